package httpapi

import "github.com/theappliance/appliance/api"

func (s *Server) projectJobs(r *Request) (*api.JobList, error) {
	return s.svc.ListProjectJobs(r.Context(), r.Principal, r.PathValue("projectID"), r.Int("limit"))
}
