package appliance_test

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/observe"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// obsEnv is an appliance with one active project under a clock the test moves.
type obsEnv struct {
	e   *appliancetest.Env
	p   *appliance.Principal
	prj *store.Project
	mu  sync.Mutex
	now time.Time
}

func (o *obsEnv) advance(d time.Duration) {
	o.mu.Lock()
	o.now = o.now.Add(d)
	o.mu.Unlock()
}

// sweep runs one sampling sweep and fails the test unless the project was sampled.
func (o *obsEnv) sweep(t *testing.T) observe.SampleSweepResult {
	t.Helper()
	res, err := o.e.Svc.Observe().Sample(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if res.Projects != 1 || res.Failed != 0 {
		t.Fatalf("sweep: %+v", res)
	}
	return res
}

func (o *obsEnv) sql(t *testing.T, q string) {
	t.Helper()
	if _, err := o.e.Svc.Studio().RunSQL(t.Context(), o.p, o.prj.ID, &appliance.SQLRequest{Query: q}); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// statsFlushed waits until the server's statistics of the database meet cond (backends report theirs at
// most once a second, and an idle one within 10 s).
func (o *obsEnv) statsFlushed(t *testing.T, cond string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok := false
		err := o.e.Svc.AdminQueryRow(t.Context(), o.prj.ID, "SELECT "+cond+" FROM pg_stat_database WHERE datname = current_database()", nil, &ok)
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the statistics never showed %s (%v)", cond, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (o *obsEnv) events(t *testing.T, typ string) []json.RawMessage {
	t.Helper()
	page, err := o.e.Svc.Events().ProjectEvents(t.Context(), o.p, o.prj.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []json.RawMessage
	for _, ev := range page.Events {
		if ev.Type == typ {
			out = append(out, ev.Data)
		}
	}
	return out
}

// TestObservability: the sampler, history, top queries, alerts and logs against a real server under load.
func TestObservability(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	o := &obsEnv{e: e, p: p, now: time.Now().UTC()}
	o.prj = provision(t, e, p, "watched", "development")
	e.Clock.Set(func() time.Time { o.mu.Lock(); defer o.mu.Unlock(); return o.now })

	// The first sweep only takes the baseline: no point without a previous reading.
	o.sweep(t)
	if h, err := e.Svc.Observe().History(t.Context(), p, o.prj.ID, 24); err != nil || len(h.Samples) != 0 {
		t.Fatalf("history after the first sweep: %+v %v", h, err)
	}
	o.sql(t, "CREATE TABLE items (id bigserial PRIMARY KEY, v int, note text)")
	o.sql(t, "INSERT INTO items (v, note) SELECT g, 'n' || g FROM generate_series(1, 5000) g")
	for range 5 {
		o.sql(t, "SELECT pg_sleep(0.05), count(*) FROM items WHERE note LIKE '%7%'")
	}
	o.sql(t, "BEGIN; INSERT INTO items (v) VALUES (1); ROLLBACK")
	o.statsFlushed(t, "tup_inserted >= 5000 AND xact_rollback >= 1")
	o.advance(observe.StatementSnapshotLate)
	o.sweep(t)

	var slowHash string
	t.Run("history", func(t *testing.T) {
		h, err := e.Svc.Observe().History(t.Context(), p, o.prj.ID, 24)
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Samples) != 1 {
			t.Fatalf("samples: %+v", h.Samples)
		}
		x := h.Samples[0]
		if x.TPS <= 0 || x.RowsWrittenPerSec <= 0 || x.RowsReadPerSec <= 0 || x.StorageBytes <= 0 || x.ConnectionLimit <= 0 ||
			x.StorageLimitBytes != o.prj.StorageLimitBytes || x.MemUsageBytes <= 0 || x.MemLimitBytes <= 0 || x.CPUQuotaCores <= 0 ||
			x.CacheHitRatio <= 0 || x.CacheHitRatio > 1 || x.RollbackRatio <= 0 || x.AvgQueryMS <= 0 {
			t.Fatalf("sample: %+v", x)
		}
	})

	t.Run("top queries", func(t *testing.T) {
		top, err := e.Svc.Observe().TopQueries(t.Context(), p, o.prj.ID, 24)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range top.Queries {
			if strings.Contains(q.Query, "pg_sleep") {
				slowHash = q.QueryHash
				if q.Calls != 5 || q.TotalExecMS < 250 || q.MeanExecMS < 50 {
					t.Fatalf("the slow statement: %+v", q)
				}
			}
			if strings.Contains(q.Query, "pg_stat") || strings.Contains(q.Query, "DISCARD ALL") || strings.Contains(q.Query, "appliance internal") {
				t.Fatalf("the appliance's own statement is listed: %+v", q)
			}
		}
		if slowHash == "" || len(slowHash) != 32 {
			t.Fatalf("the slow statement is not ranked: %+v", top.Queries)
		}
		if top.Queries[0].QueryHash != slowHash {
			t.Fatalf("the slowest statement is not first: %+v", top.Queries)
		}
		// A log line's query_id (pg_stat_statements' queryid) leads to the same statement.
		var queryID string
		if err := e.Svc.AdminQueryRow(t.Context(), o.prj.ID, "SELECT queryid::text FROM public.pg_stat_statements WHERE query LIKE '%pg_sleep%' ORDER BY calls DESC LIMIT 1", nil, &queryID); err != nil {
			t.Fatal(err)
		}
		ref, err := e.Svc.Observe().StatementByID(t.Context(), p, o.prj.ID, queryID)
		if err != nil || ref.Statement.QueryHash != slowHash || !strings.Contains(ref.Statement.Query, "pg_sleep") || strconv.FormatInt(ref.Statement.QueryID, 10) != queryID {
			t.Fatalf("statement %s: %+v %v, want hash %s", queryID, ref, err, slowHash)
		}
		for _, c := range []struct{ id, want string }{{"0", "non-zero"}, {"12x", "decimal"}, {"-1", "not found"}} {
			if _, err := e.Svc.Observe().StatementByID(t.Context(), p, o.prj.ID, c.id); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("statement %q: %v, want %q", c.id, err, c.want)
			}
		}
		d, err := e.Svc.Observe().QueryDetail(t.Context(), p, o.prj.ID, slowHash, 24)
		if err != nil {
			t.Fatal(err)
		}
		// Two snapshots: the new server's first (its counts since it started: none of this statement yet)
		// and the one after the load.
		if d.Query.WindowCalls != 5 || len(d.Query.Points) != 2 || d.Query.Points[1].Calls != 5 || d.Query.Points[1].CallsPerSec <= 0 {
			t.Fatalf("detail: %+v", d.Query)
		}
	})

	t.Run("rates survive a server crash between samples", func(t *testing.T) {
		post := postmasterPID(t, instanceOf(t, e, o.prj))
		if err := syscall.Kill(post, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		c, err := e.Svc.ProjectConnections(t.Context(), p, o.prj.ID)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := pgx.ParseConfig(c.Connections.DirectURL)
		if err != nil {
			t.Fatal(err)
		}
		var conn *pgx.Conn
		deadline := time.Now().Add(time.Minute)
		for conn == nil {
			if conn, err = pgx.ConnectConfig(t.Context(), cfg); err != nil {
				if time.Now().After(deadline) {
					t.Fatalf("the server did not come back: %v", err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		defer conn.Close(context.Background())
		for range 5 {
			if _, err := conn.Exec(t.Context(), "SELECT pg_sleep(0.05), count(*) FROM items WHERE note LIKE '%7%'"); err != nil {
				t.Fatal(err)
			}
		}
		o.statsFlushed(t, "xact_commit >= 5")
		o.advance(observe.StatementSnapshotLate)
		o.sweep(t)
		h, err := e.Svc.Observe().History(t.Context(), p, o.prj.ID, 24)
		if err != nil || len(h.Samples) != 2 {
			t.Fatalf("history: %+v %v", h, err)
		}
		x := h.Samples[1]
		for name, v := range map[string]float64{"tps": x.TPS, "rows read": x.RowsReadPerSec, "rows written": x.RowsWrittenPerSec,
			"cpu": x.CPUCoresUsed, "avg query": x.AvgQueryMS, "cache hit": x.CacheHitRatio, "rollback": x.RollbackRatio} {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("%s after the crash = %v: %+v", name, v, x)
			}
		}
		if x.TPS <= 0 || x.Deadlocks < 0 || x.TempBytes < 0 {
			t.Fatalf("sample after the crash: %+v", x)
		}
		// The same statement keeps its hash, and its calls after the crash are counted.
		d, err := e.Svc.Observe().QueryDetail(t.Context(), p, o.prj.ID, slowHash, 24)
		if err != nil {
			t.Fatal(err)
		}
		if d.Query.WindowCalls != 10 || len(d.Query.Points) != 3 || d.Query.Points[2].Calls != 5 {
			t.Fatalf("detail after the crash: %+v", d.Query)
		}
	})

	t.Run("alerts trigger, are acknowledged and resolve", func(t *testing.T) {
		setLimit := func(n int64) {
			t.Helper()
			err := e.DB.Update(func(tx *store.Tx) error {
				prj, err := store.Projects.Get(tx, o.prj.ID)
				if err != nil {
					return err
				}
				prj.StorageLimitBytes = n
				return store.Projects.Put(tx, prj)
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		// The crash above raised instance_crashed; it resolves once the server serves again. From here on
		// this follows the storage alert alone (the lists and events below leave the crash's out).
		waitFor(t, "the crash alert to resolve", func() bool {
			list, err := e.Svc.Observe().ListAlerts(t.Context(), p, o.prj.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range list.Alerts {
				if a.Kind == observe.AlertInstanceCrashed && a.ResolvedAt == nil {
					return false
				}
			}
			return true
		})
		storageOnly := func(all []*appliance.ProjectAlert) []*appliance.ProjectAlert {
			var out []*appliance.ProjectAlert
			for _, a := range all {
				if a.Kind != observe.AlertInstanceCrashed {
					out = append(out, a)
				}
			}
			return out
		}
		triggered0, resolved0 := len(o.events(t, "alert.triggered")), len(o.events(t, "alert.resolved"))
		var size int64
		if err := e.Svc.AdminQueryRow(t.Context(), o.prj.ID, "SELECT pg_database_size(current_database())", nil, &size); err != nil {
			t.Fatal(err)
		}
		setLimit(size) // at the limit: critical
		o.advance(observe.SampleInterval)
		o.sweep(t)
		list, err := e.Svc.Observe().ListAlerts(t.Context(), p, o.prj.ID)
		if list != nil {
			list.Alerts = storageOnly(list.Alerts)
		}
		if err != nil || len(list.Alerts) != 1 {
			t.Fatalf("alerts: %+v %v", list, err)
		}
		a := list.Alerts[0]
		if a.Kind != observe.AlertStorage || a.Severity != observe.SeverityCritical || a.ResolvedAt != nil || a.LimitValue != float64(size) ||
			a.ObservedValue < float64(size)*0.95 || !a.TriggeredAt.Equal(o.now) {
			t.Fatalf("storage alert: %+v", a)
		}
		// Raised once: another sweep with the condition still there adds nothing.
		o.advance(observe.SampleInterval)
		o.sweep(t)
		if n := len(o.events(t, "alert.triggered")) - triggered0; n != 1 {
			t.Fatalf("%d alert.triggered events", n)
		}
		snap, err := e.Svc.Observe().Snapshot(t.Context(), p, o.prj.ID)
		if err != nil || len(snap.Observability.Alerts) != 1 || snap.Observability.StorageUsagePercent < 95 {
			t.Fatalf("snapshot: %+v %v", snap, err)
		}
		ack, err := e.Svc.Observe().AcknowledgeAlert(t.Context(), p, o.prj.ID, a.ID)
		if err != nil || ack.Alert.AcknowledgedAt == nil {
			t.Fatalf("acknowledge: %+v %v", ack, err)
		}
		if _, err := e.Svc.Observe().AcknowledgeAlert(t.Context(), p, o.prj.ID, "alr_nope"); appliance.KindOf(err) != appliance.KindNotFound {
			t.Fatalf("acknowledge an unknown alert: %v", err)
		}
		setLimit(appliance.Plans[0].StorageLimitBytes)
		o.advance(observe.SampleInterval)
		o.sweep(t)
		list, _ = e.Svc.Observe().ListAlerts(t.Context(), p, o.prj.ID)
		list.Alerts = storageOnly(list.Alerts)
		if len(list.Alerts) != 1 || list.Alerts[0].ResolvedAt == nil || !list.Alerts[0].ResolvedAt.Equal(o.now) || list.Alerts[0].AcknowledgedAt == nil {
			t.Fatalf("after the condition cleared: %+v", list.Alerts)
		}
		resolved := o.events(t, "alert.resolved")[resolved0:]
		if len(resolved) != 1 || !strings.Contains(string(resolved[0]), a.ID) {
			t.Fatalf("alert.resolved events: %s", resolved)
		}
		// Resolved alerts are listed for a week, then no more.
		o.advance(observe.AlertListWindow + time.Hour)
		if list, _ = e.Svc.Observe().ListAlerts(t.Context(), p, o.prj.ID); len(list.Alerts) != 0 {
			t.Fatalf("a week later: %+v", list.Alerts)
		}
	})

	t.Run("logs", func(t *testing.T) {
		o.mu.Lock()
		o.now = time.Now().UTC() // the log's times are the server's
		o.mu.Unlock()
		o.sql(t, "DO $$ BEGIN RAISE LOG 'observability-marker-%', 42; END $$")
		if _, err := e.Svc.Studio().RunSQL(t.Context(), p, o.prj.ID, &appliance.SQLRequest{Query: "ALTER ROLE no_such_role PASSWORD 'hunter2-secret'"}); err == nil {
			t.Fatal("altering a role that does not exist succeeded")
		}
		q := appliance.LogsQuery{Hours: 1, Limit: 200}
		var marker, failed bool
		deadline := time.Now().Add(20 * time.Second)
		for !(marker && failed) {
			res, err := e.Svc.Observe().ReadLogs(t.Context(), p, o.prj.ID, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range res.Logs.Entries {
				if strings.Contains(l.Message, "observability-marker-42") && l.Severity == "log" {
					marker = true
				}
				if strings.Contains(l.Statement, "no_such_role") {
					failed = true
				}
				if strings.Contains(l.Message+l.Statement+l.Detail, "hunter2") {
					t.Fatalf("a password in the logs: %+v", l)
				}
				if l.User == "appliance" || l.Cursor == "" {
					t.Fatalf("entry: %+v", l)
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("marker %v, failed statement %v in %+v", marker, failed, res.Logs.Entries)
			}
			time.Sleep(100 * time.Millisecond)
		}
		errs, err := e.Svc.Observe().ReadLogs(t.Context(), p, o.prj.ID, appliance.LogsQuery{Hours: 1, Limit: 200, Severity: "error"})
		if err != nil || len(errs.Logs.Entries) == 0 {
			t.Fatalf("errors only: %+v %v", errs, err)
		}
		for _, l := range errs.Logs.Entries {
			if l.Severity != "error" {
				t.Fatalf("severity filter let through %+v", l)
			}
		}
		// Resuming after the last entry returns only what comes after it.
		last := errs.Logs.Entries[len(errs.Logs.Entries)-1]
		after, err := e.Svc.Observe().ReadLogs(t.Context(), p, o.prj.ID, appliance.LogsQuery{Hours: 1, Limit: 200, Severity: "error", Cursor: last.Cursor})
		if err != nil || len(after.Logs.Entries) != 0 || after.Logs.NextCursor == "" {
			t.Fatalf("after the last cursor: %+v %v", after, err)
		}
	})

	t.Run("bad input changes nothing", func(t *testing.T) {
		bad := []struct {
			name string
			call func() error
			want string
		}{
			{"history 0 hours", func() error { _, err := e.Svc.Observe().History(t.Context(), p, o.prj.ID, 0); return err }, "between 1 and 720"},
			{"history 721 hours", func() error { _, err := e.Svc.Observe().History(t.Context(), p, o.prj.ID, 721); return err }, "between 1 and 720"},
			{"queries 169 hours", func() error { _, err := e.Svc.Observe().TopQueries(t.Context(), p, o.prj.ID, 169); return err }, "between 1 and 168"},
			{"a hash too short", func() error { _, err := e.Svc.Observe().QueryDetail(t.Context(), p, o.prj.ID, "abc", 24); return err }, "32 lowercase"},
			{"a hash in capitals", func() error {
				_, err := e.Svc.Observe().QueryDetail(t.Context(), p, o.prj.ID, strings.ToUpper(slowHash), 24)
				return err
			}, "32 lowercase"},
			{"logs 169 hours without the archive", func() error {
				_, err := e.Svc.Observe().ReadLogs(t.Context(), p, o.prj.ID, appliance.LogsQuery{Hours: 169, Limit: 10})
				return err
			}, "log archive"},
			{"logs limit 501", func() error {
				_, err := e.Svc.Observe().ReadLogs(t.Context(), p, o.prj.ID, appliance.LogsQuery{Hours: 1, Limit: 501})
				return err
			}, "between 1 and 500"},
			{"an unknown severity", func() error {
				_, err := e.Svc.Observe().ReadLogs(t.Context(), p, o.prj.ID, appliance.LogsQuery{Hours: 1, Limit: 10, Severity: "error,loud"})
				return err
			}, "loud"},
			{"a malformed cursor", func() error {
				_, err := e.Svc.Observe().ReadLogs(t.Context(), p, o.prj.ID, appliance.LogsQuery{Hours: 1, Limit: 10, Cursor: "not-a-cursor!"})
				return err
			}, "cursor"},
			{"min_filter 0", func() error {
				_, err := e.Svc.Observe().IndexAdvice(t.Context(), p, o.prj.ID, 0, 30, false)
				return err
			}, "min_filter"},
			{"min_selectivity 101", func() error {
				_, err := e.Svc.Observe().IndexAdvice(t.Context(), p, o.prj.ID, 1000, 101, false)
				return err
			}, "min_selectivity"},
		}
		for _, c := range bad {
			err := c.call()
			if appliance.KindOf(err) != appliance.KindInvalid || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v (want a 400 naming %q)", c.name, err, c.want)
			}
		}
		if _, err := e.Svc.Observe().QueryDetail(t.Context(), p, o.prj.ID, strings.Repeat("0", 32), 24); appliance.KindOf(err) != appliance.KindNotFound {
			t.Errorf("an unknown hash: %v", err)
		}
	})

	t.Run("pruning", func(t *testing.T) {
		o.advance(observe.SampleRetention + time.Hour)
		n, err := e.Svc.Observe().Prune(t.Context())
		if err != nil || n == 0 {
			t.Fatalf("prune: %d %v", n, err)
		}
		h, err := e.Svc.Observe().History(t.Context(), p, o.prj.ID, 720)
		if err != nil || len(h.Samples) != 0 {
			t.Fatalf("history after pruning: %+v %v", h, err)
		}
	})
}

// TestIndexAdvisor: a filter on an unindexed column gets a suggestion with hypopg's estimates; an unused
// and a redundant index are reported, the primary key is not.
func TestIndexAdvisor(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "advised", "development")
	run := func(q string) {
		t.Helper()
		if _, err := e.Svc.Studio().RunSQL(t.Context(), p, prj.ID, &appliance.SQLRequest{Query: q}); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// Without the extensions the advisor says what is missing.
	adv, err := e.Svc.Observe().IndexAdvice(t.Context(), p, prj.ID, 1000, 30, false)
	if err != nil {
		t.Fatal(err)
	}
	if adv.Advisor.Available || len(adv.Advisor.MissingExtensions) == 0 || adv.Advisor.Reason == "" {
		t.Fatalf("advice without the extensions: %+v", adv.Advisor)
	}
	for _, ext := range []string{"pg_qualstats", "hypopg"} {
		res, err := e.Svc.Extensions().Enable(t.Context(), p, prj.ID, &appliance.ExtensionRequest{Name: ext})
		if err != nil {
			t.Fatal(err)
		}
		if j := e.WaitJob(t, res.Job.ID); j.State != scheduler.StateCompleted {
			t.Fatalf("enable %s: %s %s", ext, j.State, j.Error)
		}
	}
	run("CREATE TABLE orders (id bigserial PRIMARY KEY, customer int NOT NULL, status text, total numeric)")
	run("INSERT INTO orders (customer, status, total) SELECT g % 5000, CASE WHEN g % 10 = 0 THEN 'open' ELSE 'done' END, g FROM generate_series(1, 100000) g")
	run("CREATE INDEX orders_status ON orders (status)")              // never used: unused
	run("CREATE INDEX orders_status_total ON orders (status, total)") // orders_status is its prefix: redundant
	run("ANALYZE orders")
	c, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, c.Connections.DirectURL)
	for i := range 200 {
		var n int64
		if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM orders WHERE customer = $1", i).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	adv, err = e.Svc.Observe().IndexAdvice(t.Context(), p, prj.ID, 1000, 30, false)
	if err != nil {
		t.Fatal(err)
	}
	a := adv.Advisor
	if !a.Available || !a.CostEstimatesAvailable || !a.SizeEstimatesAvailable || len(a.MissingExtensions) != 0 {
		t.Fatalf("advice: %+v", a)
	}
	found := false
	for _, s := range a.Suggestions {
		if strings.Contains(s.DDL, "orders") && strings.Contains(s.DDL, "customer") && s.EstimatedCostReductionPct > 0 && s.EstimatedSizeBytes > 0 {
			found = true
		}
	}
	if !found {
		t.Fatalf("no suggestion for orders.customer with estimates: %+v", a.Suggestions)
	}
	// The advice is kept: asked again it is the same, computed at the same time; refresh computes it anew.
	again, err := e.Svc.Observe().IndexAdvice(t.Context(), p, prj.ID, 1000, 30, false)
	if err != nil || a.ComputedAt.IsZero() || !again.Advisor.ComputedAt.Equal(a.ComputedAt) {
		t.Fatalf("asked again: computed at %v, first at %v (%v)", again.Advisor.ComputedAt, a.ComputedAt, err)
	}
	fresh, err := e.Svc.Observe().IndexAdvice(t.Context(), p, prj.ID, 1000, 30, true)
	if err != nil || !fresh.Advisor.ComputedAt.After(a.ComputedAt) || len(fresh.Advisor.Suggestions) == 0 {
		t.Fatalf("refreshed: %+v (%v), first at %v", fresh.Advisor, err, a.ComputedAt)
	}

	h, err := e.Svc.Observe().IndexHygiene(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	hy := h.Hygiene
	unused := map[string]bool{}
	for _, x := range hy.UnusedIndexes {
		unused[x.Index] = true
		if !strings.HasPrefix(x.DropStatement, "DROP INDEX CONCURRENTLY") {
			t.Fatalf("drop statement: %+v", x)
		}
	}
	if !unused["orders_status_total"] || unused["orders_pkey"] {
		t.Fatalf("unused: %+v", hy.UnusedIndexes)
	}
	redundant := false
	for _, x := range hy.RedundantIndexes {
		if x.Index == "orders_status" && x.CoveredBy == "orders_status_total" {
			redundant = true
		}
	}
	if !redundant || hy.ReclaimableBytes <= 0 || hy.StatsResetAt == nil {
		t.Fatalf("hygiene: %+v", hy)
	}
}
