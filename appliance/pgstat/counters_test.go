package pgstat_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/pgstat"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/postgres/pgtest"
)

// testCounters: the counters move with the tenant's work; a lock wait shows as a blocked, slow query and
// an old transaction. The tenant's overloads of built-in functions never run on the admin session.
func testCounters(t *testing.T, s *pgtest.Server) {
	ctx := context.Background()
	db, role, tenant := s.Tenant(t)
	var adminNotices notices
	admin := s.Connect(t, adminNotices.record(s.AdminConfig(t, db)))
	mustExec(t, admin, "CREATE EXTENSION pg_stat_statements")
	mustExec(t, tenant, sqlFixture(t, "overloads.sql"))

	c1, err := pgstat.ReadCounters(ctx, admin, postgres.AdminRole)
	if err != nil {
		t.Fatal(err)
	}
	if c1.ConnectionLimit != 97 || c1.Connections < 1 || c1.DatabaseSizeBytes < 1<<20 || c1.At.Before(c1.PostmasterStart) {
		t.Errorf("first reading: %+v", c1)
	}
	mustExec(t, tenant, "CREATE TABLE t (id int PRIMARY KEY, v text)")
	mustExec(t, tenant, "INSERT INTO t SELECT g, 'x' FROM generate_series(1, 100) g")
	mustExec(t, tenant, "BEGIN")
	mustExec(t, tenant, "INSERT INTO t VALUES (1000, 'rolled back')")
	mustExec(t, tenant, "ROLLBACK")
	mustExec(t, tenant, "UPDATE t SET v = 'y' WHERE id <= 10")
	mustExec(t, tenant, "DELETE FROM t WHERE id > 90")
	mustExec(t, tenant, "SELECT count(*) FROM t")
	mustExec(t, tenant, "SELECT pg_stat_force_next_flush()") // else a backend reports its statistics once a second at most
	var c2 *pgstat.Counters
	pgtest.WaitFor(t, 20*time.Second, func() (bool, string) {
		if c2, err = pgstat.ReadCounters(ctx, admin, postgres.AdminRole); err != nil {
			t.Fatal(err)
		}
		return c2.XactCommit > c1.XactCommit && c2.XactRollback > c1.XactRollback &&
			c2.TupInserted >= c1.TupInserted+100 && c2.TupUpdated >= c1.TupUpdated+10 && c2.TupDeleted >= c1.TupDeleted+10 &&
			c2.TupReturned+c2.TupFetched > c1.TupReturned+c1.TupFetched && c2.BlksHit+c2.BlksRead > c1.BlksHit+c1.BlksRead &&
			c2.Calls >= c1.Calls+7 && c2.ExecTimeMS > c1.ExecTimeMS, fmt.Sprintf("before %+v, after %+v", c1, c2)
	})
	if !c2.PostmasterStart.Equal(c1.PostmasterStart) || !c2.At.After(c1.At) {
		t.Errorf("without a restart: %+v then %+v", c1, c2)
	}

	// A session holding a lock in a transaction, another waiting for it.
	locker := s.Connect(t, s.TenantConfig(t, db, role))
	waiter := s.Connect(t, s.TenantConfig(t, db, role))
	mustExec(t, locker, "BEGIN")
	mustExec(t, locker, "LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Exec(ctx, "SELECT count(*) FROM t")
		done <- err
	}()
	var c3 *pgstat.Counters
	pgtest.WaitFor(t, 20*time.Second, func() (bool, string) {
		if c3, err = pgstat.ReadCounters(ctx, admin, postgres.AdminRole); err != nil {
			t.Fatal(err)
		}
		return c3.BlockedQueries >= 1 && c3.SlowQueries >= 1 && c3.ActiveQueries >= 2 && c3.Connections >= 3 &&
			c3.OldestXactSeconds > pgstat.SlowQueryThreshold.Seconds(), fmt.Sprintf("%+v", c3)
	})
	mustExec(t, locker, "COMMIT")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := adminNotices.containing("runs as"); len(n) > 0 {
		t.Errorf("the tenant's functions ran on the admin session: %q", n)
	}
}

// testArchiver: once a switched segment is archived, the archiver names it, is not failing, and the WAL
// waiting is what was written since (bounded: the other subtests write little).
func testArchiver(t *testing.T, s *pgtest.Server) {
	db, _, _ := s.Tenant(t)
	admin := s.Connect(t, s.AdminConfig(t, db))
	var seg string
	if err := admin.QueryRow(t.Context(), "SELECT pg_walfile_name(pg_current_wal_lsn())").Scan(&seg); err != nil {
		t.Fatal(err)
	}
	mustExec(t, admin, "CREATE TABLE archived (n int); INSERT INTO archived VALUES (1)") // the segment holds something
	mustExec(t, admin, "SELECT pg_switch_wal()")
	deadline := time.Now().Add(30 * time.Second)
	for {
		a, err := pgstat.ReadArchiver(t.Context(), admin)
		if err != nil {
			t.Fatal(err)
		}
		if a.ArchivedWAL >= seg && len(a.ArchivedWAL) == len(seg) { // segment names sort by position on one timeline
			if a.ArchivedAt == nil || a.Failing() || a.PendingBytes < 0 || a.PendingBytes >= 64<<20 {
				t.Fatalf("after %s was archived: %+v", seg, a)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("segment %s not archived within 30 s: %+v", seg, a)
		}
		time.Sleep(50 * time.Millisecond) // polling the archiver, as the sampler reads it
	}
}

func TestSegmentEnd(t *testing.T) {
	const mb16 = 16 << 20
	for _, c := range []struct {
		name string
		size int64
		end  int64
		ok   bool
	}{
		{"000000010000000000000001", mb16, 2 * mb16, true},
		{"0000000100000002000000FF", mb16, 2<<32 + 256*mb16, true},
		{"000000030000000000000004.partial", mb16, 5 * mb16, true},
		{"000000010000000000000002.00000028.backup", mb16, 3 * mb16, true},
		{"000000010000000000000001", 1 << 30, 2 << 30, true},
		{"00000002.history", mb16, 0, false},
		{"", mb16, 0, false},
		{"0000000100000000000000zz", mb16, 0, false},
	} {
		end, ok := pgstat.SegmentEnd(c.name, c.size)
		if end != c.end || ok != c.ok {
			t.Errorf("SegmentEnd(%q, %d) = %d, %v; want %d, %v", c.name, c.size, end, ok, c.end, c.ok)
		}
	}
}
