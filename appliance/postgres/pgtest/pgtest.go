// Package pgtest runs real PostgreSQL instances for the tests of other packages, the way the appliance
// runs them (appliance/postgres: an unprivileged OS user, TLS with the appliance's CA, SCRAM, the preloaded
// statistics libraries), and gives them admin and tenant sessions.
//
// The binaries must be installed (postgresql-15; testtools.Main installs them on CI): Start fails the test
// when they are missing, it never skips.
//
// Start does not call t.Parallel (a benchmark cannot): parallel tests call it themselves first.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/certs"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/postgres"
)

// AdminPassword is the password of postgres.AdminRole on every instance Start makes.
const AdminPassword = "pgtest-admin-secret"

// Server is a running instance, stopped and removed when the test that started it ends.
type Server struct {
	Instance *postgres.Instance
	CA       *certs.CA // issued the server's certificate; customers verify it with CA.CertPath()

	mu        sync.Mutex
	passwords map[string]string // tenant role → password
}

var serial atomic.Int64 // names instances, roles and databases uniquely within the test binary

// Start initialises and starts an instance with settings (the zero value: the appliance's defaults, with
// pg_stat_statements and pg_qualstats preloaded when installed). Cleanup removes it.
func Start(t testing.TB, settings postgres.Settings) *Server {
	t.Helper()
	ctx := context.Background()
	bin, err := postgres.FindBinaries("")
	if err != nil {
		t.Fatalf("PostgreSQL binaries are required (install postgresql-15): %v", err)
	}
	user, err := daemon.DefaultOSUser()
	if err != nil {
		t.Fatal(err)
	}
	// t.TempDir() is /tmp/<Test><n>/<nnn>, both levels 0700 and root's when the tests run as root: the
	// instance's user must traverse them (see postgres.Instance).
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
	certPEM, keyPEM, caPEM, err := ca.InstanceTLS("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("pgtest%d", serial.Add(1))
	inst := &postgres.Instance{ID: id, Dir: filepath.Join(root, id), ListenHost: "127.0.0.1", Bin: bin, User: user}
	if inst.Port, err = postgres.FreePort(); err != nil {
		t.Fatal(err)
	}
	if err := inst.Init(ctx, nil, postgres.InitOptions{AdminPassword: AdminPassword, CertPEM: certPEM, KeyPEM: keyPEM, CAPEM: caPEM, Settings: settings}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := inst.Remove(context.Background()); err != nil {
			t.Error(err)
		}
	})
	for attempt := 1; ; attempt++ {
		err := inst.Start(ctx, nil)
		if err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(err.Error(), "could not bind") {
			t.Fatal(err)
		}
		t.Logf("port %d was taken, retrying: %v", inst.Port, err)
		if inst.Port, err = postgres.FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	return &Server{Instance: inst, CA: ca, passwords: map[string]string{}}
}

// Admin connects to db as postgres.AdminRole over 127.0.0.1 with AdminConfig; closed at cleanup.
func (s *Server) Admin(t testing.TB, db string) *pgx.Conn {
	t.Helper()
	return s.Connect(t, s.AdminConfig(t, db))
}

// AdminConfig is what postgres.Instance.Connect connects with but for the search_path it pins
// (postgres.AdminSearchPath): the session has PostgreSQL's default, or the database's. Fixtures name what
// they create unqualified, and code given an admin session must protect itself on any (pgstat pins its own
// search_path); tests of what Connect adds use Connect. Tests adjust it before Connect.
func (s *Server) AdminConfig(t testing.TB, db string) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d dbname=%s user=%s password=%s sslmode=disable connect_timeout=10",
		s.Instance.Port, db, postgres.AdminRole, AdminPassword))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Tenant creates a project's login role (no superuser, no other privilege) and its database, owned by it,
// and connects as that role over TLS like a customer. More sessions: Connect(t, TenantConfig(t, db, role)).
func (s *Server) Tenant(t testing.TB) (db, role string, conn *pgx.Conn) {
	t.Helper()
	n := serial.Add(1)
	role, db = fmt.Sprintf("tenant%d", n), fmt.Sprintf("tenantdb%d", n)
	password := fmt.Sprintf("tenant-secret-%d", n)
	admin := s.Admin(t, "postgres")
	for _, stmt := range []string{
		"CREATE ROLE " + pgx.Identifier{role}.Sanitize() + " LOGIN PASSWORD '" + password + "'",
		"CREATE DATABASE " + pgx.Identifier{db}.Sanitize() + " OWNER " + pgx.Identifier{role}.Sanitize(),
	} {
		if _, err := admin.Exec(context.Background(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	s.mu.Lock()
	s.passwords[role] = password
	s.mu.Unlock()
	return db, role, s.Connect(t, s.TenantConfig(t, db, role))
}

// TenantConfig is what a customer of role (made by Tenant) uses to reach db: TLS, the server's
// certificate verified with the CA. Tests adjust it (OnNotice, runtime parameters) before Connect.
func (s *Server) TenantConfig(t testing.TB, db, role string) *pgx.ConnConfig {
	t.Helper()
	s.mu.Lock()
	password, ok := s.passwords[role]
	s.mu.Unlock()
	if !ok {
		t.Fatalf("pgtest: %s is not a role made by Tenant", role)
	}
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d dbname=%s user=%s password=%s sslmode=verify-full sslrootcert=%s connect_timeout=10",
		s.Instance.Port, db, role, password, s.CA.CertPath()))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Connect opens a session with cfg; closed at cleanup.
func (s *Server) Connect(t testing.TB, cfg *pgx.ConnConfig) *pgx.Conn {
	t.Helper()
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("connect to %s as %s: %v", cfg.Database, cfg.User, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Restart stops the instance (fast: sessions are ended) and starts it again.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.Instance.Restart(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

// WaitFor polls cond every 20 ms until it holds, failing the test after timeout with what cond last said.
func WaitFor(t testing.TB, timeout time.Duration, cond func() (ok bool, status string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, status := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
