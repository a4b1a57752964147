package httpapi

import (
	"github.com/theappliance/appliance/api"
)

func (s *Server) healthz(r *Request) (*api.Health, error) {
	return s.svc.Healthz(r.Context())
}

// status is every component's status; each one's details (its message) only for an operator: a request
// on the operator listener, or one bearing the metrics token.
func (s *Server) status(r *Request) (*api.Status, error) {
	st := s.svc.Status(r.Context())
	if s.operatorAccess(r.Request, false) != nil {
		return st.Public(), nil
	}
	return st, nil
}

func (s *Server) openapiDoc(r *Request) error {
	r.W.Header().Set("Content-Type", "application/json")
	r.W.Header().Set("Cache-Control", "public, max-age=60")
	_, err := r.W.Write(s.openapi)
	return err
}

// caCert serves the CA certificate clients need for sslmode=verify-full (public: it is no secret).
func (s *Server) caCert(r *Request) error {
	pem, err := s.svc.CACertificate()
	if err != nil {
		return err
	}
	r.W.Header().Set("Content-Type", "application/x-pem-file")
	r.W.Header().Set("Content-Disposition", `attachment; filename="appliance-ca.crt"`)
	r.W.Header().Set("Cache-Control", "public, max-age=3600")
	_, err = r.W.Write(pem)
	return err
}
