package httpapi

import "github.com/theappliance/appliance/appliance"

func (s *Server) listBackups(r *Request) (*appliance.BackupList, error) {
	return s.svc.ListBackups(r.Context(), r.Principal, r.PathValue("projectID"))
}

func (s *Server) createBackup(r *Request, body *appliance.CreateBackupRequest) (*appliance.JobResponse, error) {
	return s.svc.CreateBackup(r.Context(), r.Principal, r.PathValue("projectID"), body)
}

func (s *Server) restoreProject(r *Request, body *appliance.RestoreRequest) (*appliance.JobResponse, error) {
	return s.svc.RestoreProject(r.Context(), r.Principal, r.PathValue("projectID"), body)
}

func (s *Server) listRestorePoints(r *Request) (*appliance.RestorePointList, error) {
	return s.svc.ListRestorePoints(r.Context(), r.Principal, r.PathValue("projectID"))
}

func (s *Server) createRestorePoint(r *Request, body *appliance.RestorePointRequest) (*appliance.RestorePointResponse, error) {
	return s.svc.CreateRestorePoint(r.Context(), r.Principal, r.PathValue("projectID"), body)
}

func (s *Server) deleteRestorePoint(r *Request) (*appliance.DeletedResponse, error) {
	return s.svc.DeleteRestorePoint(r.Context(), r.Principal, r.PathValue("projectID"), r.PathValue("restorePointID"))
}

func (s *Server) listScheduledBackups(r *Request) (*appliance.ScheduledBackupList, error) {
	return s.svc.ListScheduledBackups(r.Context(), r.Principal, r.PathValue("projectID"))
}

func (s *Server) putScheduledBackup(r *Request, body *appliance.PutScheduledBackupRequest) (*appliance.ScheduledBackupResponse, error) {
	return s.svc.PutScheduledBackup(r.Context(), r.Principal, r.PathValue("projectID"), appliance.ScheduledBackupID, body)
}
