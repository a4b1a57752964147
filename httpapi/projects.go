package httpapi

import "github.com/theappliance/appliance/appliance"

func (s *Server) listProjects(r *Request) (*appliance.ProjectList, error) {
	return s.svc.ListProjects(r.Context(), r.Principal, r.Str("organization_id"))
}

func (s *Server) createProject(r *Request, body *appliance.CreateProjectRequest) (*appliance.ProjectJobResponse, error) {
	return s.svc.CreateProject(r.Context(), r.Principal, body)
}

func (s *Server) deleteProject(r *Request) (*appliance.JobResponse, error) {
	return s.svc.DeleteProject(r.Context(), r.Principal, r.PathValue("projectID"), r.Str("approval_token"))
}

func (s *Server) connections(r *Request) (*appliance.ConnectionsResponse, error) {
	return s.svc.ProjectConnections(r.Context(), r.Principal, r.PathValue("projectID"))
}

func (s *Server) upgradeMinor(r *Request) (*appliance.JobResponse, error) {
	return s.svc.UpgradeMinor(r.Context(), r.Principal, r.PathValue("projectID"), r.Bool("force"))
}

func (s *Server) upgradePreflight(r *Request) (*appliance.JobResponse, error) {
	return s.svc.PreflightMajorUpgrade(r.Context(), r.Principal, r.PathValue("projectID"), r.Int("target_major"))
}

func (s *Server) upgradeMajor(r *Request) (*appliance.JobResponse, error) {
	return s.svc.UpgradeMajor(r.Context(), r.Principal, r.PathValue("projectID"), r.Int("target_major"))
}
