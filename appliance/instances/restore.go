package instances

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

	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// The steps of a restore at which Config.Step is called:
//
//	recovering   the candidate postmaster is recovering on its scratch port
//	swapped-out  the original data directory was renamed to pgdata.pre-restore-<job>, pgdata is absent
//	swapped-in   the candidate's data directory is pgdata, not started yet
//	started      the restored instance runs on the real port; the original's directory is still kept

// restoreSwap is what a restore writes (restored-<job> in the instance directory) once its restored
// instance is up on the real port: from then on the job only finishes (a retry after a crash does not undo
// the swap nor restore a second time).
type restoreSwap struct {
	FromTimeline int       `json:"from_timeline"`
	SwitchedAt   time.Time `json:"switched_at"`
}

// RestoreSpec is a restore of a project's instance from a base backup and its WAL archive.
type RestoreSpec struct {
	JobID string
	// Instance is the instance's record as the restored cluster (the backup's major, installation and WAL
	// archive); Running, when not nil, its record as it runs before the restore (another major: the
	// original data is started again with its own binaries when the swap is undone).
	Instance      *store.Instance
	Running       *store.Instance
	Project       *store.Project
	AdminPassword string
	Credential    Credential        // set again on the restored data (it has the logins of its time)
	Settings      postgres.Settings // the project's, written into the restored data
	Archive       Archive           // the project's WAL archive and the base backup to restore
	Target        Target
	// Restarting is told true when the restore stops the live server and false once a server runs again.
	Restarting func(bool)
	Steps      *Timer
}

// Restored is what a restore did.
type Restored struct {
	FromTimeline int       // the timeline before the swap
	SwitchedAt   time.Time // when the old timeline ends (archived up to then)
	Timeline     int       // the restored server's timeline
	Version      string    // the restored server's version (server_version, "17.2")
}

// Restore builds a new data directory from a base backup and the WAL archive next to the instance's,
// recovers it to the target on a temporary port, and only then swaps it in. Until the swap the original
// instance runs untouched; its data directory is kept as pgdata.pre-restore-<job> until the restored one
// is up on the real port (a failed start swaps back). Then it sets the logins again.
//
// A crash at any point is repaired by the retry: a candidate left running is stopped and removed; a swap
// left half done (the pre-restore directory exists but the swap was not committed) is undone, putting the
// original back and running, before the restore starts over; a committed swap (restored-<job> exists) is
// only finished. The caller records the restore, then calls FinishRestore.
func (m *Manager) Restore(ctx context.Context, exec daemon.ExecFunc, spec RestoreSpec) (Restored, error) {
	inst, prj := spec.Instance, spec.Project
	live := m.Instance(inst)
	orig := live // the original data's server
	if spec.Running != nil {
		orig = m.Instance(spec.Running)
	}
	old := live.DataDir() + ".pre-restore-" + spec.JobID
	committed := filepath.Join(inst.Dir, "restored-"+spec.JobID)
	cand := &postgres.Instance{ID: inst.ID + "-restore", Dir: filepath.Join(filepath.Dir(inst.Dir), inst.ID+".restore-"+spec.JobID),
		Bin: live.Bin, User: m.cfg.User}
	// Whatever happens, no candidate postmaster outlives the job (one left by a crashed attempt included).
	m.removeCandidate(ctx, cand)
	defer m.removeCandidate(context.WithoutCancel(ctx), cand)

	var swap restoreSwap
	if data, err := os.ReadFile(committed); err == nil {
		// An earlier attempt swapped the restored data in and crashed before it finished.
		if err := json.Unmarshal(data, &swap); err != nil {
			return Restored{}, fmt.Errorf("read %s: %w", committed, err)
		}
		if err := m.ensureRunning(ctx, exec, inst, live); err != nil {
			return Restored{}, scheduler.Transient(err)
		}
		spec.Restarting(false) // the crashed attempt said restarting
	} else {
		if err := m.undoSwap(ctx, exec, inst, orig, old, spec.Restarting); err != nil {
			return Restored{}, err
		}
		if swap, err = m.recoverAndSwap(ctx, exec, spec, live, orig, cand, old, committed); err != nil {
			return Restored{}, err
		}
	}
	if err := os.RemoveAll(old); err != nil {
		m.cfg.Log.Warn("remove the pre-restore data directory", "dir", old, "err", err)
	}

	// The restored database has the logins of its time: set the current credential again.
	// Errors from here on leave the restored data in place; a retry only finishes.
	conn, err := live.Admin(ctx, spec.AdminPassword)
	if err != nil {
		return Restored{}, scheduler.Transient(fmt.Errorf("restored, but the credential was not set again: %w", err))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := ensureRolesAndDatabase(ctx, conn, prj, spec.Credential); err != nil {
		return Restored{}, err
	}
	if err := m.SyncPoolerUsers(ctx, conn, inst, prj); err != nil {
		return Restored{}, err
	}
	if err := m.Pooler(inst, prj).Reload(); err != nil {
		return Restored{}, fmt.Errorf("restored, but the pooler did not reload: %w", err)
	}
	tli, _, err := CurrentTimeline(ctx, conn)
	if err != nil {
		return Restored{}, err
	}
	var version string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return Restored{}, err
	}
	version, _, _ = strings.Cut(version, " ")
	return Restored{FromTimeline: swap.FromTimeline, SwitchedAt: swap.SwitchedAt, Timeline: tli, Version: version}, nil
}

// FinishRestore removes the restore's swap record, once the caller recorded the restore: a retry then no
// longer takes the job for one that only has to finish.
func (m *Manager) FinishRestore(inst *store.Instance, jobID string) {
	committed := filepath.Join(inst.Dir, "restored-"+jobID)
	if err := os.Remove(committed); err != nil {
		m.cfg.Log.Warn("remove the restore's swap record", "file", committed, "err", err)
	}
}

// recoverAndSwap builds the candidate, recovers it to the target, and swaps it in for the live instance's
// data (orig: the original data's server, whose binaries start it again when the swap fails). It returns
// once the restored instance runs on the real port and the swap is recorded in committed.
func (m *Manager) recoverAndSwap(ctx context.Context, exec daemon.ExecFunc, spec RestoreSpec, live, orig, cand *postgres.Instance, old, committed string) (restoreSwap, error) {
	inst, prj, steps := spec.Instance, spec.Project, spec.Steps
	var swap restoreSwap
	if spec.Target.Name != "" || !spec.Target.Time.IsZero() {
		// Everything written up to now must be in the archive for recovery to reach the target.
		if _, _, err := ArchiveNow(ctx, inst, spec.AdminPassword, spec.Archive.Archived); err != nil {
			return swap, err
		}
		steps.Done("archive")
	}
	var err error
	if cand.Port, err = postgres.FreePort(); err != nil {
		return swap, err
	}
	if err := m.prepareCandidate(ctx, exec, live, cand, spec.Archive.FetchBase); err != nil {
		return swap, err
	}
	autoConf := filepath.Join(cand.DataDir(), "postgresql.auto.conf")
	original, err := os.ReadFile(autoConf)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return swap, err
	}
	if err := m.writeUserFile(autoConf, append(append([]byte{}, original...), recoveryConf(spec.JobID, spec.Archive.RestoreCommand, spec.Target)...)); err != nil {
		return swap, err
	}
	if err := m.writeUserFile(filepath.Join(cand.DataDir(), "recovery.signal"), nil); err != nil {
		return swap, err
	}
	steps.Done("prepare")
	since := time.Now()
	if err := startScratch(ctx, exec, cand); err != nil {
		return swap, fmt.Errorf("recover the backup: %w", err)
	}
	m.step(ctx, spec.JobID, "recovering")
	if err := waitPromoted(ctx, cand, spec.AdminPassword, since); err != nil {
		return swap, err
	}
	if err := cand.Stop(ctx, exec, daemon.StopFast); err != nil {
		return swap, err
	}
	if err := m.writeUserFile(autoConf, original); err != nil {
		return swap, err
	}
	steps.Done("recover")

	// The old timeline's history must be in the archive up to the swap, so that a later restore to a time
	// before this one finds it: a commit just after the recorded switch time, then that segment archived.
	// Best effort: the restore the user asked for does not depend on it.
	at, from, err := ArchiveNow(ctx, inst, spec.AdminPassword, spec.Archive.Archived)
	if err != nil {
		m.cfg.Log.Warn("archive the old timeline before a restore's swap", "project", prj.ID, "err", err)
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
	spec.Restarting(true)
	defer spec.Restarting(false)
	m.cfg.Supervisor.Unwatch(inst.ID)
	defer func() {
		if err := m.watchHeld(inst.ID, live); err != nil {
			m.cfg.Log.Error("watch instance after restore", "instance", inst.ID, "err", err)
		}
	}()
	err = live.Locked(ctx, func(ops postgres.LockedOps) error {
		if err := ops.Stop(ctx, exec, daemon.StopFast); err != nil {
			return err
		}
		if err := os.Rename(live.DataDir(), old); err != nil {
			return errors.Join(err, ops.Of(orig).Start(context.WithoutCancel(ctx), exec))
		}
		m.step(ctx, spec.JobID, "swapped-out")
		if err := os.Rename(cand.DataDir(), live.DataDir()); err != nil {
			if berr := os.Rename(old, live.DataDir()); berr != nil {
				return fmt.Errorf("move the restored data in: %w (and the original could not be put back: %v)", err, berr)
			}
			return errors.Join(err, ops.Of(orig).Start(context.WithoutCancel(ctx), exec))
		}
		m.step(ctx, spec.JobID, "swapped-in")
		startErr := func() error {
			if _, err := live.WriteSettings(spec.Settings); err != nil {
				return err
			}
			return ops.Start(ctx, exec)
		}()
		if startErr == nil {
			if startErr = m.cfg.User.WriteFile(committed, record, 0o600); startErr == nil {
				return nil
			}
		}
		bctx := context.WithoutCancel(ctx)
		_ = ops.Stop(bctx, exec, daemon.StopFast)
		_ = os.Rename(live.DataDir(), cand.DataDir())
		if err := os.Rename(old, live.DataDir()); err != nil {
			return fmt.Errorf("the restored data did not start (%v), and the original could not be put back: %w", startErr, err)
		}
		if err := ops.Of(orig).Start(bctx, exec); err != nil {
			return fmt.Errorf("the restored data did not start (%v), and the original did not start again: %w", startErr, err)
		}
		return fmt.Errorf("the restored data did not start (the original runs again): %w", startErr)
	})
	if err != nil {
		return swap, err
	}
	m.step(ctx, spec.JobID, "started")
	steps.Done("swap")
	return swap, nil
}

// undoSwap repairs what an earlier attempt of the job that crashed during its swap left (the pre-restore
// directory exists, the swap was not committed): the original data goes back in place and runs again.
func (m *Manager) undoSwap(ctx context.Context, exec daemon.ExecFunc, inst *store.Instance, live *postgres.Instance, old string, restarting func(bool)) error {
	if _, err := os.Stat(old); err != nil {
		return nil
	}
	m.cfg.Log.Warn("an interrupted restore left the original data aside: putting it back", "instance", inst.ID, "dir", old)
	m.cfg.Supervisor.Unwatch(inst.ID)
	defer func() {
		if err := m.watchHeld(inst.ID, live); err != nil {
			m.cfg.Log.Error("watch instance after restore", "instance", inst.ID, "err", err)
		}
	}()
	abandoned := old + ".abandoned"
	err := live.Locked(ctx, func(ops postgres.LockedOps) error {
		if err := ops.Stop(ctx, exec, daemon.StopFast); err != nil {
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
		return ops.Start(ctx, exec)
	})
	if err != nil {
		return scheduler.Transient(fmt.Errorf("put the original data back after an interrupted restore: %w", err))
	}
	if err := os.RemoveAll(abandoned); err != nil {
		m.cfg.Log.Warn("remove the abandoned restored data", "dir", abandoned, "err", err)
	}
	restarting(false) // the crashed attempt said restarting
	return nil
}

// ensureRunning starts the live instance if it does not run (a restarted appliance may not have yet).
func (m *Manager) ensureRunning(ctx context.Context, exec daemon.ExecFunc, inst *store.Instance, live *postgres.Instance) error {
	if _, running, _ := live.Status(); running {
		return nil
	}
	if err := live.Start(ctx, exec); err != nil {
		return err
	}
	return m.watchHeld(inst.ID, live)
}

// prepareCandidate makes the candidate's directory: the live instance's TLS files, a copy of the base
// backup as its data directory (written by the OS user, so ownership and modes are PostgreSQL's).
func (m *Manager) prepareCandidate(ctx context.Context, exec daemon.ExecFunc, live, cand *postgres.Instance,
	fetch func(context.Context, daemon.ExecFunc, string) error) error {
	if err := os.Mkdir(cand.Dir, 0o700); err != nil {
		return err
	}
	if err := m.cfg.User.Chown(cand.Dir); err != nil {
		return err
	}
	var pem [3][]byte
	for i, f := range []string{live.CertFile(), live.KeyFile(), live.CAFile()} {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("read %s: %w", f, err)
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
	if err := fetch(ctx, exec, cand.DataDir()); err != nil {
		return fmt.Errorf("copy the base backup: %w", err)
	}
	return nil
}

// removeCandidate stops and deletes a candidate directory (a leftover of an earlier attempt, or this one's).
func (m *Manager) removeCandidate(ctx context.Context, cand *postgres.Instance) {
	if _, err := os.Stat(cand.Dir); err != nil {
		return
	}
	if err := cand.Remove(ctx); err != nil {
		m.cfg.Log.Warn("remove restore candidate", "dir", cand.Dir, "err", err)
	}
}

// RepairEndedRestores puts right, at start, what restore jobs of an instance that will never run again
// (ended: a crash spent their last attempt, or they completed) left behind: a candidate (its processes
// killed, its directory removed); a committed swap (the restored data stays, the original's directory
// goes); a swap not committed (the original data is put back as pgdata). A restore job still pending or
// running repairs its own leftovers. Call it before the instance is watched; it logs what it cannot do.
func (m *Manager) RepairEndedRestores(ctx context.Context, inst *store.Instance, ended func(jobID string) bool) {
	live := m.Instance(inst)
	cands, _ := filepath.Glob(filepath.Join(filepath.Dir(inst.Dir), inst.ID+".restore-*"))
	for _, dir := range cands {
		if jobID := strings.TrimPrefix(filepath.Base(dir), inst.ID+".restore-"); ended(jobID) {
			m.cfg.Log.Warn("removing the candidate of an ended restore", "instance", inst.ID, "dir", dir)
			m.removeCandidate(ctx, &postgres.Instance{ID: inst.ID + "-restore", Dir: dir, Bin: live.Bin, User: m.cfg.User})
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
			m.cfg.Log.Warn("an ended restore swapped its data in: removing the original's directory", "instance", inst.ID, "dir", old)
			if err := os.RemoveAll(old); err != nil {
				m.cfg.Log.Error("remove the pre-restore data directory", "dir", old, "err", err)
			}
			continue
		}
		m.cfg.Log.Warn("an ended restore left the original data aside: putting it back", "instance", inst.ID, "dir", old)
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
			m.cfg.Log.Error("put the original data back after an ended restore", "instance", inst.ID, "err", err)
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

// startScratch starts a scratch server (a restore's candidate, a restore test) on loopback. Its port was
// found free by postgres.FreePort, which only probes: another process may bind it before the server does
// (a busy machine's outgoing connections take ephemeral ports too). A start that failed to bind is tried
// again on another free port, up to three ports; the start rewrites the port into appliance.conf.
func startScratch(ctx context.Context, exec daemon.ExecFunc, cand *postgres.Instance) error {
	for attempt := 1; ; attempt++ {
		err := cand.Start(ctx, exec)
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "Address already in use") {
			return err
		}
		if cand.Port, err = postgres.FreePort(); err != nil {
			return err
		}
	}
}
