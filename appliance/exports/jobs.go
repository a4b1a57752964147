package exports

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// update applies fn to the stored export in one transaction.
func (s *Service) update(id string, fn func(*store.Export)) error {
	return s.db.Update(func(tx *store.Tx) error {
		e, err := store.Exports.Get(tx, id)
		if err != nil {
			return err
		}
		fn(e)
		return store.Exports.Put(tx, e)
	})
}

// fail marks an export failed with err, and returns err for the job.
func (s *Service) fail(id string, err error) error {
	if id == "" {
		return err
	}
	if uerr := s.update(id, func(e *store.Export) { e.State, e.Error = StateFailed, err.Error() }); uerr != nil && !errors.Is(uerr, store.ErrNotFound) {
		s.log.Error("mark export failed", "export", id, "err", uerr)
	}
	return err
}

// createJob runs pg_dump -Fc as the instances' OS user into the project's exports directory and, with a
// bucket, stores the dump as its object before the export is completed (the file stays, a cache entry).
func (s *Service) createJob(ctx context.Context, run *scheduler.Run) (any, error) {
	var in payload
	prj, inst, err := s.host.ActiveTarget(run, &in)
	if err != nil {
		return nil, s.fail(in.ExportID, err)
	}
	var e *store.Export
	if err := s.db.View(func(tx *store.Tx) (err error) { e, err = store.Exports.Get(tx, in.ExportID); return err }); err != nil {
		return nil, fmt.Errorf("export %s: %w", in.ExportID, err)
	}
	if e.State != StatePending && e.State != StateRunning {
		return map[string]any{"skipped": "export is " + e.State}, nil
	}
	if _, err := s.host.PrepareDumpDir(ctx, prj.ID); err != nil {
		return nil, err
	}
	if err := s.update(e.ID, func(e *store.Export) { e.State = StateRunning }); err != nil {
		return nil, err
	}
	if err := s.host.DumpDatabase(ctx, run, inst, e.DatabaseName, e.Path); err != nil {
		if ctx.Err() != nil || scheduler.IsTransient(err) {
			return nil, err
		}
		return nil, s.fail(e.ID, err)
	}
	fi, err := os.Stat(e.Path)
	if err != nil {
		return nil, s.fail(e.ID, err)
	}
	key := ""
	if s.bucket != nil {
		if key, err = s.put(ctx, e, fi.Size()); err != nil {
			return nil, err
		}
	}
	now := s.now()
	expires := now.Add(TTL)
	if err := s.update(e.ID, func(e *store.Export) {
		e.State, e.SizeBytes, e.CompletedAt, e.ExpiresAt, e.ObjectKey = StateCompleted, fi.Size(), &now, &expires, key
	}); err != nil {
		return nil, err
	}
	out := map[string]any{"export_id": e.ID, "size_bytes": fi.Size()}
	if key != "" {
		out["object_key"] = key
		s.cache.Touch(e.Path)
		s.cache.EvictAfter("export " + e.ID)
	}
	return out, nil
}

// put stores the export's dump as its object of the bucket, complete when it returns, and returns the
// key. Its errors are transient (the bucket may be back at the next attempt, which dumps again).
func (s *Service) put(ctx context.Context, e *store.Export, size int64) (string, error) {
	f, err := os.Open(e.Path)
	if err != nil {
		return "", scheduler.Transient(err)
	}
	defer f.Close()
	n, err := s.bucket.PutExport(ctx, e.ProjectID, e.ID, f)
	if err != nil {
		return "", scheduler.Transient(fmt.Errorf("store export %s in the backup store: %w", e.ID, err))
	}
	if n != size {
		return "", scheduler.Transient(fmt.Errorf("store export %s in the backup store: %d bytes stored of %d", e.ID, n, size))
	}
	return backup.ExportKey(e.ProjectID, e.ID), nil
}
