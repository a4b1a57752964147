// Package appliancetest builds, for tests, what `appliance up` builds: a real store, the service, and on
// request the data plane (PostgreSQL and PgBouncer processes as the unprivileged OS user, the CA) and the
// job runner. Tests in several packages share it so that the real stack is assembled in one place.
package appliancetest

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/crypto/bcrypt"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/backup/walsock"
	"github.com/theappliance/appliance/appliance/certs"
	"github.com/theappliance/appliance/appliance/cgroups"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/appliance/outbound"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/testtools"
	"github.com/theappliance/appliance/kvproxy"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/scheduler/lane"
	"github.com/theappliance/appliance/store"
)

// Env is one appliance under test.
type Env struct {
	Dir       string
	DB        *store.DB
	Box       *appliance.SecretBox
	Svc       *appliance.Service
	CA        *certs.CA
	Runner    *scheduler.Runner  // nil unless Options.Instances
	Sup       *daemon.Supervisor // nil unless Options.Instances
	Bin       postgres.Binaries  // the PostgreSQL the instances run from (with Options.Instances)
	Bootstrap *appliance.Bootstrap
	// Cgroups are the groups of the projects' servers (nil unless Options.Cgroups).
	Cgroups *cgroups.Groups
	// Clock is the service's clock: the time now until a test sets another.
	Clock *Clock
	// Lane is the background lane the service, the runner and the fronts share (TestLane).
	Lane *lane.Lane
	// kvLn and kvRESTLn are the key-value fronts' listeners, bound before the
	// service so that its credentials name their ports.
	kvLn, kvRESTLn net.Listener
}

// TestLane is the background lane of the appliances of a test process: one per process, as up makes one
// per process. It is made when the first Env is (importing the package starts nothing) and never closed,
// since the Envs of parallel tests share it.
var TestLane = sync.OnceValue(lane.NewBackground)

// Clock is a clock a test moves: the service is built with its Now.
type Clock struct {
	now atomic.Pointer[func() time.Time]
}

// Now is the time of the clock last Set (time.Now before any).
func (c *Clock) Now() time.Time {
	if f := c.now.Load(); f != nil {
		return (*f)()
	}
	return time.Now()
}

// Set makes now the service's clock (time.Now goes back to the real time).
func (c *Clock) Set(now func() time.Time) { c.now.Store(&now) }

// Options choose what runs.
type Options struct {
	// Instances starts the data plane and the job runner, so projects are provisioned for real.
	Instances bool
	// Dir, when set, is the Env's directory (the data directory; it must exist, empty, traversable by the
	// instances' OS user: on a filesystem the test made, say): else a fresh temporary directory.
	Dir string
	// Spares is the number of prepared clusters kept ready (0: every provision runs initdb).
	Spares int
	// JobStepHook is Deps.JobStepHook: called at the named steps of restore, cutover and upgrade jobs.
	JobStepHook appliance.JobStepHook
	// Ports is the size of the instance port range (default 40: a project or preview takes two ports, a
	// spare two).
	Ports int
	// Log receives the service's log (default: discarded).
	Log *slog.Logger
	// APIURL is the base of the URLs the service hands out (signed download and upload URLs); default
	// "http://test".
	APIURL string
	// PGBin is the PostgreSQL bin directory the instances run from (default: the newest system install).
	PGBin string
	// Outbound is the destination policy (default: the defaults plus --outbound-allow 127.0.0.0/8, as an
	// operator would allow for the local sources the tests import from). Its OwnPorts gets the Env's
	// instance range added.
	Outbound *outbound.Policy
	// Ephemeral bounds anonymous ephemeral databases (nil: the defaults).
	Ephemeral *appliance.EphemeralLimits
	// Webhooks tune the delivery worker StartWebhooks runs (nil: the defaults).
	Webhooks *appliance.WebhookOptions
	// ImportUploadLimit, when it returns a positive size, is the import upload size limit (tests of 413).
	ImportUploadLimit func() int64
	// BackupObjects, when set, makes the backup store (Deps.BackupObjects) of the Env's data directory,
	// given the chown of the instances' OS user (with Instances; nil otherwise). A store without WAL
	// commands gets the WAL through the service's socket: PostgreSQL runs a copy of the test binary (whose
	// TestMain must be testtools.Main) as `wal push`/`wal fetch`.
	BackupObjects func(dataDir string, chown func(string) error) (backup.Objects, error)
	// BackupCache is Config.BackupCache: with BackupObjects, the bound of the local cache of the bucket's
	// exports (0: the default; negative: none kept).
	BackupCache int64
	// LogArchiveDays is Config.LogArchiveDays (0: no log archive).
	LogArchiveDays int
	// NodeID is Config.NodeID: the service takes itself for that node of a cluster whose other nodes'
	// projects it leaves alone (a test of what a cluster node shows of them; "": a single node).
	NodeID string
	// Cgroups holds the projects' servers in cgroups as up --cgroups auto does (with Instances; the Env's
	// Cgroups), to ServerLimits when set (Config.ServerLimits), else to their plans'. Off by default: the
	// plans' CPU quotas would slow the suite.
	Cgroups      bool
	ServerLimits func(plan appliance.Plan) cgroups.Limits
	// Billing is Deps.Billing, the organizations' billing provider (nil: billing off).
	Billing appliance.BillingProvider
	// ProgramApplicationRate is Config.ProgramApplicationRate (zero: the default).
	ProgramApplicationRate appliance.ProgramApplicationRate
	// IntegrationBaseURLs and IntegrationOAuth are Config's: the integration providers' API base URLs
	// (local fakes) and OAuth clients.
	IntegrationBaseURLs map[string]string
	IntegrationOAuth    map[string]appliance.IntegrationOAuthApp
	// IntegrationProviders are Deps.IntegrationProviders (nil: appliance.IntegrationProviders()).
	IntegrationProviders []provider.Provider
	// RerunUpdates makes the store run every Update's function twice, the first run rolled back
	// (store.DB.RerunUpdates), as etcd runs one again after a conflict. The environment variable
	// APPLIANCE_TEST_RERUN_UPDATES=1 (store.RerunUpdatesEnv) turns it on for every Env.
	RerunUpdates bool
}

// New builds an Env in a fresh directory that the instances' OS user can traverse.
func New(t testing.TB, o Options) *Env {
	t.Helper()
	dir := o.Dir
	if dir == "" {
		dir = TraversableTempDir(t)
	}
	// Registered first, so it runs after every other cleanup of the Env (the runner's and the supervisor's
	// stops) and before the temp dir is removed.
	t.Cleanup(func() { CheckNoProcessesUnder(t, dir) })
	db, err := store.Open(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.RerunUpdates(o.RerunUpdates || os.Getenv(store.RerunUpdatesEnv) == "1")
	box, err := appliance.OpenSecretBox(filepath.Join(dir, "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := certs.LoadOrCreateCA(filepath.Join(dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil)) // info and above, formatted for nothing: skip debug
		if f := logFile(t); f != nil {
			log = slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "instances"), 0o711); err != nil {
		t.Fatal(err)
	}
	apiURL := o.APIURL
	if apiURL == "" {
		apiURL = "http://test"
	}
	ports := freeRange(t, cmp.Or(o.Ports, 40))
	pol := o.Outbound
	if pol == nil {
		pol = &outbound.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	}
	pol.OwnPorts = append(pol.OwnPorts, outbound.PortRange{First: ports.First, Last: ports.Last})
	e := &Env{Dir: dir, DB: db, Box: box, CA: ca, Clock: &Clock{}, Lane: TestLane()}
	cfg := appliance.Config{APIURL: apiURL, PublicHost: "localhost", Region: "local",
		Version: "test", PasswordCost: bcrypt.MinCost, CACertPath: ca.CertPath(), ListenHost: "127.0.0.1",
		DataDir: dir, Ports: ports, Spares: o.Spares, Outbound: pol, Ephemeral: o.Ephemeral, Webhooks: o.Webhooks,
		BackupCache: o.BackupCache, LogArchiveDays: o.LogArchiveDays, ServerLimits: o.ServerLimits,
		ProgramApplicationRate: o.ProgramApplicationRate, IntegrationBaseURLs: o.IntegrationBaseURLs, IntegrationOAuth: o.IntegrationOAuth,
		NodeID: o.NodeID, TemplateDir: templateDir(t)}
	// The key-value fronts' listeners are bound first, as up does, so that StartKVFronts can run them and
	// the credentials the service hands out name them (real URLs, as the API documents them).
	cfg.KVFront = e.bindKVFronts(t)
	deps := appliance.Deps{DB: db, Box: box, Log: log, Clock: e.Clock.Now, ImportUploadLimit: o.ImportUploadLimit, Lane: e.Lane,
		Billing: o.Billing, IntegrationProviders: o.IntegrationProviders, JobStepHook: o.JobStepHook}
	if o.Instances {
		deps.DataPlane = e.dataPlane(t, o.PGBin)
		if o.Cgroups {
			groups, err := cgroups.Open(cgroups.Options{Name: cgroups.ParentName(dir), Log: log})
			if err != nil {
				t.Fatal(err)
			}
			e.Cgroups, deps.DataPlane.Cgroups = groups, groups
		}
		e.Runner = scheduler.New(e.DB, scheduler.Options{ID: "test", HostID: "test", Log: log, Lane: e.Lane,
			Backoff: func(int) time.Duration { return 200 * time.Millisecond }})
		deps.Jobs = e.Runner
	}
	if o.BackupObjects != nil {
		var chown func(string) error
		if deps.DataPlane != nil {
			chown = deps.DataPlane.User.Chown
		}
		if deps.BackupObjects, err = o.BackupObjects(dir, chown); err != nil {
			t.Fatal(err)
		}
		if !backup.New(deps.BackupObjects).HasWALCommands() {
			prog, err := walsock.InstallProgram(filepath.Join(dir, "bin", "appliance.test"))
			if err != nil {
				t.Fatal(err)
			}
			cfg.WALProgram = []string{prog}
		}
	}
	e.Svc = appliance.New(cfg, deps)
	if err := e.Svc.StartWAL(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Registered before the data plane's cleanups: it runs after the instances stopped (their last
	// archive_command).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		e.Svc.StopWAL(ctx)
	})
	e.Bootstrap, err = e.Svc.EnsureBootstrap(t.Context(), filepath.Join(dir, "bootstrap.json"), ca.CertPath())
	if err != nil {
		t.Fatal(err)
	}
	if o.Instances {
		e.startDataPlane(t)
	}
	return e
}

// dataPlane finds the programs the instances run and makes their supervisor.
func (e *Env) dataPlane(t testing.TB, pgBin string) *appliance.DataPlane {
	t.Helper()
	bin, err := postgres.FindBinaries(pgBin)
	if err != nil {
		t.Fatalf("PostgreSQL binaries are required (install postgresql-15): %v", err)
	}
	e.Bin = bin
	user, err := daemon.DefaultOSUser()
	if err != nil {
		t.Fatal(err)
	}
	bouncer, err := postgres.FindPgBouncer("")
	if err != nil {
		t.Fatalf("PgBouncer is required (install pgbouncer): %v", err)
	}
	redisServer, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is required (install redis-server): %v", err)
	}
	e.Sup = daemon.NewSupervisor()
	return &appliance.DataPlane{Supervisor: e.Sup, User: user, Bin: bin, CA: e.CA, PgBouncer: bouncer, RedisServer: redisServer}
}

// startDataPlane connects the supervisor's events to the service and starts the job runner.
func (e *Env) startDataPlane(t testing.TB) {
	t.Helper()
	e.Sup.OnEvent = e.Svc.OnInstanceEvent
	e.Svc.RegisterJobs(e.Runner)
	if err := e.Runner.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-in first-out: the runner stops before the supervisor stops the instances, and
	// every instance directory is removed with the temp dir afterwards.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		e.Sup.Stop(ctx)
		if err := e.Svc.StopInstances(ctx); err != nil {
			t.Errorf("stop the instances: %v", err)
		}
		if err := e.Cgroups.Close(); err != nil {
			t.Errorf("remove the cgroups: %v", err)
		}
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		e.Runner.Stop(ctx)
	})
}

// WaitJob polls the store until the job ends and returns it.
func (e *Env) WaitJob(t testing.TB, id string) *store.Job {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var j *store.Job
		err := e.DB.View(func(tx *store.Tx) (err error) { j, err = store.Jobs.Get(tx, id); return err })
		if err != nil {
			t.Fatal(err)
		}
		if j.State == scheduler.StateCompleted || j.State == scheduler.StateFailed {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s (%s) still %s after 2 minutes", id, j.Type, j.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Project reads a project record.
func (e *Env) Project(t testing.TB, id string) *store.Project {
	t.Helper()
	var p *store.Project
	if err := e.DB.View(func(tx *store.Tx) (err error) { p, err = store.Projects.Get(tx, id); return err }); err != nil {
		t.Fatal(err)
	}
	return p
}

// TraversableTempDir is a temp dir whose parents the instances' OS user can traverse (Go's test temp dirs
// are 0700 and owned by root when tests run as root).
//
// In a test process whose TestMain is MainOnScratchFS it is a directory of that process's own filesystem,
// removed when the test ends.
func TraversableTempDir(t testing.TB) string {
	t.Helper()
	if scratch != "" {
		dir, err := os.MkdirTemp(scratch, "t") // short: the appliances' Unix sockets live under it
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := os.RemoveAll(dir); err != nil {
				t.Errorf("remove the test's directory: %v", err)
			}
		})
		if err := os.Chmod(dir, 0o711); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/" && strings.HasPrefix(d, os.TempDir()); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// LogDirEnv names a directory where each Env whose Options.Log is nil writes the service's log (debug level,
// timestamped: where a test's time goes), one file per test; unset, that log is discarded.
const LogDirEnv = "APPLIANCE_TEST_LOG_DIR"

// logFile is where the Env of t writes its service's log when Options.Log is nil (nil: nowhere).
func logFile(t testing.TB) io.Writer {
	t.Helper()
	dir := os.Getenv(LogDirEnv)
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(dir, strings.NewReplacer("/", "_").Replace(t.Name())+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// Test port ranges are blocks of portBlock ports in [portsFirst, portsLast]: below Linux's ephemeral range
// (32768-60999), so that no outgoing connection's local port takes an instance's port between allocation
// and bind.
const (
	portBlock  = 40
	portsFirst = 20000
	portsLast  = 32767
)

// templateDir is the initdb templates' directory (Config.TemplateDir) of every Env of this test process,
// as up keeps one per data directory: the first instance of a kind (binaries, OS user) runs initdb and
// keeps its result there, every later one, in any test of the process, copies it (postgres.Instance.
// TemplateDir says how a copy is made its own cluster). Without it every provision of every test ran
// initdb. It is the process's own (templates are keyed by the binaries' paths, and the other majors the
// tests install live in each Env's directory): RemoveTemplates removes it at the end of a TestMain, and
// the first Env of a later process removes those of processes that are gone.
func templateDir(t testing.TB) string {
	t.Helper()
	dir, err := processTemplates()
	if err != nil {
		t.Fatalf("the initdb templates' directory: %v", err)
	}
	return dir
}

var processTemplates = sync.OnceValues(func() (string, error) {
	if scratch != "" { // the process's own filesystem, gone with it
		dir := filepath.Join(scratch, "initdb-templates")
		return dir, postgres.CheckTemplateDir(dir)
	}
	root := filepath.Join(os.TempDir(), "appliance-test-initdb-templates")
	if err := postgres.CheckTemplateDir(root); err != nil {
		return "", err
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return "", err
	}
	for _, en := range entries {
		pid, err := strconv.Atoi(en.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(filepath.Join("/proc", en.Name())); os.IsNotExist(err) {
			os.RemoveAll(filepath.Join(root, en.Name())) // a process that is gone: nobody copies from it
		}
	}
	dir := filepath.Join(root, strconv.Itoa(os.Getpid()))
	return dir, postgres.CheckTemplateDir(dir)
})

// RemoveTemplates removes this process's initdb templates, for a TestMain once its tests ran (every Env
// is gone then; what a template still being kept in the background leaves, the next process removes).
func RemoveTemplates() {
	os.RemoveAll(filepath.Join(os.TempDir(), "appliance-test-initdb-templates", strconv.Itoa(os.Getpid())))
}

// Main is the TestMain of a package whose tests make Envs: testtools.Ready (the machine readied, with
// programs), the tests, then RemoveTemplates.
func Main(m *testing.M, programs ...testtools.GoProgram) {
	testtools.Ready(programs...)
	code := m.Run()
	RemoveTemplates()
	os.Exit(code)
}

// scratch is the test process's own filesystem (MainOnScratchFS), "" when the tests use the temporary
// directory.
var scratch string

// ScratchFSSize is the size of MainOnScratchFS's filesystem: a sparse image, whose blocks are allocated as
// the tests write and given back as they remove (its mount discards).
const ScratchFSSize = 32 << 30

// MainOnScratchFS is Main with the Envs' directories (TraversableTempDir) and the initdb templates on a
// filesystem of the test process's own (testtools.ScratchFS: an ext4 with a journal, as a Debian server's
// disk is), unmounted after the tests. The machines' own root filesystem is an ext4 without a journal,
// where creating a file after others were removed costs a scan of every inode freed in the last seconds:
// the tests that make and remove clusters spent a quarter to a half of their CPU there. Where the mount is
// refused (not root, no loop devices) it says so and the tests use the temporary directory.
func MainOnScratchFS(m *testing.M, programs ...testtools.GoProgram) {
	os.Exit(RunOnScratchFS(m, programs...))
}

// RunOnScratchFS is MainOnScratchFS for a TestMain with more to do after the tests: it returns m.Run's
// code, the scratch filesystem removed.
func RunOnScratchFS(m *testing.M, programs ...testtools.GoProgram) int {
	testtools.Ready(programs...)
	mnt, unmount, err := testtools.ScratchFS(ScratchFSSize)
	if err != nil {
		fmt.Fprintf(os.Stderr, "appliancetest: no scratch filesystem (the tests use %s): %v\n", os.TempDir(), err)
	}
	scratch = mnt
	code := m.Run()
	RemoveTemplates()
	if unmount != nil {
		if err := unmount(); err != nil {
			fmt.Fprintf(os.Stderr, "appliancetest: remove the scratch filesystem: %v\n", err)
		}
	}
	return code
}

// freeRange reserves a port range of at least n ports for the test's Env until the test ends. A range is
// held by flock on one file per block under the temp dir, so Envs in parallel tests and in other test
// processes (go test runs packages side by side) never share a port: two appliances allocating from one
// range both see a port free until one binds it, and kept colliding on every retry.
func freeRange(t testing.TB, n int) appliance.PortRange {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "appliance-test-ports")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	blocks, total := (n+portBlock-1)/portBlock, (portsLast-portsFirst+1)/portBlock
	start := int(uint32(os.Getpid())*2654435761) % total // processes start at different blocks
	for i := 0; i < total; i++ {
		first := (start + i) % total
		if first+blocks > total {
			continue
		}
		var held []*os.File
		for b := first; b < first+blocks; b++ {
			f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(b)), os.O_CREATE|os.O_RDWR, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
				f.Close()
				break
			}
			held = append(held, f)
		}
		if len(held) == blocks {
			t.Cleanup(func() {
				for _, f := range held {
					f.Close() // releases the lock
				}
			})
			lo := portsFirst + first*portBlock
			return appliance.PortRange{First: lo, Last: lo + blocks*portBlock - 1}
		}
		for _, f := range held {
			f.Close()
		}
	}
	t.Fatalf("no free test port range of %d ports in %d-%d", n, portsFirst, portsLast)
	return appliance.PortRange{}
}

// AdminExec runs a statement as the instance's superuser in the project's database (for fixtures that
// need rights the project role does not have), in a session of its own with PostgreSQL's default
// search_path, as an operator's psql would: fixtures name tables and extensions unqualified, and they land
// in public. The appliance's own admin sessions never look in public (postgres.AdminSearchPath).
func (e *Env) AdminExec(t testing.TB, projectID, stmt string) error {
	t.Helper()
	cfg := e.AdminConfig(t, projectID)
	cfg.RuntimeParams["search_path"] = `"$user", public`
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(t.Context(), stmt)
	return err
}

// AdminConfig is a connection configuration for the instance's superuser in the project's database, as
// postgres.Instance.Connect's but without its search_path: PostgreSQL's defaults, the database's included.
func (e *Env) AdminConfig(t testing.TB, projectID string) *pgx.ConnConfig {
	t.Helper()
	prj := e.Project(t, projectID)
	var inst *store.Instance
	if err := e.DB.View(func(tx *store.Tx) (err error) { inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID); return err }); err != nil {
		t.Fatalf("instance of %s: %v", projectID, err)
	}
	pw, err := e.Box.Open(inst.AdminPassword)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig("sslmode=disable connect_timeout=10")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host, cfg.Port, cfg.User, cfg.Password, cfg.Database = "127.0.0.1", uint16(inst.Port), postgres.AdminRole, string(pw), prj.DatabaseName
	return cfg
}

// LeakGrace is how long CheckNoProcessesUnder lets processes of the directory end on their own (a
// postmaster's backends exit just after it; the machine may be slow) before it calls them leaked.
var LeakGrace = 30 * time.Second

// CheckNoProcessesUnder fails the test if, once LeakGrace has passed, live processes (other than the test's
// own) still have dir in their command line or work in it: a postmaster, a backend or a PgBouncer the code
// under test left behind. It names them, then SIGKILLs them, so that one leak does not outlive the test.
func CheckNoProcessesUnder(t testing.TB, dir string) {
	t.Helper()
	deadline := time.Now().Add(LeakGrace)
	for {
		left := ProcessesUnder(dir)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			pids := make([]int, 0, len(left))
			for pid := range left {
				pids = append(pids, pid)
			}
			sort.Ints(pids)
			var names []string
			for _, pid := range pids {
				names = append(names, fmt.Sprintf("pid %d: %s", pid, left[pid]))
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Errorf("processes of %s left behind after the test's cleanup (killed now):\n%s", dir, strings.Join(names, "\n"))
			return
		}
		time.Sleep(50 * time.Millisecond) // polling other processes' exit: there is nothing to wait on
	}
}

// ProcessesUnder is daemon.ProcessesUnder: the live processes of dir, with their command lines.
func ProcessesUnder(dir string) map[int]string { return daemon.ProcessesUnder(dir) }

// Listen returns a loopback listener on a port outside the Env's instance range (the outbound policy
// refuses the appliance's own ports, so test peers the appliance connects to must not sit there).
func (e *Env) Listen(t testing.TB) net.Listener {
	t.Helper()
	own := e.Svc.Config().Ports
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if p := l.Addr().(*net.TCPAddr).Port; p < own.First || p > own.Last {
			t.Cleanup(func() { l.Close() })
			return l
		}
		l.Close()
	}
}

// Serve runs an HTTP server with h on Listen's listener and returns its base URL (http://127.0.0.1:port).
func (e *Env) Serve(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = e.Listen(t)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// StartWebhooks runs the webhook delivery worker (with Options.Webhooks) until the test ends.
func (e *Env) StartWebhooks(t testing.TB) {
	t.Helper()
	if err := e.Svc.Webhooks().Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Svc.Webhooks().Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
}

// KVFronts are the key-value fronts of an Env, as up runs them.
type KVFronts struct {
	RESP *kvproxy.Server
	REST *kvproxy.REST
}

// bindKVFronts binds the key-value fronts' listeners on loopback and returns where the service says they
// are (the REST URL's host is localhost).
func (e *Env) bindKVFronts(t testing.TB) appliance.KVFront {
	t.Helper()
	for _, l := range []*net.Listener{&e.kvLn, &e.kvRESTLn} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		*l = ln
	}
	return appliance.KVFront{RESPPort: e.kvLn.Addr().(*net.TCPAddr).Port,
		RESTURL: "https://localhost:" + strconv.Itoa(e.kvRESTLn.Addr().(*net.TCPAddr).Port)}
}

// StartKVFronts starts both key-value fronts (Options.KVFronts) on their loopback listeners with
// certificates of the Env's CA (for localhost and 127.0.0.1).
func (e *Env) StartKVFronts(t testing.TB) *KVFronts {
	t.Helper()
	if e.kvLn == nil {
		t.Fatal("StartKVFronts needs appliancetest.Options.KVFronts")
	}
	cfg, err := e.CA.ServerTLS("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	f := &KVFronts{RESP: &kvproxy.Server{Addr: "127.0.0.1:0", Listener: e.kvLn, TLS: cfg, Resolver: e.Svc.KV(), Lane: e.Lane},
		REST: &kvproxy.REST{Addr: "127.0.0.1:0", Listener: e.kvRESTLn, TLS: cfg, Resolver: e.Svc.KV(), Lane: e.Lane}}
	for _, s := range []interface {
		Start(context.Context) error
		Stop(context.Context) error
	}{f.RESP, f.REST} {
		if err := s.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Stop(context.Background()) })
	}
	return f
}

// FreePorts reserves a port range of at least n ports until the test ends (for an appliance a test starts
// itself, such as appliance/node's: its --pg-ports), shared with no other test of any process.
func FreePorts(t testing.TB, n int) appliance.PortRange {
	t.Helper()
	return freeRange(t, n)
}

// Output is the output of an appliance that runs beside the test (in its process): written by it while
// the test reads it.
type Output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}
