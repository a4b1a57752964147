package httpapi

import "github.com/theappliance/appliance/appliance"

func (s *Server) projectJobs(r *Request) (*appliance.JobList, error) {
	return s.svc.ListProjectJobs(r.Context(), r.Principal, r.PathValue("projectID"), r.Int("limit"))
}
