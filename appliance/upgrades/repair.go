package upgrades

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// RepairEnded puts right, at the appliance's start and before the project's server is watched, what a
// logical upgrade whose job will never run again left (its last attempt cut short by a stop of the
// appliance: the scheduler fails it at the start, so no attempt clears it): the old server's fence (the
// stop came inside the write pause), the new clusters beside the project's (their servers stopped), the
// forward slots and publications on the old server (once it answers: in the background), the attempts'
// archives and backups. Nothing while an upgrade job of the project may still run (its next attempt
// clears it: clearAttempt) or an upgrade awaits confirm or rollback.
func (s *Service) RepairEnded(ctx context.Context, prj *store.Project, inst *store.Instance, log *slog.Logger) {
	if s.eng == nil || inst.PreviousDir != "" {
		return
	}
	s.repairPgUpgrade(ctx, prj, inst, log)
	var last *store.Job // the project's newest upgrade job
	err := s.db.View(func(tx *store.Tx) error {
		js, err := store.Jobs.Lookup(tx, store.JobsByProject, prj.ID, store.Query{})
		for _, j := range js {
			if j.Type == JobMajor && (last == nil || j.CreatedAt.After(last.CreatedAt)) {
				last = j
			}
		}
		return err
	})
	// Only when it failed so (a stop in its last attempt); one pending or running clears on its own.
	if err != nil || last == nil || last.State != scheduler.StateFailed || !strings.HasPrefix(last.Error, "failed: the appliance stopped while the job ran") {
		return
	}
	cut := []*store.Job{last}
	old := s.eng.Instance(inst)
	if old.Fenced() {
		log.Warn("a major upgrade ended inside its write pause: its old server is let in again", "project", prj.ID)
		if err := old.Fence(false); err != nil {
			log.Error("lift the fence of an ended upgrade", "project", prj.ID, "err", err)
		} else if _, running, _ := old.Status(); running {
			if err := old.Reload(ctx, nil); err != nil {
				log.Error("reload after lifting the fence of an ended upgrade", "project", prj.ID, "err", err)
			}
		}
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(inst.Dir), inst.ID+"-pg*"))
	for _, dir := range left {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || dir == inst.Dir {
			continue
		}
		rec := *inst
		rec.Dir = dir
		if err := s.eng.Instance(&rec).Remove(ctx); err != nil {
			log.Error("remove the new cluster of an ended upgrade", "project", prj.ID, "dir", dir, "err", err)
		}
	}
	go func() {
		ctx := context.WithoutCancel(ctx)
		for _, j := range cut {
			var in majorPayload
			if json.Unmarshal(j.Payload, &in) == nil && in.TargetMajor > 0 {
				if err := s.host.ForgetCluster(ctx, prj, fmt.Sprintf("pg%d-%s", in.TargetMajor, j.ID)); err != nil {
					log.Error("remove the archive of an ended upgrade", "project", prj.ID, "job", j.ID, "err", err)
				}
			}
		}
		err := waitUntil(ctx, 2*time.Minute, func() error {
			conn, err := s.host.AdminConn(ctx, inst, "postgres")
			if err != nil {
				return err
			}
			dbs, err := databases(ctx, conn)
			conn.Close(ctx)
			if err != nil {
				return err
			}
			return s.dropForward(ctx, inst, dbs)
		})
		if err != nil {
			log.Error("drop the replication slots of an ended upgrade", "project", prj.ID, "err", err)
		}
	}()
}

// repairPgUpgrade puts right, at the appliance's start and before the project's server is started or
// adopted, what a stop inside a pg_upgrade's write pause left (clearCutPgUpgrade), unless an upgrade job of
// the project will run again (the scheduler, started first, has made an interrupted one pending): its
// attempt clears it first thing, and the two must not race (the attempt makes the new cluster again).
func (s *Service) repairPgUpgrade(ctx context.Context, prj *store.Project, inst *store.Instance, log *slog.Logger) {
	if !s.eng.Instance(inst).FencedForPgUpgrade() {
		return
	}
	retry := false
	err := s.db.View(func(tx *store.Tx) error {
		js, err := store.Jobs.Lookup(tx, store.JobsByProject, prj.ID, store.Query{})
		for _, j := range js {
			if j.Type == JobMajor && (j.State == scheduler.StatePending || j.State == scheduler.StateRunning) {
				retry = true
			}
		}
		return err
	})
	if err != nil || retry {
		return
	}
	log.Warn("a major upgrade by pg_upgrade was cut short in its write pause: its processes and new cluster are removed", "project", prj.ID)
	if err := s.clearCutPgUpgrade(ctx, inst); err != nil {
		log.Error("clear a cut pg_upgrade", "project", prj.ID, "err", err)
	}
}

// clearCutPgUpgrade clears what a stop inside a pg_upgrade's write pause left when the record still names
// the old cluster, whose pg_hba.conf is then pg_upgrade's (postgres.Instance.FencedForPgUpgrade; it does
// nothing otherwise). pg_upgrade may still run, orphaned, with what it started (pg_dump, pg_restore,
// pg_ctl: all working in the new cluster's directory) and a server of the old or the new cluster on its
// private socket: they are killed first (pg_upgrade would start or stop servers after this). A server of
// the old cluster is pg_upgrade's (the pause stopped the project's before pg_upgrade ran; the engine may
// have adopted it at the start, on pg_upgrade's socket): it stops (a fast shutdown). The new cluster, whole
// or half copied, and a new server already running on the project's port are removed: an attempt makes
// them again from the old directory, which pg_upgrade's copy mode never changes, or, with no attempt left,
// the project stays on the old cluster. The old directory's usual pg_hba.conf is written back: an attempt
// pauses writes again, and nothing else would lift pg_upgrade's (a pg_upgrade rollback cut short after
// its record names the old directory again leaves it too, and its retry finds nothing to roll back). The
// caller starts the old server (or the engine does, at the appliance's start).
func (s *Service) clearCutPgUpgrade(ctx context.Context, inst *store.Instance) error {
	old := s.eng.Instance(inst)
	if !old.FencedForPgUpgrade() {
		return nil
	}
	var errs []error
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(inst.Dir), inst.ID+"-pg*"))
	for _, dir := range left {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || dir == inst.Dir {
			continue
		}
		if err := killProcessesIn(ctx, dir, old.User.UID); err != nil {
			errs = append(errs, fmt.Errorf("kill the processes of a cut pg_upgrade in %s: %w", dir, err))
		}
		rec := *inst
		rec.Dir = dir
		if err := s.eng.Instance(&rec).Remove(ctx); err != nil {
			errs = append(errs, fmt.Errorf("remove the new cluster of a cut pg_upgrade: %w", err))
		}
	}
	if err := old.Stop(ctx, nil, daemon.StopFast); err != nil {
		errs = append(errs, fmt.Errorf("stop the old cluster's server pg_upgrade started: %w", err))
	}
	if err := old.Fence(false); err != nil {
		errs = append(errs, fmt.Errorf("open the old cluster of a cut pg_upgrade: %w", err))
	}
	return errors.Join(errs...)
}

// processesIn lists the live processes of uid whose working directory is dir or below it, those of the
// named programs only when programs are given.
func processesIn(dir string, uid uint32, programs ...string) []*daemon.ProcInfo {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		real = filepath.Clean(dir)
	}
	entries, _ := os.ReadDir("/proc")
	var out []*daemon.ProcInfo
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd")
		if err != nil || (cwd != real && !strings.HasPrefix(cwd, real+"/")) {
			continue
		}
		p := daemon.ReadProcess(pid)
		if p == nil || p.UID != uid || len(p.Args) == 0 || (len(programs) > 0 && !slices.Contains(programs, p.Program())) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// killProcessesIn SIGKILLs the processes of uid working in dir until none is left (30 s at most).
func killProcessesIn(ctx context.Context, dir string, uid uint32) error {
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return daemon.WaitFor(wctx, 20*time.Millisecond, func() (bool, error) {
		procs := processesIn(dir, uid)
		for _, p := range procs {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
		return len(procs) == 0, nil
	})
}
