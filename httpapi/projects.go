package httpapi

import "github.com/theappliance/appliance/appliance"

func (s *Server) listProjects(r *Request) (*appliance.ProjectList, error) {
	return s.svc.ListProjects(r.Context(), r.Principal, r.Str("organization_id"))
}

func (s *Server) createProject(r *Request, body *appliance.CreateProjectRequest) (*appliance.ProjectJobResponse, error) {
	return s.svc.CreateProject(r.Context(), r.Principal, body)
}

func (s *Server) getProject(r *Request) (*appliance.ProjectResponse, error) {
	return s.svc.GetProject(r.Context(), r.Principal, r.PathValue("projectID"))
}

func (s *Server) patchProject(r *Request, body *appliance.PatchProjectRequest) (*appliance.ProjectResponse, error) {
	return s.svc.PatchProject(r.Context(), r.Principal, r.PathValue("projectID"), body)
}

func (s *Server) deleteProject(r *Request) (*appliance.JobResponse, error) {
	return s.svc.DeleteProject(r.Context(), r.Principal, r.PathValue("projectID"), r.Str("approval_token"))
}

func (s *Server) createApproval(r *Request, body *appliance.ApprovalRequest) (*appliance.ApprovalResponse, error) {
	return s.svc.CreateApproval(r.Context(), r.Principal, r.PathValue("projectID"), body)
}

func (s *Server) connections(r *Request) (*appliance.ConnectionsResponse, error) {
	return s.svc.ProjectConnections(r.Context(), r.Principal, r.PathValue("projectID"))
}

func (s *Server) rotateCredentials(r *Request, body *appliance.RotateCredentialsRequest) (*appliance.JobResponse, error) {
	return s.svc.RotateCredentials(r.Context(), r.Principal, r.PathValue("projectID"), body)
}

func (s *Server) listExtensions(r *Request) (*appliance.ExtensionList, error) {
	return s.svc.ListExtensions(r.Context(), r.Principal, r.PathValue("projectID"))
}

func (s *Server) enableExtension(r *Request, body *appliance.ExtensionRequest) (*appliance.JobResponse, error) {
	return s.svc.EnableExtension(r.Context(), r.Principal, r.PathValue("projectID"), body)
}

func (s *Server) disableExtension(r *Request) (*appliance.JobResponse, error) {
	return s.svc.DisableExtension(r.Context(), r.Principal, r.PathValue("projectID"), r.PathValue("extensionName"))
}

func (s *Server) updateExtension(r *Request) (*appliance.JobResponse, error) {
	return s.svc.UpdateExtension(r.Context(), r.Principal, r.PathValue("projectID"), r.PathValue("extensionName"))
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

func (s *Server) upgradeConfirm(r *Request) (*appliance.JobResponse, error) {
	return s.svc.ConfirmMajorUpgrade(r.Context(), r.Principal, r.PathValue("projectID"))
}

func (s *Server) upgradeRollback(r *Request) (*appliance.JobResponse, error) {
	return s.svc.RollbackMajorUpgrade(r.Context(), r.Principal, r.PathValue("projectID"))
}
