package exports

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/store"
)

func view(e *store.Export) *api.Export {
	return &api.Export{ID: e.ID, DatabaseName: e.DatabaseName, ProjectID: e.ProjectID, SizeBytes: e.SizeBytes,
		State: e.State, CreatedAt: e.CreatedAt, ExpiresAt: e.ExpiresAt}
}

type payload struct {
	ExportID string `json:"export_id"`
}

// List lists a project's exports, newest first.
func (s *Service) List(ctx context.Context, p *authz.Principal, projectID string) (*api.ExportList, error) {
	out := &api.ExportList{Exports: []*api.Export{}}
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		es, err := store.Exports.Lookup(tx, store.ExportsByProject, prj.ID, store.Query{Newest: true})
		if err != nil {
			return apperr.Internal(err, "list exports")
		}
		for _, e := range es {
			out.Exports = append(out.Exports, view(e))
		}
		return nil
	})
	return out, err
}

// Create records an export and enqueues the export.create job that dumps the database.
func (s *Service) Create(ctx context.Context, p *authz.Principal, projectID string) (*api.ExportJobResponse, error) {
	var e *store.Export
	var job *store.Job
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := s.host.ActiveProject(tx, p, projectID)
		if err != nil {
			return err
		}
		if err := s.host.RequireDumps(tx, prj); err != nil {
			return err
		}
		now := s.now()
		e = &store.Export{ID: ids.New("exp"), ProjectID: prj.ID, OrganizationID: prj.OrganizationID,
			DatabaseName: prj.DatabaseName, State: StatePending, CreatedAt: now}
		e.Path = filepath.Join(Dir(s.cfg.DataDir, prj.ID), e.ID+".dump")
		j, err := s.host.Enqueue(tx, prj, JobCreate, prj.ID, payload{ExportID: e.ID})
		if err != nil {
			return err
		}
		e.JobID = j.ID
		if err := store.Exports.Put(tx, e); err != nil {
			return apperr.Internal(err, "store export")
		}
		if err := s.host.Audit(tx, p, JobCreate, prj.OrganizationID, prj.ID,
			map[string]any{"export_id": e.ID, "job_id": j.ID}); err != nil {
			return apperr.Internal(err, "audit")
		}
		job = j
		return nil
	})
	res, err := s.host.AnswerJob(job, err)
	if err != nil {
		return nil, err
	}
	return &api.ExportJobResponse{ExportID: e.ID, Job: res.Job}, nil
}

// Download returns a signed URL for a completed, unexpired export (valid DownloadTTL).
func (s *Service) Download(ctx context.Context, p *authz.Principal, projectID, exportID string) (*api.DownloadResponse, error) {
	var e *store.Export
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		e, err = store.Exports.Get(tx, exportID)
		if errors.Is(err, store.ErrNotFound) || (err == nil && e.ProjectID != prj.ID) {
			return apperr.NotFound("export %s not found", exportID)
		}
		if err != nil {
			return apperr.Internal(err, "get export")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	now := s.now()
	if e.State != StateCompleted || e.ExpiresAt == nil || !now.Before(*e.ExpiresAt) {
		return nil, apperr.Conflict("export %s is %s, not downloadable", e.ID, stateAt(e, now))
	}
	exp := now.Add(DownloadTTL).Truncate(time.Second)
	if exp.After(*e.ExpiresAt) {
		exp = e.ExpiresAt.Truncate(time.Second)
	}
	u := s.downloads.URL(e.ID, exp)
	return &api.DownloadResponse{Download: &api.Download{DownloadURL: u, ExpiresAt: exp.UTC()}}, nil
}

func stateAt(e *store.Export, now time.Time) string {
	if e.State == StateCompleted && e.ExpiresAt != nil && !now.Before(*e.ExpiresAt) {
		return StateExpired
	}
	return e.State
}

// File is an export's dump opened for a download: the local file (an io.ReadSeeker: an *os.File), or,
// with a bucket when the local cache lacks it, its object read from the bucket as it is sent.
type File struct {
	io.ReadCloser
	Size    int64  // the dump's bytes
	Name    string // the attachment's file name
	ModTime time.Time
}

// OpenDownload checks a signed download URL's expires and sig (constant-time) and opens the export's
// file, or its object in the bucket when the file is not cached (caching it again as it is read). A bad or
// expired signature, or an export no longer downloadable, is Forbidden; a bucket that cannot be read is
// Unavailable.
func (s *Service) OpenDownload(ctx context.Context, exportID, expires, sig string) (*File, error) {
	e, _, err := s.downloads.Open(exportID, expires, sig)
	if err != nil {
		return nil, err
	}
	now := s.now()
	if stateAt(e, now) != StateCompleted {
		return nil, apperr.Forbidden("export %s is %s", e.ID, stateAt(e, now))
	}
	mt := e.CreatedAt
	if e.CompletedAt != nil {
		mt = *e.CompletedAt
	}
	out := &File{Size: e.SizeBytes, Name: e.ID + ".dump", ModTime: mt}
	f, err := os.Open(e.Path)
	switch {
	case err == nil:
		if e.ObjectKey != "" {
			s.cache.Touch(e.Path)
		}
		out.ReadCloser = f
		return out, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, apperr.Internal(err, "open export")
	case e.ObjectKey == "": // deleted under us (the sweep, a project's deletion)
		return nil, apperr.Forbidden("export %s is not downloadable", e.ID)
	case s.bucket == nil:
		return nil, apperr.Unavailable(fmt.Sprintf("export %s is in a bucket backup store, and the appliance runs without one now", e.ID))
	}
	r, err := s.bucket.GetExport(ctx, e.ProjectID, e.ID)
	if errors.Is(err, fs.ErrNotExist) { // deleted under us
		return nil, apperr.Forbidden("export %s is not downloadable", e.ID)
	}
	if err != nil {
		return nil, &apperr.Error{Kind: apperr.KindUnavailable, Msg: fmt.Sprintf("export %s cannot be read from the backup store now: try again later", e.ID), Cause: err}
	}
	out.ReadCloser = s.fill(ctx, e, r)
	return out, nil
}

// Sweep deletes the files of exports past expires_at (and their objects in the bucket) and marks them
// expired; it returns how many.
func (s *Service) Sweep(ctx context.Context) (int, error) {
	now := s.now()
	var due []*store.Export
	if err := s.db.View(func(tx *store.Tx) (err error) {
		due, err = store.Exports.All(tx, func(e *store.Export) bool {
			return e.State == StateCompleted && e.ExpiresAt != nil && !now.Before(*e.ExpiresAt)
		})
		return err
	}); err != nil {
		return 0, err
	}
	n := 0
	for _, e := range due {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		switch {
		case e.ObjectKey == "":
		case s.bucket == nil:
			s.log.Warn("an expired export's object stays in the bucket the appliance no longer runs with", "export", e.ID, "object", e.ObjectKey)
		default:
			if err := s.bucket.RemoveExport(ctx, e.ProjectID, e.ID); err != nil {
				return n, fmt.Errorf("remove export %s from the backup store: %w", e.ID, err)
			}
		}
		if err := s.expire(e); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// expire deletes an export's file and marks it expired, under the cache's lock (a download caching it
// again sees it expired, or its file is deleted here).
func (s *Service) expire(e *store.Export) error {
	return s.cache.Locked(func() error {
		if err := os.Remove(e.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove export %s: %w", e.ID, err)
		}
		return s.update(e.ID, func(e *store.Export) { e.State = StateExpired })
	})
}
