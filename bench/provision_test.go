// Package bench holds the appliance's benchmarks against the real stack (PostgreSQL, PgBouncer, the job
// runner). They only run with -bench: there are no Test functions here, so `go test ./...` compiles the
// package and runs nothing. See README.md for the commands and the numbers.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// envPorts is the size of an appliancetest.Env's port range; a project takes two ports (direct and pooled)
// and a spare cluster two (its instance and its pooler).
const envPorts = 40

// perEnv is how many projects one appliancetest.Env holds: the organization quota
// (appliance.DefaultOrganizationQuota.ProjectsLimit, 20) and the Env's port range both end there. More
// projects go to a further Env.
func perEnv(spares int) int {
	return min(appliance.DefaultOrganizationQuota.ProjectsLimit, (envPorts-2*spares)/2)
}

// pollInterval is how often the job's state is read from the store.
const pollInterval = 5 * time.Millisecond

// idleFor is how long the provisioned projects sit idle before their memory is read.
const idleFor = 2 * time.Second

// BenchmarkProvision measures, one project after the other, the wall time from CreateProject (what
// POST /v1/projects calls) to the first successful SELECT 1 over the project's direct_url, then the memory
// of the idle projects. BENCH_PROJECTS=n provisions exactly n projects whatever b.N is (use -benchtime 1x),
// so that p50 and p95 mean something.
//
// BENCH_SPARES=k (default 0: every provision runs initdb and starts a server) keeps k prepared clusters
// (appliancetest.Options.Spares) and, outside the measured time, waits before each provision until the pool
// is full again: the latency when a spare is at hand.
func BenchmarkProvision(b *testing.B) {
	spares := 0
	if v := os.Getenv("BENCH_SPARES"); v != "" {
		k, err := strconv.Atoi(v)
		if err != nil || k < 0 || k > envPorts-2 {
			b.Fatalf("BENCH_SPARES=%q: want an integer from 0 to %d", v, envPorts-2)
		}
		spares = k
	}
	runProvision(b, 1, spares)
}

// BenchmarkProvisionParallel is the same with BENCH_PARALLEL (default 4, the job runner's worker count)
// provisions in flight at once: the latency of each under load, and the throughput. It runs initdb for
// every project (no spare clusters).
func BenchmarkProvisionParallel(b *testing.B) {
	par := 4
	if v := os.Getenv("BENCH_PARALLEL"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("BENCH_PARALLEL=%q: want a positive integer", v)
		}
		par = n
	}
	runProvision(b, par, 0)
}

// sample is one provisioned project and its timings.
type sample struct {
	env     *appliancetest.Env
	project string
	total   time.Duration // CreateProject called -> first SELECT 1 returned
	phases  map[string]time.Duration
	steps   map[string]float64 // the job result's timings_ms, when the job reports them
	tries   int                // connection attempts until SELECT 1 succeeded
}

func runProvision(b *testing.B, par, spares int) {
	n := b.N
	if v := os.Getenv("BENCH_PROJECTS"); v != "" {
		c, err := strconv.Atoi(v)
		if err != nil || c < 1 {
			b.Fatalf("BENCH_PROJECTS=%q: want a positive integer", v)
		}
		n = c
	}
	ctx := b.Context()
	b.Logf("load average before: %s", loadavg())

	// Enough Envs for n projects, built before the clock starts.
	type envP struct {
		e *appliancetest.Env
		p *appliance.Principal
	}
	var envs []envP
	per := perEnv(spares)
	for i := 0; i < n; i += per {
		e := appliancetest.New(b, appliancetest.Options{Instances: true, Spares: spares})
		p, err := e.Svc.Identity().Authenticate(ctx, e.Bootstrap.APIKey)
		if err != nil {
			b.Fatal(err)
		}
		if err := waitSpares(ctx, e, spares); err != nil {
			b.Fatal(err)
		}
		envs = append(envs, envP{e, p})
	}
	if spares > 0 {
		b.Logf("%d spare clusters per appliance, refilled before each provision (outside the measured time)", spares)
	}

	samples := make([]*sample, n)
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range par {
		wg.Go(func() {
			for i := range next {
				ep := envs[i/per]
				if errs[i] = waitSpares(ctx, ep.e, spares); errs[i] != nil {
					continue
				}
				samples[i], errs[i] = provisionOne(ctx, ep.e, ep.p, fmt.Sprintf("bench %03d", i))
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	wall := time.Since(start)
	b.StopTimer()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	for _, ep := range envs { // no refill left running while memory is read and the Env is stopped
		if err := waitSpares(ctx, ep.e, spares); err != nil {
			b.Fatal(err)
		}
	}

	// Latency.
	totals := make([]time.Duration, n)
	var sum time.Duration
	retried := 0
	for i, s := range samples {
		totals[i], sum = s.total, sum+s.total
		if s.tries > 1 {
			retried++
		}
	}
	slices.Sort(totals)
	p50, p95, mx := percentile(totals, 50), percentile(totals, 95), totals[n-1]
	b.ReportMetric(float64(sum.Nanoseconds())/float64(n), "ns/op") // per provision, not per b.N iteration
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(p95), "p95-ms")
	b.ReportMetric(ms(mx), "max-ms")
	b.ReportMetric(float64(n), "projects")
	b.Logf("%d projects, %d at a time: CreateProject -> first SELECT 1 over direct_url: p50 %.0f ms, p95 %.0f ms, max %.0f ms, min %.0f ms, mean %.0f ms; %d needed more than one connection attempt",
		n, par, ms(p50), ms(p95), ms(mx), ms(totals[0]), ms(sum/time.Duration(n)), retried)
	if par > 1 {
		b.ReportMetric(float64(n)/wall.Seconds(), "projects/s")
		b.Logf("throughput: %d projects in %.2f s (%.2f projects/s)", n, wall.Seconds(), float64(n)/wall.Seconds())
	}
	b.Logf("load average after: %s", loadavg())
	logPhases(b, samples)
	all := make([]string, n)
	for i, s := range samples {
		all[i] = fmt.Sprintf("%.0f", ms(s.total))
	}
	b.Logf("each, in order (ms): %s", strings.Join(all, " "))

	// Memory of the idle projects.
	time.Sleep(idleFor)
	var rss, pss, uss, pgbRSS, pgbPSS float64
	procs := 0
	for _, s := range samples {
		m, err := projectMemory(ctx, s.env, s.project)
		if err != nil {
			b.Fatal(err)
		}
		rss, pss, uss, procs = rss+m.rss, pss+m.pss, uss+m.uss, procs+m.procs
		pgbRSS, pgbPSS = pgbRSS+m.poolerRSS, pgbPSS+m.poolerPSS
	}
	f := float64(n)
	b.ReportMetric(rss/f/1024, "rss-MB")
	b.ReportMetric(pss/f/1024, "pss-MB")
	b.ReportMetric(uss/f/1024, "uss-MB")
	b.Logf("idle project (instance + pooler), mean of %d after %s idle with all %d running: RSS %.1f MB, PSS %.1f MB, USS %.1f MB, %.1f processes; of which PgBouncer RSS %.1f MB, PSS %.1f MB",
		n, idleFor, n, rss/f/1024, pss/f/1024, uss/f/1024, float64(procs)/f, pgbRSS/f/1024, pgbPSS/f/1024)
}

// provisionOne creates a project, polls its job until it ends, then connects over direct_url until a
// SELECT 1 succeeds. It also reads the job's, the instance's and the instance files' times for a
// breakdown.
func provisionOne(ctx context.Context, e *appliancetest.Env, p *appliance.Principal, name string) (*sample, error) {
	t0 := time.Now()
	res, err := e.Svc.CreateProject(ctx, p, &appliance.CreateProjectRequest{Name: name, Environment: "development"})
	if err != nil {
		return nil, fmt.Errorf("create project %q: %w", name, err)
	}
	tCreated := time.Now()
	deadline := t0.Add(2 * time.Minute)
	var job *store.Job
	for {
		err := e.DB.View(func(tx *store.Tx) (err error) { job, err = store.Jobs.Get(tx, res.Job.ID); return err })
		if err != nil {
			return nil, err
		}
		if job.State == scheduler.StateCompleted {
			break
		}
		if job.State == scheduler.StateFailed {
			return nil, fmt.Errorf("provision %q: job failed: %s\nstderr: %s", name, job.Error, job.LastStderr)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("provision %q: job still %s after 2 minutes", name, job.State)
		}
		time.Sleep(pollInterval)
	}
	tJobSeen := time.Now()
	c, err := e.Svc.ProjectConnections(ctx, p, res.Project.ID)
	if err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(c.Connections.DirectURL)
	if err != nil {
		return nil, err
	}
	tries := 0
	for {
		tries++
		err := selectOne(ctx, cfg)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("provision %q: SELECT 1 over direct_url after %d attempts: %w", name, tries, err)
		}
		time.Sleep(pollInterval)
	}
	tSelect := time.Now()
	s := &sample{env: e, project: res.Project.ID, total: tSelect.Sub(t0), tries: tries}
	s.phases = phases(e, res.Project.ID, job, t0, tCreated, tJobSeen, tSelect)
	var result struct {
		Timings map[string]float64 `json:"timings_ms"`
	}
	if json.Unmarshal(job.Result, &result) == nil {
		s.steps = result.Timings
	}
	return s, nil
}

// waitSpares fills the Env's pool of spare clusters (EnsureSpares returns at once while a refill started by
// a provision is under way) and waits until it holds want.
func waitSpares(ctx context.Context, e *appliancetest.Env, want int) error {
	if want == 0 {
		return nil
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var have int
		err := e.DB.View(func(tx *store.Tx) error {
			s, err := store.Instances.All(tx, func(i *store.Instance) bool { return i.State == appliance.InstanceSpare })
			have = len(s)
			return err
		})
		if err != nil {
			return err
		}
		if have >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d spare clusters ready after 2 minutes", have, want)
		}
		if err := e.Svc.EnsureSpares(ctx); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func selectOne(ctx context.Context, cfg *pgx.ConnConfig) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return err
	}
	if one != 1 {
		return fmt.Errorf("SELECT 1 returned %d", one)
	}
	return nil
}

// phaseNames, in the order they happen. The marks between them come from the store (the job's start and
// end, the instance record's creation) and from the modification times of files the provision job leaves:
//
//	initialized         written when Instance.Init (initdb + TLS files + configuration) has completed
//	pgdata/postmaster.pid   last written by the postmaster when it is ready to accept connections
//	pooler/userlist.txt written after the roles and the database exist (the SCRAM verifiers for PgBouncer)
//	pooler/pgbouncer.pid    written when PgBouncer has daemonized
var phaseNames = []string{
	"api",           // CreateProject returns (project and job stored)
	"queue",         // -> the runner starts the job
	"record",        // -> the instance record (ports, directory, passwords) exists
	"init",          // -> Init done: initdb, TLS files, configuration
	"start",         // -> the postmaster is ready (pg_ctl start launched it)
	"roles+db",      // -> pg_ctl has noticed, admin connection, roles, CREATE DATABASE, extension, verifiers
	"pooler",        // -> PgBouncer started
	"finish",        // -> pooler seen listening, version read, store updated, supervised: job completed
	"poll",          // -> the benchmark sees the job completed
	"first-select1", // -> ProjectConnections, TLS connect, SCRAM, SELECT 1
}

func phases(e *appliancetest.Env, projectID string, job *store.Job, t0, tCreated, tJobSeen, tSelect time.Time) map[string]time.Duration {
	var inst *store.Instance
	_ = e.DB.View(func(tx *store.Tx) error {
		prj, err := store.Projects.Get(tx, projectID)
		if err != nil {
			return err
		}
		inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID)
		return err
	})
	if inst == nil || job.StartedAt == nil || job.CompletedAt == nil {
		return nil
	}
	mtime := func(rel string) time.Time {
		fi, err := os.Stat(filepath.Join(inst.Dir, rel))
		if err != nil {
			return time.Time{}
		}
		return fi.ModTime()
	}
	marks := []time.Time{t0, tCreated, *job.StartedAt, inst.CreatedAt, mtime("initialized"),
		mtime("pgdata/postmaster.pid"), mtime("pooler/userlist.txt"), mtime("pooler/pgbouncer.pid"),
		*job.CompletedAt, tJobSeen, tSelect}
	out := map[string]time.Duration{}
	for i, name := range phaseNames {
		// A mark out of order means the files predate this provision (a prepared cluster was reused).
		if marks[i].IsZero() || marks[i+1].IsZero() || marks[i+1].Before(marks[i]) {
			return nil
		}
		out[name] = marks[i+1].Sub(marks[i])
	}
	return out
}

func logPhases(b *testing.B, samples []*sample) {
	p50s, means := make([]string, 0, len(phaseNames)), make([]string, 0, len(phaseNames))
	for _, name := range phaseNames {
		var ds []time.Duration
		var sum time.Duration
		for _, s := range samples {
			if d, ok := s.phases[name]; ok {
				ds, sum = append(ds, d), sum+d
			}
		}
		if len(ds) == 0 {
			b.Logf("no breakdown from file times: the instance files could not be read or predate the provision")
			break
		}
		slices.Sort(ds)
		p50s = append(p50s, fmt.Sprintf("%s %.1f", name, ms(percentile(ds, 50))))
		means = append(means, fmt.Sprintf("%s %.1f", name, ms(sum/time.Duration(len(ds)))))
	}
	// One line each: the testing package keeps only 10 lines of a benchmark's log.
	if len(p50s) == len(phaseNames) {
		b.Logf("breakdown p50 (ms): %s", strings.Join(p50s, ", "))
		b.Logf("breakdown mean (ms): %s", strings.Join(means, ", "))
	}
	// The job's own step timings, when it records them in its result (timings_ms).
	steps := map[string][]float64{}
	var order []string
	for _, s := range samples {
		for k, v := range s.steps {
			if _, ok := steps[k]; !ok {
				order = append(order, k)
			}
			steps[k] = append(steps[k], v)
		}
	}
	if len(order) > 0 {
		slices.Sort(order)
		var parts []string
		for _, k := range order {
			v := steps[k]
			sum := 0.0
			for _, x := range v {
				sum += x
			}
			slices.Sort(v)
			parts = append(parts, fmt.Sprintf("%s %.0f/%.0f", k, v[(len(v)-1)/2], sum/float64(len(v))))
		}
		b.Logf("job timings_ms (median/mean): %s", strings.Join(parts, ", "))
	}
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	return sorted[max(rank, 1)-1]
}

// loadavg is /proc/loadavg's 1, 5 and 15 minute averages: other work on the machine skews the numbers.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// memory of one project's processes, in kB.
type memory struct {
	rss, pss, uss        float64
	poolerRSS, poolerPSS float64
	procs                int
}

// projectMemory sums the memory of the project's postmaster, all its descendants and its PgBouncer.
func projectMemory(ctx context.Context, e *appliancetest.Env, projectID string) (memory, error) {
	var m memory
	var inst *store.Instance
	err := e.DB.View(func(tx *store.Tx) error {
		prj, err := store.Projects.Get(tx, projectID)
		if err != nil {
			return err
		}
		inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID)
		return err
	})
	if err != nil {
		return m, err
	}
	pm, err := pidFromFile(filepath.Join(inst.Dir, "pgdata", "postmaster.pid"))
	if err != nil {
		return m, err
	}
	pgb, err := pidFromFile(filepath.Join(inst.Dir, "pooler", "pgbouncer.pid"))
	if err != nil {
		return m, err
	}
	pids := append(descendants(pm), pm)
	for _, pid := range append(pids, pgb) {
		rss, err := statusKB(pid, "VmRSS:")
		if err != nil {
			return m, err
		}
		pss, uss, err := rollupKB(pid)
		if err != nil {
			return m, err
		}
		m.rss, m.pss, m.uss, m.procs = m.rss+rss, m.pss+pss, m.uss+uss, m.procs+1
		if pid == pgb {
			m.poolerRSS, m.poolerPSS = rss, pss
		}
	}
	return m, nil
}

// pidFromFile reads the pid on the first line of a pid file (postmaster.pid, pgbouncer.pid).
func pidFromFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return pid, nil
}

// descendants lists the processes below pid, from the ppid field of /proc/*/stat.
func descendants(pid int) []int { return readProcTable().tree(pid)[1:] }

// statusKB reads a "Key:  n kB" line of /proc/<pid>/status.
func statusKB(pid int, key string) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	v, ok := kbField(string(b), key)
	if !ok {
		return 0, fmt.Errorf("/proc/%d/status has no %s", pid, key)
	}
	return v, nil
}

// rollupKB reads the proportional set size (Pss) and the unique set size (Private_Clean + Private_Dirty)
// of /proc/<pid>/smaps_rollup.
func rollupKB(pid int) (pss, uss float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0, err
	}
	s := string(b)
	pss, ok := kbField(s, "Pss:")
	if !ok {
		return 0, 0, fmt.Errorf("/proc/%d/smaps_rollup has no Pss", pid)
	}
	clean, _ := kbField(s, "Private_Clean:")
	dirty, _ := kbField(s, "Private_Dirty:")
	return pss, clean + dirty, nil
}

func kbField(s, key string) (float64, bool) {
	for line := range strings.Lines(s) {
		if rest, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0, false
			}
			v, err := strconv.ParseFloat(f[0], 64)
			return v, err == nil
		}
	}
	return 0, false
}
