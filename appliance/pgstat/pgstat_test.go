package pgstat_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/theappliance/appliance/appliance/pgstat"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/postgres/pgtest"
	"github.com/theappliance/appliance/appliance/testtools"
)

// These tests run real PostgreSQL 15 servers (with pg_qualstats and hypopg; testtools installs them on
// CI). TestPgstat shares one server among subtests that each make their own tenant database;
// TestRestart has a server of its own, which it restarts.

func TestMain(m *testing.M) { testtools.Main(m) }

func mustExec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// notices records the notices a session receives.
type notices struct {
	mu   sync.Mutex
	msgs []string
}

func (n *notices) record(cfg *pgx.ConnConfig) *pgx.ConnConfig {
	cfg.OnNotice = func(_ *pgconn.PgConn, msg *pgconn.Notice) {
		n.mu.Lock()
		n.msgs = append(n.msgs, msg.Message)
		n.mu.Unlock()
	}
	return cfg
}

// containing returns the notices containing s.
func (n *notices) containing(s string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, m := range n.msgs {
		if strings.Contains(m, s) {
			out = append(out, m)
		}
	}
	return out
}

// sqlFixture is the SQL of testdata/name: overloads.sql, a tenant's overloads of built-in functions the
// readings call (names resolved through the tenant's public schema would pick them, more specific than the
// polymorphic built-ins, and run them with the reader's rights); orders.sql, the advisor's table;
// hygiene.sql, the index hygiene's table and indexes.
func sqlFixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestPgstat(t *testing.T) {
	t.Parallel()
	s := pgtest.Start(t, postgres.Settings{})
	t.Run("Snapshot", func(t *testing.T) { t.Parallel(); testSnapshot(t, s) })
	t.Run("Counters", func(t *testing.T) { t.Parallel(); testCounters(t, s) })
	t.Run("Archiver", func(t *testing.T) { t.Parallel(); testArchiver(t, s) })
	t.Run("Procs", func(t *testing.T) { t.Parallel(); testProcs(t, s) })
	t.Run("Advisor", func(t *testing.T) { t.Parallel(); testAdvisor(t, s) })
	t.Run("AdvisorWithoutHypopg", func(t *testing.T) { t.Parallel(); testAdvisorWithoutHypopg(t, s) })
	t.Run("AdvisorWithoutExtensions", func(t *testing.T) { t.Parallel(); testAdvisorWithoutExtensions(t, s) })
	t.Run("Hygiene", func(t *testing.T) { t.Parallel(); testHygiene(t, s) })
}

func TestRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.Start(t, postgres.Settings{})
	db, role, tenant := s.Tenant(t)
	admin := s.Admin(t, db)

	if st, err := pgstat.ReadStatements(ctx, admin, db, postgres.AdminRole); err != nil || st.Available || st.Totals == nil || len(st.Totals) != 0 {
		t.Errorf("without pg_stat_statements: %+v %v", st, err)
	}
	c1, err := pgstat.ReadCounters(ctx, admin, postgres.AdminRole)
	if err != nil {
		t.Fatal(err)
	}
	if c1.Calls != 0 || c1.ExecTimeMS != 0 {
		t.Errorf("without pg_stat_statements: %d calls, %v ms", c1.Calls, c1.ExecTimeMS)
	}
	mustExec(t, admin, "CREATE EXTENSION pg_stat_statements")
	mustExec(t, tenant, "SELECT count(*) FROM pg_class WHERE relname = 'pg_proc'")
	mustExec(t, admin, "SELECT relname AS admin_marker FROM pg_class WHERE relname = 'pg_type'")
	var reset time.Time // of the last reading
	tenantStatement := func(admin *pgx.Conn) pgstat.StatementTotals {
		t.Helper()
		read, err := pgstat.ReadStatements(ctx, admin, db, postgres.AdminRole)
		if err != nil || !read.Available || read.Reset.IsZero() {
			t.Fatalf("read statements: %+v, %v", read, err)
		}
		stmts := read.Totals
		reset = read.Reset
		var found []pgstat.StatementTotals
		for _, st := range stmts {
			if strings.Contains(st.Query, "admin_marker") {
				t.Errorf("an admin statement is listed: %+v", st)
			}
			if strings.Join(strings.Fields(st.Query), " ") == "SELECT count(*) FROM pg_class WHERE relname = $1" {
				found = append(found, st)
			}
			if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(st.Hash) || st.Hash != pgstat.QueryHash(db, st.Query) {
				t.Errorf("hash of %+v", st)
			}
		}
		if len(found) != 1 {
			t.Fatalf("the tenant's statement: %+v in %+v", found, stmts)
		}
		return found[0]
	}
	st1 := tenantStatement(admin)
	reset1 := reset
	if st1.Calls != 1 || st1.Rows != 1 || st1.TotalExecMS <= 0 {
		t.Errorf("the tenant's statement: %+v", st1)
	}
	if _, err := pgstat.ReadStatements(ctx, admin, "postgres", postgres.AdminRole); err == nil {
		t.Error("ReadStatements of another database than the session's")
	}

	s.Restart(t)
	admin = s.Admin(t, db)
	tenant = s.Connect(t, s.TenantConfig(t, db, role))
	c2, err := pgstat.ReadCounters(ctx, admin, postgres.AdminRole)
	if err != nil {
		t.Fatal(err)
	}
	if !c2.PostmasterStart.After(c1.PostmasterStart) {
		t.Errorf("postmaster start %v, then after a restart %v", c1.PostmasterStart, c2.PostmasterStart)
	}
	mustExec(t, tenant, "SELECT  count(*)  FROM pg_class\n WHERE relname = 'pg_am'")
	if st2 := tenantStatement(admin); st2.Hash != st1.Hash || st2.Calls != 2 || !reset.Equal(reset1) {
		t.Errorf("after a restart: %+v (reset %v), before %+v (reset %v)", st2, reset, st1, reset1)
	}

	mustExec(t, admin, "SELECT pg_stat_statements_reset()")
	mustExec(t, tenant, "SELECT count(*)\n\tFROM pg_class    WHERE relname = 'pg_am'")
	if st3 := tenantStatement(admin); st3.Hash != st1.Hash || st3.Calls != 1 || st3.Query == st1.Query || !reset.After(reset1) {
		t.Errorf("after a reset, written otherwise: %+v (reset %v), before %+v (reset %v)", st3, reset, st1, reset1)
	}
}
