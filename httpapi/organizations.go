package httpapi

import "github.com/theappliance/appliance/appliance"

func (s *Server) usage(r *Request) (*appliance.UsageResponse, error) {
	return s.svc.OrganizationUsage(r.Context(), r.Principal, r.PathValue("orgID"))
}
