package httpapi

import "github.com/theappliance/appliance/appliance"

func (s *Server) getOrganization(r *Request) (*appliance.OrganizationResponse, error) {
	return s.svc.GetOrganization(r.Context(), r.Principal, r.PathValue("orgID"))
}

func (s *Server) patchOrganization(r *Request, body *appliance.PatchOrganizationRequest) (*appliance.OrganizationResponse, error) {
	return s.svc.PatchOrganization(r.Context(), r.Principal, r.PathValue("orgID"), body)
}

func (s *Server) usage(r *Request) (*appliance.UsageResponse, error) {
	return s.svc.OrganizationUsage(r.Context(), r.Principal, r.PathValue("orgID"))
}
