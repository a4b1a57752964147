package appliance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/certs"
	"github.com/theappliance/appliance/appliance/cgroups"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/appliance/moves"
	"github.com/theappliance/appliance/appliance/nodeloss"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/previews"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// DataPlane is the machinery the job handlers drive: the supervisor of instances and poolers, the OS user
// they run as, the binaries and the CA that issues their certificates.
type DataPlane struct {
	Supervisor *daemon.Supervisor
	User       *daemon.OSUser
	Bin        postgres.Binaries
	CA         *certs.CA
	PgBouncer  string // the pgbouncer program
	// RedisServer is the redis-server program of key-value stores ("": not installed, the feature is off).
	RedisServer string
	// Cgroups holds each project's server to its plan's memory and CPU (nil: not held, up --cgroups off).
	Cgroups *cgroups.Groups
}

// engine is what the service asks of the instance engine (appliance/instances): the process and
// PostgreSQL side of instances and their poolers. The service keeps the records.
type engine interface {
	// The instance's processes.
	Instance(rec *store.Instance) *postgres.Instance
	Pooler(rec *store.Instance, prj *store.Project) *postgres.Pooler
	Watch(rec *store.Instance, prj *store.Project) error
	WatchSpare(rec *store.Instance, maxConnections int) error
	Unwatch(rec *store.Instance)
	Serving(ctx context.Context, rec *store.Instance, prj *store.Project) bool
	StopAll(ctx context.Context, insts []*store.Instance, others []daemon.Process) error
	Remove(ctx context.Context, rec *store.Instance) error
	RepairEndedRestores(ctx context.Context, inst *store.Instance, ended func(jobID string) bool)
	BringUpToDate(ctx context.Context, inst *store.Instance, prj *store.Project, adminPW string) (purged bool, err error)
	// Making one: a spare, or a project's (from a spare, initdb or a clone's fill).
	PrepareSpare(ctx context.Context, rec *store.Instance, adminPW string, settings postgres.Settings, maxConnections int, ready func() error) error
	RemoveSpareLeftovers()
	CloseSpareConns()
	Provision(ctx context.Context, exec daemon.ExecFunc, spec instances.ProvisionSpec) (version string, err error)
	// Changing one.
	ApplySettings(ctx context.Context, exec daemon.ExecFunc, inst *store.Instance, prj *store.Project, settings postgres.Settings,
		adminPW string, restarting func(bool)) (postgres.Action, error)
	SyncPoolerUsers(ctx context.Context, conn *pgx.Conn, inst *store.Instance, prj *store.Project) error
	Restart(ctx context.Context, exec daemon.ExecFunc, inst *store.Instance, prj *store.Project, restarting func(bool)) error
	// Stop and Start stop a server and its pooler, data kept, and start them again (a suspension).
	Stop(ctx context.Context, exec daemon.ExecFunc, inst *store.Instance, prj *store.Project) error
	Start(ctx context.Context, exec daemon.ExecFunc, inst *store.Instance, prj *store.Project) error
	Restore(ctx context.Context, exec daemon.ExecFunc, spec instances.RestoreSpec) (instances.Restored, error)
	FinishRestore(inst *store.Instance, jobID string)
	VerifyBackup(ctx context.Context, exec daemon.ExecFunc, spec instances.VerifySpec) (instances.Verified, error)
	RemoveVerifyScratch(ctx context.Context, inst *store.Instance)
	// A copy staged on this node before a move's cutover (instances/stage.go).
	Stage(ctx context.Context, spec instances.StageSpec) error
	StagedReplayLSN(ctx context.Context, inst *store.Instance, key, adminPW string) (string, error)
	CheckpointStaged(ctx context.Context, inst *store.Instance, key, adminPW string) error
	PromoteStaged(ctx context.Context, inst *store.Instance, key, adminPW string, offArchive bool) (string, error)
	StagedFill(inst *store.Instance, key string) func(context.Context, daemon.ExecFunc, string) error
	RemoveStaged(ctx context.Context, inst *store.Instance)
	RemoveAllStaged(ctx context.Context, instancesDir string) []string
	// A move's source resumed above a timeline its rolled-back target promoted to (instances/recovery.go).
	NewTimeline(ctx context.Context, exec daemon.ExecFunc, inst *store.Instance, adminPW, restoreCmd, jobID string,
		archived func(context.Context, string) (bool, error)) (instances.Branched, bool, error)
}

var _ engine = (*instances.Manager)(nil)

// useDataPlane connects the instance machinery (New), and reports on the status page which features lack
// a program.
func (s *Service) useDataPlane(dp *DataPlane) {
	s.dp = dp
	s.reflinks = s.probeReflinks()
	s.eng = instances.New(instances.Config{Supervisor: dp.Supervisor, User: dp.User, Bin: dp.Bin, CA: dp.CA, PgBouncer: dp.PgBouncer,
		ListenHost: s.cfg.ListenHost, Dir: s.instancesDir(), CertHosts: s.certHosts(), Log: s.log, Step: s.jobStep,
		Cgroups: dp.Cgroups, Limits: s.serverLimits, NoSync: s.cfg.NoSync, TemplateDir: s.cfg.TemplateDir, Reflink: s.reflinks})
	if dp.Cgroups != nil {
		s.Probe.Register("cgroups", func(context.Context) (string, string) {
			if dp.Cgroups.Version() == cgroups.None {
				return StatusDegraded, dp.Cgroups.Status()
			}
			return StatusOperational, "projects' memory and CPU held by " + dp.Cgroups.Status()
		})
	}
	s.Probe.Register("programs", s.programsCheck)
	s.Probe.Register("backup-store", backupStoreCheck(s))
}

// probeReflinks tells whether the instances' directory (the data directory where it is not made yet) is on
// a filesystem with reflinks; a probe that fails is logged and taken as none.
func (s *Service) probeReflinks() bool {
	dir := s.instancesDir()
	if _, err := os.Stat(dir); err != nil {
		dir = s.cfg.DataDir
	}
	ok, err := postgres.ReflinkSupport(dir)
	if err != nil {
		s.log.Warn("cannot tell whether the data directory has reflinks: copies copy bytes", "err", err)
		return false
	}
	s.log.Info("data directory filesystem", "reflinks", ok)
	return ok
}

// Reflinks reports whether previews, restores and base backups copy files by reflink here (/status).
func (s *Service) Reflinks() bool { return s.reflinks }

// serverLimits are the memory and CPU a project's server is held to: its plan's (the default plan's for a
// plan the table lacks), or Config.ServerLimits'.
func (s *Service) serverLimits(prj *store.Project) cgroups.Limits {
	plan := s.planOrDefault(prj.Plan)
	if s.cfg.ServerLimits != nil {
		return s.cfg.ServerLimits(plan)
	}
	return cgroups.Limits{MemoryBytes: plan.MemoryBytes, CPUCores: plan.CPUCores}
}

// Features that need PostgreSQL programs beyond the server (which the appliance does not start without).
const (
	FeatureBackups = "backups"
	FeatureDumps   = "exports and imports"
)

// featurePrograms are the programs of PostgreSQL's bin directory each feature runs.
var featurePrograms = []struct {
	feature  string
	programs []string
}{
	{FeatureBackups, []string{"pg_basebackup", "pg_verifybackup"}},
	{FeatureDumps, []string{"pg_dump", "pg_restore"}},
}

// missingFor is nil when the feature's programs are all installed, else the error naming the first missing
// one and how to get it.
func missingFor(dp *DataPlane, feature string) error {
	for _, f := range featurePrograms {
		if f.feature != feature {
			continue
		}
		for _, name := range f.programs {
			if _, err := dp.Bin.Path(name); err != nil {
				return err
			}
		}
	}
	return nil
}

// requireFeature refuses an action whose programs this appliance lacks, before anything is stored or
// queued (503 naming the program and how to install it). Without a data plane it answers nil: the job
// then fails as every job does there.
func (s *Service) requireFeature(feature string) error {
	if s.dp == nil {
		return nil
	}
	if err := missingFor(s.dp, feature); err != nil {
		return &Error{Kind: KindUnavailable, Msg: fmt.Sprintf("%s are not available on this appliance: %v", feature, err)}
	}
	return nil
}

// programsCheck is the status page's row of the features disabled for a missing program.
func (s *Service) programsCheck(ctx context.Context) (string, string) {
	var off []string
	for _, f := range featurePrograms {
		if err := missingFor(s.dp, f.feature); err != nil {
			off = append(off, fmt.Sprintf("%s disabled: %v", f.feature, err))
		}
	}
	if len(off) > 0 {
		return StatusDegraded, strings.Join(off, "; ")
	}
	return StatusOperational, "every program found in " + s.dp.Bin.Dir
}

func (s *Service) dataPlane() (*DataPlane, error) {
	if s.dp == nil {
		return nil, errors.New("no data plane: PostgreSQL instances cannot run in this process")
	}
	return s.dp, nil
}

// instancesDir holds one directory per instance; it must be traversable by the instances' OS user.
func (s *Service) instancesDir() string { return filepath.Join(s.cfg.DataDir, "instances") }

// settingsFor derives an instance's settings from its project.
func (s *Service) settingsFor(dp *DataPlane, prj *store.Project, rec *store.Instance) (postgres.Settings, error) {
	st, err := parsePGDuration(prj.StatementTimeout)
	if err != nil {
		return postgres.Settings{}, err
	}
	idle, err := parsePGDuration(prj.IdleTransactionTimeout)
	if err != nil {
		return postgres.Settings{}, err
	}
	libs := postgres.DefaultPreloadLibraries(s.eng.Instance(rec).Bin)
	for _, l := range prj.PreloadLibraries {
		if !contains(libs, l) {
			libs = append(libs, l)
		}
	}
	set := postgres.Settings{MaxConnections: prj.MaxConnections, StatementTimeout: st,
		IdleInTransactionSessionTimeout: idle, SharedPreloadLibraries: libs}
	if prj.Ephemeral { // a throwaway database runs bounded (EphemeralLimits)
		l := s.previews.EphemeralLimits()
		set.ProcessDataBytes, set.TempFileLimitBytes, set.MaxWorkerProcesses = l.ProcessMemoryBytes, l.TempFileBytes, previews.EphemeralWorkers
	}
	// A project's WAL goes to its directory in the backup store, from provisioning on (a spare, which has
	// no project yet, archives into its own directory until a provision claims it and rewrites this).
	// A preview is disposable: no WAL archive, no backups. A cluster a logical major upgrade made before
	// clusters had archives of their own (WALArchiveOff, no WALArchive) stays unarchived until restored.
	if prj.PreviewOf != "" || (rec.WALArchiveOff && rec.WALArchive == "") {
		set.ArchiveCommand = postgres.DiscardArchiveCommand
	} else if prj.ID != "" {
		// The directory store's commands are made locally; a bucket's talk to the WAL socket.
		ctx := context.Background()
		bs := s.backupStore(dp)
		if err := bs.Prepare(ctx, prj.ID); err != nil {
			return postgres.Settings{}, fmt.Errorf("prepare the backup store of %s: %w", prj.ID, err)
		}
		if set.ArchiveCommand, _, err = s.walCommands(ctx, dp, prj.ID, rec.WALArchive); err != nil {
			return postgres.Settings{}, err
		}
		if !bs.HasWALCommands() { // a bucket: the archive is off the machine, so bound what a lost disk loses
			set.ArchiveTimeout = BucketArchiveTimeout
		}
	}
	return set, nil
}

var pgDurationRE = regexp.MustCompile(`^([0-9]+)(ms|s|min|h|d)?$`)

// parsePGDuration reads the PostgreSQL durations the API accepts ("0", "250ms", "30s", "5min", "2h", "1d";
// a bare number is milliseconds, as PostgreSQL reads it).
func parsePGDuration(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	m := pgDurationRE.FindStringSubmatch(v)
	if m == nil {
		return 0, fmt.Errorf("invalid duration %q", v)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, err
	}
	// In milliseconds, as PostgreSQL counts: at most 9 digits times a day's 86,400,000 ms fits in an int64.
	unitMs := map[string]int64{"": 1, "ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}[m[2]]
	ms := n * unitMs
	if ms > postgres.MaxTimeoutMillis {
		return 0, fmt.Errorf("%s is more than PostgreSQL allows (%d ms, about 24.8 days)", v, postgres.MaxTimeoutMillis)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// AdoptInstances puts every live instance under supervision at start: running ones are adopted, dead ones
// (the machine rebooted, or they died with the appliance) are started by the supervisor, and it returns
// once those serve (adoptStartWait at most).
func (s *Service) AdoptInstances(ctx context.Context) error {
	_, err := s.dataPlane()
	if err != nil {
		return err
	}
	type pair struct {
		inst *store.Instance
		prj  *store.Project
	}
	var live, fenced, starting, unopened []pair
	owners := map[string]string{}
	err = s.db.View(func(tx *store.Tx) error {
		insts, err := store.Instances.All(tx, func(i *store.Instance) bool {
			// This node's, and in a cluster every project's instance: one another node hosts is fenced below
			// when this node's data directory holds a stale copy of it.
			return (i.State == InstanceRunning || i.State == InstanceSpare) && (store.LocalInstance(tx, i) || (s.cfg.NodeID != "" && i.ProjectID != ""))
		})
		if err != nil {
			return err
		}
		for _, in := range insts {
			if in.State == InstanceSpare {
				live = append(live, pair{in, nil})
				continue
			}
			prj, err := store.Projects.Get(tx, in.ProjectID)
			if err != nil {
				return fmt.Errorf("instance %s: project %s: %w", in.ID, in.ProjectID, err)
			}
			// In a cluster, only the projects this node hosts: another node's are not started here, and
			// a stale copy of one (restored elsewhere while this node was away) is fenced.
			if owner := store.ProjectNode(tx, prj); s.cfg.NodeID != "" && owner != s.cfg.NodeID {
				fenced, owners[prj.ID] = append(fenced, pair{in, prj}), owner
				continue
			}
			// This node's, paused by a move (the node crashed in the pause or the cutover): its move job's
			// retry resumes it or leaves it to the target; a start here would serve a copy the target's
			// promotion discards.
			if s.cfg.NodeID != "" && moves.PausedBy(tx, prj.ID) {
				s.log.Warn("adoption: not started, a move paused it (its move job resumes it or the target opens it)", "project", prj.ID, "instance", in.ID)
				if moves.UnopenedOn(tx, prj.ID, s.cfg.NodeID) { // this node is the target of a rebuild a crash cut short
					unopened = append(unopened, pair{in, prj})
				}
				continue
			}
			// This node's, but its copy here is older than the project's placement (moved away and back
			// meanwhile): kept aside, not started.
			if err := nodeloss.CheckEpoch(filepath.Join(s.instancesDir(), in.ID), prj); s.cfg.NodeID != "" && err != nil {
				fenced, owners[prj.ID] = append(fenced, pair{in, prj}), s.cfg.NodeID
				continue
			}
			live = append(live, pair{in, prj})
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, p := range fenced {
		s.nodeloss.Fence(ctx, p.inst, p.prj, owners[p.prj.ID])
	}
	// A move's target that crashed inside its rebuild, before it opened the project: the source takes the
	// project back, so the server and pooler the rebuild started here (they outlive the appliance) stop.
	for _, p := range unopened {
		if _, running, _ := s.eng.Instance(p.inst).Status(); !running {
			continue
		}
		if err := s.eng.Stop(ctx, nil, p.inst, p.prj); err != nil {
			s.log.Error("adoption: stop a move's copy its rebuild did not open", "project", p.prj.ID, "err", err)
		}
	}
	// Every copy a move staged on this node (instances/<id>.stage-<move>) is a leftover: no move-in runs
	// before the adoption, and one a crash interrupted has failed (it has one attempt); its standby may
	// still run (postgres outlives the appliance). A move's retry stages again.
	for _, id := range s.eng.RemoveAllStaged(ctx, s.instancesDir()) {
		s.log.Warn("move: removed a staged copy an interrupted move-in left", "instance", id)
	}
	for _, p := range live {
		if p.prj == nil { // a spare (its pooler with the placeholders' pool size)
			defaults := s.planOrDefault(DefaultPlan)
			if err := s.eng.WatchSpare(p.inst, defaults.MaxConnections); err != nil {
				return err
			}
			continue
		}
		// A project being deleted is not started again: its delete job (retried after the crash that
		// interrupted it, perhaps running already) removes its instance and pooler, and a supervisor's start
		// would make their directories again after it (lifecycle.lock, pooler/).
		if deleting, err := s.beingDeleted(p.prj.ID); err != nil {
			return err
		} else if deleting {
			continue
		}
		// A suspended organization's server stays stopped until its resume starts it (appliance/tenancy).
		if s.organizationSuspended(p.prj.OrganizationID) {
			s.setRuntime(p.prj.ID, RuntimeStopped)
			continue
		}
		// A project suspended for idleness stays suspended: the wake front holds its ports again.
		if p.prj.IdleSuspendedAt != nil {
			if err := s.z.HoldSuspended(p.prj, p.inst); err != nil {
				s.log.Error("hold a suspended project's ports", "project", p.prj.ID, "err", err)
				s.setRuntime(p.prj.ID, RuntimeDown)
			}
			continue
		}
		s.repairEndedRestores(ctx, p.inst)
		s.upgrades.RepairEnded(ctx, p.prj, p.inst, s.log)
		// A move's copy its rebuild started fenced, the word that it opened the project here written (its
		// records name this node): the crash came before the rebuild let clients in.
		if err := s.openMoveFenced(ctx, p.inst); err != nil {
			s.log.Error("adoption: let clients in on a moved project's copy started fenced", "project", p.prj.ID, "err", err)
		}
		if !s.eng.Instance(p.inst).Initialized() {
			// Its data is gone (metadata older than the data directory: ReportMismatches says so); starting
			// it would only make an empty directory.
			s.log.Warn("instance not started: its data directory holds no cluster", "instance", p.inst.ID, "project", p.prj.ID, "dir", p.inst.Dir)
			s.setRuntime(p.prj.ID, RuntimeDown)
			continue
		}
		// Its archive_command follows the backup store of this start (another store than the last start's,
		// or the program's path).
		if err := s.rewriteArchiveSettings(ctx, p.inst, p.prj); err != nil {
			s.log.Warn("rewrite an adopted instance's settings", "project", p.prj.ID, "err", err)
		}
		// A server that died with the machine is not running yet: say so until the supervisor's restart
		// (whose event sets it back to active).
		if _, running, _ := s.eng.Instance(p.inst).Status(); !running {
			s.setRuntime(p.prj.ID, RuntimeRestarting)
			// Waited for below, unless its data directory is away: a restore interrupted in its swap (its
			// retry puts the data back or in) — no start serves before that job runs, after the wait.
			if _, err := os.Stat(filepath.Join(s.eng.Instance(p.inst).DataDir(), "PG_VERSION")); err == nil {
				starting = append(starting, p)
			}
		} else if p.prj.State == ProjectActive {
			if err := s.bringUpToDate(ctx, p.inst, p.prj); err != nil {
				s.log.Warn("bring an adopted instance up to date", "project", p.prj.ID, "err", err)
			}
		}
		if err := s.eng.Watch(p.inst, p.prj); err != nil {
			return err
		}
	}
	// The job runner starts after the adoption: the servers the supervisor is starting are waited for (at
	// once, adoptStartWait at most), so that a job claimed at the start does not spend its attempts on a
	// refused connection (a clean stop stopped every server; the next start starts them all).
	wctx, cancel := context.WithTimeout(ctx, adoptStartWait)
	defer cancel()
	for _, p := range starting {
		for !s.eng.Serving(wctx, p.inst, p.prj) && wctx.Err() == nil {
			select {
			case <-wctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	if wctx.Err() != nil && ctx.Err() == nil {
		s.log.Warn("adoption: not every server the supervisor starts serves yet; the job runner starts anyway", "waited", adoptStartWait)
	}
	return nil
}

// openMoveFenced lets clients in on inst's copy when a move's rebuild started it fenced (nothing
// otherwise): its pg_hba.conf the usual one, in force on its server when it runs; then the mark goes. A
// node self-fenced meanwhile stays fenced: its own unfence opens the copy (nodeloss.FenceMarker "open").
func (s *Service) openMoveFenced(ctx context.Context, inst *store.Instance) error {
	mark := filepath.Join(inst.Dir, moveFenced)
	if _, err := os.Stat(mark); errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	pgi := s.eng.Instance(inst)
	switch _, running, _ := pgi.Status(); {
	case nodeloss.SelfFenced(inst.Dir):
		if err := os.WriteFile(filepath.Join(inst.Dir, nodeloss.FenceMarker), []byte("open\n"), 0o600); err != nil {
			return err
		}
	default:
		if err := pgi.Fence(false); err != nil {
			return err
		}
		if running {
			pw, err := s.box.Open(inst.AdminPassword)
			if err != nil {
				return fmt.Errorf("open the admin password: %w", err)
			}
			conn, err := pgi.Admin(ctx, string(pw))
			if err != nil {
				return err
			}
			err = postgres.ReloadConf(ctx, conn)
			conn.Close(context.WithoutCancel(ctx))
			if err != nil {
				return err
			}
		}
	}
	return os.Remove(mark)
}

// adoptStartWait bounds AdoptInstances' wait for the servers it has the supervisor start.
const adoptStartWait = 30 * time.Second

// rewriteArchiveSettings writes an adopted instance's settings again, and reloads a running server when
// that applies them (archive_command and restore_command do); a change that needs a restart waits for
// the next one.
func (s *Service) rewriteArchiveSettings(ctx context.Context, inst *store.Instance, prj *store.Project) error {
	set, err := s.settingsFor(s.dp, prj, inst)
	if err != nil {
		return err
	}
	pgi := s.eng.Instance(inst)
	action, err := pgi.WriteSettings(set)
	if err != nil || action != postgres.ActionReload {
		return err
	}
	return pgi.Apply(ctx, nil, action)
}

// bringUpToDate brings an instance an older appliance provisioned up to today's rules (see
// instances.Manager.BringUpToDate).
func (s *Service) bringUpToDate(ctx context.Context, inst *store.Instance, prj *store.Project) error {
	adminPW, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return err
	}
	reset, err := s.eng.BringUpToDate(ctx, inst, prj, string(adminPW))
	if reset {
		s.log.Warn("purged pg_stat_statements: it held statements with passwords", "project", prj.ID)
	}
	return err
}

// beingDeleted reports whether the project is being deleted or is deleted (read now: a delete requested
// while the appliance starts counts).
func (s *Service) beingDeleted(projectID string) (bool, error) {
	var deleting bool
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := store.Projects.Get(tx, projectID)
		if err != nil {
			return err
		}
		deleting = prj.State == ProjectDeleting || prj.State == ProjectDeleted
		return nil
	})
	return deleting, err
}

// StopInstances is the last step of a shutdown, after the job runner and the supervisor stopped: every
// instance, pooler and key-value server the store knows of that still runs is stopped (fast). A job that
// the shutdown cancelled may have started one before handing it to the supervisor (a provision between
// its instance's start and its watch); it must not outlive the appliance. The next start's retry of that
// job starts it again. Then the key-value stores' last snapshots are shipped (kv.ShipSnapshots, at most
// 10 s).
func (s *Service) StopInstances(ctx context.Context) error {
	s.z.Close()
	s.endSpares()
	if s.eng != nil {
		s.eng.CloseSpareConns()
	}
	s.studio.ClosePools()
	if err := s.studio.FlushLog(ctx); err != nil {
		s.log.Warn("write the studio's last history entries", "err", err)
	}
	if _, err := s.dataPlane(); err != nil {
		return err
	}
	var insts []*store.Instance
	var others []daemon.Process
	err := s.db.View(func(tx *store.Tx) error {
		var err error
		if insts, err = store.Instances.All(tx, nil); err != nil {
			return err
		}
		kvs, err := store.KVStores.All(tx, nil)
		for _, kv := range kvs {
			if srv, _, err := s.kv.Server(kv); err == nil {
				others = append(others, srv)
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	err = s.eng.StopAll(ctx, insts, others)
	// The stores saved their RDB snapshot as they stopped: ship it (bounded), so a clean stop leaves the
	// bucket with every store's last data.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if n, serr := s.kv.ShipSnapshots(sctx); serr != nil {
		s.log.Warn("ship the key-value stores' last snapshots", "err", serr)
	} else if n > 0 {
		s.log.Info("key-value stores' last snapshots shipped to the backup store", "stores", n)
	}
	return err
}

// OnInstanceEvent records what the supervisor saw (a death, a restart) on the project: runtime_status and
// an audit event from the system.
func (s *Service) OnInstanceEvent(e daemon.Event) {
	if strings.HasPrefix(e.Key, "kv/") {
		s.kv.OnEvent(e)
		return
	}
	instID := e.Key
	if i := len(instID) - len("/pooler"); i > 0 && instID[i:] == "/pooler" {
		instID = instID[:i]
	}
	// A restart reports the project active only when its server accepts connections and its pooler runs:
	// a pooler started again while the server is down or still starting changes nothing.
	serving := false
	if e.Kind == daemon.EventRestarted && s.dp != nil {
		var rec *store.Instance
		var prj *store.Project
		if err := s.db.View(func(tx *store.Tx) (err error) {
			if rec, err = store.Instances.Get(tx, instID); err != nil || rec.ProjectID == "" {
				return err
			}
			prj, err = store.Projects.Get(tx, rec.ProjectID)
			return err
		}); err == nil && prj != nil {
			serving = s.eng.Serving(context.Background(), rec, prj)
		}
	}
	err := s.db.Update(func(tx *store.Tx) error {
		inst, err := store.Instances.Get(tx, instID)
		if err != nil {
			return err
		}
		if inst.ProjectID == "" { // a spare: the supervisor's restart is all it needs
			return nil
		}
		prj, err := store.Projects.Get(tx, inst.ProjectID)
		if err != nil {
			return err
		}
		if prj.State != ProjectActive {
			return nil
		}
		switch e.Kind {
		case daemon.EventDied, daemon.EventRestartFailed:
			prj.RuntimeStatus = RuntimeDown
		case daemon.EventRestarted:
			if serving {
				prj.RuntimeStatus = RuntimeActive
			}
		}
		prj.UpdatedAt = s.now()
		if err := store.Projects.Put(tx, prj); err != nil {
			return err
		}
		md := map[string]any{"process": e.Key, "pid": e.PID}
		if e.Err != nil {
			md["error"] = e.Err.Error()
		}
		if err := s.audit(tx, &Principal{AuthSource: ActorSystem}, "instance."+string(e.Kind), prj.OrganizationID, prj.ID, md); err != nil {
			return err
		}
		switch {
		case e.Kind == daemon.EventDied:
			return s.observe.InstanceCrashed(tx, prj, e)
		case e.Kind == daemon.EventRestarted && serving:
			return s.observe.InstanceServing(tx, prj)
		}
		return nil
	})
	if err != nil {
		s.log.Error("record instance event", "event", e, "err", err)
	}
}

// repairEndedRestores puts right, at start, what restore jobs of an instance that will never run again
// left behind (instances.Manager.RepairEndedRestores): a restore job ends when it failed (a crash spent
// its last attempt) or completed. Call it before the instance is watched.
func (s *Service) repairEndedRestores(ctx context.Context, inst *store.Instance) {
	s.eng.RepairEndedRestores(ctx, inst, func(jobID string) bool {
		var j *store.Job
		err := s.db.View(func(tx *store.Tx) (err error) { j, err = store.Jobs.Get(tx, jobID); return err })
		return err == nil && (j.State == scheduler.StateFailed || j.State == scheduler.StateCompleted)
	})
}

// organizationSuspended reports whether the organization is suspended (its servers stay stopped at a
// start of the appliance).
func (s *Service) organizationSuspended(orgID string) bool {
	suspended := false
	_ = s.db.View(func(tx *store.Tx) error {
		if org, err := store.Organizations.Get(tx, orgID); err == nil {
			suspended = org.SuspendedAt != nil
		}
		return nil
	})
	return suspended
}
