// Package appliancetest builds, for tests, what `appliance up` builds: a real store, the service, and on
// request the data plane (PostgreSQL and PgBouncer processes as the unprivileged OS user, the CA) and the
// job runner. Tests in several packages share it so that the real stack is assembled in one place.
package appliancetest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/certs"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Env is one appliance under test.
type Env struct {
	Dir       string
	DB        *store.DB
	Box       *appliance.SecretBox
	Svc       *appliance.Service
	CA        *certs.CA
	Runner    *scheduler.Runner    // nil unless Options.Instances
	Sup       *postgres.Supervisor // nil unless Options.Instances
	Bootstrap *appliance.Bootstrap
}

// Options choose what runs.
type Options struct {
	// Instances starts the data plane and the job runner, so projects are provisioned for real.
	Instances bool
	// Spares is the number of prepared clusters kept ready (0: every provision runs initdb).
	Spares int
	// Log receives the service's log (default: discarded).
	Log *slog.Logger
}

// New builds an Env in a fresh directory that the instances' OS user can traverse.
func New(t testing.TB, o Options) *Env {
	t.Helper()
	dir := TraversableTempDir(t)
	db, err := store.Open(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
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
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if err := os.MkdirAll(filepath.Join(dir, "instances"), 0o711); err != nil {
		t.Fatal(err)
	}
	svc := appliance.New(appliance.Config{APIURL: "http://test", PublicHost: "localhost", Region: "local",
		Version: "test", PasswordCost: bcrypt.MinCost, CACertPath: ca.CertPath(), ListenHost: "127.0.0.1",
		DataDir: dir, Ports: freeRange(t), Spares: o.Spares}, db, box, log)
	e := &Env{Dir: dir, DB: db, Box: box, Svc: svc, CA: ca}
	e.Bootstrap, err = svc.EnsureBootstrap(t.Context(), filepath.Join(dir, "bootstrap.json"), ca.CertPath())
	if err != nil {
		t.Fatal(err)
	}
	if o.Instances {
		e.startDataPlane(t, log)
	}
	return e
}

func (e *Env) startDataPlane(t testing.TB, log *slog.Logger) {
	t.Helper()
	e.Sup = postgres.NewSupervisor("")
	e.Sup.OnEvent = e.Svc.OnInstanceEvent
	bin, err := e.Sup.Binaries()
	if err != nil {
		t.Fatalf("PostgreSQL binaries are required (install postgresql-15): %v", err)
	}
	user, err := postgres.DefaultOSUser()
	if err != nil {
		t.Fatal(err)
	}
	bouncer, err := postgres.FindPgBouncer("")
	if err != nil {
		t.Fatalf("PgBouncer is required (install pgbouncer): %v", err)
	}
	e.Svc.SetDataPlane(&appliance.DataPlane{Supervisor: e.Sup, User: user, Bin: bin, CA: e.CA, PgBouncer: bouncer})
	e.Runner = scheduler.New(e.DB, scheduler.Options{ID: "test", HostID: "test", Log: log,
		Backoff: func(int) time.Duration { return 200 * time.Millisecond }})
	e.Svc.SetNotifier(e.Runner)
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
func TraversableTempDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/" && strings.HasPrefix(d, os.TempDir()); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// freeRange gives each Env its own port range so parallel tests do not compete for the same ports.
func freeRange(t testing.TB) appliance.PortRange {
	t.Helper()
	// Spread by test name and time over 20000-59999, in blocks of 40 ports.
	h := uint32(time.Now().UnixNano())
	for _, c := range t.Name() {
		h = h*31 + uint32(c)
	}
	first := 20000 + int(h%1000)*40
	return appliance.PortRange{First: first, Last: first + 39}
}

// AdminExec runs a statement as the instance's superuser in the project's database (for fixtures that
// need rights the project role does not have).
func (e *Env) AdminExec(t testing.TB, projectID, stmt string) error {
	t.Helper()
	return e.Svc.AdminExec(t.Context(), projectID, stmt)
}
