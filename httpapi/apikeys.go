package httpapi

import "github.com/theappliance/appliance/appliance"

func (s *Server) listAPIKeys(r *Request) (*appliance.APIKeyList, error) {
	return s.svc.ListAPIKeys(r.Context(), r.Principal, r.PathValue("orgID"))
}

func (s *Server) createAPIKey(r *Request, body *appliance.CreateAPIKeyRequest) (*appliance.CreatedAPIKey, error) {
	return s.svc.CreateAPIKey(r.Context(), r.Principal, r.PathValue("orgID"), body)
}

func (s *Server) revokeAPIKey(r *Request) (*appliance.Revoked, error) {
	return s.svc.RevokeAPIKey(r.Context(), r.Principal, r.PathValue("orgID"), r.PathValue("keyID"))
}
