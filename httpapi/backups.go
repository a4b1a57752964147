package httpapi

import (
	"mime"
	"net/http"

	"github.com/theappliance/appliance/appliance"
)

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

func (s *Server) listExports(r *Request) (*appliance.ExportList, error) {
	return s.svc.ListExports(r.Context(), r.Principal, r.PathValue("projectID"))
}

func (s *Server) createExport(r *Request, _ *appliance.CreateExportRequest) (*appliance.ExportJobResponse, error) {
	return s.svc.CreateExport(r.Context(), r.Principal, r.PathValue("projectID"))
}

func (s *Server) exportDownload(r *Request) (*appliance.DownloadResponse, error) {
	return s.svc.ExportDownload(r.Context(), r.Principal, r.PathValue("projectID"), r.PathValue("exportID"))
}

// downloadExport streams an export's dump to the holder of a signed URL (no credentials).
func (s *Server) downloadExport(r *Request) error {
	f, err := s.svc.OpenExportDownload(r.PathValue("exportID"), r.URL.Query().Get("expires"), r.URL.Query().Get("sig"))
	if err != nil {
		return err
	}
	defer f.Close()
	h := r.W.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": f.Name}))
	h.Set("Cache-Control", "private, no-store")
	http.ServeContent(r.W, r.Request, f.Name, f.ModTime, f)
	return nil
}

func (s *Server) createImportUpload(r *Request, _ *appliance.CreateUploadRequest) (*appliance.UploadResponse, error) {
	return s.svc.CreateImportUpload(r.Context(), r.Principal, r.PathValue("projectID"))
}

func (s *Server) createImport(r *Request, body *appliance.ImportRequest) (*appliance.JobResponse, error) {
	return s.svc.CreateImport(r.Context(), r.Principal, r.PathValue("projectID"), body)
}

func (s *Server) importPreflight(r *Request, body *appliance.PreflightRequest) (*appliance.PreflightResponse, error) {
	return s.svc.ImportPreflight(r.Context(), r.Principal, r.PathValue("projectID"), body)
}

func (s *Server) startFollow(r *Request, body *appliance.FollowRequest) (*appliance.JobResponse, error) {
	return s.svc.StartFollow(r.Context(), r.Principal, r.PathValue("projectID"), body)
}

func (s *Server) followStatus(r *Request) (*appliance.JobResponse, error) {
	return s.svc.FollowStatus(r.Context(), r.Principal, r.PathValue("projectID"))
}

func (s *Server) followCutover(r *Request, body *appliance.FollowCutoverRequest) (*appliance.JobResponse, error) {
	return s.svc.FollowCutover(r.Context(), r.Principal, r.PathValue("projectID"), body)
}

func (s *Server) followAbort(r *Request) (*appliance.JobResponse, error) {
	return s.svc.FollowAbort(r.Context(), r.Principal, r.PathValue("projectID"))
}

// receiveImportUpload stores the raw body of a signed upload URL's PUT (no credentials; the body is the
// dump, not JSON) and answers {upload}; the service bounds it by the project's storage_limit_bytes (413).
func (s *Server) receiveImportUpload(r *Request) (*appliance.UploadResponse, error) {
	return s.svc.ReceiveImportUpload(r.Context(), r.PathValue("uploadID"), r.URL.Query().Get("expires"), r.URL.Query().Get("sig"), r.ContentLength, r.Body)
}
