package httpapi

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
)

func (s *Server) putScheduledBackup(r *Request, body *api.PutScheduledBackupRequest) (*api.ScheduledBackupResponse, error) {
	return s.svc.Backups().PutSchedule(r.Context(), r.Principal, r.PathValue("projectID"), appliance.ScheduledBackupID, body)
}

func (s *Server) createExport(r *Request, _ *api.CreateExportRequest) (*api.ExportJobResponse, error) {
	return s.svc.Exports().Create(r.Context(), r.Principal, r.PathValue("projectID"))
}

// downloadExport streams an export's dump to the holder of a signed URL (no credentials) with
// http.ServeContent: ranges and conditional requests. A local file is served as it is; a dump read from
// the bucket as it is sent is one forward pass (forwardSeeker): one range is served by reading past what
// precedes it, several are answered whole. An error midway cuts the response short of its length, so the
// client sees the download failed.
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
	rs, ok := f.ReadCloser.(io.ReadSeeker)
	if !ok {
		fs := &forwardSeeker{r: f, size: f.Size}
		if strings.Contains(r.Header.Get("Range"), ",") {
			r.Header.Del("Range")
		}
		defer func() {
			if fs.err != nil {
				s.log.Warn("download of an export from the backup store cut short", "export", f.Name, "err", fs.err)
			}
		}()
		rs = fs
	}
	http.ServeContent(r.W, r.Request, f.Name, f.ModTime, rs)
	return nil
}

// forwardSeeker is a stream of a known size as the io.ReadSeeker http.ServeContent takes: ServeContent
// seeks to the end for the size and back, then to the start of the range it sends, which a Read reaches
// by reading past what precedes it; a seek back behind what was read fails the Read. Once the last byte
// is read it reads the stream to its end, so that the stream's end is checked (a dump read from the
// bucket is authenticated, and cached, there) even when the reader stops at the size.
type forwardSeeker struct {
	r         io.Reader
	size      int64
	pos, want int64 // read so far from r; where the next Read starts
	err       error // the first error of r but its end
}

func (f *forwardSeeker) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += f.want
	case io.SeekEnd:
		offset += f.size
	default:
		return 0, errors.New("seek: invalid whence")
	}
	if offset < 0 {
		return 0, errors.New("seek: negative position")
	}
	f.want = offset
	return offset, nil
}

func (f *forwardSeeker) Read(p []byte) (int, error) {
	if f.want < f.pos {
		return 0, f.fail(errors.New("a dump streamed from the backup store is read forward only"))
	}
	if f.want > f.pos {
		n, err := io.CopyN(io.Discard, f.r, f.want-f.pos)
		if f.pos += n; err != nil {
			return 0, f.fail(err)
		}
	}
	n, err := f.r.Read(p)
	f.pos += int64(n)
	f.want = f.pos
	if err == nil && f.pos >= f.size {
		_, err = io.Copy(io.Discard, f.r)
		if err == nil {
			err = io.EOF
		}
	}
	switch {
	case err == io.EOF && f.pos < f.size:
		err = f.fail(io.ErrUnexpectedEOF)
	case err != nil && err != io.EOF:
		f.fail(err)
	}
	return n, err
}

func (f *forwardSeeker) fail(err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if f.err == nil {
		f.err = err
	}
	return err
}

func (s *Server) createImportUpload(r *Request, _ *api.CreateUploadRequest) (*api.UploadResponse, error) {
	return s.svc.Migrate().CreateUpload(r.Context(), r.Principal, r.PathValue("projectID"))
}

// receiveImportUpload stores the raw body of a signed upload URL's PUT (no credentials; the body is the
// dump, not JSON) and answers {upload}; the service bounds it by the project's storage_limit_bytes (413).
func (s *Server) receiveImportUpload(r *Request) (*api.UploadResponse, error) {
	return s.svc.Migrate().ReceiveUpload(r.Context(), r.PathValue("uploadID"), r.URL.Query().Get("expires"), r.URL.Query().Get("sig"), r.ContentLength, r.Body)
}
