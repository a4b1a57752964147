package httpapi

import "github.com/theappliance/appliance/appliance"

func (s *Server) createApproval(r *Request, body *appliance.ApprovalRequest) (*appliance.ApprovalResponse, error) {
	return s.svc.CreateApproval(r.Context(), r.Principal, r.PathValue("projectID"), body)
}
