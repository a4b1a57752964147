package httpapi

import "github.com/theappliance/appliance/api"

func (s *Server) listProjects(r *Request) (*api.ProjectList, error) {
	return s.svc.ListProjects(r.Context(), r.Principal, r.Str("organization_id"))
}

func (s *Server) deleteProject(r *Request) (*api.JobResponse, error) {
	return s.svc.DeleteProject(r.Context(), r.Principal, r.PathValue("projectID"), r.Str("approval_token"))
}

func (s *Server) upgradeMinor(r *Request) (*api.JobResponse, error) {
	return s.svc.Upgrades().Minor(r.Context(), r.Principal, r.PathValue("projectID"), r.Bool("force"))
}

func (s *Server) upgradePreflight(r *Request) (*api.JobResponse, error) {
	return s.svc.Upgrades().Preflight(r.Context(), r.Principal, r.PathValue("projectID"), r.Int("target_major"))
}

func (s *Server) upgradeMajor(r *Request) (*api.JobResponse, error) {
	return s.svc.Upgrades().Major(r.Context(), r.Principal, r.PathValue("projectID"), r.Int("target_major"))
}
