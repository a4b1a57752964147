package appliancetest

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/postgres"
)

// Source is a second local PostgreSQL standing in for a database hosted elsewhere (the source of imports
// and follows). Its database "shop" is owned by the login role "app" (with REPLICATION), reached over TLS.
type Source struct {
	Inst    *postgres.Instance
	adminPW string
}

// SourceAppPassword is the password of the source's role app.
const SourceAppPassword = "app-secret-pw"

// StartSource initializes and starts a source with the given wal_level (logical or replica), in the
// Env's directory; the test's cleanup removes it.
func (e *Env) StartSource(t testing.TB, walLevel string) *Source {
	t.Helper()
	if e.Sup == nil {
		t.Fatal("StartSource needs Options{Instances: true}")
	}
	user, err := daemon.DefaultOSUser()
	if err != nil {
		t.Fatal(err)
	}
	bin := e.Bin
	// A port outside the Env's instance range: the outbound policy refuses the appliance's own ports.
	l := e.Listen(t)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	src := &Source{Inst: &postgres.Instance{ID: "source", Dir: filepath.Join(e.Dir, "source"), Port: port, Bin: bin, User: user},
		adminPW: "source-admin-pw"}
	certPEM, keyPEM, caPEM, err := e.CA.InstanceTLS("localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Inst.Init(t.Context(), nil, postgres.InitOptions{AdminPassword: src.adminPW, CertPEM: certPEM, KeyPEM: keyPEM, CAPEM: caPEM}); err != nil {
		t.Fatal(err)
	}
	// postgresql.auto.conf is read last: it overrides the appliance's wal_level and archiving.
	if err := user.WriteFile(filepath.Join(src.Inst.DataDir(), "postgresql.auto.conf"),
		[]byte("wal_level = "+walLevel+"\narchive_mode = off\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Inst.Remove(context.Background()) })
	if err := src.Inst.Start(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	src.Admin(t, "postgres", "CREATE ROLE app LOGIN REPLICATION PASSWORD '"+SourceAppPassword+"'", "CREATE DATABASE shop OWNER app")
	return src
}

// URL is the source URL of database db as role app.
func (s *Source) URL(db string) string {
	return fmt.Sprintf("postgres://app:%s@127.0.0.1:%d/%s?sslmode=require", SourceAppPassword, s.Inst.Port, db)
}

// Admin runs statements as the source's superuser in db.
func (s *Source) Admin(t testing.TB, db string, stmts ...string) {
	t.Helper()
	conn, err := s.Inst.Connect(t.Context(), s.adminPW, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, q := range stmts {
		if _, err := conn.Exec(t.Context(), q); err != nil {
			t.Fatalf("source: %s: %v", q, err)
		}
	}
}

// App runs statements as role app in db, over TLS like the appliance.
func (s *Source) App(t testing.TB, db string, stmts ...string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), s.URL(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, q := range stmts {
		if _, err := conn.Exec(t.Context(), q); err != nil {
			t.Fatalf("source as app: %s: %v", q, err)
		}
	}
}

// Int runs a query returning one integer as the source's superuser in db.
func (s *Source) Int(t testing.TB, db, query string) int {
	t.Helper()
	conn, err := s.Inst.Connect(t.Context(), s.adminPW, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(t.Context(), query).Scan(&n); err != nil {
		t.Fatalf("source: %s: %v", query, err)
	}
	return n
}
