package appliance

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Export states; see docs/api-decisions.md (Exports).
const (
	ExportPending   = "pending"   // recorded, its export.create job not started yet
	ExportRunning   = "running"   // pg_dump is writing
	ExportCompleted = "completed" // the dump is in the backup store until expires_at
	ExportFailed    = "failed"    // pg_dump failed; the job carries its output
	ExportExpired   = "expired"   // past expires_at: SweepExports deleted the file
)

// JobExportCreate dumps a project's database with pg_dump -Fc.
const JobExportCreate = "export.create"

// ExportTTL is how long a completed export is kept (from its completion); DownloadTTL is how long a
// signed download URL is valid.
const (
	ExportTTL   = 7 * 24 * time.Hour
	DownloadTTL = 15 * time.Minute
)

const exportMACPurpose = "export-download"

func exportView(e *store.Export) *Export {
	return &Export{ID: e.ID, DatabaseName: e.DatabaseName, ProjectID: e.ProjectID, SizeBytes: e.SizeBytes,
		State: e.State, CreatedAt: e.CreatedAt, ExpiresAt: e.ExpiresAt}
}

type exportPayload struct {
	ExportID string `json:"export_id"`
}

// exportDir is the directory of a project's exports in the backup store.
func (s *Service) exportDir(projectID string) string {
	return filepath.Join(s.cfg.DataDir, "backups", projectID, "exports")
}

// ListExports lists a project's exports, newest first.
func (s *Service) ListExports(ctx context.Context, p *Principal, projectID string) (*ExportList, error) {
	out := &ExportList{Exports: []*Export{}}
	err := s.db.View(func(tx *store.Tx) error {
		_, es, err := visibleRecords(s, tx, p, projectID, "exports", store.Exports, store.ExportsByProject)
		if err != nil {
			return err
		}
		for _, e := range es {
			out.Exports = append(out.Exports, exportView(e))
		}
		return nil
	})
	return out, err
}

// CreateExport records an export and enqueues the export.create job that dumps the database.
func (s *Service) CreateExport(ctx context.Context, p *Principal, projectID string) (*ExportJobResponse, error) {
	var out *ExportJobResponse
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := s.visibleActiveProject(tx, p, projectID)
		if err != nil {
			return err
		}
		if err := s.requireFeature(FeatureDumps); err != nil {
			return err
		}
		now := s.now()
		e := &store.Export{ID: ids.New("exp"), ProjectID: prj.ID, OrganizationID: prj.OrganizationID,
			DatabaseName: prj.DatabaseName, State: ExportPending, CreatedAt: now}
		e.Path = filepath.Join(s.exportDir(prj.ID), e.ID+".dump")
		j, err := s.enqueue(tx, prj, JobExportCreate, prj.ID, exportPayload{ExportID: e.ID})
		if err != nil {
			return err
		}
		e.JobID = j.ID
		if err := store.Exports.Put(tx, e); err != nil {
			return Internal(err, "store export")
		}
		if err := s.audit(tx, p, JobExportCreate, prj.OrganizationID, prj.ID,
			map[string]any{"export_id": e.ID, "job_id": j.ID}); err != nil {
			return Internal(err, "audit")
		}
		out = &ExportJobResponse{ExportID: e.ID, Job: JobView(j)}
		return nil
	})
	if err == nil {
		s.notify()
	}
	return out, err
}

// updateExport applies fn to the stored export in one transaction.
func (s *Service) updateExport(id string, fn func(*store.Export)) error {
	return s.db.Update(func(tx *store.Tx) error {
		e, err := store.Exports.Get(tx, id)
		if err != nil {
			return err
		}
		fn(e)
		return store.Exports.Put(tx, e)
	})
}

// failExport marks an export failed with err, and returns err for the job.
func (s *Service) failExport(id string, err error) error {
	if id == "" {
		return err
	}
	if uerr := s.updateExport(id, func(e *store.Export) { e.State, e.Error = ExportFailed, err.Error() }); uerr != nil && !errors.Is(uerr, store.ErrNotFound) {
		s.log.Error("mark export failed", "export", id, "err", uerr)
	}
	return err
}

// createExportJob runs pg_dump -Fc as the instances' OS user into the project's exports directory.
func (s *Service) createExportJob(ctx context.Context, run *scheduler.Run) (any, error) {
	var in exportPayload
	dp, prj, inst, err := s.activeTarget(run, &in)
	if err != nil {
		return nil, s.failExport(in.ExportID, err)
	}
	var e *store.Export
	if err := s.db.View(func(tx *store.Tx) (err error) { e, err = store.Exports.Get(tx, in.ExportID); return err }); err != nil {
		return nil, fmt.Errorf("export %s: %w", in.ExportID, err)
	}
	if e.State != ExportPending && e.State != ExportRunning {
		return map[string]any{"skipped": "export is " + e.State}, nil
	}
	if _, err := s.prepareDumpDir(ctx, dp, prj.ID); err != nil {
		return nil, err
	}
	if err := s.updateExport(e.ID, func(e *store.Export) { e.State = ExportRunning }); err != nil {
		return nil, err
	}
	if err := s.dumpDatabase(ctx, run, dp, inst, e.DatabaseName, e.Path); err != nil {
		if ctx.Err() != nil || scheduler.IsTransient(err) {
			return nil, err
		}
		return nil, s.failExport(e.ID, err)
	}
	fi, err := os.Stat(e.Path)
	if err != nil {
		return nil, s.failExport(e.ID, err)
	}
	now := s.now()
	expires := now.Add(ExportTTL)
	if err := s.updateExport(e.ID, func(e *store.Export) {
		e.State, e.SizeBytes, e.CompletedAt, e.ExpiresAt = ExportCompleted, fi.Size(), &now, &expires
	}); err != nil {
		return nil, err
	}
	return map[string]any{"export_id": e.ID, "size_bytes": fi.Size()}, nil
}

// ExportDownload returns a signed URL for a completed, unexpired export (valid DownloadTTL).
func (s *Service) ExportDownload(ctx context.Context, p *Principal, projectID, exportID string) (*DownloadResponse, error) {
	var e *store.Export
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := s.visibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		e, err = store.Exports.Get(tx, exportID)
		if errors.Is(err, store.ErrNotFound) || (err == nil && e.ProjectID != prj.ID) {
			return NotFound("export %s not found", exportID)
		}
		if err != nil {
			return Internal(err, "get export")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	now := s.now()
	if e.State != ExportCompleted || e.ExpiresAt == nil || !now.Before(*e.ExpiresAt) {
		return nil, Conflict("export %s is %s, not downloadable", e.ID, exportStateAt(e, now))
	}
	exp := now.Add(DownloadTTL).Truncate(time.Second)
	if exp.After(*e.ExpiresAt) {
		exp = e.ExpiresAt.Truncate(time.Second)
	}
	u := s.signedURL(exportMACPurpose, "/v1/downloads/exports", e.ID, exp)
	return &DownloadResponse{Download: &Download{DownloadURL: u, ExpiresAt: exp.UTC()}}, nil
}

func exportStateAt(e *store.Export, now time.Time) string {
	if e.State == ExportCompleted && e.ExpiresAt != nil && !now.Before(*e.ExpiresAt) {
		return ExportExpired
	}
	return e.State
}

// ExportFile is an export's dump opened for a download.
type ExportFile struct {
	*os.File
	Name    string // the attachment's file name
	ModTime time.Time
}

// OpenExportDownload checks a signed download URL's expires and sig (constant-time) and opens the export's
// file. A bad or expired signature, or an export no longer downloadable, is Forbidden.
func (s *Service) OpenExportDownload(exportID, expires, sig string) (*ExportFile, error) {
	if err := s.checkSignedURL(exportMACPurpose, "download", exportID, expires, sig); err != nil {
		return nil, err
	}
	now := s.now()
	var e *store.Export
	var prj *store.Project
	if err := s.db.View(func(tx *store.Tx) (err error) {
		if e, err = store.Exports.Get(tx, exportID); err != nil {
			return err
		}
		prj, err = store.Projects.Get(tx, e.ProjectID)
		return err
	}); err != nil {
		return nil, Forbidden("export %s is not downloadable", exportID)
	}
	if prj.State == ProjectDeleting || prj.State == ProjectDeleted {
		return nil, Forbidden("export %s is not downloadable: project %s is %s", e.ID, prj.ID, prj.State)
	}
	if exportStateAt(e, now) != ExportCompleted {
		return nil, Forbidden("export %s is %s", e.ID, exportStateAt(e, now))
	}
	f, err := os.Open(e.Path)
	if errors.Is(err, fs.ErrNotExist) { // deleted under us (the sweep, a project's deletion)
		return nil, Forbidden("export %s is not downloadable", e.ID)
	}
	if err != nil {
		return nil, Internal(err, "open export")
	}
	mt := e.CreatedAt
	if e.CompletedAt != nil {
		mt = *e.CompletedAt
	}
	return &ExportFile{File: f, Name: e.ID + ".dump", ModTime: mt}, nil
}

// SweepExports deletes the files of exports past expires_at and marks them expired; it returns how many.
func (s *Service) SweepExports(ctx context.Context) (int, error) {
	now := s.now()
	var due []*store.Export
	if err := s.db.View(func(tx *store.Tx) (err error) {
		due, err = store.Exports.All(tx, func(e *store.Export) bool {
			return e.State == ExportCompleted && e.ExpiresAt != nil && !now.Before(*e.ExpiresAt)
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
		if err := os.Remove(e.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, fmt.Errorf("remove export %s: %w", e.ID, err)
		}
		if err := s.updateExport(e.ID, func(e *store.Export) { e.State = ExportExpired }); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// prepareDumpDir makes the project's directory of dumps (its exports, a cutover's copy of a preview),
// owned by the instances' OS user, and returns it. Its errors are transient.
func (s *Service) prepareDumpDir(ctx context.Context, dp *DataPlane, projectID string) (string, error) {
	if err := s.localBackups(dp).Prepare(ctx, projectID); err != nil {
		return "", scheduler.Transient(err)
	}
	dir := s.exportDir(projectID)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", scheduler.Transient(err)
	}
	if err := dp.User.Chown(dir); err != nil {
		return "", scheduler.Transient(err)
	}
	return dir, nil
}

// dumpDatabase writes a custom-format dump (pg_dump -Fc, as the admin) of the instance's database to path,
// replacing any file there; a failed dump leaves no file. The dump is the whole database: only the
// instances' OS user reads it (pg_dump keeps the mode of the file it truncates, so it is created first,
// 0600). Errors about the file are transient.
func (s *Service) dumpDatabase(ctx context.Context, run *scheduler.Run, dp *DataPlane, inst *store.Instance, database, path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return scheduler.Transient(err)
	}
	if f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); err != nil {
		return scheduler.Transient(err)
	} else if err := f.Close(); err != nil {
		return scheduler.Transient(err)
	}
	if err := dp.User.Chown(path); err != nil {
		return scheduler.Transient(err)
	}
	adminPW, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return fmt.Errorf("open admin password: %w", err)
	}
	pgdump, err := s.eng.Instance(inst).Bin.Path("pg_dump")
	if err != nil {
		return err
	}
	cmd := dp.User.Command(pgdump, "-Fc", "--no-password", "-h", "127.0.0.1", "-p", strconv.Itoa(inst.Port),
		"-U", postgres.AdminRole, "-d", database, "-f", path)
	// role=none: the session's own role whatever the database's defaults say (postgres.Instance.Connect).
	cmd.Env = append(cmd.Env, "PGPASSWORD="+string(adminPW), "PGSSLMODE=disable", "PGCONNECT_TIMEOUT=10", "PGOPTIONS=-c role=none")
	if err := run.Exec(ctx, cmd); err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
}
