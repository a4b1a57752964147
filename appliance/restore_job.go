package appliance

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// restoreJob builds a new data directory from a base backup and the WAL archive next to the instance's,
// recovers it to the target on a temporary port, and only then swaps it in. Until the swap the original
// instance runs untouched; its data directory is kept as pgdata.pre-restore-<job> until the restored one
// is up on the real port (a failed start swaps back).
func (s *Service) restoreJob(ctx context.Context, run *scheduler.Run) (any, error) {
	var in restorePayload
	dp, prj, inst, err := s.activeTarget(run, &in)
	if err != nil {
		return nil, err
	}
	var b *store.Backup
	if err := s.db.View(func(tx *store.Tx) (err error) { b, err = store.Backups.Get(tx, in.BackupID); return err }); err != nil {
		return nil, fmt.Errorf("backup %s: %w", in.BackupID, err)
	}
	adminPW, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return nil, fmt.Errorf("open admin password: %w", err)
	}
	bs := s.backupStore(dp)
	live := s.pgInstance(dp, inst)
	old := live.DataDir() + ".pre-restore-" + run.Job.ID
	cand := &postgres.Instance{ID: inst.ID + "-restore", Dir: filepath.Join(filepath.Dir(inst.Dir), inst.ID+".restore-"+run.Job.ID),
		Bin: live.Bin, User: dp.User}

	// An earlier attempt of this job that crashed during the swap: put the original data back first.
	if _, err := os.Stat(old); err == nil {
		dp.Supervisor.Unwatch(inst.ID)
		_ = live.Stop(ctx, run.Exec, postgres.StopFast)
		if _, err := os.Stat(live.DataDir()); err == nil {
			if err := os.Rename(live.DataDir(), old+".abandoned"); err != nil {
				return nil, err
			}
			defer os.RemoveAll(old + ".abandoned")
		}
		if err := os.Rename(old, live.DataDir()); err != nil {
			return nil, err
		}
		if err := live.Start(ctx, run.Exec); err != nil {
			return nil, err
		}
		if err := dp.Supervisor.Watch(inst.ID, live); err != nil {
			return nil, err
		}
	}
	s.removeCandidate(ctx, cand)
	defer s.removeCandidate(context.WithoutCancel(ctx), cand)

	steps := newStepTimer()
	if in.TargetName != "" || !in.TargetTime.IsZero() {
		// Everything written up to now must be in the archive for recovery to reach the target.
		if err := s.archiveNow(ctx, inst, bs.WALDir(prj.ID)); err != nil {
			return nil, err
		}
		steps.done("archive")
	}
	if cand.Port, err = freePort(); err != nil {
		return nil, err
	}
	if err := s.prepareCandidate(ctx, run, dp, live, cand, bs.BaseDir(prj.ID, b.BackupKey)); err != nil {
		return nil, err
	}
	autoConf := filepath.Join(cand.DataDir(), "postgresql.auto.conf")
	original, err := os.ReadFile(autoConf)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err := writeUserFile(dp, autoConf, append(append([]byte{}, original...), recoveryConf(run.Job.ID, bs.WALDir(prj.ID), in)...)); err != nil {
		return nil, err
	}
	if err := writeUserFile(dp, filepath.Join(cand.DataDir(), "recovery.signal"), nil); err != nil {
		return nil, err
	}
	steps.done("prepare")
	since := time.Now()
	if err := cand.Start(ctx, run.Exec); err != nil {
		return nil, fmt.Errorf("recover the backup: %w", err)
	}
	if err := waitPromoted(ctx, cand, string(adminPW), since); err != nil {
		return nil, err
	}
	if err := cand.Stop(ctx, run.Exec, postgres.StopFast); err != nil {
		return nil, err
	}
	if err := writeUserFile(dp, autoConf, original); err != nil {
		return nil, err
	}
	steps.done("recover")

	// The swap: the original stops only now.
	s.setRuntime(prj.ID, RuntimeRestarting)
	defer s.setRuntime(prj.ID, RuntimeActive)
	dp.Supervisor.Unwatch(inst.ID)
	rewatch := func() {
		if err := dp.Supervisor.Watch(inst.ID, live); err != nil {
			s.log.Error("watch instance after restore", "instance", inst.ID, "err", err)
		}
	}
	if err := live.Stop(ctx, run.Exec, postgres.StopFast); err != nil {
		rewatch()
		return nil, err
	}
	if err := os.Rename(live.DataDir(), old); err != nil {
		rewatch()
		return nil, err
	}
	if err := os.Rename(cand.DataDir(), live.DataDir()); err != nil {
		_ = os.Rename(old, live.DataDir())
		rewatch()
		return nil, err
	}
	startErr := func() error {
		settings, err := s.settingsFor(dp, prj, inst)
		if err != nil {
			return err
		}
		if _, err := live.WriteSettings(settings); err != nil {
			return err
		}
		return live.Start(ctx, run.Exec)
	}()
	if startErr != nil {
		_ = live.Stop(context.WithoutCancel(ctx), run.Exec, postgres.StopFast)
		_ = os.Rename(live.DataDir(), cand.DataDir())
		if err := os.Rename(old, live.DataDir()); err != nil {
			return nil, fmt.Errorf("the restored data did not start (%v), and the original could not be put back: %w", startErr, err)
		}
		rewatch()
		return nil, fmt.Errorf("the restored data did not start (the original runs again): %w", startErr)
	}
	rewatch()
	steps.done("swap")
	if err := os.RemoveAll(old); err != nil {
		s.log.Warn("remove the pre-restore data directory", "dir", old, "err", err)
	}

	// The restored database has the logins of its time: set the current credential again.
	// Errors from here on are final (never Transient): a retry would restore once more.
	conn, err := live.Admin(ctx, string(adminPW))
	if err != nil {
		return nil, fmt.Errorf("restored, but the credential was not set again: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := s.ensureRolesAndDatabase(ctx, conn, prj); err != nil {
		return nil, err
	}
	if err := s.syncPoolerUsers(ctx, dp, conn, inst, prj); err != nil {
		return nil, err
	}
	if err := s.pgPooler(dp, inst, prj).Reload(); err != nil {
		return nil, fmt.Errorf("restored, but the pooler did not reload: %w", err)
	}
	tli, _, err := currentTimeline(ctx, conn)
	if err != nil {
		return nil, err
	}
	// A base backup of the new timeline, so that later point-in-time restores have one to start from.
	var next *store.Job
	err = s.db.Update(func(tx *store.Tx) error {
		p, err := store.Projects.Get(tx, prj.ID)
		if err != nil {
			return err
		}
		now := s.now()
		id := ids.New("bkp")
		nb := &store.Backup{ID: id, ProjectID: p.ID, OrganizationID: p.OrganizationID, DatabaseName: p.DatabaseName,
			BackupKey: now.Format("20060102T150405Z") + "-" + id[len(id)-6:], Label: "after restore " + run.Job.ID,
			State: BackupPending, VerificationState: VerificationPending, CreatedAt: now}
		if next, err = s.enqueue(tx, p, JobBackupCreate, p.ID, backupPayload{BackupID: id}); err != nil {
			return err
		}
		nb.JobID = next.ID
		if err := store.Backups.Put(tx, nb); err != nil {
			return err
		}
		md := map[string]any{"job_id": run.Job.ID, "backup_key": b.BackupKey, "timeline": tli}
		return s.audit(tx, &Principal{AuthSource: ActorSystem}, "project.restored", p.OrganizationID, p.ID, md)
	})
	if err != nil {
		return nil, err
	}
	s.notify()
	steps.done("finish")
	return map[string]any{"backup_key": b.BackupKey, "timeline": tli, "backup_job_id": next.ID, "timings_ms": steps.ms}, nil
}

// recoveryConf is what makes the candidate recover to the target and promote.
func recoveryConf(jobID, walDir string, in restorePayload) []byte {
	var c strings.Builder
	fmt.Fprintf(&c, "\n# appliance: restore %s\n", jobID)
	fmt.Fprintf(&c, "restore_command = %s\n", quoteLiteral(`cp "`+walDir+`/%f" "%p"`))
	switch {
	case in.TargetName != "":
		fmt.Fprintf(&c, "recovery_target_name = %s\n", quoteLiteral(in.TargetName))
	case !in.TargetTime.IsZero():
		fmt.Fprintf(&c, "recovery_target_time = %s\n", quoteLiteral(in.TargetTime.UTC().Format("2006-01-02 15:04:05.999999-07")))
	default:
		c.WriteString("recovery_target = 'immediate'\n")
	}
	if in.Timeline > 0 {
		fmt.Fprintf(&c, "recovery_target_timeline = '%d'\n", in.Timeline)
	} else {
		c.WriteString("recovery_target_timeline = 'current'\n")
	}
	c.WriteString("recovery_target_action = 'promote'\n")
	return []byte(c.String())
}

// prepareCandidate makes the candidate's directory: the live instance's TLS files, a copy of the base
// backup as its data directory (copied by the OS user, so ownership and modes are PostgreSQL's).
func (s *Service) prepareCandidate(ctx context.Context, run *scheduler.Run, dp *DataPlane, live, cand *postgres.Instance, base string) error {
	if err := os.Mkdir(cand.Dir, 0o700); err != nil {
		return err
	}
	if err := dp.User.Chown(cand.Dir); err != nil {
		return err
	}
	var pem [3][]byte
	for i, f := range []string{live.CertFile(), live.KeyFile(), live.CAFile()} {
		b, err := readFile(f)
		if err != nil {
			return err
		}
		pem[i] = b
	}
	if err := cand.WriteTLS(pem[0], pem[1], pem[2]); err != nil {
		return err
	}
	// postgres.Instance starts only directories its Init completed: the marker Init writes last.
	if err := writeUserFile(dp, filepath.Join(cand.Dir, "initialized"), []byte(time.Now().UTC().Format(time.RFC3339)+"\n")); err != nil {
		return err
	}
	cp := dp.User.Command("cp", "-a", base, cand.DataDir())
	if err := run.Exec(ctx, cp); err != nil {
		return fmt.Errorf("copy the base backup: %w", err)
	}
	return nil
}

// removeCandidate stops and deletes a candidate directory (a leftover of an earlier attempt, or this one's).
func (s *Service) removeCandidate(ctx context.Context, cand *postgres.Instance) {
	if _, err := os.Stat(cand.Dir); err != nil {
		return
	}
	if err := cand.Remove(ctx); err != nil {
		s.log.Warn("remove restore candidate", "dir", cand.Dir, "err", err)
	}
}

// waitPromoted waits until the candidate left recovery (recovery_target_action = promote).
func waitPromoted(ctx context.Context, cand *postgres.Instance, password string, since time.Time) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		if _, running, _ := cand.Status(); !running {
			return fmt.Errorf("recovery stopped before reaching the target: %s", strings.Join(cand.LogMessages(since, 4), "; "))
		}
		if conn, err := cand.Admin(ctx, password); err == nil {
			var inRecovery bool
			err = conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery)
			conn.Close(context.WithoutCancel(ctx))
			if err == nil && !inRecovery {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("recovery did not reach the target within 10 minutes")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// archiveNow closes the current WAL segment and waits until the archiver copied it into walDir.
func (s *Service) archiveNow(ctx context.Context, inst *store.Instance, walDir string) error {
	conn, err := s.adminConn(ctx, inst, "postgres")
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var seg string
	if err := conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_switch_wal())").Scan(&seg); err != nil {
		return fmt.Errorf("switch WAL: %w", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var last, failed *string
		if err := conn.QueryRow(ctx, "SELECT last_archived_wal, last_failed_wal FROM pg_stat_archiver").Scan(&last, &failed); err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(walDir, seg)); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("WAL segment %s was not archived within a minute (last archived: %s, last failed: %s)", seg, deref(last), deref(failed))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return "none"
	}
	return *s
}

// writeUserFile writes a file owned by the instances' OS user (mode 0600).
func writeUserFile(dp *DataPlane, path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return err
	}
	return dp.User.Chown(path)
}
