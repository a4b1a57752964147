package httpapi

import "github.com/theappliance/appliance/api"

func (s *Server) orgAudit(r *Request) (*api.AuditEventList, error) {
	return s.svc.ListOrganizationAudit(r.Context(), r.Principal, r.PathValue("orgID"), r.Int("limit"))
}

func (s *Server) projectAudit(r *Request) (*api.AuditEventList, error) {
	return s.svc.ListProjectAudit(r.Context(), r.Principal, r.PathValue("projectID"), r.Int("limit"))
}
