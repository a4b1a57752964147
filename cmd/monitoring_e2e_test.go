package cmd

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/observe"
	"github.com/theappliance/appliance/store"
)

// The Monitoring tab's part of TestDashboardEndToEnd (ui/e2e/dashboard.mjs asks for these).

// monitoringData gives a project what its Monitoring tab shows, in a few seconds: SQL run through the
// API (a table, rows, a slow statement run several times), a history of minutely samples and two
// pg_stat_statements snapshots or more (the sampler's sweeps, run under a clock moved back and forth: a
// sweep at 16, 8, 7 … 1 minutes ago, then the real clock again), a storage alert (the project's storage limit
// lowered in the store to just above its size), and a statement running while the page looks.
func monitoringData(t *testing.T, e *cliEnv, p *appliance.Principal, projectID string) {
	t.Helper()
	ctx := t.Context()
	cl, err := newAPIClient(e.url, e.boot.APIKey, e.caPath)
	if err != nil {
		t.Fatal(err)
	}
	sql := func(q string) {
		t.Helper()
		if err := cl.do(ctx, "POST", "/v1/projects/"+seg(projectID)+"/sql", map[string]string{"query": q}, nil); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var ago atomic.Int64 // how far the service's clock is behind the real one
	e.env.Clock.Set(func() time.Time { return time.Now().Add(-time.Duration(ago.Load())) })
	defer ago.Store(0)
	sweep := func(at time.Duration) {
		t.Helper()
		ago.Store(int64(at))
		res, err := e.svc.Observe().Sample(ctx)
		if err != nil || res.Failed != 0 || res.Projects == 0 {
			t.Fatalf("sweep %s ago: %+v %v", at, res, err)
		}
	}
	adminRow := func(q string, dest any) {
		t.Helper()
		if err := e.svc.AdminQueryRow(ctx, projectID, q, nil, dest); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	sweep(16 * time.Minute) // the baseline: counters and statements (no point without a previous reading)
	var inserted int64
	adminRow("SELECT tup_inserted FROM pg_stat_database WHERE datname = current_database()", &inserted)
	sql("CREATE TABLE items (id bigserial PRIMARY KEY, v int, note text); INSERT INTO items (v, note) SELECT g, 'n' || g FROM generate_series(1, 5000) g")
	const slow = "SELECT pg_sleep(0.05), count(*) FROM items WHERE note LIKE '%7%'"
	for range 4 {
		sql(slow)
	}
	// Backends report their statistics at most once a second (an idle one within 10 s): wait for the rows.
	waitCLI(t, func() bool {
		var n int64
		return e.svc.AdminQueryRow(ctx, projectID, "SELECT tup_inserted FROM pg_stat_database WHERE datname = current_database()", nil, &n) == nil &&
			n >= inserted+5000
	})
	// A storage alert: the limit just above the database's size (88 %, a warning).
	var size int64
	adminRow("SELECT pg_database_size(current_database())", &size)
	err = e.svc.DB().Update(func(tx *store.Tx) error {
		prj, err := store.Projects.Get(tx, projectID)
		if err != nil {
			return err
		}
		prj.StorageLimitBytes = size * 100 / 88
		return store.Projects.Put(tx, prj)
	})
	if err != nil {
		t.Fatal(err)
	}
	sweep(8 * time.Minute) // the first point and the first statement snapshot (the baseline's is 8 minutes old)
	// The second snapshot comes in the sweep of the project's phase, 3 to 7 minutes after the first.
	for m := 7; m >= 1; m-- {
		sql(fmt.Sprintf("SELECT count(*) FROM items WHERE v %% %d = 0", m))
		if m%3 == 0 {
			sql(slow)
		}
		sweep(time.Duration(m) * time.Minute)
	}
	ago.Store(0)

	// A statement running while the page looks (20 s; the active queries list it).
	conns, err := e.svc.ProjectConnections(ctx, p, projectID)
	if err != nil {
		t.Fatal(err)
	}
	running, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	go func() {
		conn, err := pgx.Connect(running, conns.Connections.DirectURL)
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		conn.Exec(running, "SELECT pg_sleep(20) AS e2e_active")
	}()
	waitCLI(t, func() bool {
		var n int64
		return e.svc.AdminQueryRow(ctx, projectID, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%e2e_active%' AND pid <> pg_backend_pid()", nil, &n) == nil && n > 0
	})
}

// alertAcknowledged checks that the project's storage alert is acknowledged (from the page) and still open.
func alertAcknowledged(t *testing.T, e *cliEnv, p *appliance.Principal, projectID string) {
	t.Helper()
	l, err := e.svc.Observe().ListAlerts(t.Context(), p, projectID)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range l.Alerts {
		if a.Kind == observe.AlertStorage && a.AcknowledgedAt != nil && a.ResolvedAt == nil {
			return
		}
	}
	t.Fatalf("no acknowledged open storage alert: %+v", l.Alerts)
}

// logMarker writes a line to the project's server log through the API's SQL console.
func logMarker(t *testing.T, e *cliEnv, projectID, marker string) {
	t.Helper()
	cl, err := newAPIClient(e.url, e.boot.APIKey, e.caPath)
	if err != nil {
		t.Fatal(err)
	}
	q := "DO $$ BEGIN RAISE LOG '" + marker + "'; END $$"
	if err := cl.do(t.Context(), "POST", "/v1/projects/"+seg(projectID)+"/sql", map[string]string{"query": q}, nil); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}
