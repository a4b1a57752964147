package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/httpapi"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// studioQuery is one text the console benchmark runs, with the requests each client sends per round.
type studioQuery struct {
	name, sql string
	perClient int
	rows      int // the rows it returns (checked once before the rounds)
}

// BenchmarkStudioSQL: the SQL console (POST /v1/projects/{id}/sql over HTTP to the real API handler, plain
// HTTP on loopback, keep-alive) next to the same text run directly with pgx over the project's pooled URL
// (PgBouncer, TLS verify-full, a pgxpool of BENCH_CLIENTS sessions, the simple protocol), BENCH_CLIENTS
// (16) clients each sending its requests one after the other. Per query (`select 1`, and 1,000 rows of
// two columns) BENCH_ROUNDS (5) rounds of each side alternate in one run (the side that goes first
// alternates by round), each client sending BENCH_SELECT1_REQUESTS (200) or BENCH_ROWS_REQUESTS (50)
// requests per round. Reported: p50 and p99 of every request of a side, its requests/s (requests over the
// rounds' wall time), the added p50 (ours − reference) and the ratios.
func BenchmarkStudioSQL(b *testing.B) {
	clients, rounds := envInt(b, "BENCH_CLIENTS", 16), envInt(b, "BENCH_ROUNDS", 5)
	queries := []studioQuery{
		{name: "select_1", sql: "select 1", perClient: envInt(b, "BENCH_SELECT1_REQUESTS", 200), rows: 1},
		{name: "rows_1000", sql: "select g, md5(g::text) from generate_series(1,1000) g", perClient: envInt(b, "BENCH_ROWS_REQUESTS", 50), rows: 1000},
	}
	// The pro plan: PgBouncer's pool (default_pool_size 72) does not cap the reference below the clients.
	e, p, prj := previewEnv(b, 0, "pro")
	ctx := b.Context()

	api := httptest.NewServer(httpapi.New(e.Svc, httpapi.Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}, Lane: e.Lane}))
	b.Cleanup(api.Close)
	tr := &http.Transport{MaxIdleConns: 4 * clients, MaxIdleConnsPerHost: 4 * clients}
	b.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	sqlURL := api.URL + "/v1/projects/" + prj.ID + "/sql"

	c, err := e.Svc.ProjectConnections(ctx, p, prj.ID)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(c.Connections.PooledURL)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = int32(clients)
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol // PgBouncer in transaction mode
	ref, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(ref.Close)

	for _, q := range queries {
		body, _ := json.Marshal(appliance.SQLRequest{Query: q.sql})
		ours := func(ctx context.Context) (int64, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, sqlURL, bytes.NewReader(body))
			if err != nil {
				return 0, err
			}
			req.Header.Set("Authorization", "Bearer "+e.Bootstrap.APIKey)
			req.Header.Set("Content-Type", "application/json")
			res, err := client.Do(req)
			if err != nil {
				return 0, err
			}
			defer res.Body.Close()
			if res.StatusCode != http.StatusOK {
				msg, _ := io.ReadAll(res.Body)
				return 0, fmt.Errorf("POST sql: %d %s", res.StatusCode, msg)
			}
			if ctx.Value(checkKey{}) != nil { // the check before the rounds decodes the answer once
				var out struct {
					Result struct {
						RowCount int64 `json:"row_count"`
					} `json:"result"`
				}
				if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
					return 0, err
				}
				return out.Result.RowCount, nil
			}
			_, err = io.Copy(io.Discard, res.Body) // the whole body, not decoded
			return -1, err
		}
		reference := func(ctx context.Context) (int64, error) {
			rows, err := ref.Query(ctx, q.sql)
			if err != nil {
				return 0, err
			}
			n := int64(0)
			for rows.Next() {
				_ = rows.RawValues()
				n++
			}
			rows.Close()
			return n, rows.Err()
		}
		sides := []struct {
			name string
			do   func(context.Context) (int64, error)
		}{{"ours", ours}, {"reference", reference}}
		b.Run(q.name, func(b *testing.B) {
			loadBefore := loadavg()
			// Check each side once, then a warm-up round of each (every session and keep-alive connection
			// opened), not counted.
			for _, s := range sides {
				n, err := s.do(context.WithValue(ctx, checkKey{}, true))
				if err != nil {
					b.Fatalf("%s: %v", s.name, err)
				}
				if n != int64(q.rows) {
					b.Fatalf("%s: %d rows, want %d", s.name, n, q.rows)
				}
			}
			for _, s := range sides {
				if _, _, err := studioRound(ctx, clients, max(q.perClient/10, 5), s.do); err != nil {
					b.Fatalf("%s warm-up: %v", s.name, err)
				}
			}
			lat := make([][]time.Duration, 2)
			wall := make([]time.Duration, 2)
			roundP50 := make([][]time.Duration, 2)
			cpuSelf, cpuAll := make([]time.Duration, 2), make([]time.Duration, 2)
			for r := range rounds {
				for k := range sides {
					i := (k + r) % 2 // ours first in even rounds, the reference first in odd ones
					self0, all0 := cpuTimes()
					l, w, err := pprofRound(ctx, sides[i].name, clients, q.perClient, sides[i].do)
					self1, all1 := cpuTimes()
					cpuSelf[i] += self1 - self0
					cpuAll[i] += all1 - all0
					if err != nil {
						b.Fatalf("round %d, %s: %v", r, sides[i].name, err)
					}
					lat[i] = append(lat[i], l...)
					wall[i] += w
					slices.Sort(l)
					roundP50[i] = append(roundP50[i], percentile(l, 50))
				}
			}
			type figures struct{ p50, p99, rps float64 }
			var f [2]figures
			for i := range sides {
				slices.Sort(lat[i])
				f[i] = figures{ms(percentile(lat[i], 50)), ms(percentile(lat[i], 99)), float64(len(lat[i])) / wall[i].Seconds()}
			}
			b.ReportMetric(f[0].p50, "ours-p50-ms")
			b.ReportMetric(f[0].p99, "ours-p99-ms")
			b.ReportMetric(f[0].rps, "ours-req/s")
			b.ReportMetric(f[1].p50, "ref-p50-ms")
			b.ReportMetric(f[1].p99, "ref-p99-ms")
			b.ReportMetric(f[1].rps, "ref-req/s")
			b.ReportMetric(f[0].p50-f[1].p50, "added-p50-ms")
			b.ReportMetric(f[0].p50/f[1].p50, "p50-ratio")
			b.ReportMetric(f[0].rps/f[1].rps, "rps-ratio")
			b.Logf("%q, %d clients, %d rounds x %d requests per client per side: ours p50 %.3f ms p99 %.3f ms %.0f req/s; reference p50 %.3f ms p99 %.3f ms %.0f req/s",
				q.sql, clients, rounds, q.perClient, f[0].p50, f[0].p99, f[0].rps, f[1].p50, f[1].p99, f[1].rps)
			goal := ""
			if q.name == "select_1" {
				goal = " (the issue's goal: <= 1 ms)"
			}
			b.Logf("added p50 %.3f ms%s; p50 ratio %.2f, p99 ratio %.2f, req/s ratio %.2f",
				f[0].p50-f[1].p50, goal, f[0].p50/f[1].p50, f[0].p99/f[1].p99, f[0].rps/f[1].rps)
			b.Logf("p50 per round (ms): ours %s; reference %s", joinMS3(roundP50[0]), joinMS3(roundP50[1]))
			us := func(d time.Duration, i int) float64 {
				return float64(d) / float64(time.Microsecond) / float64(len(lat[i]))
			}
			b.Logf("CPU per request (us): ours %.0f in this process + %.0f in other processes; reference %.0f + %.0f (machine: 2 CPUs)",
				us(cpuSelf[0], 0), us(cpuAll[0]-cpuSelf[0], 0), us(cpuSelf[1], 1), us(cpuAll[1]-cpuSelf[1], 1))
			pools, conns := e.Svc.Studio().PoolStats()
			b.Logf("studio pools %d, sessions %d (at most %d per project); load average before %s, after %s", pools, conns, 4, loadBefore, loadavg())
		})
	}
}

// checkKey in a context asks the console side to decode the answer and return its row_count.
type checkKey struct{}

// studioRound runs clients goroutines, each calling do per times one after the other, and returns every
// call's latency and the round's wall time.
func studioRound(ctx context.Context, clients, per int, do func(context.Context) (int64, error)) ([]time.Duration, time.Duration, error) {
	lat := make([][]time.Duration, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	t0 := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := make([]time.Duration, 0, per)
			for range per {
				t := time.Now()
				if _, err := do(ctx); err != nil {
					errs[c] = err
					return
				}
				l = append(l, time.Since(t))
			}
			lat[c] = l
		}()
	}
	wg.Wait()
	wall := time.Since(t0)
	var all []time.Duration
	for c := range clients {
		if errs[c] != nil {
			return nil, 0, errs[c]
		}
		all = append(all, lat[c]...)
	}
	return all, wall, nil
}

// pprofRound is studioRound with its client goroutines labelled side=<side> in CPU profiles (the API's
// handlers run on the server's goroutines, which carry no label: -tagignore side=reference keeps the
// console's whole cost).
func pprofRound(ctx context.Context, side string, clients, per int, do func(context.Context) (int64, error)) (lat []time.Duration, wall time.Duration, err error) {
	pprof.Do(ctx, pprof.Labels("side", side), func(ctx context.Context) { lat, wall, err = studioRound(ctx, clients, per, do) })
	return lat, wall, err
}

// cpuTimes is the CPU time used so far by this process (user + system) and by the whole machine (every
// state of /proc/stat's cpu line but idle and iowait; USER_HZ ticks of 10 ms).
func cpuTimes() (self, all time.Duration) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return self, 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	var ticks int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return self, time.Duration(ticks) * 10 * time.Millisecond
}

// joinMS3 lists durations in ms with three decimals.
func joinMS3(ds []time.Duration) string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = fmt.Sprintf("%.3f", ms(d))
	}
	return strings.Join(out, " ")
}

// studioPoint is one reading of BenchmarkStudioIdlePools.
type studioPoint struct {
	name                 string
	at                   time.Duration // since the last query
	heapInuse, heapAlloc uint64
	goroutines           int
	pools, conns         int
	pssKB                float64            // the projects' processes (postmaster, children, PgBouncer)
	kindKB               map[string]float64 // pssKB by process kind (pssByKind)
	procs                int
}

// BenchmarkStudioIdlePools: BENCH_STUDIO_PROJECTS (100) free-plan projects on one appliance, each running
// `select 1` once through svc.Studio().RunSQL (its studio pool and one session), then left alone. The process's
// Go heap (HeapInuse after runtime.GC) and the studio's pools and sessions (studio.Service.PoolStats) are
// read before the queries, right after them, once every session closed (conns == 0: studio.IdleTime plus
// up to the health check period), and once every pool was dropped (pools == 0: studio.PoolIdleTime plus up
// to the janitor's period); also the PSS of the projects' processes (a session is a backend) at each.
// BENCH_SPARES (0) spare clusters.
func BenchmarkStudioIdlePools(b *testing.B) {
	n, spares := envInt(b, "BENCH_STUDIO_PROJECTS", 100), envAtLeast(b, "BENCH_SPARES", 0, 0)
	ctx := b.Context()
	// One organization holds them all: the project quota (20) is a package default the operator may
	// raise; the benchmark raises it for its own run.
	if q := appliance.DefaultOrganizationQuota; q.ProjectsLimit < n {
		appliance.DefaultOrganizationQuota.ProjectsLimit = n
		b.Cleanup(func() { appliance.DefaultOrganizationQuota = q })
	}
	e := appliancetest.New(b, appliancetest.Options{Instances: true, Spares: spares, Ports: 2*(n+spares) + 8})
	p, err := e.Svc.Identity().Authenticate(ctx, e.Bootstrap.APIKey)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("load average before: %s", loadavg())
	t0 := time.Now()
	ids, jobs := make([]string, n), make([]string, n)
	for i := range n {
		if err := waitSpares(ctx, e, spares); err != nil {
			b.Fatal(err)
		}
		res, err := e.Svc.CreateProject(ctx, p, &appliance.CreateProjectRequest{Name: fmt.Sprintf("studio %03d", i), Environment: "development"})
		if err != nil {
			b.Fatal(err)
		}
		ids[i], jobs[i] = res.Project.ID, res.Job.ID
		if spares > 0 { // a spare is claimed per provision: wait for it, so the refill sees the pool short
			if j := e.WaitJob(b, res.Job.ID); j.State != scheduler.StateCompleted {
				b.Fatalf("provision: %s", j.Error)
			}
		}
	}
	for _, j := range jobs {
		if job := e.WaitJob(b, j); job.State != scheduler.StateCompleted {
			b.Fatalf("provision: %s", job.Error)
		}
	}
	provisioned := time.Since(t0)
	time.Sleep(idleFor)

	var last time.Time
	read := func(name string) studioPoint {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		pt := studioPoint{name: name, heapInuse: m.HeapInuse, heapAlloc: m.HeapAlloc, goroutines: runtime.NumGoroutine()}
		if !last.IsZero() {
			pt.at = time.Since(last)
		}
		pt.pools, pt.conns = e.Svc.Studio().PoolStats()
		pt.kindKB = map[string]float64{}
		for _, id := range ids {
			if err := pssByKind(e, id, pt.kindKB, &pt.procs); err != nil {
				b.Fatal(err)
			}
		}
		for _, kb := range pt.kindKB {
			pt.pssKB += kb
		}
		return pt
	}
	points := []studioPoint{read("before the queries")}

	t1 := time.Now()
	for _, id := range ids {
		res, err := e.Svc.Studio().RunSQL(ctx, p, id, &appliance.SQLRequest{Query: "select 1"})
		if err != nil {
			b.Fatal(err)
		}
		if res.Result.RowCount != 1 {
			b.Fatalf("select 1: %d rows", res.Result.RowCount)
		}
	}
	last = time.Now()
	queried := last.Sub(t1)
	if err := e.Svc.Studio().FlushLog(ctx); err != nil { // the history and audit entries are in the store
		b.Fatal(err)
	}
	points = append(points, read("right after"))

	// Wait on the conditions, polling every 500 ms.
	wait := func(what string, limit time.Duration, done func(pools, conns int) bool) {
		for deadline := time.Now().Add(limit); ; time.Sleep(500 * time.Millisecond) {
			if done(e.Svc.Studio().PoolStats()) {
				return
			}
			if time.Now().After(deadline) {
				pools, conns := e.Svc.Studio().PoolStats()
				b.Fatalf("%s: still %d pools and %d sessions after %v", what, pools, conns, limit)
			}
		}
	}
	wait("sessions closing", 5*time.Minute, func(_, conns int) bool { return conns == 0 })
	points = append(points, read("sessions closed"))
	wait("pools dropped", 10*time.Minute, func(pools, _ int) bool { return pools == 0 })
	points = append(points, read("pools dropped"))

	base := points[0]
	after := points[1]
	b.ReportMetric(float64(after.heapInuse), "heap-after-B")
	b.ReportMetric(float64(points[2].heapInuse), "heap-idle-B")
	b.ReportMetric(float64(points[3].heapInuse), "heap-dropped-B")
	b.ReportMetric((float64(after.heapInuse)-float64(base.heapInuse))/float64(n), "heap-per-project-B")
	b.ReportMetric(float64(after.conns), "sessions-after")
	b.ReportMetric(points[2].at.Seconds(), "s-to-sessions-closed")
	b.ReportMetric(points[3].at.Seconds(), "s-to-pools-dropped")
	b.Logf("%d projects provisioned in %.0f s (%d spares); select 1 on each through RunSQL in %.2f s", n, provisioned.Seconds(), spares, queried.Seconds())
	for _, pt := range points {
		b.Logf("%-18s t+%5.1f s: pools %3d sessions %3d | Go HeapInuse %6.1f MiB (%+7.1f KiB/project) HeapAlloc %6.1f MiB, %d goroutines | projects' PSS %6.0f MiB (%+6.2f MiB/project), %d processes",
			pt.name, pt.at.Seconds(), pt.pools, pt.conns, mib(pt.heapInuse), (float64(pt.heapInuse)-float64(base.heapInuse))/1024/float64(n),
			mib(pt.heapAlloc), pt.goroutines, pt.pssKB/1024, (pt.pssKB-base.pssKB)/1024/float64(n), pt.procs)
	}
	var kinds []string
	for k, kb := range points[3].kindKB {
		if d := kb - base.kindKB[k]; d > 1024 || d < -1024 {
			kinds = append(kinds, fmt.Sprintf("%s %+.0f", k, d/1024))
		}
	}
	slices.Sort(kinds)
	b.Logf("PSS change by process kind, pools dropped vs before the queries (MiB): %s; load average after: %s", strings.Join(kinds, ", "), loadavg())
}

// pssByKind adds the PSS (kB) of the project's postmaster, its children and its PgBouncer to kb by process
// kind (the title PostgreSQL gives a process, "backend" for a client's session), and counts them in procs.
func pssByKind(e *appliancetest.Env, projectID string, kb map[string]float64, procs *int) error {
	var inst *store.Instance
	err := e.DB.View(func(tx *store.Tx) error {
		prj, err := store.Projects.Get(tx, projectID)
		if err == nil {
			inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID)
		}
		return err
	})
	if err != nil {
		return err
	}
	pm, err := pidFromFile(filepath.Join(inst.Dir, "pgdata", "postmaster.pid"))
	if err != nil {
		return err
	}
	pgb, err := pidFromFile(filepath.Join(inst.Dir, "pooler", "pgbouncer.pid"))
	if err != nil {
		return err
	}
	for _, pid := range append(descendants(pm), pm, pgb) {
		pss, _, err := rollupKB(pid)
		if err != nil {
			return err
		}
		kind := "backend"
		switch pid {
		case pm:
			kind = "postmaster"
		case pgb:
			kind = "pgbouncer"
		default:
			raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			// "postgres: <cluster_name>: checkpointer", "postgres: <cluster_name>: <user> <db> <host>(<port>) idle"
			title := strings.TrimPrefix(strings.TrimRight(string(raw), "\x00"), "postgres: ")
			if _, rest, ok := strings.Cut(title, ": "); ok {
				title = rest
			}
			for _, aux := range []string{"checkpointer", "background writer", "walwriter", "autovacuum launcher", "autovacuum worker",
				"archiver", "logger", "logical replication launcher", "stats"} {
				if strings.HasPrefix(title, aux) {
					kind = aux
				}
			}
		}
		kb[kind] += pss
		*procs++
	}
	return nil
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
