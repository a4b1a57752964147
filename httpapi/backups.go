package httpapi

import (
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
)

func (s *Server) putScheduledBackup(r *Request, body *api.PutScheduledBackupRequest) (*api.ScheduledBackupResponse, error) {
	return s.svc.Backups().PutSchedule(r.Context(), r.Principal, r.PathValue("projectID"), appliance.ScheduledBackupID, body)
}

func (s *Server) createExport(r *Request, _ *api.CreateExportRequest) (*api.ExportJobResponse, error) {
	return s.svc.Exports().Create(r.Context(), r.Principal, r.PathValue("projectID"))
}

// downloadExport streams an export's dump to the holder of a signed URL (no credentials): a local file
// with ranges and conditional requests (http.ServeContent); one read from the bucket whole, with its
// length (an error midway cuts the response short of it, so the client sees the download failed).
func (s *Server) downloadExport(r *Request) error {
	f, err := s.svc.Exports().OpenDownload(r.Context(), r.PathValue("exportID"), r.URL.Query().Get("expires"), r.URL.Query().Get("sig"))
	if err != nil {
		return err
	}
	defer f.Close()
	h := r.W.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": f.Name}))
	h.Set("Cache-Control", "private, no-store")
	if rs, ok := f.ReadCloser.(io.ReadSeeker); ok {
		http.ServeContent(r.W, r.Request, f.Name, f.ModTime, rs)
		return nil
	}
	h.Set("Content-Length", strconv.FormatInt(f.Size, 10))
	h.Set("Last-Modified", f.ModTime.UTC().Format(http.TimeFormat))
	r.W.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	if _, err := io.Copy(r.W, f); err != nil {
		s.log.Warn("download of an export from the backup store cut short", "export", f.Name, "err", err)
	}
	return nil
}

func (s *Server) createImportUpload(r *Request, _ *api.CreateUploadRequest) (*api.UploadResponse, error) {
	return s.svc.Migrate().CreateUpload(r.Context(), r.Principal, r.PathValue("projectID"))
}

// receiveImportUpload stores the raw body of a signed upload URL's PUT (no credentials; the body is the
// dump, not JSON) and answers {upload}; the service bounds it by the project's storage_limit_bytes (413).
func (s *Server) receiveImportUpload(r *Request) (*api.UploadResponse, error) {
	return s.svc.Migrate().ReceiveUpload(r.Context(), r.PathValue("uploadID"), r.URL.Query().Get("expires"), r.URL.Query().Get("sig"), r.ContentLength, r.Body)
}
