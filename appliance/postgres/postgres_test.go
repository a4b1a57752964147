package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/certs"

	"github.com/theappliance/appliance/appliance/daemon"
)

// These tests run real PostgreSQL 15 and PgBouncer processes. They fail (never skip) when the binaries are
// missing: CI installs postgresql-15 and pgbouncer.
//
// Directories: t.TempDir() is /tmp/<Test><n>/<nnn>, both levels root-owned 0700 when the tests run as root
// (as in CI); the instances run as the unprivileged OS user, which must traverse them, so testRoot makes
// both 0711 (the requirement documented on Instance).

type bundle struct {
	root string
	user *daemon.OSUser
	bin  Binaries
	ca   *certs.CA
}

func setup(t *testing.T) *bundle {
	t.Helper()
	t.Parallel()
	bin, err := FindBinaries("")
	if err != nil {
		t.Fatalf("PostgreSQL binaries are required (install postgresql-15): %v", err)
	}
	user, err := daemon.DefaultOSUser()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, d := range []string{root, filepath.Dir(root)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	ca, err := certs.LoadOrCreateCA(filepath.Join(root, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{root: root, user: user, bin: bin, ca: ca}
}

// freePort returns a port that was free a moment ago (callers retry on a collision).
func freePort(t *testing.T) int {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

const adminPassword = "admin-secret"

// newInstance initialises and starts an instance, removed at the end of the test.
func (b *bundle) newInstance(t *testing.T, name string, s Settings) *Instance {
	t.Helper()
	ctx := context.Background()
	inst := &Instance{ID: name, Dir: filepath.Join(b.root, name), ListenHost: "127.0.0.1", Bin: b.bin, User: b.user, Port: freePort(t)}
	certPEM, keyPEM, caPEM, err := b.ca.InstanceTLS("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := inst.Init(ctx, nil, InitOptions{AdminPassword: adminPassword, CertPEM: certPEM, KeyPEM: keyPEM, CAPEM: caPEM, Settings: s}); err != nil {
		t.Fatal(err)
	}
	initTime := time.Since(t0)
	t.Cleanup(func() {
		if err := inst.Remove(context.Background()); err != nil {
			t.Error(err)
		}
	})
	for attempt := 1; ; attempt++ {
		t0 = time.Now()
		err := inst.Start(ctx, nil)
		if err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(err.Error(), "could not bind") {
			t.Fatal(err)
		}
		t.Logf("port %d was taken, retrying: %v", inst.Port, err)
		inst.Port = freePort(t)
	}
	t.Logf("%s: initdb and configuration %v, start %v", name, initTime.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	return inst
}

func admin(t *testing.T, inst *Instance) *pgx.Conn {
	t.Helper()
	conn, err := inst.Admin(context.Background(), adminPassword)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func exec1(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func show(t *testing.T, conn *pgx.Conn, name string) string {
	t.Helper()
	var v string
	if err := conn.QueryRow(context.Background(), "SHOW "+name).Scan(&v); err != nil {
		t.Fatalf("SHOW %s: %v", name, err)
	}
	return v
}

// customerURL is what a customer gets: TLS with the CA verified.
func (b *bundle) customerURL(user, password string, port int, db, extra string) string {
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=verify-full&sslrootcert=%s&connect_timeout=10%s",
		user, password, port, db, b.ca.CertPath(), extra)
}

func TestInstanceLifecycle(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	inst := b.newInstance(t, "life", Settings{})
	conn := admin(t, inst)

	if got := show(t, conn, "shared_preload_libraries"); !strings.Contains(got, "pg_stat_statements") {
		t.Errorf("shared_preload_libraries = %q, want pg_stat_statements", got)
	}
	if b.bin.HasLibrary("pg_qualstats") && !strings.Contains(show(t, conn, "shared_preload_libraries"), "pg_qualstats") {
		t.Error("pg_qualstats is installed but not preloaded")
	}
	for name, want := range map[string]string{"ssl": "on", "password_encryption": "scram-sha-256",
		"log_destination": "jsonlog", "logging_collector": "on", "archive_mode": "on", "wal_level": "logical",
		"server_encoding": "UTF8", "lc_collate": "C.UTF-8", "data_checksums": "on", "cluster_name": "life",
		"log_timezone": "UTC", "unix_socket_directories": "", "listen_addresses": "127.0.0.1"} {
		if got := show(t, conn, name); got != want {
			t.Errorf("SHOW %s = %q, want %q", name, got, want)
		}
	}
	exec1(t, conn, "CREATE EXTENSION pg_stat_statements SCHEMA public")
	exec1(t, conn, "SELECT count(*) FROM public.pg_stat_statements")

	exec1(t, conn, "CREATE ROLE app LOGIN PASSWORD 'app-secret'")
	exec1(t, conn, "CREATE DATABASE appdb OWNER app")

	// A customer over TLS, verifying the server's certificate with the CA.
	app, err := pgx.Connect(ctx, b.customerURL("app", "app-secret", inst.Port, "appdb", ""))
	if err != nil {
		t.Fatalf("customer over TLS: %v", err)
	}
	var ssl bool
	var user string
	if err := app.QueryRow(ctx, "SELECT ssl, current_user FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl, &user); err != nil {
		t.Fatal(err)
	}
	if !ssl || user != "app" {
		t.Errorf("ssl=%v user=%q", ssl, user)
	}
	checkAdminSearchPath(t, inst, app)
	app.Close(ctx)

	// No plaintext for customers, no wrong passwords, no admin over TLS from elsewhere than loopback rules.
	plain := fmt.Sprintf("postgres://app:app-secret@127.0.0.1:%d/appdb?sslmode=disable", inst.Port)
	if c, err := pgx.Connect(ctx, plain); err == nil {
		c.Close(ctx)
		t.Error("a customer connected without TLS")
	} else if !strings.Contains(err.Error(), "no encryption") {
		t.Errorf("plaintext refused with an unexpected error: %v", err)
	}
	if c, err := pgx.Connect(ctx, b.customerURL("app", "wrong", inst.Port, "appdb", "")); err == nil {
		c.Close(ctx)
		t.Error("a wrong password was accepted")
	}

	// Files: the directory belongs to the user, the key is private, the JSON log exists.
	for path, mode := range map[string]os.FileMode{inst.Dir: 0o700 | os.ModeDir, inst.KeyFile(): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != mode || fi.Sys().(*syscall.Stat_t).Uid != b.user.UID {
			t.Errorf("%s: mode %v uid %d, want %v uid %d", path, fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid, mode, b.user.UID)
		}
	}
	if logs, _ := filepath.Glob(filepath.Join(inst.LogDir(), "*.json")); len(logs) == 0 {
		t.Error("no JSON log in", inst.LogDir())
	}
	if fileExists(filepath.Join(inst.Dir, "initdb.pw")) {
		t.Error("the password file was left behind")
	}
	if err := inst.Init(ctx, nil, InitOptions{AdminPassword: "x"}); !errors.Is(err, ErrInitialized) {
		t.Errorf("second Init: %v, want ErrInitialized", err)
	}

	// Stop and start again, idempotently.
	if err := inst.Stop(ctx, nil, daemon.StopFast); err != nil {
		t.Fatal(err)
	}
	if err := inst.Stop(ctx, nil, daemon.StopFast); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if _, running, err := inst.Status(); running || err != nil {
		t.Errorf("after Stop: running=%v err=%v", running, err)
	}
	if err := inst.Reload(ctx, nil); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Reload of a stopped instance: %v", err)
	}
	t0 := time.Now()
	if err := inst.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart from stopped: %v", time.Since(t0).Round(time.Millisecond))
}

// checkAdminSearchPath: the owner of appdb (app, connected) makes its public schema the first of the
// database's search_path and overloads current_setting(text) there; the admin sessions in appdb keep
// AdminSearchPath (after RESET and DISCARD ALL too, and on a connection made with their configuration) and
// run the catalog's function, while app's next session runs its own.
func checkAdminSearchPath(t *testing.T, inst *Instance, app *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	exec1(t, app, "ALTER DATABASE appdb SET search_path = public, pg_catalog")
	exec1(t, app, "CREATE FUNCTION public.current_setting(text) RETURNS text LANGUAGE sql AS $$ SELECT 'overloaded'::text $$")
	own, err := pgx.ConnectConfig(ctx, app.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close(ctx)
	const probe = "SELECT current_setting('search_path'), current_setting('server_version_num')"
	var path, version string
	if err := own.QueryRow(ctx, probe).Scan(&path, &version); err != nil || version != "overloaded" {
		t.Fatalf("the database owner's session: search_path %q, current_setting() gave %q (%v): the overload is not in its way", path, version, err)
	}

	check := func(what string, conn *pgx.Conn) {
		t.Helper()
		// Simple protocol: DISCARD ALL drops the session's prepared statements.
		if err := conn.QueryRow(ctx, probe, pgx.QueryExecModeSimpleProtocol).Scan(&path, &version); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if path != AdminSearchPath || version == "overloaded" {
			t.Errorf("%s: search_path %q, current_setting() gave %q", what, path, version)
		}
	}
	adm, err := inst.Connect(ctx, adminPassword, "appdb")
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close(ctx)
	check("admin session", adm)
	exec1(t, adm, "RESET search_path")
	check("after RESET", adm)
	exec1(t, adm, "DISCARD ALL")
	check("after DISCARD ALL", adm)
	derived, err := pgx.ConnectConfig(ctx, adm.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer derived.Close(ctx)
	check("a connection with the admin session's configuration", derived)

	// The extensions' session: pinned, but its reset value is the database's default (what postgis_topology's
	// script appends its schema to and makes the database's default).
	ext, err := inst.ConnectForExtensions(ctx, adminPassword, "appdb")
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Close(ctx)
	check("extensions' session", ext)
	var reset string
	if err := ext.QueryRow(ctx, "SELECT reset_val FROM pg_settings WHERE name = 'search_path'").Scan(&reset); err != nil || reset != "public, pg_catalog" {
		t.Errorf("extensions' session: reset search_path %q (%v), want the database's", reset, err)
	}
	exec1(t, app, "DROP FUNCTION public.current_setting(text)")
	exec1(t, app, "ALTER DATABASE appdb RESET search_path")
}

func TestWALArchiving(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	inst := b.newInstance(t, "archive", Settings{})
	conn := admin(t, inst)
	exec1(t, conn, "CREATE TABLE public.t AS SELECT g FROM generate_series(1, 1000) g")
	var segment string
	if err := conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_switch_wal())").Scan(&segment); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := daemon.WaitFor(wctx, 20*time.Millisecond, func() (bool, error) {
		return fileExists(filepath.Join(inst.ArchiveDir(), segment)), nil
	}); err != nil {
		var failed int
		_ = conn.QueryRow(ctx, "SELECT failed_count FROM pg_stat_archiver").Scan(&failed)
		t.Fatalf("segment %s not archived (failed_count %d): %v", segment, failed, err)
	}
}

func TestSettingsChanges(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	s := Settings{MaxConnections: 20}
	inst := b.newInstance(t, "settings", s)
	conn := admin(t, inst)
	if got := show(t, conn, "max_connections"); got != "20" {
		t.Fatalf("max_connections = %s", got)
	}
	if got := show(t, conn, "statement_timeout"); got != "0" {
		t.Fatalf("statement_timeout = %s", got)
	}
	conn.Close(ctx)

	if a, err := inst.WriteSettings(s); err != nil || a != ActionNone {
		t.Errorf("same settings: %v %v, want none", a, err)
	}

	s.StatementTimeout = 1500 * time.Millisecond
	a, err := inst.WriteSettings(s)
	if err != nil || a != ActionReload {
		t.Fatalf("statement_timeout: %v %v, want reload", a, err)
	}
	pid, _, _ := inst.Status()
	if err := inst.Apply(ctx, nil, a); err != nil {
		t.Fatal(err)
	}
	conn = admin(t, inst)
	if got := show(t, conn, "statement_timeout"); got != "1500ms" {
		t.Errorf("statement_timeout after reload = %s", got)
	}
	if p, _, _ := inst.Status(); p != pid {
		t.Errorf("a reload restarted the postmaster (%d -> %d)", pid, p)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_sleep(3)"); err == nil || !strings.Contains(err.Error(), "statement timeout") {
		t.Errorf("pg_sleep(3) with a 1.5 s statement_timeout: %v", err)
	}

	s.MaxConnections = 30
	if a, err = inst.WriteSettings(s); err != nil || a != ActionRestart {
		t.Fatalf("max_connections: %v %v, want restart", a, err)
	}
	// The server agrees, after a reload, that it needs a restart.
	if err := inst.Reload(ctx, nil); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := daemon.WaitFor(wctx, 20*time.Millisecond, func() (bool, error) {
		names, err := PendingRestart(ctx, conn)
		return len(names) == 1 && names[0] == "max_connections", err
	}); err != nil {
		names, _ := PendingRestart(ctx, conn)
		t.Errorf("pending_restart = %v: %v", names, err)
	}
	conn.Close(ctx)
	if err := inst.Apply(ctx, nil, a); err != nil {
		t.Fatal(err)
	}
	conn = admin(t, inst)
	if got := show(t, conn, "max_connections"); got != "30" {
		t.Errorf("max_connections after restart = %s", got)
	}
	if got, err := inst.ReadSettings(); err != nil || got.MaxConnections != 30 || got.StatementTimeout != 1500*time.Millisecond {
		t.Errorf("ReadSettings = %+v, %v", got, err)
	}
	if _, err := inst.WriteSettings(Settings{SharedPreloadLibraries: []string{"no_such_library"}}); err == nil {
		t.Error("a missing library was accepted")
	}
}

func TestStatusAdoption(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	first := b.newInstance(t, "adopt", Settings{})
	pid, running, err := first.Status()
	if err != nil || !running || pid == 0 {
		t.Fatalf("Status = %d %v %v", pid, running, err)
	}
	// The appliance restarts: a new value for the same directory finds the same postmaster.
	again := &Instance{ID: first.ID, Dir: first.Dir, ListenHost: first.ListenHost, Port: first.Port, Bin: b.bin, User: b.user}
	if p, running, err := again.Status(); p != pid || !running || err != nil {
		t.Fatalf("adopted Status = %d %v %v, want %d true", p, running, err, pid)
	}
	if err := again.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := again.Status(); p != pid {
		t.Errorf("Start of a running instance replaced it: %d -> %d", pid, p)
	}
	admin(t, again)
}

func TestStatusIgnoresOtherProcesses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	inst := &Instance{ID: "fake", Dir: dir}
	if err := os.MkdirAll(inst.DataDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	// A live process that is not a postmaster of this directory holds the pid (a recycled pid).
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(inst.DataDir(), "postmaster.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(sleep.Process.Pid)+"\n"+inst.DataDir()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, running, err := inst.Status(); running || err != nil {
		t.Errorf("a sleep process was taken for the postmaster: %v %v", running, err)
	}
	// The same pid as a zombie (killed, not yet reaped).
	_ = sleep.Process.Kill()
	if err := daemon.WaitFor(context.Background(), 10*time.Millisecond, func() (bool, error) {
		return daemon.ReadProcess(sleep.Process.Pid) == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, running, _ := inst.Status(); running {
		t.Error("a zombie was taken for the postmaster")
	}
	_ = sleep.Wait()
	if err := os.WriteFile(pidFile, []byte("not a pid\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := inst.Status(); err == nil {
		t.Error("a garbled pid file gave no error")
	}
}

func TestRemove(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	inst := b.newInstance(t, "remove", Settings{})
	conn := admin(t, inst) // a backend that must go too
	pid, _, _ := inst.Status()
	if len(postgresIn(inst.DataDir(), b.user.UID)) < 2 {
		t.Fatal("expected a postmaster and its children")
	}
	if err := inst.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if procs := postgresIn(inst.Dir, b.user.UID); len(procs) > 0 {
		t.Errorf("%d processes left, first %v", len(procs), procs[0].Args)
	}
	if daemon.ReadProcess(pid) != nil {
		t.Errorf("postmaster %d still runs", pid)
	}
	if _, err := os.Stat(inst.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory left: %v", err)
	}
	if _, running, err := inst.Status(); running || err != nil {
		t.Errorf("Status after Remove: %v %v", running, err)
	}
	if err := inst.Remove(ctx); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	_ = conn
}

// eventLog collects supervisor events for tests to wait on.
type eventLog struct {
	mu     sync.Mutex
	events []daemon.Event
	ch     chan struct{}
}

func newEventLog() *eventLog { return &eventLog{ch: make(chan struct{}, 1000)} }

func (l *eventLog) add(e daemon.Event) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
	l.ch <- struct{}{}
}

// wait returns the first event of kind for key (after skip of them), waiting up to d.
func (l *eventLog) wait(t *testing.T, key string, kind daemon.EventKind, d time.Duration) daemon.Event {
	t.Helper()
	deadline := time.After(d)
	for {
		l.mu.Lock()
		for _, e := range l.events {
			if e.Key == key && e.Kind == kind {
				l.mu.Unlock()
				return e
			}
		}
		all := fmt.Sprint(l.events)
		l.mu.Unlock()
		select {
		case <-l.ch:
		case <-deadline:
			t.Fatalf("no %s event for %s within %v; events: %s", kind, key, d, all)
		}
	}
}

// waitN waits for the n-th event of kind for key, up to d.
func (l *eventLog) waitN(t *testing.T, key string, kind daemon.EventKind, n int, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		l.mu.Lock()
		seen := 0
		for _, e := range l.events {
			if e.Key == key && e.Kind == kind {
				seen++
			}
		}
		all := fmt.Sprint(l.events)
		l.mu.Unlock()
		if seen >= n {
			return
		}
		select {
		case <-l.ch:
		case <-deadline:
			t.Fatalf("%d %s events for %s within %v, want %d; events: %s", seen, kind, key, d, n, all)
		}
	}
}

func TestSupervisorRestartsKilledPostmaster(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	inst := b.newInstance(t, "supervised", Settings{})
	events := newEventLog()
	sup := daemon.NewSupervisor()
	sup.OnEvent, sup.Interval, sup.MinBackoff = events.add, 100*time.Millisecond, 100*time.Millisecond
	t.Cleanup(func() { _ = sup.Stop(context.Background()) })
	if err := sup.Watch("inst", inst); err != nil {
		t.Fatal(err)
	}
	pid, _, _ := inst.Status()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := daemon.WaitFor(wctx, 20*time.Millisecond, func() (bool, error) {
		status, _ := sup.Health(ctx)
		return status == "operational", nil
	}); err != nil {
		_, msg := sup.Health(ctx)
		t.Fatalf("health: %s: %v", msg, err)
	}

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	died := events.wait(t, "inst", daemon.EventDied, 10*time.Second)
	if died.PID != pid {
		t.Errorf("died event pid %d, want %d", died.PID, pid)
	}
	restarted := events.wait(t, "inst", daemon.EventRestarted, 60*time.Second)
	t.Logf("kill -9 to restarted: %v", time.Since(t0).Round(time.Millisecond))
	if restarted.PID == pid || restarted.PID == 0 {
		t.Errorf("restarted pid %d (old %d)", restarted.PID, pid)
	}
	if p, running, _ := inst.Status(); !running || p != restarted.PID {
		t.Errorf("Status %d %v after restart to %d", p, running, restarted.PID)
	}
	conn := admin(t, inst)
	exec1(t, conn, "SELECT 1")
	conn.Close(ctx)
	if status, msg := sup.Health(ctx); status != "operational" || !strings.Contains(msg, "1 of 1") {
		t.Errorf("health %s: %s", status, msg)
	}

	// Stop stops what it watches.
	if err := sup.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, running, _ := inst.Status(); running {
		t.Error("instance still runs after the supervisor stopped")
	}
	if err := sup.Watch("again", inst); !errors.Is(err, daemon.ErrSupervisorStopped) {
		t.Errorf("Watch after Stop: %v", err)
	}
}

// fakeProcess fails to start a number of times.
type fakeProcess struct {
	mu       sync.Mutex
	running  bool
	failures int
	starts   []time.Time
}

func (f *fakeProcess) Status() (int, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return 1, f.running, nil
}

func (f *fakeProcess) Start(context.Context, daemon.ExecFunc) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.starts = append(f.starts, time.Now())
	if f.failures > 0 {
		f.failures--
		return errors.New("boom")
	}
	f.running = true
	return nil
}

func (f *fakeProcess) Stop(context.Context, daemon.ExecFunc, daemon.StopMode) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running = false
	return nil
}

func TestSupervisorBackoff(t *testing.T) {
	t.Parallel()
	events := newEventLog()
	sup := daemon.NewSupervisor()
	sup.OnEvent, sup.Interval, sup.MinBackoff, sup.MaxBackoff = events.add, 5*time.Millisecond, 40*time.Millisecond, 160*time.Millisecond
	f := &fakeProcess{failures: 4}
	if err := sup.Watch("f", f); err != nil {
		t.Fatal(err)
	}
	events.wait(t, "f", daemon.EventRestarted, 10*time.Second)
	f.mu.Lock()
	starts := append([]time.Time(nil), f.starts...)
	f.mu.Unlock()
	if len(starts) != 5 {
		t.Fatalf("%d start attempts, want 5", len(starts))
	}
	// Waits between attempts: at least 40, 80, 160, 160 ms.
	want := []time.Duration{40, 80, 160, 160}
	for i, w := range want {
		if gap := starts[i+1].Sub(starts[i]); gap < w*time.Millisecond {
			t.Errorf("attempt %d came %v after the previous one, want >= %v", i+2, gap, w*time.Millisecond)
		}
	}
	events.mu.Lock()
	failed := 0
	for _, e := range events.events {
		if e.Kind == daemon.EventRestartFailed {
			failed++
		}
	}
	events.mu.Unlock()
	if failed != 4 {
		t.Errorf("%d restart_failed events, want 4", failed)
	}
	sup.Unwatch("f")
	if err := sup.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, running, _ := f.Status(); !running {
		t.Error("Stop stopped an unwatched process")
	}
}

// A process that ran healthy for a while and is then killed is started again at once, every time: the
// backoff is for crash loops, not for a healthy process killed now and then (F-L5).
func TestSupervisorBackoffResetsAfterHealthyRun(t *testing.T) {
	t.Parallel()
	events := newEventLog()
	sup := daemon.NewSupervisor()
	// Without the reset, the second death would wait MinBackoff (a minute), the third two...
	sup.OnEvent, sup.Interval, sup.MinBackoff, sup.MaxBackoff = events.add, 5*time.Millisecond, time.Minute, time.Hour
	sup.HealthyAfter = 50 * time.Millisecond
	t.Cleanup(func() { _ = sup.Stop(context.Background()) })
	f := &fakeProcess{running: true}
	if err := sup.Watch("f", f); err != nil {
		t.Fatal(err)
	}
	for kill := 1; kill <= 4; kill++ {
		time.Sleep(sup.HealthyAfter) // it runs healthy this long (not synchronisation: the duration is the subject)
		f.mu.Lock()
		f.running = false
		f.mu.Unlock()
		// The restart comes at once; 30 s is only the test's patience (the backoff would be >= 1 min).
		events.waitN(t, "f", daemon.EventRestarted, kill, 30*time.Second)
	}
}

func TestPooler(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	if _, err := FindPgBouncer(""); err != nil {
		t.Fatalf("PgBouncer is required (install pgbouncer): %v", err)
	}
	const maxConns = 20
	inst := b.newInstance(t, "pooled", Settings{MaxConnections: maxConns})
	conn := admin(t, inst)
	exec1(t, conn, "CREATE ROLE app LOGIN PASSWORD 'app-secret'")
	exec1(t, conn, "CREATE DATABASE appdb OWNER app")
	verifiers, err := ScramVerifiers(ctx, conn, "app")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ScramVerifiers(ctx, conn, "nobody"); !errors.Is(err, ErrNoRole) {
		t.Errorf("ScramVerifiers of a missing role: %v", err)
	}

	pool := &Pooler{ID: "pooled", Dir: filepath.Join(b.root, "pooled-bouncer"), Port: freePort(t), TargetPort: inst.Port,
		DBName: "appdb", PoolSize: PoolSizeFor(maxConns), CertFile: inst.CertFile(), KeyFile: inst.KeyFile(),
		CAFile: inst.CAFile(), User: b.user}
	if err := pool.WriteUsers(verifiers); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgbouncer.log:\n%s", daemon.Tail(pool.LogFile(), 4000))
		}
		if err := pool.Remove(context.Background()); err != nil {
			t.Error(err)
		}
	})
	for attempt := 1; ; attempt++ {
		t0 := time.Now()
		err := pool.Start(ctx, nil)
		if err == nil {
			t.Logf("pgbouncer start: %v", time.Since(t0).Round(time.Millisecond))
			break
		}
		if attempt == 3 || !strings.Contains(err.Error(), "listen") {
			t.Fatal(err)
		}
		t.Logf("port %d was taken, retrying: %v", pool.Port, err)
		pool.Port = freePort(t)
	}
	pid, running, err := pool.Status()
	if !running || err != nil {
		t.Fatalf("pooler Status: %d %v %v", pid, running, err)
	}

	// SCRAM through the pooler; prepared statements are not supported by PgBouncer 1.18 in transaction
	// mode, hence the simple protocol.
	const simple = "&default_query_exec_mode=simple_protocol"
	url := b.customerURL("app", "app-secret", pool.Port, "appdb", simple)
	if c, err := pgx.Connect(ctx, b.customerURL("app", "wrong", pool.Port, "appdb", simple)); err == nil {
		c.Close(ctx)
		t.Error("the pooler accepted a wrong password")
	}
	plain := fmt.Sprintf("postgres://app:app-secret@127.0.0.1:%d/appdb?sslmode=disable%s", pool.Port, simple)
	if c, err := pgx.Connect(ctx, plain); err == nil {
		c.Close(ctx)
		t.Error("the pooler accepted a client without TLS")
	}

	// Many more clients than max_connections, all connected at once, each running a transaction.
	const clients = 100
	conns := make([]*pgx.Conn, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	t0 := time.Now()
	for n := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conns[n], errs[n] = pgx.Connect(ctx, url)
		}()
	}
	wg.Wait()
	t.Logf("%d TLS+SCRAM connections through the pooler: %v", clients, time.Since(t0).Round(time.Millisecond))
	for n, err := range errs {
		if err != nil {
			t.Fatalf("client %d: %v", n, err)
		}
	}
	defer func() {
		for _, c := range conns {
			c.Close(ctx)
		}
	}()
	for n, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[n] = pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
				var one int
				if err := tx.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
					return err
				}
				if one != 1 {
					return fmt.Errorf("SELECT 1 = %d", one)
				}
				return nil
			})
		}()
	}
	wg.Wait()
	for n, err := range errs {
		if err != nil {
			t.Errorf("client %d transaction: %v", n, err)
		}
	}
	var servers int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE usename = 'app'").Scan(&servers); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d clients served by %d server connections (max_connections %d)", clients, servers, maxConns)
	if servers == 0 || servers > PoolSizeFor(maxConns) {
		t.Errorf("%d server connections, want 1..%d", servers, PoolSizeFor(maxConns))
	}
	var tls bool
	if err := conn.QueryRow(ctx, "SELECT bool_and(s.ssl) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.usename = 'app'").Scan(&tls); err != nil || !tls {
		t.Errorf("pooler to instance connections over TLS: %v %v", tls, err)
	}

	// A password change reaches the pooler with new verifiers and a reload.
	exec1(t, conn, "ALTER ROLE app PASSWORD 'new-secret'")
	if verifiers, err = ScramVerifiers(ctx, conn, "app"); err != nil {
		t.Fatal(err)
	}
	if err := pool.WriteUsers(verifiers); err != nil {
		t.Fatal(err)
	}
	if err := pool.Reload(); err != nil {
		t.Fatal(err)
	}
	newURL := b.customerURL("app", "new-secret", pool.Port, "appdb", simple)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var lastErr error
	if err := daemon.WaitFor(wctx, 20*time.Millisecond, func() (bool, error) {
		c, err := pgx.Connect(ctx, newURL)
		if err != nil {
			lastErr = err
			return false, nil
		}
		defer c.Close(ctx)
		_, lastErr = c.Exec(ctx, "SELECT 1")
		return lastErr == nil, nil
	}); err != nil {
		log, _ := os.ReadFile(pool.LogFile())
		t.Fatalf("new password through the pooler after reload: %v: %v\n%s", err, lastErr, log[max(0, len(log)-3000):])
	}

	// The supervisor brings a killed pooler back.
	events := newEventLog()
	sup := daemon.NewSupervisor()
	sup.OnEvent, sup.Interval, sup.MinBackoff = events.add, 100*time.Millisecond, 100*time.Millisecond
	t.Cleanup(func() { _ = sup.Stop(context.Background()) })
	if err := sup.Watch("pool", pool); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	events.wait(t, "pool", daemon.EventDied, 10*time.Second)
	e := events.wait(t, "pool", daemon.EventRestarted, 30*time.Second)
	if e.PID == pid {
		t.Errorf("restarted with the old pid %d", pid)
	}
	c, err := pgx.Connect(ctx, newURL)
	if err != nil {
		t.Fatalf("through the restarted pooler: %v", err)
	}
	c.Close(ctx)
	sup.Unwatch("pool")
	if err := pool.Stop(ctx, nil, daemon.StopFast); err != nil {
		t.Fatal(err)
	}
	if _, running, _ := pool.Status(); running {
		t.Error("pooler runs after Stop")
	}
}

func TestOSUser(t *testing.T) {
	t.Parallel()
	u, err := daemon.DefaultOSUser()
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		if int(u.UID) != os.Geteuid() {
			t.Errorf("not root: got uid %d, want the current %d", u.UID, os.Geteuid())
		}
		return
	}
	if u.UID == 0 || (u.Name != daemon.DebianOSUser && u.Name != daemon.ApplianceOSUser) {
		t.Errorf("DefaultOSUser = %+v", u)
	}
	out, err := u.Command("id", "-u").Output()
	if err != nil || strings.TrimSpace(string(out)) != strconv.Itoa(int(u.UID)) {
		t.Errorf("command as %s: id -u = %q, %v", u.Name, out, err)
	}
	if _, err := daemon.EnsureOSUser("-rf"); err == nil {
		t.Error("an invalid user name was accepted")
	}
	if _, err := daemon.EnsureOSUser("root"); err == nil {
		t.Error("root was accepted")
	}
	// Creation of a missing user (then removed).
	name := fmt.Sprintf("appl-test-%d", os.Getpid()%100000)
	created, err := daemon.EnsureOSUser(name)
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Command("userdel", name).Run()
	if created.UID == 0 || created.Name != name {
		t.Errorf("created %+v", created)
	}
	again, err := daemon.EnsureOSUser(name)
	if err != nil || again.UID != created.UID {
		t.Errorf("second EnsureOSUser: %+v %v", again, err)
	}
}

func TestCheckReachable(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		if err := (&daemon.OSUser{}).CheckReachable("/nonexistent/x"); err != nil {
			t.Error(err)
		}
		return
	}
	u, err := daemon.DefaultOSUser()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := os.Chmod(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := u.CheckReachable(filepath.Join(root, "inst")); err == nil || !strings.Contains(err.Error(), "0711") {
		t.Errorf("a 0700 root-owned parent: %v", err)
	}
}

func TestCopyArchiveCommand(t *testing.T) {
	t.Parallel()
	got, err := CopyArchiveCommand("/data/a 100%/wal")
	if err != nil {
		t.Fatal(err)
	}
	if want := "if test -f '/data/a 100%%/wal/%f'; then cmp -s %p '/data/a 100%%/wal/%f'; else cp %p '/data/a 100%%/wal/.%f.tmp' && mv '/data/a 100%%/wal/.%f.tmp' '/data/a 100%%/wal/%f'; fi"; got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
	// Run by sh as PostgreSQL runs it (%p, %f and %% replaced): a new segment is copied, the same bytes
	// again succeed, other bytes under its name fail and leave the archived segment as it was.
	dir := filepath.Join(t.TempDir(), "a 100%")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd, err := CopyArchiveCommand(dir)
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "000000010000000000000001")
	run := func(content string) error {
		if err := os.WriteFile(src, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		line := strings.NewReplacer("%p", src, "%f", filepath.Base(src), "%%", "%").Replace(cmd)
		return exec.Command("sh", "-c", line).Run()
	}
	archived := filepath.Join(dir, filepath.Base(src))
	if err := run("segment one"); err != nil {
		t.Fatalf("a new segment: %v", err)
	}
	if err := run("segment one"); err != nil {
		t.Errorf("the same segment archived again: %v", err)
	}
	if err := run("other bytes"); err == nil {
		t.Error("other bytes under an archived segment's name were accepted")
	}
	if b, err := os.ReadFile(archived); err != nil || string(b) != "segment one" {
		t.Errorf("the archived segment: %q %v", b, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
	if _, err := CopyArchiveCommand("/data/it's"); err == nil {
		t.Error("a quote was accepted")
	}
	if q := confQuote(`it's \ok`); q != `'it''s \\ok'` {
		t.Errorf("confQuote = %s", q)
	}
}

func TestSettingsChange(t *testing.T) {
	t.Parallel()
	base := Settings{MaxConnections: 20, SharedPreloadLibraries: []string{"pg_stat_statements"}, ArchiveCommand: "x"}
	for _, tc := range []struct {
		name string
		edit func(*Settings)
		want Action
	}{
		{"same", func(*Settings) {}, ActionNone},
		{"max_connections", func(s *Settings) { s.MaxConnections = 30 }, ActionRestart},
		{"libraries", func(s *Settings) { s.SharedPreloadLibraries = []string{"pg_stat_statements", "pg_qualstats"} }, ActionRestart},
		{"statement_timeout", func(s *Settings) { s.StatementTimeout = time.Second }, ActionReload},
		{"idle timeout", func(s *Settings) { s.IdleInTransactionSessionTimeout = time.Minute }, ActionReload},
		{"archive_command", func(s *Settings) { s.ArchiveCommand = "y" }, ActionReload},
	} {
		s := base
		s.SharedPreloadLibraries = append([]string(nil), base.SharedPreloadLibraries...)
		tc.edit(&s)
		if got := s.Change(base); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestStartErrorSaysWhy(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	inst := b.newInstance(t, "taken", Settings{})
	if err := inst.Stop(ctx, nil, daemon.StopFast); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", inst.Port))
	if err != nil {
		t.Fatal(err)
	}
	err = inst.Start(ctx, nil)
	ln.Close()
	if err == nil || !strings.Contains(err.Error(), "could not bind") || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("Start on a taken port: %v", err)
	}
	t.Log(err)
	if err := inst.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// Locked holds the lifecycle lock across a stop and a start: another value's Start or Stop (the
// supervisor's, a restarted appliance's) cannot run in between, while ops can.
func TestLockedExcludesLifecycle(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	inst := b.newInstance(t, "locked", Settings{})
	other := &Instance{ID: inst.ID, Dir: inst.Dir, ListenHost: inst.ListenHost, Port: inst.Port, Bin: b.bin, User: b.user}
	done, cancel := context.WithCancel(ctx)
	cancel() // lock attempts give up at once instead of waiting
	err := inst.Locked(ctx, func(ops LockedOps) error {
		if err := ops.Stop(ctx, nil, daemon.StopFast); err != nil {
			return err
		}
		if _, running, _ := inst.Status(); running {
			return errors.New("still running after ops.Stop")
		}
		if err := other.Start(done, nil); err == nil || !strings.Contains(err.Error(), "lock "+inst.Dir) {
			return fmt.Errorf("another Start was not held off by the lock: %v", err)
		}
		if _, running, _ := inst.Status(); running {
			return errors.New("another Start started it while the lock was held")
		}
		if err := other.Stop(done, nil, daemon.StopFast); err == nil || !strings.Contains(err.Error(), "lock "+inst.Dir) {
			return fmt.Errorf("another Stop was not held off by the lock: %v", err)
		}
		return ops.Start(ctx, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, running, _ := inst.Status(); !running {
		t.Fatal("not running after ops.Start")
	}
	admin(t, inst)
	if err := other.Stop(ctx, nil, daemon.StopFast); err != nil { // the lock is free again
		t.Fatal(err)
	}
}

// MarkInitialized makes a directory assembled without Init startable, and Init then refuses it.
func TestMarkInitialized(t *testing.T) {
	b := setup(t)
	inst := &Instance{ID: "marked", Dir: filepath.Join(b.root, "marked"), Bin: b.bin, User: b.user, Port: freePort(t)}
	if err := b.user.Mkdir(inst.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if inst.Initialized() {
		t.Fatal("initialized before the marker")
	}
	if err := inst.Start(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "not initialized") {
		t.Fatalf("Start of an unmarked directory: %v", err)
	}
	if err := inst.MarkInitialized(); err != nil {
		t.Fatal(err)
	}
	if !inst.Initialized() {
		t.Fatal("not initialized after MarkInitialized")
	}
	if err := inst.Init(context.Background(), nil, InitOptions{}); !errors.Is(err, ErrInitialized) {
		t.Fatalf("Init of a marked directory: %v", err)
	}
	fi, err := os.Stat(filepath.Join(inst.Dir, "initialized"))
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != b.user.UID {
		t.Fatalf("marker %v %v", fi, err)
	}
}

// TestRefusedSettings: a settings line the server cannot apply is caught after a reload
// (pg_file_settings), and a restart with such a file does not leave the instance down: it starts with the
// last settings it ran with and says why.
func TestRefusedSettings(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	inst := b.newInstance(t, "refused", Settings{MaxConnections: 20})
	conn, err := inst.Admin(ctx, adminPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := inst.CheckReloaded(ctx, conn); err != nil {
		t.Fatalf("good settings: %v", err)
	}
	path := filepath.Join(inst.DataDir(), settingsConf)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// What an older appliance wrote for "25d": more milliseconds than PostgreSQL's int allows.
	bad := append(append([]byte{}, good...), []byte("statement_timeout = 2160000000\n")...)
	if err := inst.User.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := inst.Reload(ctx, nil); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	daemon.WaitFor(wctx, 20*time.Millisecond, func() (bool, error) { // a reload is asynchronous
		err = inst.CheckReloaded(ctx, conn)
		return err != nil, nil
	})
	if err == nil || !strings.Contains(err.Error(), "statement_timeout") {
		t.Fatalf("CheckReloaded after a bad reload: %v", err)
	}
	if _, err := (Settings{StatementTimeout: 25 * 24 * time.Hour}).normalize(inst); err == nil {
		t.Error("normalize accepts a timeout PostgreSQL refuses")
	}
	conn.Close(ctx)
	err = inst.Restart(ctx, nil)
	if !errors.Is(err, ErrSettingsRefused) || !strings.Contains(err.Error(), "statement_timeout") {
		t.Fatalf("restart with a refused file: %v", err)
	}
	if _, running, _ := inst.Status(); !running {
		t.Fatal("the instance is down after a restart with a refused settings file")
	}
	if now, _ := os.ReadFile(path); string(now) != string(good) {
		t.Errorf("settings.conf was not restored to the last good one:\n%s", now)
	}
}

// TestSupervisorSeesDeathAtOnce: the supervisor learns of a postmaster's death from the process itself
// (a pidfd), not from its next check: with checks an hour apart, the died event still comes at once.
// Before, runtime_status stayed active until the next tick.
func TestSupervisorSeesDeathAtOnce(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	inst := b.newInstance(t, "watched", Settings{})
	events := newEventLog()
	sup := daemon.NewSupervisor()
	sup.OnEvent, sup.Interval, sup.MinBackoff = events.add, time.Hour, time.Hour
	t.Cleanup(func() { _ = sup.Stop(context.Background()) })
	if err := sup.Watch("inst", inst); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := daemon.WaitFor(wctx, 20*time.Millisecond, func() (bool, error) {
		status, _ := sup.Health(ctx)
		return status == "operational", nil
	}); err != nil {
		t.Fatal(err)
	}
	pid, _, _ := inst.Status()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	died := events.wait(t, "inst", daemon.EventDied, 30*time.Second) // far below the hour between checks
	t.Logf("kill -9 to the died event: %v", time.Since(t0).Round(time.Millisecond))
	if died.PID != pid {
		t.Errorf("died pid %d, want %d", died.PID, pid)
	}
}
