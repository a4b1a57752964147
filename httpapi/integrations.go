package httpapi

import (
	"net/http"

	"github.com/theappliance/appliance/api"
)

// integrationWebhook hands an inbound webhook of the provider (the raw body and its headers) to the
// integrations area.
func (s *Server) integrationWebhook(name string) func(r *Request) (*api.IntegrationWebhookResponse, error) {
	return func(r *Request) (*api.IntegrationWebhookResponse, error) {
		return s.svc.Integrations().Receive(r.Context(), name, r.PathValue("projectID"), r.Header, r.Body)
	}
}

func (s *Server) integrationOAuthStart(r *Request) (*api.OAuthStartResponse, error) {
	return s.svc.Integrations().OAuthStart(r.Context(), r.Principal, r.PathValue("provider"), r.Str("project_id"))
}

// integrationOAuthCallback redirects the browser to the dashboard's integrations page once the code is
// exchanged (the one redirect the API makes, to its own dashboard only).
func (s *Server) integrationOAuthCallback(r *Request) error {
	to, err := s.svc.Integrations().OAuthCallback(r.Context(), r.PathValue("provider"), r.Str("code"), r.Str("state"))
	if err != nil {
		return err
	}
	r.W.Header().Set("Cache-Control", "no-store")
	http.Redirect(r.W, r.Request, to, http.StatusFound)
	return nil
}
