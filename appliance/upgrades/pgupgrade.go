package upgrades

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// The major upgrade with the target's pg_upgrade (copy mode): a new cluster of the target major, into
// which pg_upgrade copies the old one's data while both are stopped; the old directory is kept as it was
// at the upgrade until confirm, and a rollback starts it again. Writes made on the new major are not
// carried back (pg_upgrade has no way back): the preflight and the upgrade's result say so, and a rollback
// says how many row changes it discarded.

// pgUpgradeRollbackWarning is what the preflight and the upgrade say of a rollback after pg_upgrade.
const pgUpgradeRollbackWarning = "a rollback returns the project to its data as it was at the upgrade (pg_upgrade keeps the old directory as it was): every write made on PostgreSQL %d after the upgrade is lost by a rollback; confirm once the project works on %d"

// pgUpgradeCheck is the preflight with pg_upgrade: the target's extensions and libraries, then
// pg_upgrade --check of the running server against a scratch cluster of the target, and what a rollback
// loses.
func (s *Service) pgUpgradeCheck(ctx context.Context, run *scheduler.Run, dp *Plane, prj *store.Project, inst *store.Instance, target postgres.Binaries) (map[string]any, error) {
	if err := s.checkTargetHas(ctx, inst, target); err != nil {
		return nil, err
	}
	// A trial: the roles and every database's schema restored into a scratch cluster of the project's
	// major, which the target's pg_upgrade then upgrades in full into a scratch cluster of the target (what
	// pg_upgrade refuses, and what only the new major's restore of the schema refuses, named before the
	// upgrade). pg_upgrade cannot check the running server itself: it reaches a live server only on a Unix
	// socket, and the projects' servers listen on TCP alone.
	dbs, err := s.databasesOf(ctx, inst)
	if err != nil {
		return nil, err
	}
	bg := context.WithoutCancel(ctx)
	src, _, err := s.prepareTarget(ctx, run, dp, prj, inst, s.eng.Instance(inst).Bin, inst.Dir+"-trial", "", dbs)
	if err != nil {
		return nil, fmt.Errorf("the trial's copy of the schema: %w", err)
	}
	defer src.Remove(bg)
	if err := src.Stop(ctx, run.Exec, daemon.StopFast); err != nil {
		return nil, err
	}
	dst, err := s.newCluster(ctx, run, prj, inst, target, inst.Dir+"-preflight")
	if err != nil {
		return nil, err
	}
	defer dst.Remove(bg)
	pw, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return nil, err
	}
	if err := s.pgUpgrade(ctx, run, dp, string(pw), src, dst); err != nil {
		return nil, fmt.Errorf("pg_upgrade of the schema into PostgreSQL %d failed: %w", target.Major, err)
	}
	warnings := []string{fmt.Sprintf(pgUpgradeRollbackWarning, target.Major, target.Major)}
	if !target.HasClientTools() {
		warnings = append(warnings, fmt.Sprintf("PostgreSQL %d's installation has no client tools: after the upgrade the project's exports and imports are refused until they are installed (postgresql-client-%d)", target.Major, target.Major))
	}
	return map[string]any{"ok": true, "from_major": inst.Major, "target_major": target.Major, "method": MethodPgUpgrade,
		"target_bin_dir": target.Dir, "warnings": warnings}, nil
}

// checkTargetHas fails, naming each, when an extension of any database or a preloaded library of the
// project's server is missing from the target installation (pg_upgrade --check would say so less clearly).
func (s *Service) checkTargetHas(ctx context.Context, inst *store.Instance, target postgres.Binaries) error {
	conn, err := s.host.AdminConn(ctx, inst, "postgres")
	if err != nil {
		return scheduler.Transient(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	dbs, err := databases(ctx, conn)
	if err != nil {
		return err
	}
	var missing []string
	for _, db := range dbs {
		dconn, err := s.host.AdminConn(ctx, inst, db)
		if err != nil {
			return scheduler.Transient(err)
		}
		exts, err := queryStrings(ctx, dconn, "SELECT extname::text FROM pg_extension ORDER BY extname")
		dconn.Close(context.WithoutCancel(ctx))
		if err != nil {
			return err
		}
		for _, ext := range exts {
			if !target.HasExtension(ext) {
				missing = append(missing, fmt.Sprintf("extension %s (database %s) is not available in PostgreSQL %d", ext, db, target.Major))
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the upgrade with pg_upgrade cannot run: %s", strings.Join(missing, "; "))
	}
	return nil
}

// pgUpgradeMajor upgrades with pg_upgrade: checks first (nothing changes when one fails), then, in the
// write pause, the pooler stops, the old server is fenced (client sessions end), its last WAL archived (a
// restore to a time before the upgrade reaches it), it stops, pg_upgrade copies it into the new cluster,
// which starts on the project's port with a WAL archive of its own, and the project reopens on it. A
// failure before the new server opens starts the old one again and removes the new cluster.
func (s *Service) pgUpgradeMajor(ctx context.Context, run *scheduler.Run, dp *Plane, prj *store.Project, inst *store.Instance, target postgres.Binaries) (any, error) {
	started := time.Now()
	report := func(step string) {
		_ = run.Progress(map[string]any{"step": step, "method": MethodPgUpgrade})
	}
	// A retry of an attempt cut short in its pause (the appliance stopped) finds the old server fenced:
	// it serves again first, whatever this attempt does. Cut while pg_upgrade ran or after, what that
	// left goes first (its orphans, the new cluster, the old server pg_upgrade started), and the old
	// server starts on the project's port.
	if old := s.eng.Instance(inst); old.FencedForPgUpgrade() {
		if err := s.clearCutPgUpgrade(ctx, inst); err != nil {
			return nil, scheduler.Transient(err)
		}
		if err := old.Start(ctx, run.Exec); err != nil {
			return nil, scheduler.Transient(fmt.Errorf("start the old server after a cut pg_upgrade: %w", err))
		}
	}
	// The server may be starting (the appliance's start, a restart): it is given a minute to answer.
	if err := waitUntil(ctx, time.Minute, func() error { return s.fence(ctx, inst, false) }); err != nil {
		return nil, scheduler.Transient(fmt.Errorf("the project's server: %w", err))
	}
	report("preflight")
	if err := s.checkTargetHas(ctx, inst, target); err != nil {
		return nil, err
	}
	newDir := filepath.Join(filepath.Dir(inst.Dir), inst.ID+"-pg"+strconv.Itoa(target.Major))
	next, err := s.newCluster(ctx, run, prj, inst, target, newDir)
	if err != nil {
		return nil, err
	}
	nextRec := *inst
	nextRec.Dir, nextRec.Major, nextRec.BinDir = newDir, target.Major, target.Dir
	bg := context.WithoutCancel(ctx)
	// The new cluster's WAL goes into an archive of its own from its start (its system identifier is not
	// the old one's: the old cluster's archive stays the old cluster's, which a rollback resumes).
	walArchive := fmt.Sprintf("pg%d-%s", target.Major, run.Job.ID)
	if err := s.archiveInto(prj, &nextRec, walArchive); err != nil {
		next.Remove(bg)
		return nil, fmt.Errorf("the new cluster's WAL archive: %w", err)
	}
	fromTimeline, err := s.timeline(ctx, inst)
	if err != nil {
		next.Remove(bg)
		return nil, scheduler.Transient(fmt.Errorf("read the old server's timeline: %w", err))
	}
	pw, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		next.Remove(bg)
		return nil, err
	}
	if conn, err := s.host.AdminConn(ctx, inst, "postgres"); err == nil {
		_, _ = conn.Exec(ctx, "CHECKPOINT") // keeps the shutdown checkpoint in the pause short
		conn.Close(bg)
	}

	// The write pause.
	report("upgrade")
	paused := time.Now()
	steps := instances.NewTimer()
	old := s.eng.Instance(inst)
	s.host.SetRuntime(prj.ID, api.RuntimeRestarting)
	s.eng.Unwatch(inst)
	resume := func(cause error) error {
		next.Stop(bg, run.Exec, daemon.StopFast)
		next.Remove(bg)
		err := old.Start(bg, run.Exec)
		if err == nil {
			err = s.fence(bg, inst, false)
		}
		err = errors.Join(err, s.eng.Watch(inst, prj))
		s.host.SetRuntime(prj.ID, api.RuntimeActive)
		if err != nil {
			return fmt.Errorf("%w (and resuming the old server: %v)", cause, err)
		}
		return cause
	}
	if err := s.eng.Pooler(inst, prj).Stop(ctx, nil, daemon.StopFast); err != nil {
		return nil, resume(fmt.Errorf("stop the pooler: %w", err))
	}
	steps.Done("pooler_stop")
	if err := s.fence(ctx, inst, true); err != nil {
		return nil, resume(fmt.Errorf("pause writes: %w", err))
	}
	steps.Done("fence")
	var warnings []string
	archived := func(ctx context.Context, seg string) (bool, error) {
		return s.host.WALArchived(ctx, inst.ProjectID, inst.WALArchive, seg)
	}
	if inst.WALArchiveOff {
		warnings = append(warnings, "the old cluster's WAL is not archived: no restore to a time before the upgrade")
	} else if _, _, err := instances.ArchiveNow(ctx, inst, string(pw), archived); err != nil {
		warnings = append(warnings, fmt.Sprintf("the old server's last WAL was not archived (%v): a restore to a time just before the upgrade may not reach it", err))
	}
	steps.Done("archive")
	if err := old.Stop(ctx, run.Exec, daemon.StopFast); err != nil {
		return nil, resume(err)
	}
	steps.Done("stop")
	s.step(ctx, run, "pgupgrade-stopped")
	// pg_upgrade checks first (a failure then changes nothing: the old server resumes), then copies. A stop
	// of the appliance from here until the record names the new cluster is put right at the next start
	// (RepairPgUpgrade), and the job's retry upgrades again from the old directory.
	held := s.holdPgUpgrade(ctx, run, old, next)
	err = s.pgUpgrade(ctx, run, dp, string(pw), old, next)
	held()
	if err != nil {
		return nil, resume(fmt.Errorf("pg_upgrade: %w", err))
	}
	steps.Done("pg_upgrade")
	if err := next.Start(ctx, run.Exec); err != nil {
		return nil, resume(err)
	}
	steps.Done("start")
	s.step(ctx, run, "pgupgrade-started")
	var rec *store.Instance
	err = s.db.Update(func(tx *store.Tx) error {
		var err error
		if rec, err = store.Instances.Get(tx, inst.ID); err != nil {
			return err
		}
		rec.PreviousDir, rec.PreviousMajor, rec.PreviousBinDir, rec.PreviousPort = rec.Dir, rec.Major, rec.BinDir, 0
		rec.Dir, rec.Major, rec.BinDir, rec.UpgradeMethod, rec.UpdatedAt = newDir, target.Major, target.Dir, MethodPgUpgrade, s.now()
		rec.PreviousWALArchive, rec.WALArchive, rec.WALArchiveOff = rec.WALArchive, walArchive, false
		return store.Instances.Put(tx, rec)
	})
	if err != nil {
		return nil, resume(fmt.Errorf("record the upgrade: %w", err))
	}
	if err := s.openOn(ctx, prj, rec); err != nil {
		return nil, fmt.Errorf("%w but could not be opened to clients: %w", errSwapped, err)
	}
	steps.Done("open")
	pause := time.Since(paused)
	s.host.SetRuntime(prj.ID, api.RuntimeActive)

	// After the pause: the point-in-time log (before the pause: the old cluster; after it: the new one,
	// whose first base backup starts its window), and the planner's statistics, which pg_upgrade does not
	// carry (its advice: vacuumdb --analyze-in-stages).
	sw := ClusterSwitch{JobID: run.Job.ID, FromArchive: inst.WALArchive, ToArchive: walArchive, FromTimeline: fromTimeline, At: paused.UTC()}
	if sw.ToTimeline, err = s.timeline(ctx, rec); err == nil {
		err = s.host.SwitchedCluster(ctx, prj, sw, true)
	}
	if err != nil {
		warnings = append(warnings, fmt.Sprintf("record the move to the new cluster for point-in-time restores: %v (a restore to a time before the upgrade may start from the wrong cluster)", err))
	}
	report("analyze")
	if err := s.analyze(ctx, run, dp, rec, target); err != nil {
		warnings = append(warnings, fmt.Sprintf("vacuumdb --analyze-in-stages: %v (the planner has no statistics until autovacuum's analyze)", err))
	}
	steps.Done("analyze")
	os.Remove(filepath.Join(newDir, "delete_old_cluster.sh")) // confirm removes the old directory
	version, _ := s.serverVersion(ctx, rec)
	s.host.UpdateProject(prj.ID, func(p *store.Project) error {
		p.PostgresVersion, p.RuntimeStatus = version, api.RuntimeActive
		return nil
	})
	warnings = append(warnings, fmt.Sprintf(pgUpgradeRollbackWarning, target.Major, target.Major))
	return map[string]any{"from_major": inst.Major, "to_major": target.Major, "method": MethodPgUpgrade,
		"postgres_version": version, "previous_dir_kept": inst.Dir, "write_pause_ms": pause.Milliseconds(),
		"steps_ms": steps.MS, "total_ms": time.Since(started).Milliseconds(), "warnings": warnings}, nil
}

// analyze gathers the planner's statistics of every database of the new cluster (pg_upgrade does not carry
// them), with the target's vacuumdb when it has it.
func (s *Service) analyze(ctx context.Context, run *scheduler.Run, dp *Plane, rec *store.Instance, target postgres.Binaries) error {
	prog, err := target.Path("vacuumdb")
	if err != nil {
		return err
	}
	cmd, err := s.toolCommand(dp, rec, prog, "--all", "--analyze-in-stages", "--no-password",
		"-h", "127.0.0.1", "-p", strconv.Itoa(rec.Port), "-U", postgres.AdminRole)
	if err != nil {
		return err
	}
	return run.Exec(ctx, cmd)
}

// pgUpgradeRollback stops the upgraded server and starts the old directory, as it was at the upgrade, on
// the project's port: the writes made on the new major are discarded (the preflight said so); the result
// counts the row changes discarded.
func (s *Service) pgUpgradeRollback(ctx context.Context, run *scheduler.Run, prj *store.Project, inst *store.Instance) (any, error) {
	fromTimeline, _ := s.timeline(ctx, inst)
	paused := time.Now()
	cur := s.eng.Instance(inst)
	s.host.SetRuntime(prj.ID, api.RuntimeRestarting)
	s.eng.Unwatch(inst)
	bg := context.WithoutCancel(ctx)
	resume := func(cause error) error {
		err := errors.Join(s.fence(bg, inst, false), s.eng.Watch(inst, prj))
		s.host.SetRuntime(prj.ID, api.RuntimeActive)
		if err != nil {
			return fmt.Errorf("%w (and resuming the new server: %v)", cause, err)
		}
		return cause
	}
	if err := s.eng.Pooler(inst, prj).Stop(ctx, nil, daemon.StopFast); err != nil {
		return nil, resume(err)
	}
	if err := s.fence(ctx, inst, true); err != nil {
		return nil, resume(err)
	}
	// Counted once the client sessions ended (each reports its statistics as it exits).
	discarded, derr := s.rowChanges(ctx, inst)
	if err := cur.Stop(ctx, run.Exec, daemon.StopFast); err != nil {
		return nil, resume(err)
	}
	back := *inst
	back.Dir, back.Major, back.BinDir, back.WALArchive = inst.PreviousDir, inst.PreviousMajor, inst.PreviousBinDir, inst.PreviousWALArchive
	back.PreviousDir, back.PreviousMajor, back.PreviousBinDir, back.PreviousPort, back.UpgradeMethod = "", 0, "", 0, ""
	back.PreviousWALArchive, back.WALArchiveOff = "", false
	backPG := s.eng.Instance(&back)
	if err := backPG.Start(ctx, run.Exec); err != nil {
		cur.Start(bg, run.Exec)
		s.eng.Watch(inst, prj)
		s.host.SetRuntime(prj.ID, api.RuntimeActive)
		return nil, err
	}
	back.UpdatedAt = s.now()
	if err := s.db.Update(func(tx *store.Tx) error { return store.Instances.Put(tx, &back) }); err != nil {
		return nil, err
	}
	s.step(ctx, run, "pgupgrade-rolled-back")         // the record names the old directory, not opened yet
	if err := s.openOn(ctx, prj, &back); err != nil { // the old directory was fenced in the upgrade's pause
		return nil, fmt.Errorf("the project runs on its old server again but could not be opened to clients: %w", err)
	}
	pause := time.Since(paused)
	s.host.SetRuntime(prj.ID, api.RuntimeActive)
	warnings := []string{}
	toTimeline, _ := s.timeline(ctx, &back)
	sw := ClusterSwitch{JobID: run.Job.ID, FromArchive: inst.WALArchive, ToArchive: back.WALArchive, FromTimeline: fromTimeline,
		ToTimeline: toTimeline, At: paused.UTC()}
	if err := s.host.SwitchedCluster(ctx, prj, sw, false); err != nil {
		warnings = append(warnings, fmt.Sprintf("record the move back to the old cluster for point-in-time restores: %v", err))
	}
	if err := cur.Remove(ctx); err != nil {
		return nil, err
	}
	version, _ := s.serverVersion(ctx, &back)
	s.host.UpdateProject(prj.ID, func(p *store.Project) error {
		p.PostgresVersion, p.RuntimeStatus = version, api.RuntimeActive
		return nil
	})
	res := map[string]any{"rolled_back_to": back.Major, "postgres_version": version, "method": MethodPgUpgrade,
		"write_pause_ms": pause.Milliseconds(), "warnings": warnings}
	if derr == nil {
		res["row_changes_discarded"] = discarded
	} else {
		warnings = append(warnings, fmt.Sprintf("count the row changes made on PostgreSQL %d: %v (they are discarded all the same)", inst.Major, derr))
		res["warnings"] = warnings
	}
	return res, nil
}

// rowChanges counts the rows inserted, updated and deleted on rec's server since it started, over every
// database (the cumulative statistics, which a pg_upgrade'd cluster starts at zero).
func (s *Service) rowChanges(ctx context.Context, rec *store.Instance) (int64, error) {
	conn, err := s.host.AdminConn(ctx, rec, "postgres")
	if err != nil {
		return 0, err
	}
	dbs, err := databases(ctx, conn)
	conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return 0, err
	}
	var total int64
	for _, db := range dbs {
		c, err := s.host.AdminConn(ctx, rec, db)
		if err != nil {
			return 0, err
		}
		var n int64
		err = c.QueryRow(ctx, "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint FROM pg_stat_user_tables").Scan(&n)
		c.Close(context.WithoutCancel(ctx))
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// pgUpgradeProblems is what pg_upgrade said of a failure: its last lines of output (it reports on standard
// output), the lists of problems it wrote into files it names there (the libraries, extensions or types
// the new major lacks: *.txt) and the end of the logs it names as the probable cause (*.log: a restore of
// the schema the new major refused).
func pgUpgradeProblems(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var tail []string
	for i := len(lines) - 1; i >= 0 && len(tail) < 12; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			tail = append([]string{l}, tail...)
		}
	}
	msg := strings.Join(tail, " | ")
	seen := map[string]bool{}
	for _, l := range lines {
		for _, f := range strings.FieldsFunc(l, func(r rune) bool { return r == '"' || r == ' ' || r == '\t' }) {
			if !strings.HasPrefix(f, "/") || seen[f] || !(strings.HasSuffix(f, ".txt") || strings.HasSuffix(f, ".log")) {
				continue
			}
			seen[f] = true
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			if strings.HasSuffix(f, ".txt") && len(b) > 2000 {
				b = b[:2000]
			} else if len(b) > 1500 {
				b = b[len(b)-1500:]
			}
			msg += " | " + filepath.Base(f) + ": " + strings.Join(strings.Fields(string(b)), " ")
		}
	}
	return msg
}

// pgUpgrade runs the target's pg_upgrade (copy mode) from the cluster from into to, both stopped, as the
// admin (pw: the same password in both). pg_upgrade starts each on a Unix socket in a short directory of
// its own, which their pg_hba.conf admits the admin on (FenceForPgUpgrade: no client's login).
func (s *Service) pgUpgrade(ctx context.Context, run *scheduler.Run, dp *Plane, pw string, from, to *postgres.Instance) error {
	prog, err := to.Bin.Path("pg_upgrade")
	if err != nil {
		return err
	}
	oldPort, err := postgres.FreePort()
	if err != nil {
		return err
	}
	newPort, err := postgres.FreePort()
	if err != nil {
		return err
	}
	for _, i := range []*postgres.Instance{from, to} {
		if err := i.FenceForPgUpgrade(); err != nil {
			return err
		}
	}
	sockets, err := os.MkdirTemp("", "pgupgrade-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(sockets)
	if err := dp.User.Chown(sockets); err != nil {
		return err
	}
	args := []string{"-b", from.Bin.Dir, "-B", to.Bin.Dir, "-d", from.DataDir(), "-D", to.DataDir(), "-U", postgres.AdminRole,
		"-p", strconv.Itoa(oldPort), "-P", strconv.Itoa(newPort), "--socketdir", sockets, "--copy"}
	cmd := dp.User.Command(prog, args...)
	cmd.Dir = to.Dir // pg_upgrade writes its logs into the working directory
	cmd.Env = append(cmd.Env, "PGPASSWORD="+pw, "PGPASSFILE=/dev/null")
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := run.Exec(ctx, cmd); err != nil {
		return fmt.Errorf("%w: %s", err, pgUpgradeProblems(out.String()))
	}
	return nil
}

// holdPgUpgrade gives a test build's job-step hook (Deps.Step) the moments pg_upgrade runs a server of its
// own: "pgupgrade-old-running" when it has started the old cluster (on its private socket), then
// "pgupgrade-new-running" when it has started the new one. pg_upgrade is held still (SIGSTOP) while the
// hook runs, so that a test stops the appliance with that server running. Without a hook it does nothing.
// The returned function waits for the watch to end.
func (s *Service) holdPgUpgrade(ctx context.Context, run *scheduler.Run, old, next *postgres.Instance) (done func()) {
	if s.stepHook == nil {
		return func() {}
	}
	wctx, cancel := context.WithCancel(ctx)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for _, w := range []struct {
			step string
			i    *postgres.Instance
		}{{"pgupgrade-old-running", old}, {"pgupgrade-new-running", next}} {
			err := daemon.WaitFor(wctx, 10*time.Millisecond, func() (bool, error) {
				_, running, _ := w.i.Status()
				return running, nil
			})
			if err != nil {
				return
			}
			stopped := processesIn(next.Dir, next.User.UID, "pg_upgrade")
			for _, p := range stopped {
				_ = syscall.Kill(p.PID, syscall.SIGSTOP)
			}
			s.step(ctx, run, w.step)
			for _, p := range stopped {
				_ = syscall.Kill(p.PID, syscall.SIGCONT)
			}
		}
	}()
	return func() { cancel(); <-ended }
}
