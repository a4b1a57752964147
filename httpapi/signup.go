package httpapi

import "github.com/theappliance/appliance/api"

func (s *Server) signupSettings(r *Request) (*api.SignupSettings, error) {
	return s.svc.Tenancy().SignupSettings(r.Context())
}

// signup signs a new user up; with cookie, their session is the dashboard's cookie, as a sign-in's.
func (s *Server) signup(r *Request, body *api.SignupRequest) (*api.SignupResult, error) {
	if err := sameOrigin(r.Request); err != nil {
		return nil, err
	}
	res, err := s.svc.Tenancy().SignUp(r.Context(), body)
	if err != nil || !body.Cookie {
		return res, err
	}
	setSessionCookie(r.W, res.Session)
	return res, nil
}
