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

	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// JobStepHook, when not nil (Deps.JobStepHook), is called at the named steps of the restore and cutover
// jobs. Only test builds give one (cmd/testhooks_on.go), to stop the process at a chosen moment. The steps
// of a restore:
//
//	recovering   the candidate postmaster is recovering on its scratch port
//	swapped-out  the original data directory was renamed to pgdata.pre-restore-<job>, pgdata is absent
//	swapped-in   the candidate's data directory is pgdata, not started yet
//	started      the restored instance runs on the real port; the original's directory is still kept
//
// and of a cutover's promotion:
//
//	cutover-staged   the preview's data is restored into the staging database; the project is untouched
//	cutover-swapped  the staging database has the project's database name; the old one is not dropped yet
type JobStepHook func(ctx context.Context, jobID, step string)

func (s *Service) jobStep(ctx context.Context, jobID, step string) {
	if h := s.stepHook; h != nil {
		h(ctx, jobID, step)
	}
}

// restoreSwap is what a restore job writes (restored-<job> in the instance directory) once its restored
// instance is up on the real port: from then on the job only finishes (a retry after a crash does not undo
// the swap nor restore a second time).
type restoreSwap struct {
	FromTimeline int       `json:"from_timeline"`
	SwitchedAt   time.Time `json:"switched_at"`
}

// restoreJob builds a new data directory from a base backup and the WAL archive next to the instance's,
// recovers it to the target on a temporary port, and only then swaps it in. Until the swap the original
// instance runs untouched; its data directory is kept as pgdata.pre-restore-<job> until the restored one
// is up on the real port (a failed start swaps back).
//
// A crash at any point is repaired by the retry: a candidate left running is stopped and removed; a swap
// left half done (the pre-restore directory exists but the swap was not committed) is undone, putting the
// original back and running, before the restore starts over; a committed swap (restored-<job> exists) is
// only finished.
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
	live := s.eng.Instance(inst)
	old := live.DataDir() + ".pre-restore-" + run.Job.ID
	committed := filepath.Join(inst.Dir, "restored-"+run.Job.ID)
	cand := &postgres.Instance{ID: inst.ID + "-restore", Dir: filepath.Join(filepath.Dir(inst.Dir), inst.ID+".restore-"+run.Job.ID),
		Bin: live.Bin, User: dp.User}
	// Whatever happens, no candidate postmaster outlives the job (one left by a crashed attempt included).
	s.removeCandidate(ctx, cand)
	defer s.removeCandidate(context.WithoutCancel(ctx), cand)

	steps := newStepTimer()
	var swap restoreSwap
	if data, err := os.ReadFile(committed); err == nil {
		// An earlier attempt swapped the restored data in and crashed before it finished.
		if err := json.Unmarshal(data, &swap); err != nil {
			return nil, fmt.Errorf("read %s: %w", committed, err)
		}
		if err := s.ensureRunning(ctx, run, dp, inst, live); err != nil {
			return nil, scheduler.Transient(err)
		}
		s.setRuntime(prj.ID, RuntimeActive) // the crashed attempt said restarting
	} else {
		if err := s.undoSwap(ctx, run, dp, inst, live, old); err != nil {
			return nil, err
		}
		if swap, err = s.recoverAndSwap(ctx, run, dp, prj, inst, live, cand, b, in, string(adminPW), old, committed, steps); err != nil {
			return nil, err
		}
	}
	if err := os.RemoveAll(old); err != nil {
		s.log.Warn("remove the pre-restore data directory", "dir", old, "err", err)
	}

	// The restored database has the logins of its time: set the current credential again.
	// Errors from here on leave the restored data in place; a retry only finishes.
	conn, err := live.Admin(ctx, string(adminPW))
	if err != nil {
		return nil, scheduler.Transient(fmt.Errorf("restored, but the credential was not set again: %w", err))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := s.ensureRolesAndDatabase(ctx, conn, prj); err != nil {
		return nil, err
	}
	if err := s.syncPoolerUsers(ctx, dp, conn, inst, prj); err != nil {
		return nil, err
	}
	if err := s.eng.Pooler(inst, prj).Reload(); err != nil {
		return nil, fmt.Errorf("restored, but the pooler did not reload: %w", err)
	}
	tli, _, err := currentTimeline(ctx, conn)
	if err != nil {
		return nil, err
	}
	if err := appendTimelineSwitch(ctx, bs, prj.ID, timelineSwitch{JobID: run.Job.ID, From: swap.FromTimeline, To: tli,
		At: swap.SwitchedAt, BackupID: b.ID}); err != nil {
		return nil, fmt.Errorf("record the timeline switch: %w", err)
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
		md := map[string]any{"job_id": run.Job.ID, "backup_key": b.BackupKey, "timeline": tli, "from_timeline": swap.FromTimeline}
		return s.audit(tx, &Principal{AuthSource: ActorSystem}, "project.restored", p.OrganizationID, p.ID, md)
	})
	if err != nil {
		return nil, err
	}
	if err := os.Remove(committed); err != nil {
		s.log.Warn("remove the restore's swap record", "file", committed, "err", err)
	}
	s.notify()
	steps.done("finish")
	return map[string]any{"backup_key": b.BackupKey, "timeline": tli, "from_timeline": swap.FromTimeline,
		"switched_at": swap.SwitchedAt, "backup_job_id": next.ID, "timings_ms": steps.ms}, nil
}

// recoverAndSwap builds the candidate, recovers it to the target, and swaps it in for the live instance's
// data. It returns once the restored instance runs on the real port and the swap is recorded in committed.
func (s *Service) recoverAndSwap(ctx context.Context, run *scheduler.Run, dp *DataPlane, prj *store.Project, inst *store.Instance,
	live, cand *postgres.Instance, b *store.Backup, in restorePayload, adminPW, old, committed string, steps *stepTimer) (restoreSwap, error) {
	var swap restoreSwap
	bs := s.backupStore(dp)
	if in.TargetName != "" || !in.TargetTime.IsZero() {
		// Everything written up to now must be in the archive for recovery to reach the target.
		if _, _, err := s.archiveNow(ctx, inst, bs, prj.ID); err != nil {
			return swap, err
		}
		steps.done("archive")
	}
	var err error
	if cand.Port, err = postgres.FreePort(); err != nil {
		return swap, err
	}
	if err := s.prepareCandidate(ctx, run, dp, live, cand, prj.ID, b.BackupKey); err != nil {
		return swap, err
	}
	_, restoreCmd, err := bs.WALCommands(ctx, prj.ID)
	if err != nil {
		return swap, err
	}
	autoConf := filepath.Join(cand.DataDir(), "postgresql.auto.conf")
	original, err := os.ReadFile(autoConf)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return swap, err
	}
	if err := writeUserFile(dp, autoConf, append(append([]byte{}, original...), recoveryConf(run.Job.ID, restoreCmd, in)...)); err != nil {
		return swap, err
	}
	if err := writeUserFile(dp, filepath.Join(cand.DataDir(), "recovery.signal"), nil); err != nil {
		return swap, err
	}
	steps.done("prepare")
	since := time.Now()
	if err := cand.Start(ctx, run.Exec); err != nil {
		return swap, fmt.Errorf("recover the backup: %w", err)
	}
	s.jobStep(ctx, run.Job.ID, "recovering")
	if err := waitPromoted(ctx, cand, adminPW, since); err != nil {
		return swap, err
	}
	if err := cand.Stop(ctx, run.Exec, daemon.StopFast); err != nil {
		return swap, err
	}
	if err := writeUserFile(dp, autoConf, original); err != nil {
		return swap, err
	}
	steps.done("recover")

	// The old timeline's history must be in the archive up to the swap, so that a later restore to a time
	// before this one finds it: a commit just after the recorded switch time, then that segment archived.
	// Best effort: the restore the user asked for does not depend on it.
	at, from, err := s.archiveNow(ctx, inst, bs, prj.ID)
	if err != nil {
		s.log.Warn("archive the old timeline before a restore's swap", "project", prj.ID, "err", err)
		at = time.Now().UTC()
	}
	swap = restoreSwap{FromTimeline: from, SwitchedAt: at}
	record, err := json.Marshal(swap)
	if err != nil {
		return swap, err
	}

	// The swap: the original stops only now. The instance's lifecycle lock is held from its stop to the
	// restored data's start, so no supervisor (this process's, or a restarted one's adoption) starts
	// anything in between.
	settings, err := s.settingsFor(dp, prj, inst)
	if err != nil {
		return swap, err
	}
	s.setRuntime(prj.ID, RuntimeRestarting)
	defer s.setRuntime(prj.ID, RuntimeActive)
	dp.Supervisor.Unwatch(inst.ID)
	defer func() {
		if err := dp.Supervisor.Watch(inst.ID, live); err != nil {
			s.log.Error("watch instance after restore", "instance", inst.ID, "err", err)
		}
	}()
	err = live.Locked(ctx, func(ops postgres.LockedOps) error {
		if err := ops.Stop(ctx, run.Exec, daemon.StopFast); err != nil {
			return err
		}
		if err := os.Rename(live.DataDir(), old); err != nil {
			return errors.Join(err, ops.Start(context.WithoutCancel(ctx), run.Exec))
		}
		s.jobStep(ctx, run.Job.ID, "swapped-out")
		if err := os.Rename(cand.DataDir(), live.DataDir()); err != nil {
			if berr := os.Rename(old, live.DataDir()); berr != nil {
				return fmt.Errorf("move the restored data in: %w (and the original could not be put back: %v)", err, berr)
			}
			return errors.Join(err, ops.Start(context.WithoutCancel(ctx), run.Exec))
		}
		s.jobStep(ctx, run.Job.ID, "swapped-in")
		startErr := func() error {
			if _, err := live.WriteSettings(settings); err != nil {
				return err
			}
			return ops.Start(ctx, run.Exec)
		}()
		if startErr == nil {
			if startErr = dp.User.WriteFile(committed, record, 0o600); startErr == nil {
				return nil
			}
		}
		bctx := context.WithoutCancel(ctx)
		_ = ops.Stop(bctx, run.Exec, daemon.StopFast)
		_ = os.Rename(live.DataDir(), cand.DataDir())
		if err := os.Rename(old, live.DataDir()); err != nil {
			return fmt.Errorf("the restored data did not start (%v), and the original could not be put back: %w", startErr, err)
		}
		if err := ops.Start(bctx, run.Exec); err != nil {
			return fmt.Errorf("the restored data did not start (%v), and the original did not start again: %w", startErr, err)
		}
		return fmt.Errorf("the restored data did not start (the original runs again): %w", startErr)
	})
	if err != nil {
		return swap, err
	}
	s.jobStep(ctx, run.Job.ID, "started")
	steps.done("swap")
	return swap, nil
}

// undoSwap repairs what an earlier attempt of the job that crashed during its swap left (the pre-restore
// directory exists, the swap was not committed): the original data goes back in place and runs again.
func (s *Service) undoSwap(ctx context.Context, run *scheduler.Run, dp *DataPlane, inst *store.Instance, live *postgres.Instance, old string) error {
	if _, err := os.Stat(old); err != nil {
		return nil
	}
	s.log.Warn("an interrupted restore left the original data aside: putting it back", "instance", inst.ID, "dir", old)
	dp.Supervisor.Unwatch(inst.ID)
	defer func() {
		if err := dp.Supervisor.Watch(inst.ID, live); err != nil {
			s.log.Error("watch instance after restore", "instance", inst.ID, "err", err)
		}
	}()
	abandoned := old + ".abandoned"
	err := live.Locked(ctx, func(ops postgres.LockedOps) error {
		if err := ops.Stop(ctx, run.Exec, daemon.StopFast); err != nil {
			return err
		}
		if _, err := os.Stat(live.DataDir()); err == nil {
			if err := os.RemoveAll(abandoned); err != nil {
				return err
			}
			if err := os.Rename(live.DataDir(), abandoned); err != nil {
				return err
			}
		}
		if err := os.Rename(old, live.DataDir()); err != nil {
			return err
		}
		return ops.Start(ctx, run.Exec)
	})
	if err != nil {
		return scheduler.Transient(fmt.Errorf("put the original data back after an interrupted restore: %w", err))
	}
	if err := os.RemoveAll(abandoned); err != nil {
		s.log.Warn("remove the abandoned restored data", "dir", abandoned, "err", err)
	}
	s.setRuntime(inst.ProjectID, RuntimeActive) // the crashed attempt said restarting
	return nil
}

// ensureRunning starts the live instance if it does not run (a restarted appliance may not have yet).
func (s *Service) ensureRunning(ctx context.Context, run *scheduler.Run, dp *DataPlane, inst *store.Instance, live *postgres.Instance) error {
	if _, running, _ := live.Status(); running {
		return nil
	}
	if err := live.Start(ctx, run.Exec); err != nil {
		return err
	}
	return dp.Supervisor.Watch(inst.ID, live)
}

// recoveryConf is what makes the candidate recover to the target and promote, fetching WAL with
// restoreCmd (the backup store's restore_command).
func recoveryConf(jobID, restoreCmd string, in restorePayload) []byte {
	var c strings.Builder
	fmt.Fprintf(&c, "\n# appliance: restore %s\n", jobID)
	fmt.Fprintf(&c, "restore_command = %s\n", quoteLiteral(restoreCmd))
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
// backup as its data directory (written by the OS user, so ownership and modes are PostgreSQL's).
func (s *Service) prepareCandidate(ctx context.Context, run *scheduler.Run, dp *DataPlane, live, cand *postgres.Instance, projectID, backupKey string) error {
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
	if err := cand.MarkInitialized(); err != nil {
		return err
	}
	if err := s.fetchBackup(ctx, run.Exec, dp, projectID, backupKey, cand.DataDir()); err != nil {
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

// archiveNow commits a transaction (so that the WAL holds a commit record timed after "at", which a
// recovery to a time before it needs to stop), closes the current WAL segment and waits until the archiver
// stored it in the project's WAL archive. It returns the time taken just before that commit and the
// timeline it is on.
func (s *Service) archiveNow(ctx context.Context, inst *store.Instance, bs *backup.Store, projectID string) (at time.Time, timeline int, err error) {
	conn, err := s.adminConn(ctx, inst, "postgres")
	if err != nil {
		return at, 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	at = time.Now().UTC() // the wall clock, as the commit timestamps recovery compares targets with
	if _, err := conn.Exec(ctx, "SELECT txid_current()"); err != nil {
		return at, 0, fmt.Errorf("commit a marker transaction: %w", err)
	}
	if timeline, _, err = currentTimeline(ctx, conn); err != nil {
		return at, 0, fmt.Errorf("read the timeline: %w", err)
	}
	var seg string
	if err := conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_switch_wal())").Scan(&seg); err != nil {
		return at, 0, fmt.Errorf("switch WAL: %w", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var last, failed *string
		if err := conn.QueryRow(ctx, "SELECT last_archived_wal, last_failed_wal FROM pg_stat_archiver").Scan(&last, &failed); err != nil {
			return at, 0, err
		}
		if ok, err := bs.WALArchived(ctx, projectID, seg); err != nil {
			return at, 0, err
		} else if ok {
			return at, timeline, nil
		}
		if time.Now().After(deadline) {
			return at, 0, fmt.Errorf("WAL segment %s was not archived within a minute (last archived: %s, last failed: %s)", seg, deref(last), deref(failed))
		}
		select {
		case <-ctx.Done():
			return at, 0, ctx.Err()
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

// repairEndedRestores puts right, at start, what restore jobs of an instance that will never run again
// (failed: a crash spent their last attempt) left behind: a candidate (its processes killed, its directory
// removed); a committed swap (the restored data stays, the original's directory goes); a swap not
// committed (the original data is put back as pgdata). A restore job still pending or running repairs its
// own leftovers. Call it before the instance is watched; it logs what it cannot do.
func (s *Service) repairEndedRestores(ctx context.Context, dp *DataPlane, inst *store.Instance) {
	live := s.eng.Instance(inst)
	ended := func(jobID string) bool {
		var j *store.Job
		err := s.db.View(func(tx *store.Tx) (err error) { j, err = store.Jobs.Get(tx, jobID); return err })
		return err == nil && (j.State == scheduler.StateFailed || j.State == scheduler.StateCompleted)
	}
	cands, _ := filepath.Glob(filepath.Join(filepath.Dir(inst.Dir), inst.ID+".restore-*"))
	for _, dir := range cands {
		if jobID := strings.TrimPrefix(filepath.Base(dir), inst.ID+".restore-"); ended(jobID) {
			s.log.Warn("removing the candidate of an ended restore", "instance", inst.ID, "dir", dir)
			s.removeCandidate(ctx, &postgres.Instance{ID: inst.ID + "-restore", Dir: dir, Bin: live.Bin, User: dp.User})
		}
	}
	olds, _ := filepath.Glob(live.DataDir() + ".pre-restore-*")
	for _, old := range olds {
		jobID := strings.TrimPrefix(old, live.DataDir()+".pre-restore-")
		if strings.HasSuffix(jobID, ".abandoned") {
			jobID = strings.TrimSuffix(jobID, ".abandoned")
			if ended(jobID) {
				_ = os.RemoveAll(old)
			}
			continue
		}
		if !ended(jobID) {
			continue
		}
		if _, err := os.Stat(filepath.Join(inst.Dir, "restored-"+jobID)); err == nil {
			s.log.Warn("an ended restore swapped its data in: removing the original's directory", "instance", inst.ID, "dir", old)
			if err := os.RemoveAll(old); err != nil {
				s.log.Error("remove the pre-restore data directory", "dir", old, "err", err)
			}
			continue
		}
		s.log.Warn("an ended restore left the original data aside: putting it back", "instance", inst.ID, "dir", old)
		abandoned := old + ".abandoned"
		err := live.Locked(ctx, func(ops postgres.LockedOps) error {
			if err := ops.Stop(ctx, nil, daemon.StopFast); err != nil {
				return err
			}
			if _, err := os.Stat(live.DataDir()); err == nil {
				if err := os.Rename(live.DataDir(), abandoned); err != nil {
					return err
				}
			}
			return os.Rename(old, live.DataDir())
		})
		if err != nil {
			s.log.Error("put the original data back after an ended restore", "instance", inst.ID, "err", err)
			continue
		}
		_ = os.RemoveAll(abandoned)
	}
	markers, _ := filepath.Glob(filepath.Join(inst.Dir, "restored-*"))
	for _, m := range markers {
		if ended(strings.TrimPrefix(filepath.Base(m), "restored-")) {
			_ = os.Remove(m)
		}
	}
}
