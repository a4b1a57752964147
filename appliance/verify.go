package appliance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/theappliance/appliance/appliance/backups"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/store"
)

// DefaultVerifyBackupsEvery is how often each project's newest backup is restore-tested unless up
// --verify-backups-every says otherwise.
const DefaultVerifyBackupsEvery = 7 * 24 * time.Hour

// verifyBackupsCheckEvery is how often the periodic task looks for projects whose restore test is due (a
// restarted appliance does not wait a whole interval; a project is tested once per interval).
const verifyBackupsCheckEvery = "@every 1h"

// Events of the periodic restore test.
const (
	EventBackupVerified           = "backup.verified"
	EventBackupVerificationFailed = "backup.verification_failed"
)

// BackupVerifiedEvent is the data of backup.verified and backup.verification_failed.
type BackupVerifiedEvent struct {
	BackupID          string    `json:"backup_id"`
	BackupKey         string    `json:"backup_key"`
	ProjectID         string    `json:"project_id"`
	VerificationState string    `json:"verification_state" doc:"verified or failed"`
	VerificationError string    `json:"verification_error"`
	VerifiedAt        time.Time `json:"verified_at"`
	Databases         []string  `json:"databases" doc:"the databases the restored backup served"`
	Tables            int       `json:"tables" doc:"user tables read, one row each"`
	TookMS            int64     `json:"took_ms"`
}

// VerifyBackupsResult is what one pass of the periodic restore test did.
type VerifyBackupsResult struct {
	Verified int // backups restored and queried
	Failed   int // backups whose restore or query failed (recorded, event, alert)
	Skipped  int // due, but not tested now (short of disk; tried again at the next pass)
}

// VerifyBackups restore-tests, one after the other, the newest completed backup (not already known bad) of
// each active project that has had none of its backups restore-tested within every: the engine's
// VerifyBackup restores it from the backup store into a scratch server and queries it. Each result goes into
// the backup's verification_state, verification_error and verified_at (and its restore_tested_at), with
// the event backup.verified or backup.verification_failed; a failure raises the backup_unrestorable alert,
// a success resolves it. every <= 0 does nothing.
//
// The work is bounded: one scratch server at a time (the periodic runner never overlaps a task with itself,
// and this pass tests sequentially), a backup is not fetched when the data directory's file system would
// be left with less than the disk reserve plus its size, and a shutdown (ctx) stops the pass.
func (s *Service) VerifyBackups(ctx context.Context, now time.Time, every time.Duration) (VerifyBackupsResult, error) {
	var res VerifyBackupsResult
	if every <= 0 {
		return res, nil
	}
	dp, err := s.dataPlane()
	if err != nil {
		return res, err
	}
	type due struct {
		prj    *store.Project
		inst   *store.Instance
		backup *store.Backup
	}
	var todo []due
	err = s.db.View(func(tx *store.Tx) error {
		prjs, err := store.Projects.All(tx, func(p *store.Project) bool { return p.State == ProjectActive && p.PrimaryInstanceID != "" })
		if err != nil {
			return err
		}
		for _, prj := range prjs {
			if suspended, err := store.Suspended(tx, prj.OrganizationID); err != nil {
				return err
			} else if suspended { // its server is stopped: tested after the organization's resume
				continue
			}
			inst, err := store.Instances.Get(tx, prj.PrimaryInstanceID)
			if err != nil {
				continue
			}
			bs, err := store.Backups.Lookup(tx, store.BackupsByProject, prj.ID, store.Query{})
			if err != nil {
				return err
			}
			if b := dueBackup(bs, now, every); b != nil {
				todo = append(todo, due{prj, inst, b})
			}
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	var errs []error
	for _, d := range todo {
		if ctx.Err() != nil {
			return res, errors.Join(append(errs, ctx.Err())...)
		}
		ok, err := s.verifyBackup(ctx, dp, d.prj, d.inst, d.backup)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("project %s, backup %s: %w", d.prj.ID, d.backup.BackupKey, err))
			res.Skipped++
		case ok:
			res.Verified++
		default:
			res.Failed++
		}
	}
	return res, errors.Join(errs...)
}

// dueBackup is the backup of a project (bs) to restore-test now: its newest completed one whose
// verification did not fail already, unless one of its backups was restore-tested within every.
func dueBackup(bs []*store.Backup, now time.Time, every time.Duration) *store.Backup {
	var newest *store.Backup
	for _, b := range bs {
		if b.RestoreTestedAt != nil && now.Sub(*b.RestoreTestedAt) < every {
			return nil
		}
		if b.State != BackupCompleted || b.CompletedAt == nil || b.VerificationState == VerificationFailed {
			continue
		}
		if newest == nil || b.CompletedAt.After(*newest.CompletedAt) {
			newest = b
		}
	}
	return newest
}

// verifyBackup restore-tests one backup and records the result: ok says whether it restored and answered.
// An error is a test that did not happen (short of disk, the shutdown, the record not written): nothing
// about the backup is recorded then.
func (s *Service) verifyBackup(ctx context.Context, dp *DataPlane, prj *store.Project, inst *store.Instance, b *store.Backup) (bool, error) {
	s.eng.RemoveVerifyScratch(ctx, inst) // a crash's leftover, whatever comes next
	d := s.storage.CheckDisk()
	if d.FreeBytes >= 0 && d.FreeBytes-b.SizeBytes < d.ReserveBytes {
		return false, fmt.Errorf("not restore-tested now: %d bytes free, the backup takes %d and %d are kept in reserve", d.FreeBytes, b.SizeBytes, d.ReserveBytes)
	}
	adminPW, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return false, fmt.Errorf("open admin password: %w", err)
	}
	archive, err := s.archiveOf(ctx, dp, prj.ID, b.BackupKey)
	if err != nil {
		return false, err
	}
	start := time.Now()
	// The scratch server runs the major of the backup's cluster (before a major upgrade: the old one).
	got, verr := s.eng.VerifyBackup(ctx, nil, instances.VerifySpec{Instance: backups.BackupCluster(inst, b, dp.Bin), AdminPassword: string(adminPW),
		Archive: archive, Label: b.BackupKey})
	if verr != nil && ctx.Err() != nil {
		return false, ctx.Err() // stopped by the shutdown: not a verdict on the backup
	}
	took := time.Since(start)
	if verr != nil {
		s.log.Warn("restore test of a backup failed", "project", prj.ID, "backup", b.BackupKey, "err", verr)
	} else {
		s.log.Info("restore test of a backup", "project", prj.ID, "backup", b.BackupKey, "databases", len(got.Databases),
			"tables", got.Tables, "took", took.Round(time.Millisecond))
	}
	err = s.db.Update(func(tx *store.Tx) error {
		rec, err := store.Backups.Get(tx, b.ID)
		if errors.Is(err, store.ErrNotFound) {
			return nil // deleted meanwhile (retention, the project's deletion): nothing to record
		} else if err != nil {
			return err
		}
		now := s.now()
		ev := BackupVerifiedEvent{BackupID: rec.ID, BackupKey: rec.BackupKey, ProjectID: rec.ProjectID,
			VerificationState: VerificationVerified, VerifiedAt: now, Databases: got.Databases, Tables: got.Tables,
			TookMS: took.Milliseconds()}
		typ := EventBackupVerified
		if verr != nil {
			typ = EventBackupVerificationFailed
			ev.VerificationState, ev.VerificationError = VerificationFailed, "restore test: "+verr.Error()
		}
		rec.VerificationState, rec.VerificationError, rec.VerifiedAt, rec.RestoreTestedAt = ev.VerificationState, ev.VerificationError, &now, &now
		if err := store.Backups.Put(tx, rec); err != nil {
			return err
		}
		if err := s.events.Append(tx, typ, rec.OrganizationID, rec.ProjectID, ev); err != nil {
			return err
		}
		p, err := store.Projects.Get(tx, rec.ProjectID)
		if err != nil {
			return nil // the project is gone: no alert to raise
		}
		return s.observe.BackupRestoreTested(tx, p, rec.BackupKey, verr)
	})
	if err != nil {
		return false, fmt.Errorf("record the restore test: %w", err)
	}
	return verr == nil, nil
}
