package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/observe"
	"github.com/theappliance/appliance/appliance/pgstat"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/httpapi"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// The observability benchmarks (README.md "Observability benchmarks"): the sampler's sweep over 1, 20 and
// 100 running projects next to a naive collector, and the history read of a full 30 days of points next to
// the same points stored as JSON.

// benchClock is the service's clock in these benchmarks: the real time moved forward by offset, or a
// frozen instant (between the sampler's sweeps, each moving it a SampleInterval, so that every sweep stores
// a point and every 5th measures memory and snapshots pg_stat_statements; the history window).
type benchClock struct{ offset, frozen atomic.Int64 }

func (c *benchClock) now() time.Time {
	if f := c.frozen.Load(); f != 0 {
		return time.Unix(0, f).UTC()
	}
	return time.Now().Add(time.Duration(c.offset.Load())).UTC()
}

// freeze stops the clock where it is.
func (c *benchClock) freeze() { c.frozen.Store(c.now().UnixNano()) }

// advance moves the clock forward by d.
func (c *benchClock) advance(d time.Duration) {
	if c.frozen.Load() != 0 {
		c.frozen.Add(int64(d))
	} else {
		c.offset.Add(int64(d))
	}
}

// thaw lets a frozen clock run again from where it stood.
func (c *benchClock) thaw() {
	if f := c.frozen.Load(); f != 0 {
		c.offset.Store(f - time.Now().UnixNano())
		c.frozen.Store(0)
	}
}

// obsProject is what the benchmark itself needs of a sampled project: its admin login (for the naive
// collector and the SQL-alone reading) and its postmaster (for the servers' CPU and memory).
type obsProject struct {
	id, db   string
	inst     *store.Instance
	password string
	pm       int // postmaster pid
}

func loadObsProject(e *appliancetest.Env, id string) (obsProject, error) {
	o := obsProject{id: id}
	err := e.DB.View(func(tx *store.Tx) error {
		prj, err := store.Projects.Get(tx, id)
		if err != nil {
			return err
		}
		o.db = prj.DatabaseName
		o.inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID)
		return err
	})
	if err != nil {
		return o, err
	}
	pw, err := e.Box.Open(o.inst.AdminPassword)
	if err != nil {
		return o, err
	}
	o.password = string(pw)
	o.pm, err = pidFromFile(filepath.Join(o.inst.Dir, "pgdata", "postmaster.pid"))
	return o, err
}

// adminConnect connects as the admin role to the project's database, as the sampler does (loopback, no
// TLS, SCRAM).
func (o obsProject) adminConnect(ctx context.Context) (*pgx.Conn, error) {
	return (&postgres.Instance{ID: o.inst.ID, Port: o.inst.Port}).Connect(ctx, o.password, o.db)
}

// quietAdmin is an admin session set up as the sampler sets up its session (appliance's quietAdminConn:
// the five SETs of instances.Untracked, appliance/instances/quiet.go), with an application_name when name
// is not empty (the sampler sets none).
func (o obsProject) quietAdmin(ctx context.Context, name string) (*pgx.Conn, error) {
	conn, err := o.adminConnect(ctx)
	if err != nil {
		return nil, err
	}
	sets := []string{"SET pg_stat_statements.track = 'none'", "SET track_activities = off", "SET log_statement = 'none'",
		"SET log_min_duration_statement = -1", "SET log_min_error_statement = panic"}
	if name != "" {
		sets = append(sets, "SET application_name = "+quoteLit(name))
	}
	for _, set := range sets {
		if _, err := conn.Exec(ctx, set); err != nil {
			conn.Close(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	return conn, nil
}

func quoteLit(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// parallel calls fn(i) for i in [0, n) on workers goroutines (the sampler reads 4 servers at once).
func parallel(n, workers int, fn func(i int) error) error {
	next := atomic.Int64{}
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil && errs[w] == nil {
					errs[w] = err
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// selfCPU is this process's CPU time (user + system), what SampleSweepResult.CPU measures.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procTable is one pass over /proc/*/stat: each process's parent and its CPU ticks (utime + stime +
// cutime + cstime: a backend that exited is in its postmaster's cutime/cstime once waited for).
type procTable struct {
	ticks    map[int]uint64
	children map[int][]int
}

// serverTime is the CPU time of the projects' servers over a window: ticks from /proc/<pid>/stat (10 ms
// ticks; counts the backends that exited, in their postmaster's cutime/cstime) and sched from
// /proc/<pid>/schedstat (nanoseconds; only processes alive at both ends of the window, so a kept session is
// measured exactly and a process that started or exited meanwhile not at all).
type serverTime struct{ ticks, sched time.Duration }

// serverReading is the servers' processes at one moment: ticks summed, and each process's schedstat.
type serverReading struct {
	ticks uint64
	sched map[int]int64
	procs int
}

func (a serverReading) sub(b serverReading) serverTime {
	var sched int64
	for pid, ns := range a.sched {
		if old, ok := b.sched[pid]; ok {
			sched += ns - old
		}
	}
	return serverTime{ticks: time.Duration(a.ticks-b.ticks) * 10 * time.Millisecond, sched: time.Duration(sched)}
}

func readProcTable() procTable {
	t := procTable{ticks: map[int]uint64{}, children: map[int][]int{}}
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + ent.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:]) // f[0] state, f[1] ppid, f[11..14] utime stime cutime cstime
		if len(f) < 15 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		var ticks uint64
		for _, x := range f[11:15] {
			n, _ := strconv.ParseUint(x, 10, 64)
			ticks += n
		}
		t.ticks[pid] = ticks
		t.children[ppid] = append(t.children[ppid], pid)
	}
	return t
}

// tree lists root and its descendants.
func (t procTable) tree(root int) []int {
	out := []int{root}
	for i := 0; i < len(out); i++ {
		out = append(out, t.children[out[i]]...)
	}
	return out
}

// serverCPU reads the CPU time of the postmasters and all their descendants.
func serverCPU(pms []int) serverReading {
	t := readProcTable()
	r := serverReading{sched: map[int]int64{}}
	for _, pm := range pms {
		for _, pid := range t.tree(pm) {
			r.ticks += t.ticks[pid]
			r.procs++
			if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat"); err == nil {
				if f := strings.Fields(string(b)); len(f) > 0 {
					r.sched[pid], _ = strconv.ParseInt(f[0], 10, 64)
				}
			}
		}
	}
	return r
}

// provisionObs grows the appliance to n active projects (all enqueued at once, the job runner's 4 workers
// provision them), each given BENCH_STATEMENTS distinct statements run once as the project's role over its
// direct URL, so that pg_stat_statements has something to snapshot.
func provisionObs(b *testing.B, e *appliancetest.Env, p *appliance.Principal, have []obsProject, n, stmts int) []obsProject {
	ctx := b.Context()
	var jobs, ids []string
	for i := len(have); i < n; i++ {
		res, err := e.Svc.CreateProject(ctx, p, &appliance.CreateProjectRequest{Name: fmt.Sprintf("obs %03d", i), Environment: "development"})
		if err != nil {
			b.Fatal(err)
		}
		jobs, ids = append(jobs, res.Job.ID), append(ids, res.Project.ID)
	}
	for _, j := range jobs {
		if job := e.WaitJob(b, j); job.State != scheduler.StateCompleted {
			b.Fatalf("provision: %s", job.Error)
		}
	}
	for _, id := range ids {
		o, err := loadObsProject(e, id)
		if err != nil {
			b.Fatal(err)
		}
		if err := obsWorkload(ctx, e, p, id, stmts); err != nil {
			b.Fatal(err)
		}
		have = append(have, o)
	}
	return have
}

// obsWorkload creates a table of 1,000 rows and runs stmts distinct statements on it once, as the
// project's role (direct URL: TLS, SCRAM).
func obsWorkload(ctx context.Context, e *appliancetest.Env, p *appliance.Principal, id string, stmts int) error {
	c, err := e.Svc.ProjectConnections(ctx, p, id)
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, c.Connections.DirectURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, q := range []string{"CREATE TABLE IF NOT EXISTS bench_obs (id int PRIMARY KEY, v text)",
		"INSERT INTO bench_obs SELECT g, md5(g::text) FROM generate_series(1, 1000) g ON CONFLICT DO NOTHING"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return err
		}
	}
	for i := range stmts {
		// The alias makes each a statement of its own for pg_stat_statements (constants are normalised).
		if _, err := conn.Exec(ctx, fmt.Sprintf("SELECT count(*) AS c%d FROM bench_obs WHERE id > %d", i, i)); err != nil {
			return err
		}
	}
	return nil
}

// sweepFigures is one measured window.
type sweepFigures struct {
	cpu, wall time.Duration // this process (ours: the sweep's own SampleSweepResult.CPU and Duration)
	server    serverTime    // the servers, read before the window and after its backends exited
	swall     time.Duration // the wall time between those two readings
	stmts     int           // ours: the projects whose pg_stat_statements the sweep snapshotted
	gone      time.Duration // how long the backends the window opened took to exit after it
}

// BenchmarkObservabilitySampler: the sampler's sweep (observe.Service.Sample) over
// BENCH_SAMPLER_PROJECTS (1,20,100) running free-plan projects, grown on one appliance (sub-benchmark
// projects=N), each with BENCH_SESSIONS (0) idle client sessions. After a baseline sweep, BENCH_SWEEPS (20)
// rounds each run, in alternating order, one sweep of ours (the clock, frozen between sweeps, moved a
// SampleInterval: every sweep stores a point and every project's memory, PSS read for the fifth of its
// processes whose turn it is; each project's pg_stat_statements is snapshotted every 5th sweep, in the
// sweeps of its phase — checked in the store after each sweep) and one of a naive collector (a new admin
// connection per project, pgstat.ReadCounters, close; 4 at once like the sampler), then six parts of a
// sweep by themselves: pgstat.Measure of every project without memory, with every process's PSS
// (&pgstat.Memory{}), and with a kept pgstat.Memory{Every: 5} per project as the sampler's, ReadCounters
// on a fresh session set up as the sampler's (connect with untracked's settings, close), ReadCounters on
// kept admin sessions of the benchmark's own, and ReadStatements on those. Each window's CPU time in
// this process (getrusage: what SampleSweepResult.CPU measures) and in the projects' servers (the
// postmasters' process trees: /proc ticks and schedstat), less their idle rates measured over
// BENCH_IDLE_SECONDS (5) before the rounds. After every window that opens sessions, the benchmark waits
// until no admin backend of it is left on any server (the benchmark's own kept sessions aside) and says
// how long that took; at the end, with its kept sessions closed, none of the admin role is left at all.
// The memory the sampler stores is compared with a Measure of every process of the same servers after the sweep.
func BenchmarkObservabilitySampler(b *testing.B) {
	sizes := envInts(b, "BENCH_SAMPLER_PROJECTS", []int{1, 20, 100})
	rounds := envInt(b, "BENCH_SWEEPS", 20)
	stmts := envAtLeast(b, "BENCH_STATEMENTS", 20, 0)
	spares := envAtLeast(b, "BENCH_SPARES", 0, 0)
	sessions := envAtLeast(b, "BENCH_SESSIONS", 0, 0)
	idle := time.Duration(envInt(b, "BENCH_IDLE_SECONDS", 5)) * time.Second
	maxN := slices.Max(sizes)
	if q := appliance.DefaultOrganizationQuota; q.ProjectsLimit < maxN {
		appliance.DefaultOrganizationQuota.ProjectsLimit = maxN
		b.Cleanup(func() { appliance.DefaultOrganizationQuota = q })
	}
	e := appliancetest.New(b, appliancetest.Options{Instances: true, Spares: spares, Ports: 2*(maxN+spares) + 48}) // slack: a port of the range something else holds is skipped
	p, err := e.Svc.Identity().Authenticate(b.Context(), e.Bootstrap.APIKey)
	if err != nil {
		b.Fatal(err)
	}
	clk := &benchClock{}
	e.Clock.Set(clk.now)
	detail := detailLog(b)
	var prjs []obsProject
	var idleSessions []*pgx.Conn
	b.Cleanup(func() {
		for _, c := range idleSessions {
			c.Close(context.Background())
		}
	})
	for _, n := range sizes {
		b.Run(fmt.Sprintf("projects=%d", n), func(b *testing.B) {
			load0 := loadavg()
			t0 := time.Now()
			fresh := n - len(prjs)
			prjs = provisionObs(b, e, p, prjs, n, stmts)
			provisioned := time.Since(t0)
			// BENCH_SESSIONS idle client sessions per project (backends Measure visits).
			for _, o := range prjs[n-fresh:] {
				c, err := e.Svc.ProjectConnections(b.Context(), p, o.id)
				if err != nil {
					b.Fatal(err)
				}
				for range sessions {
					conn, err := pgx.Connect(b.Context(), c.Connections.DirectURL)
					if err != nil {
						b.Fatal(err)
					}
					idleSessions = append(idleSessions, conn)
				}
			}
			samplerRun(b, e, p, clk, prjs[:n], n-fresh, rounds, idle, detail)
			b.Logf("%d projects (%d provisioned in %.0f s, %d statements and %d idle client sessions each); load average before %s, after %s",
				n, fresh, provisioned.Seconds(), stmts, sessions, load0, loadavg())
		})
	}
}

// adminBackends lists the children of the postmasters pms that are backends of the admin role (their
// process title names it) or are exiting (a zombie's cmdline is empty), less the pids in skip.
func adminBackends(pms []int, skip map[int]bool) []int {
	var out []int
	for _, pm := range pms {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pm, pm)) // read whole: one read(2) gives a page at most
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(raw)) {
			pid, _ := strconv.Atoi(f)
			if pid == 0 || skip[pid] {
				continue
			}
			cmd, err := os.ReadFile("/proc/" + f + "/cmdline")
			if err != nil { // gone meanwhile
				continue
			}
			if len(cmd) == 0 || strings.Contains(string(cmd), ": "+postgres.AdminRole+" ") {
				out = append(out, pid)
			}
		}
	}
	return out
}

// sampledBefore is how many of prjs (the first ones) the sweeps of a smaller size sampled already.
func samplerRun(b *testing.B, e *appliancetest.Env, p *appliance.Principal, clk *benchClock, prjs []obsProject, sampledBefore, rounds int, idle time.Duration, detail io.Writer) {
	ctx := b.Context()
	n := len(prjs)
	pms := make([]int, n)
	for i, o := range prjs {
		pms[i] = o.pm
	}
	time.Sleep(idleFor)

	var skip map[int]bool // the benchmark's own kept admin sessions
	// settle waits until no admin backend but the benchmark's kept ones is left on any server, nor a child
	// exiting (so that the servers' reading after a window has the exited backends' CPU in their
	// postmaster's cutime), and says how long that took.
	settle := func() time.Duration {
		t0 := time.Now()
		for {
			left := adminBackends(pms, skip)
			if len(left) == 0 {
				return time.Since(t0)
			}
			if time.Since(t0) > 10*time.Second {
				b.Fatalf("%d admin backends (or exiting children) still on the servers 10 s after the window: %v", len(left), left)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	sweep := func() observe.SampleSweepResult {
		res, err := e.Svc.Observe().Sample(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if res.Projects != n || res.Failed != 0 {
			b.Fatalf("sweep: %d projects sampled, %d failed, want %d", res.Projects, res.Failed, n)
		}
		return res
	}
	// stored is what the store holds after the sweep at `at`: how many projects got a history point at that
	// time with their memory, each project's memory figure, and which projects' statements it snapshotted
	// (ObservabilityState.StatementsAt).
	stored := func(at time.Time) (measured int, mem []int64, snapped []bool) {
		mem, snapped = make([]int64, n), make([]bool, n)
		for i, o := range prjs {
			h, err := e.Svc.Observe().History(ctx, p, o.id, 1)
			if err != nil {
				b.Fatal(err)
			}
			if k := len(h.Samples); k > 0 && h.Samples[k-1].SampledAt.Equal(at) && h.Samples[k-1].MemUsageBytes > 0 {
				measured++
				mem[i] = h.Samples[k-1].MemUsageBytes
			}
		}
		if err := e.DB.View(func(tx *store.Tx) error {
			for i, o := range prjs {
				st, err := store.ObservabilityStates.Get(tx, o.id)
				if err != nil {
					return err
				}
				snapped[i] = st.StatementsAt.Equal(at)
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		return measured, mem, snapped
	}
	// observer compares the memory the sampler stored (measured before its session opened, a fifth of the
	// processes read and the others carried) with a Measure of every process of the same servers now, its
	// session gone: MiB per project, stored minus now.
	var observer, storedMiB []float64
	compareMemory := func(mem []int64) {
		for i, pm := range pms {
			if mem[i] == 0 { // no point stored at that sweep (a project's first reading)
				continue
			}
			u, err := pgstat.Measure(pm, &pgstat.Memory{})
			if err != nil {
				b.Fatal(err)
			}
			observer = append(observer, float64(mem[i]-u.MemBytes)/(1<<20))
			storedMiB = append(storedMiB, float64(mem[i])/(1<<20))
		}
	}

	// The baseline: the first reading of the new projects. The clock moves a StatementSnapshotLate first,
	// so that every project's statements are snapshotted now (a new project's first snapshot is at once,
	// an older project's is late), and then in the sweeps of its phase; it stays frozen between sweeps.
	clk.advance(observe.StatementSnapshotLate)
	clk.freeze()
	defer clk.thaw()
	base := sweep()
	baseGone := settle()
	// A new project's first reading stores no point (nothing to compare it with): only the projects of the
	// sizes before have their memory in the history.
	measured, mem, _ := stored(base.At)
	if measured != sampledBefore || base.Statements != n {
		b.Fatalf("baseline sweep: memory stored for %d of the %d projects sampled before, statements snapshotted for %d of %d", measured, sampledBefore, base.Statements, n)
	}
	compareMemory(mem)
	fmt.Fprintf(detail, "projects=%d baseline sweep: cpu %v wall %v statements %d memory %d; backends gone after %v\n", n, base.CPU, base.Duration, base.Statements, measured, baseGone)

	// The benchmark's own kept admin sessions for the parts measured alone (prepared once: warm-up).
	kept := make([]*pgx.Conn, n)
	if err := parallel(n, 4, func(i int) (err error) {
		if kept[i], err = prjs[i].quietAdmin(ctx, "bench kept"); err != nil {
			return err
		}
		if _, err = pgstat.ReadCounters(ctx, kept[i], postgres.AdminRole); err != nil {
			return err
		}
		_, err = pgstat.ReadStatements(ctx, kept[i], prjs[i].db, postgres.AdminRole)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	skip = map[int]bool{}
	for _, c := range kept {
		skip[int(c.PgConn().PID())] = true
	}
	closeKept := func() {
		for _, c := range kept {
			if c != nil {
				c.Close(context.WithoutCancel(ctx))
			}
		}
		kept = nil
	}
	defer func() {
		if kept != nil {
			closeKept()
		}
	}()
	// The naive collector: a new admin connection per project, the counters, close.
	naive := func() error {
		return parallel(n, 4, func(i int) error {
			conn, err := prjs[i].adminConnect(ctx)
			if err != nil {
				return err
			}
			defer conn.Close(context.WithoutCancel(ctx))
			_, err = pgstat.ReadCounters(ctx, conn, postgres.AdminRole)
			return err
		})
	}
	// The counters on a fresh session set up as the sampler's (appliance's quietAdminConn: connect with
	// untracked's settings as startup parameters), closed after.
	freshCounters := func() error {
		return parallel(n, 4, func(i int) error {
			conn, err := prjs[i].quietAdmin(ctx, "")
			if err != nil {
				return err
			}
			defer conn.Close(context.WithoutCancel(ctx))
			_, err = pgstat.ReadCounters(ctx, conn, postgres.AdminRole)
			return err
		})
	}
	for _, warm := range []func() error{naive, freshCounters} {
		if err := warm(); err != nil {
			b.Fatal(err)
		}
		settle()
	}

	// Idle rates: this process (the supervisor checks every process once a second, the job runner polls)
	// and the servers (background processes, autovacuum).
	cpuI0, srvI0, tI0 := selfCPU(), serverCPU(pms), time.Now()
	time.Sleep(idle)
	cpuI1, srvI1, idleWall := selfCPU(), serverCPU(pms), time.Since(tI0)
	rate := func(d time.Duration) float64 { return float64(d) / float64(idleWall) } // CPU seconds per second
	idleSelf, idleSrv := rate(cpuI1-cpuI0), srvI1.sub(srvI0)
	serverProcs := srvI1.procs
	idleTicks, idleSched := rate(idleSrv.ticks), rate(idleSrv.sched)
	net := func(d, wall time.Duration, rate float64) time.Duration { return d - time.Duration(rate*float64(wall)) }

	var ours, ref, measure, measureMem, measureRoll, freshC, keptC, stm []sweepFigures
	// lastSnap is the sweep (0: the baseline) of each project's last statement snapshot; rolling, the
	// pgstat.Memory of each project for the part measured alone.
	lastSnap, rolling := make([]int, n), make([]*pgstat.Memory, n)
	for i := range rolling {
		rolling[i] = &pgstat.Memory{Every: int(observe.MemoryInterval / observe.SampleInterval)}
	}
	// window measures fn: this process's CPU and wall time, and the servers' CPU, read outside the CPU
	// window (for one that opens sessions, after its backends exited).
	window := func(fn func() error, opens bool) sweepFigures {
		s0 := serverCPU(pms)
		w0 := time.Now()
		c0, t0 := selfCPU(), time.Now()
		if err := fn(); err != nil {
			b.Fatal(err)
		}
		f := sweepFigures{cpu: selfCPU() - c0, wall: time.Since(t0)}
		if opens {
			f.gone = settle()
		}
		f.swall = time.Since(w0)
		f.server = serverCPU(pms).sub(s0)
		return f
	}
	for r := range rounds {
		for k := range 2 {
			if (k+r)%2 == 0 { // ours first in even rounds
				clk.advance(observe.SampleInterval)
				var res observe.SampleSweepResult
				f := window(func() error { res = sweep(); return nil }, true)
				f.cpu, f.wall = res.CPU, res.Duration
				k := len(ours) + 1 // sweeps after the baseline
				measured, mem, snapped := stored(res.At)
				f.stmts = res.Statements
				if measured != n {
					b.Fatalf("sweep %d after the baseline: memory stored for %d of %d projects", k, measured, n)
				}
				// The second snapshot comes in the sweep of the project's phase at least half an interval
				// after the first (sweeps 3 to 7), the next ones every 5th sweep.
				for i, now := range snapped {
					gap := k - lastSnap[i]
					switch {
					case now && lastSnap[i] == 0 && (gap < 3 || gap > 7), now && lastSnap[i] > 0 && gap != 5, !now && gap >= 7:
						b.Fatalf("sweep %d after the baseline: project %d snapshotted %v, its last snapshot at sweep %d", k, i, now, lastSnap[i])
					case now:
						lastSnap[i] = k
						f.stmts--
					}
				}
				if f.stmts != 0 {
					b.Fatalf("sweep %d: %d statement snapshots reported, the store has %d", k, res.Statements, res.Statements-f.stmts)
				}
				f.stmts = res.Statements
				if k%5 == 0 {
					compareMemory(mem)
				}
				ours = append(ours, f)
				fmt.Fprintf(detail, "projects=%d round %d ours: cpu %v wall %v server %v (ticks) statements %d; backends gone after %v\n",
					n, r, f.cpu, f.wall, f.server.ticks, f.stmts, f.gone)
			} else {
				f := window(naive, true)
				ref = append(ref, f)
				fmt.Fprintf(detail, "projects=%d round %d naive: cpu %v wall %v server %v (ticks); backends gone after %v\n", n, r, f.cpu, f.wall, f.server.ticks, f.gone)
			}
		}
		measureAll := func(memory func(i int) *pgstat.Memory) func() error {
			return func() error {
				for i, pm := range pms {
					m := memory(i)
					u, err := pgstat.Measure(pm, m)
					if err != nil {
						return err
					}
					if u.CPUSeconds <= 0 || (m != nil) != (u.MemBytes > 0) {
						return fmt.Errorf("Measure(%d, %+v): %+v", pm, m, u)
					}
				}
				return nil
			}
		}
		measure = append(measure, window(measureAll(func(int) *pgstat.Memory { return nil }), false))
		measureMem = append(measureMem, window(measureAll(func(int) *pgstat.Memory { return &pgstat.Memory{} }), false))
		measureRoll = append(measureRoll, window(measureAll(func(i int) *pgstat.Memory { return rolling[i] }), false))
		freshC = append(freshC, window(freshCounters, true))
		keptC = append(keptC, window(func() error {
			return parallel(n, 4, func(i int) error { _, err := pgstat.ReadCounters(ctx, kept[i], postgres.AdminRole); return err })
		}, false))
		stm = append(stm, window(func() error {
			return parallel(n, 4, func(i int) error {
				_, err := pgstat.ReadStatements(ctx, kept[i], prjs[i].db, postgres.AdminRole)
				return err
			})
		}, false))
		fmt.Fprintf(detail, "projects=%d round %d parts: Measure cpu %v, Measure+memory cpu %v, rolling %v; counters fresh cpu %v server %v (ticks), kept cpu %v server %v; statements cpu %v server %v\n",
			n, r, measure[r].cpu, measureMem[r].cpu, measureRoll[r].cpu, freshC[r].cpu, freshC[r].server.ticks, keptC[r].cpu, keptC[r].server.sched, stm[r].cpu, stm[r].server.sched)
	}

	// No admin backend left: the benchmark's own kept sessions closed, none of the admin role may remain on
	// any server.
	closeKept()
	skip = nil
	endGone := settle()
	if left := adminBackends(pms, nil); len(left) > 0 {
		b.Fatalf("admin backends left on the servers after the last sweep: %v", left)
	}

	// Figures: medians of this process's CPU per window; the servers' CPU summed over a side's windows,
	// less the idle rate over their wall time, per project and window.
	med := func(fs []sweepFigures, keep func(sweepFigures) bool, idleRate float64) (cpu, wall time.Duration, k int) {
		var cs, ws []time.Duration
		for _, f := range fs {
			if keep == nil || keep(f) {
				cs, ws = append(cs, net(f.cpu, f.wall, idleRate)), append(ws, f.wall)
			}
		}
		if len(cs) == 0 {
			return 0, 0, 0
		}
		return median(cs), median(ws), len(cs)
	}
	srvPer := func(fs []sweepFigures) (ticks, sched time.Duration) {
		var st serverTime
		var wall time.Duration
		for _, f := range fs {
			st.ticks, st.sched, wall = st.ticks+f.server.ticks, st.sched+f.server.sched, wall+f.swall
		}
		k := time.Duration(max(1, len(fs)*n))
		return net(st.ticks, wall, idleTicks) / k, net(st.sched, wall, idleSched) / k
	}
	gones := func(fs []sweepFigures) (med, most time.Duration) {
		var gs []time.Duration
		for _, f := range fs {
			gs = append(gs, f.gone)
		}
		return median(gs), slices.Max(gs)
	}
	plain := func(f sweepFigures) bool { return f.stmts == 0 }
	snaps := func(f sweepFigures) bool { return f.stmts > 0 }
	oursCPU, oursWall, kAll := med(ours, nil, 0)
	oursNet, _, _ := med(ours, nil, idleSelf)
	plainCPU, _, kPlain := med(ours, plain, 0)
	snapCPU, _, kSnap := med(ours, snaps, 0)
	var most, refMost time.Duration // the most expensive sweep of each side
	var perSweep []float64          // snapshots per sweep
	for _, f := range ours {
		most = max(most, f.cpu)
		perSweep = append(perSweep, float64(f.stmts))
	}
	for _, f := range ref {
		refMost = max(refMost, f.cpu)
	}
	refCPU, refWall, _ := med(ref, nil, 0)
	mCPU, _, _ := med(measure, nil, 0)
	mmCPU, _, _ := med(measureMem, nil, 0)
	mrCPU, _, _ := med(measureRoll, nil, 0)
	freshCPU, freshWall, _ := med(freshC, nil, 0)
	keptCPU, _, _ := med(keptC, nil, 0)
	stmCPU, _, _ := med(stm, nil, 0)
	var ratios []float64
	for i := range min(len(ours), len(ref)) {
		ratios = append(ratios, float64(ours[i].cpu)/float64(ref[i].cpu))
	}
	per := func(d time.Duration) float64 { return ms(d) / float64(n) }
	oursTicks, _ := srvPer(ours)
	refTicks, _ := srvPer(ref)
	freshTicks, _ := srvPer(freshC)
	_, keptSched := srvPer(keptC)
	_, stmSched := srvPer(stm)
	goneOurs, goneOursMax := gones(ours)
	goneRef, goneRefMax := gones(ref)
	b.ReportMetric(per(oursCPU), "cpu-ms/project")
	b.ReportMetric(per(most), "cpu-ms/project-max")
	b.ReportMetric(ms(oursWall), "wall-ms/sweep")
	b.ReportMetric(per(refCPU), "naive-cpu-ms/project")
	b.ReportMetric(float64(oursCPU)/float64(refCPU), "cpu-ratio")
	b.ReportMetric(ms(oursTicks), "server-cpu-ms/project")
	b.ReportMetric(ms(refTicks), "naive-server-cpu-ms/project")
	b.ReportMetric(medianF(observer), "stored-minus-fresh-MiB/project")
	b.Logf("ours, median of %d sweeps: %.2f ms CPU = %.3f ms per project (%.3f net of the process's idle %.1f ms/s), wall %.1f ms; the most expensive sweep %.3f ms per project (goal < 5); %d sweeps without a statement snapshot: %.3f ms per project, %d with (median %.0f snapshots a sweep): %.3f ms per project",
		kAll, ms(oursCPU), per(oursCPU), per(oursNet), idleSelf*1000, ms(oursWall), per(most), kPlain, per(plainCPU), kSnap, medianF(perSweep), per(snapCPU))
	b.Logf("naive (new connection per project + ReadCounters): %.2f ms CPU per sweep = %.3f ms per project (the most expensive %.3f), wall %.1f ms; ours/naive CPU %.3f (median of per-round ratios: %.3f)",
		ms(refCPU), per(refCPU), per(refMost), ms(refWall), float64(oursCPU)/float64(refCPU), medianF(ratios))
	b.Logf("parts alone, per project: Measure %.3f ms, with every process's PSS %.3f ms, with the rolling PSS %.3f ms (%.1f server processes per project); ReadCounters on a fresh session %.3f ms (wall %.1f ms per sweep), on a kept one %.3f ms; ReadStatements %.3f ms; a sweep less fresh ReadCounters and rolling Measure: %.3f ms",
		per(mCPU), per(mmCPU), per(mrCPU), float64(serverProcs)/float64(n), per(freshCPU), ms(freshWall), per(keptCPU), per(stmCPU), per(oursCPU-freshCPU-mrCPU))
	b.Logf("servers' CPU per project per window (idle rate removed: %.1f ms/s ticks, %.1f ms/s schedstat): ours %.3f ms, naive %.3f ms, fresh ReadCounters %.3f ms (ticks); kept ReadCounters %.3f ms, ReadStatements %.3f ms (schedstat)",
		idleTicks*1000, idleSched*1000, ms(oursTicks), ms(refTicks), ms(freshTicks), ms(keptSched), ms(stmSched))
	b.Logf("admin backends: the sampler's gone %.1f ms after a sweep (median; at most %.1f), the naive collector's %.1f ms (at most %.1f); none left on the %d servers at the end (the benchmark's own gone after %.1f ms); memory stored per project %.1f MiB, stored minus a fresh reading %.2f MiB (median of %d)",
		ms(goneOurs), ms(goneOursMax), ms(goneRef), ms(goneRefMax), n, ms(endGone), medianF(storedMiB), medianF(observer), len(observer))
	b.Logf("baseline sweep: %.1f ms CPU, wall %.1f ms", ms(base.CPU), ms(base.Duration))
}

// envInts is a comma-separated list of positive integers in the environment variable name, sorted (def
// when unset).
func envInts(b *testing.B, name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			b.Fatalf("%s=%q: want positive integers separated by commas", name, v)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// detailLog is the file named by BENCH_DETAIL (appended to), for the per-sweep figures the testing package
// would cut (it keeps 10 lines of a benchmark's log); io.Discard without it.
func detailLog(b *testing.B) io.Writer {
	path := os.Getenv("BENCH_DETAIL")
	if path == "" {
		return io.Discard
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return f
}

// BenchmarkObservabilityHistory: GET …/observability/history?hours=720 of a project holding a full 30
// days of points (BENCH_HISTORY_POINTS, 43,200 one-minute samples). One real point is taken by the sampler
// (a baseline sweep, some work, a sweep a minute later on the moved clock); its stored bytes (the real
// encoding, read back with Series.Last) are put again at 43,200 timestamps one minute apart ending at the
// clock, which is then frozen. The same points are also stored as JSON records (json.Marshal of the
// ObservabilitySample, what a store table keeps) in the same bucket under another key: the reference reads
// the window with the same Series.Range, json.Unmarshal of each, and the same downsampling (a copy).
// BENCH_ROUNDS (10) rounds each time BENCH_HISTORY_CALLS (20) calls of every case in a rotating order:
// Service.History 720 h and 24 h, the JSON reference 720 h, the HTTP GET through the real API handler
// (plain HTTP on loopback, keep-alive, JSON encoding, body read whole) for 720 h and 24 h.
func BenchmarkObservabilityHistory(b *testing.B) {
	points := envInt(b, "BENCH_HISTORY_POINTS", 30*24*60)
	rounds, calls := envInt(b, "BENCH_ROUNDS", 10), envInt(b, "BENCH_HISTORY_CALLS", 20)
	e, p, prj := previewEnv(b, 0, "free")
	ctx := b.Context()
	clk := &benchClock{}
	e.Clock.Set(clk.now)

	// One real point with some activity in it.
	if _, err := e.Svc.Observe().Sample(ctx); err != nil {
		b.Fatal(err)
	}
	if err := obsWorkload(ctx, e, p, prj.ID, 20); err != nil {
		b.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		ok := false
		err := e.Svc.AdminQueryRow(ctx, prj.ID, "SELECT tup_inserted >= 1000 FROM pg_stat_database WHERE datname = current_database()", nil, &ok)
		if err == nil && ok {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the server's statistics never showed the inserts (%v)", err)
		}
	}
	clk.advance(observe.SampleInterval)
	if res, err := e.Svc.Observe().Sample(ctx); err != nil || res.Projects != 1 {
		b.Fatalf("sweep: %+v %v", res, err)
	}
	var last time.Time
	var value []byte
	if err := e.DB.View(func(tx *store.Tx) (err error) {
		last, value, err = store.ObservabilitySamples.Last(tx, prj.ID)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	clk.frozen.Store(last.UnixNano())
	one, err := e.Svc.Observe().History(ctx, p, prj.ID, 1)
	if err != nil || len(one.Samples) != 1 {
		b.Fatalf("history of the real point: %+v %v", one, err)
	}
	sample := one.Samples[0]

	// The 30 days: the real encoding under the project's key, JSON records under refKey.
	refKey := "bench-json-" + prj.ID
	fi0, _ := os.Stat(filepath.Join(e.Dir, "meta.db"))
	jsonBytes := 0
	t0 := time.Now()
	const batch = 3600
	for lo := 0; lo < points; lo += batch {
		err := e.DB.Update(func(tx *store.Tx) error {
			for i := lo; i < min(lo+batch, points); i++ {
				at := last.Add(-time.Duration(i) * time.Minute)
				if err := store.ObservabilitySamples.Put(tx, prj.ID, at, value); err != nil {
					return err
				}
				x := sample
				x.SampledAt = at
				js, err := json.Marshal(&x)
				if err != nil {
					return err
				}
				jsonBytes += len(js)
				if err := store.ObservabilitySamples.Put(tx, refKey, at, js); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	fi1, _ := os.Stat(filepath.Join(e.Dir, "meta.db"))
	filled := time.Since(t0)

	reference := func(hours int) ([]appliance.ObservabilitySample, error) {
		now := clk.now()
		var samples []appliance.ObservabilitySample
		err := e.DB.View(func(tx *store.Tx) error {
			if _, err := store.Projects.Get(tx, prj.ID); err != nil { // as History reads the project
				return err
			}
			samples = make([]appliance.ObservabilitySample, 0, hours*int(time.Hour/observe.SampleInterval)+1) // as History sizes it
			return store.ObservabilitySamples.Range(tx, refKey, now.Add(-time.Duration(hours)*time.Hour), now.Add(time.Nanosecond), func(_ time.Time, v []byte) error {
				var x appliance.ObservabilitySample
				if err := json.Unmarshal(v, &x); err == nil {
					samples = append(samples, x)
				}
				return nil
			})
		})
		return benchDownsample(samples, observe.MaxHistoryPoints), err
	}
	// Check: both give the same answer.
	h720, err := e.Svc.Observe().History(ctx, p, prj.ID, 720)
	if err != nil {
		b.Fatal(err)
	}
	r720, err := reference(720)
	if err != nil {
		b.Fatal(err)
	}
	if len(h720.Samples) != observe.MaxHistoryPoints || !reflect.DeepEqual(h720.Samples, r720) {
		b.Fatalf("history 720 h: %d samples; the JSON reference differs: %v", len(h720.Samples), !reflect.DeepEqual(h720.Samples, r720))
	}

	api := httptest.NewServer(httpapi.New(e.Svc, httpapi.Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}, Lane: e.Lane}))
	b.Cleanup(api.Close)
	client := api.Client()
	bodySize := map[int]int{}
	get := func(hours int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1/projects/%s/observability/history?hours=%d", api.URL, prj.ID, hours), nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+e.Bootstrap.APIKey)
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		var buf bytes.Buffer
		if _, err := io.Copy(&buf, res.Body); err != nil {
			return err
		}
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("GET history: %d %s", res.StatusCode, buf.Bytes())
		}
		bodySize[hours] = buf.Len()
		return nil
	}
	cases := []struct {
		name string
		do   func() error
	}{
		{"History 720 h", func() error { _, err := e.Svc.Observe().History(ctx, p, prj.ID, 720); return err }},
		{"JSON reference 720 h", func() error { _, err := reference(720); return err }},
		{"History 24 h", func() error { _, err := e.Svc.Observe().History(ctx, p, prj.ID, 24); return err }},
		{"HTTP GET 720 h", func() error { return get(720) }},
		{"HTTP GET 24 h", func() error { return get(24) }},
	}
	for _, c := range cases { // warm-up
		if err := c.do(); err != nil {
			b.Fatalf("%s: %v", c.name, err)
		}
	}
	lat := make([][]time.Duration, len(cases))
	cpu := make([]time.Duration, len(cases))
	alloc := make([]uint64, len(cases))
	roundP50 := make([][]time.Duration, len(cases))
	var ms0, ms1 runtime.MemStats
	for r := range rounds {
		for k := range cases {
			i := (k + r) % len(cases)
			runtime.ReadMemStats(&ms0)
			c0 := selfCPU()
			l := make([]time.Duration, 0, calls)
			for range calls {
				t := time.Now()
				if err := cases[i].do(); err != nil {
					b.Fatalf("%s: %v", cases[i].name, err)
				}
				l = append(l, time.Since(t))
			}
			cpu[i] += selfCPU() - c0
			runtime.ReadMemStats(&ms1)
			alloc[i] += ms1.TotalAlloc - ms0.TotalAlloc
			lat[i] = append(lat[i], l...)
			slices.Sort(l)
			roundP50[i] = append(roundP50[i], percentile(l, 50))
		}
	}
	p50 := make([]time.Duration, len(cases))
	var lines []string
	for i, c := range cases {
		slices.Sort(lat[i])
		p50[i] = percentile(lat[i], 50)
		k := len(lat[i])
		lines = append(lines, fmt.Sprintf("%s: p50 %.2f ms, p99 %.2f ms, CPU %.2f ms and %.1f MB allocated per call",
			c.name, ms(p50[i]), ms(percentile(lat[i], 99)), ms(cpu[i])/float64(k), float64(alloc[i])/float64(k)/1e6))
	}
	var ratios []float64
	for r := range rounds {
		ratios = append(ratios, float64(roundP50[0][r])/float64(roundP50[1][r]))
	}
	b.ReportMetric(ms(p50[0]), "history720-p50-ms")
	b.ReportMetric(ms(percentile(lat[0], 99)), "history720-p99-ms")
	b.ReportMetric(ms(p50[1]), "json720-p50-ms")
	b.ReportMetric(float64(p50[0])/float64(p50[1]), "p50-ratio")
	b.ReportMetric(ms(p50[3]), "http720-p50-ms")
	b.ReportMetric(ms(percentile(lat[3], 99)), "http720-p99-ms")
	b.Logf("%d points (value %d bytes; JSON %d bytes each), put in %.1f s; meta.db %d -> %d MB; %d rounds x %d calls per case; load average %s",
		points, len(value), jsonBytes/points, filled.Seconds(), fi0.Size()>>20, fi1.Size()>>20, rounds, calls, loadavg())
	b.Logf("%s; %s (ours/JSON p50 %.3f, per-round median %.3f)", lines[0], lines[1], float64(p50[0])/float64(p50[1]), medianF(ratios))
	b.Logf("%s; %s", lines[2], lines[3])
	b.Logf("%s; answer bodies: 720 h %d bytes, 24 h %d bytes; goal p50 <= 50 ms for 720 h", lines[4], bodySize[720], bodySize[24])
	b.Logf("p50 per round (ms): History 720 h %s; JSON 720 h %s; HTTP 720 h %s", joinMS3(roundP50[0]), joinMS3(roundP50[1]), joinMS3(roundP50[3]))
}

// benchDownsample is observe's downsample (appliance/observe/samples.go), copied for the JSON reference: buckets of
// consecutive samples, each one point at its newest sample's time, deadlocks and temp bytes summed, every
// other field averaged (integers rounded, numbers rounded to millionths).
func benchDownsample(in []appliance.ObservabilitySample, maxPoints int) []appliance.ObservabilitySample {
	if len(in) <= maxPoints {
		return in
	}
	ints := func(x *appliance.ObservabilitySample) [12]*int64 {
		return [12]*int64{&x.ActiveQueries, &x.BlockedQueries, &x.ConnectionLimit, &x.Connections, &x.DeadTuples, &x.Deadlocks,
			&x.MemLimitBytes, &x.MemUsageBytes, &x.SlowQueries, &x.StorageBytes, &x.StorageLimitBytes, &x.TempBytes}
	}
	floats := func(x *appliance.ObservabilitySample) [8]*float64 {
		return [8]*float64{&x.AvgQueryMS, &x.CacheHitRatio, &x.CPUCoresUsed, &x.CPUQuotaCores, &x.RollbackRatio,
			&x.RowsReadPerSec, &x.RowsWrittenPerSec, &x.TPS}
	}
	out := make([]appliance.ObservabilitySample, 0, maxPoints)
	for i := range maxPoints {
		lo, hi := i*len(in)/maxPoints, (i+1)*len(in)/maxPoints
		var acc appliance.ObservabilitySample
		var is [12]float64
		for k := lo; k < hi; k++ {
			for j, p := range ints(&in[k]) {
				is[j] += float64(*p)
			}
			af := floats(&acc)
			for j, p := range floats(&in[k]) {
				*af[j] += *p
			}
		}
		n := float64(hi - lo)
		for j, p := range ints(&acc) {
			if j == 5 || j == 11 { // Deadlocks, TempBytes
				*p = int64(is[j])
			} else {
				*p = int64(math.Round(is[j] / n))
			}
		}
		for _, p := range floats(&acc) {
			*p = math.Round(*p/n*1e6) / 1e6
		}
		acc.SampledAt = in[hi-1].SampledAt
		out = append(out, acc)
	}
	return out
}
