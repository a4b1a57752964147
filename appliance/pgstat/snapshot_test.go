package pgstat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/pgstat"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/postgres/pgtest"
)

// testSnapshot: a tenant's running pg_sleep shows with its duration; the admin's sessions do not; the
// tenant's statements are among the slow queries, the admin's are not.
func testSnapshot(t *testing.T, s *pgtest.Server) {
	ctx := context.Background()
	db, role, tenant := s.Tenant(t)
	admin := s.Admin(t, db)

	snap, err := pgstat.TakeSnapshot(ctx, admin, postgres.AdminRole)
	if err != nil {
		t.Fatal(err)
	}
	if snap.PGStatStatements || len(snap.SlowQueries) != 0 {
		t.Errorf("without pg_stat_statements: %v %v", snap.PGStatStatements, snap.SlowQueries)
	}
	js, _ := json.Marshal(snap)
	if strings.Contains(string(js), "null") {
		t.Errorf("snapshot JSON has a null: %s", js)
	}

	mustExec(t, admin, "CREATE EXTENSION pg_stat_statements")
	mustExec(t, tenant, "SELECT count(*) FROM generate_series(1, 200000)")
	mustExec(t, admin, "SELECT relname AS admin_marker FROM pg_class WHERE relname = 'pg_type'")

	sleeper := s.Connect(t, s.TenantConfig(t, db, role))
	adminSleeper := s.Admin(t, db)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{}, 2)
	for _, c := range []*pgx.Conn{sleeper, adminSleeper} {
		go func() {
			c.Exec(sctx, "SELECT pg_sleep(5)")
			done <- struct{}{}
		}()
	}
	var sleeping pgstat.ActiveQuery
	pgtest.WaitFor(t, 10*time.Second, func() (bool, string) {
		if snap, err = pgstat.TakeSnapshot(ctx, admin, postgres.AdminRole); err != nil {
			t.Fatal(err)
		}
		for _, q := range snap.ActiveQueries {
			if q.PID == int(sleeper.PgConn().PID()) && q.DurationMS >= 200 {
				sleeping = q
				return true, ""
			}
		}
		return false, fmt.Sprintf("the tenant's pg_sleep is not among %+v", snap.ActiveQueries)
	})
	if sleeping.Username != role || sleeping.State != "active" || sleeping.Query != "SELECT pg_sleep(5)" ||
		sleeping.WaitEventType != "Timeout" || sleeping.WaitEvent != "PgSleep" || sleeping.DurationMS > 5000 {
		t.Errorf("the tenant's pg_sleep: %+v", sleeping)
	}
	for i, q := range snap.ActiveQueries {
		if q.Username == postgres.AdminRole || q.PID == int(admin.PgConn().PID()) || q.PID == int(adminSleeper.PgConn().PID()) {
			t.Errorf("an admin session is listed: %+v", q)
		}
		if i > 0 && q.DurationMS > snap.ActiveQueries[i-1].DurationMS {
			t.Errorf("not longest first: %+v", snap.ActiveQueries)
		}
	}
	if snap.ConnectionCount < 2 || snap.ConnectionLimit != 97 || snap.DatabaseSizeBytes < 1<<20 {
		t.Errorf("connections %d of %d, size %d: want at least 2 of 97 (100 - 3 reserved), more than 1 MB",
			snap.ConnectionCount, snap.ConnectionLimit, snap.DatabaseSizeBytes)
	}
	if !snap.PGStatStatements {
		t.Error("pg_stat_statements is installed but not reported")
	}
	var tenants int
	for _, q := range snap.SlowQueries {
		if strings.Contains(q.Query, "admin_marker") {
			t.Errorf("an admin statement is listed: %+v", q)
		}
		if strings.Contains(q.Query, "generate_series") {
			tenants++
			if q.Calls != 1 || q.Rows != 1 || q.MeanTimeMS <= 0 || q.TotalTimeMS < q.MeanTimeMS || q.QueryID == 0 {
				t.Errorf("the tenant's statement: %+v", q)
			}
		}
	}
	if tenants != 1 || len(snap.SlowQueries) > pgstat.SlowQueryLimit {
		t.Errorf("slow queries: %+v", snap.SlowQueries)
	}
	cancel()
	<-done
	<-done
}
