package appliance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/theappliance/appliance/appliance/migrate"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// sweepRetention is how long expired records stay readable (for audit and support) before the sweep
// deletes them.
const sweepRetention = 24 * time.Hour

// UploadRetention is how long an uploaded dump that no import consumed is kept (from its upload); then
// the sweep deletes it and the upload is expired.
const UploadRetention = 7 * 24 * time.Hour

// UploadPendingGrace is how long past its URL's expires_at a pending upload is left alone: a PUT accepted
// just before expires_at may still be streaming. Then the sweep expires it and deletes any partial file.
const UploadPendingGrace = time.Hour

// SweepResult counts what a sweep did.
type SweepResult struct {
	LoginsExpired, LoginsDeleted, ApprovalsDeleted, SessionsDeleted int

	UploadsExpired     int // pending uploads past expires_at+UploadPendingGrace, uploaded ones past UploadRetention
	UploadFilesDeleted int // files (dumps, partial uploads) of consumed or expired uploads
	UploadObjects      int // objects in the bucket of consumed or expired uploads (migrate's RemoveUploadObjects)
	ProjectsPurged     int // deleted projects whose backup store or backup records were left (see purgeProjectBackups)
	SQLHistoryDeleted  int // console runs past studio.HistoryRetention or beyond a project's newest studio.HistoryKeep
}

// Sweep is the periodic expiry work: CLI logins past their deadline are expired (revoking keys nobody
// collected), and expired logins, approvals and sessions older than a day are deleted. Then uploads are
// expired and their files deleted (sweepUploads), and whatever is left of a deleted project's backups is
// deleted (sweepDeletedProjects), and the SQL console's history is pruned (studio.Service.PruneHistory).
func (s *Service) Sweep(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	now := s.now()
	err := s.db.Update(func(tx *store.Tx) error {
		res = SweepResult{} // a run again starts over
		var err error
		if res.LoginsExpired, res.LoginsDeleted, err = s.identity.SweepLogins(tx, now, sweepRetention); err != nil {
			return err
		}
		approvals, err := store.Approvals.All(tx, func(a *store.Approval) bool { return now.Sub(a.ExpiresAt) > sweepRetention })
		if err != nil {
			return err
		}
		for _, a := range approvals {
			res.ApprovalsDeleted++
			if err := store.Approvals.Delete(tx, a.ID); err != nil {
				return err
			}
		}
		res.SessionsDeleted, err = s.identity.SweepSessions(tx, now, sweepRetention)
		return err
	})
	if err != nil {
		return res, Internal(err, "sweep expired records")
	}
	uerr := s.sweepUploads(ctx, now, &res)
	perr := s.sweepDeletedProjects(ctx, &res)
	var herr error
	res.SQLHistoryDeleted, herr = s.studio.PruneHistory(ctx)
	if err := errors.Join(uerr, perr, herr); err != nil {
		return res, Internal(err, "sweep uploads, deleted projects and SQL history")
	}
	return res, nil
}

// sweepUploads expires the pending uploads past expires_at+UploadPendingGrace and the uploaded ones past
// uploaded_at+UploadRetention that no queued or running import.restore names, then deletes their objects
// in the bucket and, in the imports directory of every project with uploads, the files (dump, partial
// upload, restore list, a copy from the bucket) of uploads that are consumed or expired. Those two states
// are final, so deleting by them is safe against a concurrent PUT or import, and a file or object a crash
// left behind is deleted by the next sweep.
func (s *Service) sweepUploads(ctx context.Context, now time.Time, res *SweepResult) error {
	var due []string
	if err := s.db.View(func(tx *store.Tx) error {
		us, err := store.Uploads.All(tx, func(u *store.Upload) bool { return uploadDue(u, now) })
		for _, u := range us {
			due = append(due, u.ID)
		}
		return err
	}); err != nil {
		return err
	}
	for _, id := range due {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := s.db.Update(func(tx *store.Tx) error {
			u, err := store.Uploads.Get(tx, id)
			if errors.Is(err, store.ErrNotFound) {
				return nil
			}
			if err != nil || !uploadDue(u, now) {
				return err
			}
			if u.State == migrate.UploadUploaded {
				busy, err := importQueued(tx, u)
				if err != nil || busy {
					return err
				}
			}
			// Like an export's expiry, not audited: the record keeps saying what happened.
			u.State = migrate.UploadExpired
			if err := store.Uploads.Put(tx, u); err != nil {
				return err
			}
			tx.OnCommit(func() { res.UploadsExpired++ })
			return nil
		})
		if err != nil {
			return fmt.Errorf("expire upload %s: %w", id, err)
		}
	}
	var oerr error
	if res.UploadObjects, oerr = s.migrate.RemoveUploadObjects(ctx); oerr != nil {
		oerr = fmt.Errorf("delete the objects of uploads: %w", oerr)
	}
	// The files: one directory listing per project with uploads.
	final := map[string]map[string]bool{} // project → ids of its consumed or expired uploads
	if err := s.db.View(func(tx *store.Tx) error {
		_, err := store.Uploads.All(tx, func(u *store.Upload) bool {
			if final[u.ProjectID] == nil {
				final[u.ProjectID] = map[string]bool{}
			}
			if u.State == migrate.UploadConsumed || u.State == migrate.UploadExpired {
				final[u.ProjectID][u.ID] = true
			}
			return false
		})
		return err
	}); err != nil {
		return err
	}
	errs := []error{oerr}
	for projectID, ids := range final {
		if len(ids) == 0 {
			continue
		}
		dir := migrate.ImportDir(s.cfg.DataDir, projectID)
		ents, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range ents {
			id, _, _ := strings.Cut(strings.TrimPrefix(e.Name(), "."), ".")
			if !ids[id] {
				continue
			}
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
				continue
			}
			res.UploadFilesDeleted++
		}
	}
	return errors.Join(errs...)
}

// uploadDue reports whether the sweep expires u at now.
func uploadDue(u *store.Upload, now time.Time) bool {
	switch u.State {
	case migrate.UploadPending:
		return !now.Before(u.ExpiresAt.Add(UploadPendingGrace))
	case migrate.UploadUploaded:
		return u.UploadedAt != nil && !now.Before(u.UploadedAt.Add(UploadRetention))
	}
	return false
}

// importQueued reports whether a pending or running import.restore job names the upload.
func importQueued(tx *store.Tx, u *store.Upload) (bool, error) {
	js, err := store.Jobs.Lookup(tx, store.JobsByProject, u.ProjectID, store.Query{})
	if err != nil {
		return false, err
	}
	for _, j := range js {
		if j.Type != migrate.JobImportRestore || j.State == scheduler.StateCompleted || j.State == scheduler.StateFailed {
			continue
		}
		var in migrate.ImportPayload
		if err := json.Unmarshal(j.Payload, &in); err == nil && in.UploadID == u.ID {
			return true, nil
		}
	}
	return false, nil
}

// sweepDeletedProjects deletes what is left of deleted projects' backups: the delete job purges them
// before it marks the project deleted, so this finds only projects deleted before that existed, or files a
// request racing the deletion recreated.
func (s *Service) sweepDeletedProjects(ctx context.Context, res *SweepResult) error {
	var left []*store.Project
	if err := s.db.View(func(tx *store.Tx) error {
		deleted, err := store.Projects.All(tx, func(p *store.Project) bool { return p.State == ProjectDeleted })
		if err != nil {
			return err
		}
		for _, p := range deleted {
			has, err := hasBackupRecords(tx, p.ID)
			if err != nil {
				return err
			}
			if !has {
				_, err := os.Lstat(filepath.Join(s.cfg.DataDir, "backups", p.ID))
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
			}
			left = append(left, p)
		}
		return nil
	}); err != nil {
		return err
	}
	var errs []error
	for _, p := range left {
		if err := ctx.Err(); err != nil {
			return err
		}
		c, err := s.purgeProjectBackups(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("purge backups of deleted project %s: %w", p.ID, err))
		} else if c.any() {
			res.ProjectsPurged++
		}
	}
	return errors.Join(errs...)
}
