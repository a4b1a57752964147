package backups

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// updateBackup applies fn to the stored backup in one transaction.
func (s *Service) updateBackup(id string, fn func(*store.Backup)) error {
	return s.db.Update(func(tx *store.Tx) error {
		b, err := store.Backups.Get(tx, id)
		if err != nil {
			return err
		}
		fn(b)
		return store.Backups.Put(tx, b)
	})
}

// createBackupJob takes a plain-format base backup with pg_basebackup (-X stream: the backup carries the
// WAL it needs, so it restores on its own) into the backup store's stage, verifies it with pg_verifybackup,
// stores it (its files, then its manifest) and records its size and verification.
func (s *Service) createBackupJob(ctx context.Context, run *scheduler.Run) (any, error) {
	steps := instances.NewTimer()
	var in backupPayload
	prj, inst, err := s.host.ActiveTarget(run, &in)
	if err != nil {
		return nil, s.failBackup(in.BackupID, err)
	}
	user := s.plane.User // ActiveTarget fails without a data plane
	var b *store.Backup
	if err := s.db.View(func(tx *store.Tx) (err error) { b, err = store.Backups.Get(tx, in.BackupID); return err }); err != nil {
		return nil, fmt.Errorf("backup %s: %w", in.BackupID, err)
	}
	if b.State == StateCompleted || b.State == StateFailed {
		return map[string]any{"skipped": "backup is " + b.State}, nil
	}
	bs := s.host.BackupStore()
	if err := bs.Prepare(ctx, prj.ID); err != nil {
		return nil, scheduler.Transient(err)
	}
	// A retry after a crash starts over: what an earlier attempt stored or staged goes.
	if err := bs.RemoveBackup(ctx, prj.ID, b.BackupKey); err != nil {
		return nil, scheduler.Transient(err)
	}
	if err := s.updateBackup(b.ID, func(b *store.Backup) { b.State = StateRunning }); err != nil {
		return nil, err
	}
	adminPW, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return nil, s.failBackup(b.ID, fmt.Errorf("open admin password: %w", err))
	}
	pgi := s.eng.Instance(inst)
	// Just after the appliance starts, the supervisor may still be bringing the server up: a backup waits
	// for it (a retry) instead of failing.
	ping, err := pgi.Admin(ctx, string(adminPW))
	if err != nil {
		return nil, scheduler.Transient(fmt.Errorf("the project's server does not accept connections yet: %w", err))
	}
	ping.Close(context.WithoutCancel(ctx))
	basebackup, err := pgi.Bin.Path("pg_basebackup")
	if err != nil {
		return nil, s.failBackup(b.ID, err)
	}
	verify, err := pgi.Bin.Path("pg_verifybackup")
	if err != nil {
		return nil, s.failBackup(b.ID, err)
	}
	dir, err := bs.StageBackup(ctx, prj.ID, b.BackupKey)
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	label := "appliance " + b.BackupKey
	cmd := user.Command(basebackup, "-D", dir, "-F", "p", "-X", "stream", "--checkpoint=fast", "--no-password",
		"--label", label, "-h", "127.0.0.1", "-p", strconv.Itoa(inst.Port), "-U", postgres.AdminRole)
	cmd.Env = append(cmd.Env, "PGPASSWORD="+string(adminPW), "PGSSLMODE=disable", "PGCONNECT_TIMEOUT=10")
	steps.Done("prepare")
	if err := run.Exec(ctx, cmd); err != nil {
		_ = bs.RemoveBackup(context.WithoutCancel(ctx), prj.ID, b.BackupKey)
		if ctx.Err() != nil {
			return nil, err // the runner stops: a later attempt starts over
		}
		return nil, s.failBackup(b.ID, err)
	}
	steps.Done("basebackup")
	// pg_verifybackup reads a plain-format directory (PostgreSQL 15's): the staged one, before it is stored.
	vstate, verr := VerificationVerified, ""
	if err := run.Exec(ctx, user.Command(verify, dir)); err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		vstate, verr = VerificationFailed, err.Error()
	}
	steps.Done("verify")
	now := s.now()
	m, err := bs.CommitBackup(ctx, prj.ID, b.BackupKey, dir, now)
	if err != nil {
		_ = bs.RemoveBackup(context.WithoutCancel(ctx), prj.ID, b.BackupKey)
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, s.failBackup(b.ID, fmt.Errorf("store the base backup: %w", err))
	}
	size := m.SizeBytes
	steps.Done("store")
	if err := s.updateBackup(b.ID, func(b *store.Backup) {
		b.State, b.SizeBytes, b.Timeline, b.CompletedAt = StateCompleted, size, m.Timeline, &now
	}); err != nil {
		return nil, err
	}
	steps.Done("record")
	verified := s.now()
	if err := s.updateBackup(b.ID, func(b *store.Backup) {
		b.VerificationState, b.VerificationError, b.VerifiedAt = vstate, verr, &verified
	}); err != nil {
		return nil, err
	}
	steps.Done("finish")
	return map[string]any{"backup_id": b.ID, "backup_key": b.BackupKey, "size_bytes": size, "verification_state": vstate,
		"timings_ms": steps.MS}, nil
}

// failBackup marks a backup failed with err, and returns err for the job.
func (s *Service) failBackup(id string, err error) error {
	if id == "" {
		return err
	}
	uerr := s.updateBackup(id, func(b *store.Backup) {
		b.State, b.Error = StateFailed, err.Error()
		b.VerificationState, b.VerificationError = VerificationFailed, "no backup to verify: "+err.Error()
	})
	if uerr != nil && !errors.Is(uerr, store.ErrNotFound) {
		s.log.Error("mark backup failed", "backup", id, "err", uerr)
	}
	return err
}
