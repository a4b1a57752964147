package programs_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/programs"
	"github.com/theappliance/appliance/scheduler"
)

// systemPG is the Debian install the tests build distributions from.
const systemPG = "/usr/lib/postgresql/15"

func requirePG(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(systemPG, "bin", "postgres")); err != nil {
		t.Fatalf("PostgreSQL 15 is required (postgresql-15): %v", err)
	}
}

// distribution builds an archive in embedded-postgres' format (bin/ and lib/ at its root, tar.xz) from
// the installed Debian binaries, named as embedded-postgres' cache names it, in a new cache directory.
func distribution(t *testing.T) (cacheDir string) {
	t.Helper()
	requirePG(t)
	cacheDir = t.TempDir()
	name := fmt.Sprintf("embedded-postgres-binaries-%s-%s-15.13.0.txz", runtime.GOOS, runtime.GOARCH)
	cmd := exec.Command("tar", "-I", "xz -0 -T0", "--exclude=lib/bitcode", "--exclude=lib/postgis*",
		"-cf", filepath.Join(cacheDir, name), "-C", systemPG, "bin/postgres", "bin/initdb", "bin/pg_ctl", "lib")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build distribution: %v\n%s", err, out)
	}
	return cacheDir
}

// hidden is resolution with no system PostgreSQL: an empty install root and a search path without the
// system's programs.
func hidden(t *testing.T) programs.Options {
	return programs.Options{PGRoot: t.TempDir(), Path: []string{t.TempDir()}}
}

// TestEmbeddedPostgresProvisionsAProject obtains PostgreSQL's server from an embedded-postgres
// distribution in the cache (the mirror does not answer: nothing is downloaded), with the system
// PostgreSQL hidden, then provisions a project on those binaries and queries it.
func TestEmbeddedPostgresProvisionsAProject(t *testing.T) {
	t.Parallel()
	o := hidden(t)
	o.Embedded = &programs.Embedded{Dir: filepath.Join(appliancetest.TraversableTempDir(t), "postgresql"),
		CacheDir: distribution(t), MirrorURL: "http://127.0.0.1:1/maven2"}
	s, err := programs.Resolve(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(o.Embedded.Dir, "bin"); s.PG.Dir != want || s.PG.Major != 15 {
		t.Fatalf("PostgreSQL from %+v, want %s", s.PG, want)
	}
	if f := s.Found["postgres"]; f.Source != programs.SourceEmbedded || !strings.Contains(f.Version, "15.") {
		t.Errorf("postgres: %+v", f)
	}
	// The distribution has no client tools: the features that need them say which program and how.
	if _, err := s.Path("pg_dump"); !errors.Is(err, programs.ErrMissing) || !strings.Contains(err.Error(), "apt-get install -y postgresql-client-15") {
		t.Errorf("pg_dump: %v", err)
	}
	if f := s.Missing(); len(f) == 0 || f[0].Name != "pgbouncer" {
		t.Errorf("missing, required first: %+v", f)
	}

	e := appliancetest.New(t, appliancetest.Options{Instances: true, PGBin: s.PG.Dir})
	p, err := e.Svc.Identity().Authenticate(t.Context(), e.Bootstrap.APIKey)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Svc.CreateProject(t.Context(), p, &appliance.CreateProjectRequest{Name: "embedded", Environment: "development"})
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, res.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("provision on embedded binaries: %s %s\n%s", j.State, j.Error, j.LastStderr)
	}
	conns, err := e.Svc.ProjectConnections(t.Context(), p, res.Project.ID)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), conns.Connections.DirectURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var one int
	var version string
	if err := conn.QueryRow(t.Context(), "select 1, version()").Scan(&one, &version); err != nil || one != 1 {
		t.Fatalf("select 1: %v %d", err, one)
	}
	if !strings.HasPrefix(version, "PostgreSQL 15") {
		t.Errorf("version %q", version)
	}
	// The server that answered runs the embedded binaries.
	if n := processesOf(filepath.Join(o.Embedded.Dir, "bin", "postgres")); n == 0 {
		t.Errorf("no process runs %s", filepath.Join(o.Embedded.Dir, "bin", "postgres"))
	}
}

// processesOf counts the processes whose executable is exe.
func processesOf(exe string) int {
	n := 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && target == exe {
			n++
		}
	}
	return n
}

// TestEmbeddedMirrorDown: with nothing cached and a mirror that does not answer, resolution fails naming
// the mirror, and unpacks nothing.
func TestEmbeddedMirrorDown(t *testing.T) {
	t.Parallel()
	o := hidden(t)
	o.Embedded = &programs.Embedded{Dir: filepath.Join(t.TempDir(), "postgresql"), CacheDir: t.TempDir(), MirrorURL: "http://127.0.0.1:1/maven2"}
	_, err := programs.Resolve(t.Context(), o)
	if err == nil || !strings.Contains(err.Error(), "http://127.0.0.1:1/maven2") || !strings.Contains(err.Error(), "embedded-postgres") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(o.Embedded.Dir, "bin")); err == nil {
		t.Error("a failed download left a bin directory")
	}
}

// TestPGBinWithoutPostgres: --pg-bin naming a directory without PostgreSQL is the operator's mistake,
// reported with the directory; it is never replaced by another install.
func TestPGBinWithoutPostgres(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := programs.Resolve(t.Context(), programs.Options{PGBin: dir})
	if err == nil || !strings.Contains(err.Error(), "--pg-bin "+dir) {
		t.Fatalf("err = %v", err)
	}
}

// TestResolveSystem finds the Debian install and the programs on PATH.
func TestResolveSystem(t *testing.T) {
	t.Parallel()
	requirePG(t)
	s, err := programs.Resolve(t.Context(), programs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.PG.Dir != filepath.Join(systemPG, "bin") {
		t.Errorf("PG %+v", s.PG)
	}
	for _, name := range []string{"postgres", "pg_dump", "pgbouncer"} {
		if f := s.Found[name]; f.Err != nil || f.Source != programs.SourceSystem || f.Version == "" {
			t.Errorf("%s: %+v", name, f)
		}
	}
	if err := s.Ready(); err != nil {
		t.Error(err)
	}
}
