package httpapi

import "github.com/theappliance/appliance/appliance"

func (s *Server) getJob(r *Request) (*appliance.JobResponse, error) {
	return s.svc.GetJob(r.Context(), r.Principal, r.PathValue("jobID"))
}

func (s *Server) projectJobs(r *Request) (*appliance.JobList, error) {
	return s.svc.ListProjectJobs(r.Context(), r.Principal, r.PathValue("projectID"), r.Int("limit"))
}
