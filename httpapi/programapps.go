package httpapi

import "github.com/theappliance/appliance/api"

// listProgramApplications is GET /v1/program-applications: the query's status and limit.
func (s *Server) listProgramApplications(r *Request) (*api.ProgramApplicationList, error) {
	return s.svc.ProgramApps().List(r.Context(), r.Principal, r.Str("status"), r.Int("limit"))
}
