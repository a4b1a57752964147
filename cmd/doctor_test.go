package cmd

import (
	"bytes"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/node"
	"github.com/theappliance/appliance/appliance/testtools"
	"github.com/theappliance/appliance/store"
)

// upConfig is the configuration up and doctor get from args (and their defaults).
func upConfig(t *testing.T, args ...string) UpConfig {
	t.Helper()
	var cfg UpConfig
	c := &cobra.Command{Use: "up"}
	upFlags(c, &cfg)
	if err := c.ParseFlags(append([]string{"--data-dir", appliancetest.TraversableTempDir(t) + "/data", "--listen", "127.0.0.1:0", "--kv-listen", "127.0.0.1:0", "--kv-rest-listen", "127.0.0.1:0",
		"--pg-ports", "39000-39009", "--no-install"}, args...)); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func report(t *testing.T, cfg UpConfig) (string, bool) {
	t.Helper()
	checks, _ := node.Doctor{Status: runningComponent}.Run(t.Context(), cfg)
	var out bytes.Buffer
	failed := printChecks(&out, checks)
	return out.String(), failed
}

func TestDoctorHealthy(t *testing.T) {
	t.Parallel()
	out, failed := report(t, upConfig(t))
	if failed {
		t.Fatalf("doctor fails on this machine:\n%s", out)
	}
	for _, want := range []string{"ok  postgres", "/usr/lib/postgresql/15/bin/postgres (system; postgres (PostgreSQL) 15.", "ok  pgbouncer",
		"ok  instance ports", "ok  certificate authority  created at first start", "(created by up)",
		"projects' memory and CPU held by cgroup v", "reflinks: previews, restores and base backups copy",
		"15: /usr/lib/postgresql/15/bin (server, pg_upgrade: upgrades to it by pg_upgrade; client tools: pg_dump"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// TestDoctorListsMajors: doctor's "postgres majors" check lists each installation with what it can do:
// Debian 12's 15 (pg_upgrade, client tools) and Debian 13's 17 given as --pg-dist 17=<its bin directory>
// (pg_upgrade, so upgrades to it run by pg_upgrade, and its client tools).
func TestDoctorListsMajors(t *testing.T) {
	t.Parallel()
	bin, err := testtools.DebianPostgres(t.Context(), 17)
	if err != nil {
		t.Fatal(err)
	}
	out, failed := report(t, upConfig(t, "--pg-dist", "17="+bin))
	if failed {
		t.Fatalf("doctor fails:\n%s", out)
	}
	tools := "client tools: pg_dump, pg_dumpall, pg_restore, pg_basebackup, pg_verifybackup, psql"
	for _, want := range []string{"ok  postgres majors",
		"15: /usr/lib/postgresql/15/bin (server, pg_upgrade: upgrades to it by pg_upgrade; " + tools + ")",
		"17: " + bin + " (server, pg_upgrade: upgrades to it by pg_upgrade; " + tools + ")"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	out, _ = report(t, upConfig(t, "--pg-dist", "17="+t.TempDir()))
	if !strings.Contains(out, "warn  postgres majors") || !strings.Contains(out, "holds no PostgreSQL 17 server") {
		t.Errorf("a --pg-dist directory without PostgreSQL:\n%s", out)
	}
}

// TestDoctorAndUpRefuseBadSettings: a --pg-bin without PostgreSQL and a busy listener each fail with the
// fix; up refuses to start on the same checks, naming them, before it listens or creates anything.
func TestDoctorAndUpRefuseBadSettings(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	empty := t.TempDir()
	cfg := upConfig(t, "--pg-bin", empty, "--listen", busy.Addr().String())
	out, failed := report(t, cfg)
	if !failed {
		t.Fatalf("doctor passes:\n%s", out)
	}
	for _, want := range []string{"FAIL  programs", "--pg-bin " + empty + " holds no PostgreSQL server", "fix: point --pg-bin",
		"FAIL  API listener", "cannot listen on " + busy.Addr().String(), "fix: stop what uses it, or choose another address with --listen"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	var stdout bytes.Buffer
	err = runUp(t.Context(), cfg, &stdout)
	if err == nil || !strings.Contains(err.Error(), "refusing to start") || !strings.Contains(err.Error(), "--pg-bin "+empty) ||
		!strings.Contains(err.Error(), "API listener") {
		t.Fatalf("up: %v", err)
	}
	if stdout.Len() > 0 {
		t.Errorf("up printed: %s", stdout.String())
	}
	if _, err := os.Stat(cfg.DataDir); err == nil {
		t.Error("up created its data directory before refusing to start")
	}
}

func TestDoctorCommandExitsNonZero(t *testing.T) {
	var out bytes.Buffer
	root.SetArgs([]string{"doctor", "--data-dir", t.TempDir(), "--pg-bin", t.TempDir(), "--listen", "127.0.0.1:0", "--kv-listen", "127.0.0.1:0", "--kv-rest-listen", "127.0.0.1:0"})
	root.SetOut(&out)
	t.Cleanup(func() { root.SetArgs(nil); root.SetOut(nil) })
	if err := root.ExecuteContext(t.Context()); err != errDoctorFailed {
		t.Fatalf("doctor: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "FAIL  programs") {
		t.Errorf("output:\n%s", out.String())
	}
}

// TestUpRefusesAnUntraversableDataDir: as root, a data directory below a directory the instances' OS user
// cannot enter (mode 0700, owned by root) makes doctor fail and up refuse to start, naming the directory
// and the fix; before, up started and the first provision failed.
func TestUpRefusesAnUntraversableDataDir(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("instances run as the current user when the appliance is not root: nothing to refuse")
	}
	closed := filepath.Join(t.TempDir(), "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := upConfig(t, "--data-dir", filepath.Join(closed, "data"))
	out, failed := report(t, cfg)
	if !failed || !strings.Contains(out, "FAIL  data directory access") || !strings.Contains(out, "cannot enter "+closed+" (mode 0700)") ||
		!strings.Contains(out, "fix: chmod o+x "+closed) {
		t.Fatalf("doctor:\n%s", out)
	}
	err := runUp(t.Context(), cfg, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "cannot enter "+closed) || !strings.Contains(err.Error(), "chmod o+x "+closed) {
		t.Fatalf("up: %v", err)
	}
}

// TestUpRefusesABadHeapFloor: --heap-floor-mb outside 0..1 TiB is refused before anything is set up.
func TestUpRefusesABadHeapFloor(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"-1", "1048577"} {
		cfg := upConfig(t, "--heap-floor-mb", v)
		err := runUp(t.Context(), cfg, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "--heap-floor-mb: "+v+" is not between 0 and 1048576") {
			t.Fatalf("--heap-floor-mb %s: %v", v, err)
		}
		if _, err := os.Stat(cfg.DataDir); !os.IsNotExist(err) {
			t.Fatalf("--heap-floor-mb %s: the data directory was made (%v)", v, err)
		}
	}
}

// TestDoctorBesideARunningAppliance: while an appliance runs on the data directory (its store is open),
// its listeners being in use is no failure.
func TestDoctorBesideARunningAppliance(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := upConfig(t, "--listen", busy.Addr().String())
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(filepath.Join(cfg.DataDir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out, failed := report(t, cfg)
	if row := lineWith(out, "API listener"); failed || !strings.HasPrefix(row, "ok") ||
		!strings.HasSuffix(row, busy.Addr().String()+" is in use: an appliance runs on this data directory") {
		t.Fatalf("doctor:\n%s", out)
	}
}

// TestDoctorShowsTheRunningStore: beside a running appliance, doctor's backup store line carries what its
// /status says of the store (read over HTTPS trusting the data directory's CA): operational, then — once
// a project's archive_command fails and the sampler saw it — a warning naming the failing project, with
// the WAL lag. Without a running appliance the line says the lag is shown while it runs.
func TestDoctorShowsTheRunningStore(t *testing.T) {
	storeCheck := func(cfg UpConfig, dataDir string) node.Check {
		cfg.DataDir = dataDir
		c, err := node.Doctor{Status: runningComponent}.One(t.Context(), cfg, "backup store")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := storeCheck(upConfig(t), t.TempDir()); c.Level != node.LevelOK || !strings.HasSuffix(c.Detail, "; the WAL lag is shown while the appliance runs") {
		t.Fatalf("without a running appliance: %+v", c)
	}
	e := setupCLI(t, cliSetupOpts{instances: true, metricsToken: "doctor-reads-status"})
	u, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	if !node.Running(e.env.Dir) {
		t.Fatal("the test's appliance does not count as running")
	}
	// Without the metrics token, /status tells the component's status only: doctor says what it needs.
	c := storeCheck(upConfig(t, "--data-dir", e.env.Dir, "--listen", u.Host), e.env.Dir)
	if c.Level != node.LevelOK || !strings.Contains(c.Detail, "; the running appliance: operational (the last upload and the WAL lag need up's --metrics-token") {
		t.Fatalf("beside a running appliance, without the token: %+v", c)
	}
	cfg := upConfig(t, "--data-dir", e.env.Dir, "--listen", u.Host, "--metrics-token", "doctor-reads-status")
	c = storeCheck(cfg, e.env.Dir)
	if c.Level != node.LevelOK || !strings.HasSuffix(c.Detail, "; the running appliance: "+filepath.Join(e.env.Dir, "backups")+" (this machine's disk); WAL archiving not sampled yet") {
		t.Fatalf("beside a running appliance: %+v", c)
	}

	// A project whose archive_command cannot write into its archive (the directory is root's now).
	p := e.login(t)
	id := e.activeProject(t, p, "doctor")
	wal := filepath.Join(e.env.Dir, "backups", id, "wal")
	if err := os.Chown(wal, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(wal, 0o755); err != nil {
		t.Fatal(err)
	}
	var xid, lsn string // a transaction's commit record, then the end of its segment: one to archive
	if err := e.svc.AdminQueryRow(t.Context(), id, "SELECT txid_current()::text", nil, &xid); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.AdminQueryRow(t.Context(), id, "SELECT pg_switch_wal()::text", nil, &lsn); err != nil {
		t.Fatal(err)
	}
	waitCLI(t, func() bool {
		var failed int64
		err := e.svc.AdminQueryRow(t.Context(), id, "SELECT failed_count FROM pg_stat_archiver", nil, &failed)
		return err == nil && failed > 0
	})
	if res, err := e.svc.Observe().Sample(t.Context()); err != nil || res.Failed != 0 {
		t.Fatalf("sample: %+v %v", res, err)
	}
	c = storeCheck(cfg, e.env.Dir)
	if c.Level != node.LevelWarn || !strings.Contains(c.Detail, "archiving fails for 1 of 1 projects: "+id) || !strings.Contains(c.Detail, "WAL lag ") ||
		!strings.Contains(c.Fix, "backup_store_unreachable") {
		t.Fatalf("with a project's archiving failing: %+v", c)
	}
	out := &bytes.Buffer{}
	printChecks(out, []node.Check{c})
	t.Logf("doctor's line:\n%s", out)
}

// TestDoctorObtainsPgDist: as up runs it (Install), the postgres majors check unpacks --pg-dist's
// tarball into <data-dir>/postgres/17 and lists it as server only; doctor alone says it is not unpacked.
func TestDoctorObtainsPgDist(t *testing.T) {
	t.Parallel()
	tgz, err := testtools.PostgresTarball(t.Context(), 17)
	if err != nil {
		t.Fatal(err)
	}
	cfg := upConfig(t, "--pg-dist", "17="+tgz)
	c, err := node.Doctor{}.One(t.Context(), cfg, "postgres majors")
	if err != nil {
		t.Fatal(err)
	}
	if c.Level != node.LevelWarn || !strings.Contains(c.Fix, "--pg-dist 17="+tgz+" is not unpacked yet") {
		t.Fatalf("doctor before up: %+v", c)
	}
	c, err = node.Doctor{Install: true}.One(t.Context(), cfg, "postgres majors")
	if err != nil {
		t.Fatal(err)
	}
	want := "17: " + filepath.Join(cfg.DataDir, "postgres", "17", "bin") + " (server only"
	if c.Level != node.LevelOK || !strings.Contains(c.Detail, "15: /usr/lib/postgresql/15/bin (server, pg_upgrade") || !strings.Contains(c.Detail, want) {
		t.Fatalf("as up runs it: %+v (want %q)", c, want)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "postgres", "17", "bin", "postgres")); err != nil {
		t.Fatal(err)
	}
}
