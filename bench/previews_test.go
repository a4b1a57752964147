package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/previews"
	"github.com/theappliance/appliance/httpapi"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// previewEnv is an appliance with a data plane and one active project on plan.
func previewEnv(b *testing.B, spares int, plan string) (*appliancetest.Env, *appliance.Principal, *store.Project) {
	b.Helper()
	e := appliancetest.New(b, appliancetest.Options{Instances: true, Spares: spares})
	p, err := e.Svc.Identity().Authenticate(b.Context(), e.Bootstrap.APIKey)
	if err != nil {
		b.Fatal(err)
	}
	res, err := e.Svc.CreateProject(b.Context(), p, &appliance.CreateProjectRequest{Name: "bench", Environment: "development", Plan: plan})
	if err != nil {
		b.Fatal(err)
	}
	if j := e.WaitJob(b, res.Job.ID); j.State != scheduler.StateCompleted {
		b.Fatal(j.Error)
	}
	return e, p, e.Project(b, res.Project.ID)
}

// timePreview creates a preview and returns the time to its first SELECT 1 over its direct URL.
func timePreview(b *testing.B, e *appliancetest.Env, p *appliance.Principal, projectID, mode string) (time.Duration, string) {
	b.Helper()
	ctx := b.Context()
	t0 := time.Now()
	res, err := e.Svc.Previews().Create(ctx, p, projectID, &appliance.CreatePreviewRequest{Mode: mode})
	if err != nil {
		b.Fatal(err)
	}
	for deadline := t0.Add(10 * time.Minute); ; time.Sleep(pollInterval) {
		var j *store.Job
		e.DB.View(func(tx *store.Tx) (err error) { j, err = store.Jobs.Get(tx, res.Job.ID); return err })
		if j.State == scheduler.StateCompleted {
			if os.Getenv("BENCH_VERBOSE") != "" {
				b.Logf("%s: %s", j.Type, j.Result)
			}
			break
		}
		if j.State == scheduler.StateFailed || time.Now().After(deadline) {
			b.Fatalf("preview %s: %s %s", res.Preview.ID, j.State, j.Error)
		}
	}
	c, err := e.Svc.Previews().Connections(ctx, p, res.Preview.ID)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(c.Connections.DirectURL)
	if err != nil {
		b.Fatal(err)
	}
	for tries := 0; ; tries++ {
		if err := selectOne(ctx, cfg); err == nil {
			break
		} else if tries > 400 {
			b.Fatal(err)
		}
		time.Sleep(pollInterval)
	}
	return time.Since(t0), res.Preview.ID
}

// BenchmarkPreviewEmpty: an empty preview, POST → first SELECT 1, BENCH_DATABASES (20) one after the other
// with BENCH_SPARES (2) spare clusters refilled outside the measured time; each is deleted after.
func BenchmarkPreviewEmpty(b *testing.B) {
	n, spares := envInt(b, "BENCH_DATABASES", 20), envAtLeast(b, "BENCH_SPARES", 2, 0)
	// The free plan: its max_connections is a spare's, so taking a spare needs no restart (a bigger plan's
	// preview restarts the spare with the project's max_connections).
	e, p, prj := previewEnv(b, spares, "free")
	var totals []time.Duration
	for range n {
		if err := waitSpares(b.Context(), e, spares); err != nil {
			b.Fatal(err)
		}
		d, id := timePreview(b, e, p, prj.ID, previews.ModeEmpty)
		totals = append(totals, d)
		res, err := e.Svc.Previews().Delete(b.Context(), p, id)
		if err != nil {
			b.Fatal(err)
		}
		e.WaitJob(b, res.Job.ID)
	}
	slices.Sort(totals)
	b.Logf("%d empty previews (%d spare clusters kept): POST -> first SELECT 1: p50 %.0f ms, p95 %.0f ms, min %.0f ms, max %.0f ms",
		n, spares, ms(percentile(totals, 50)), ms(percentile(totals, 95)), ms(totals[0]), ms(totals[n-1]))
}

// BenchmarkPreviewClone: a project of BENCH_CLONE_MB (1024) MB; BENCH_ROUNDS (3) rounds, each timing in
// turn (the order rotates) a clone preview (POST → first SELECT 1), `cp -a` of the project's data
// directory, and a hand-run `pg_basebackup -X stream` of it, both as the instances' OS user.
func BenchmarkPreviewClone(b *testing.B) {
	rounds := envInt(b, "BENCH_ROUNDS", 3)
	e, p, prj, inst, size := cloneSource(b)
	ctx := b.Context()
	user, admin := sourceAccess(b, e, inst)
	scratch := appliancetest.TraversableTempDir(b)
	if err := user.Chown(scratch); err != nil { // the copies are made as the instances' user
		b.Fatal(err)
	}
	run := func(cmd *exec.Cmd) time.Duration {
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		return time.Since(t0)
	}
	kinds := []string{"preview", "cp -a", "pg_basebackup"}
	got := map[string][]time.Duration{}
	for r := range rounds {
		for k := range kinds {
			kind := kinds[(k+r)%len(kinds)]
			dst := filepath.Join(scratch, fmt.Sprintf("%d-%d", r, k))
			switch kind {
			case "preview":
				d, id := timePreview(b, e, p, prj.ID, previews.ModeClone)
				got[kind] = append(got[kind], d)
				res, err := e.Svc.Previews().Delete(ctx, p, id)
				if err != nil {
					b.Fatal(err)
				}
				e.WaitJob(b, res.Job.ID)
			case "cp -a":
				got[kind] = append(got[kind], run(user.Command("cp", "-a", filepath.Join(inst.Dir, "pgdata"), dst)))
			case "pg_basebackup":
				bb, err := e.Bin.Path("pg_basebackup")
				if err != nil {
					b.Fatal(err)
				}
				cmd := user.Command(bb, "-D", dst, "-F", "p", "-X", "stream", "--checkpoint=fast", "--no-password",
					"-h", "127.0.0.1", "-p", strconv.Itoa(inst.Port), "-U", "appliance_admin")
				cmd.Env = append(os.Environ(), "PGPASSWORD="+string(admin), "PGSSLMODE=disable")
				got[kind] = append(got[kind], run(cmd))
			}
			os.RemoveAll(dst)
		}
	}
	med := func(k string) time.Duration { return median(got[k]) }
	faster := min(med("cp -a"), med("pg_basebackup"))
	b.Logf("project of %d MB; medians of %d rounds: clone preview POST -> first SELECT 1 %.1f s, cp -a %.1f s, pg_basebackup %.1f s; preview / faster = %.2f (goal <= 1.2)",
		size>>20, rounds, med("preview").Seconds(), med("cp -a").Seconds(), med("pg_basebackup").Seconds(), float64(med("preview"))/float64(faster))
	for _, k := range kinds {
		b.Logf("%s: %s", k, joinMS(got[k]))
	}
}

// cloneSource is an appliance with a data plane and one free-plan project holding BENCH_CLONE_MB (1024)
// MB of table (~1 KB rows), its instance and its database's size.
// sourceAccess is what the hand-run references of a clone need: the instances' OS user and the admin password.
func sourceAccess(b *testing.B, e *appliancetest.Env, inst *store.Instance) (*daemon.OSUser, []byte) {
	b.Helper()
	user, err := daemon.DefaultOSUser()
	if err != nil {
		b.Fatal(err)
	}
	admin, err := e.Box.Open(inst.AdminPassword)
	if err != nil {
		b.Fatal(err)
	}
	return user, admin
}

func cloneSource(b *testing.B) (*appliancetest.Env, *appliance.Principal, *store.Project, *store.Instance, int64) {
	b.Helper()
	mb := envInt(b, "BENCH_CLONE_MB", 1024)
	e, p, prj := previewEnv(b, 0, "free")
	ctx := b.Context()
	c, err := e.Svc.ProjectConnections(ctx, p, prj.ID)
	if err != nil {
		b.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, c.Connections.DirectURL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE TABLE fill AS SELECT g, repeat(md5(g::text), 30) AS pad FROM generate_series(1, %d) g", mb*1000)); err != nil {
		b.Fatal(err)
	}
	var size int64
	if err := conn.QueryRow(ctx, "SELECT pg_database_size(current_database())").Scan(&size); err != nil {
		b.Fatal(err)
	}
	var inst *store.Instance
	if err := e.DB.View(func(tx *store.Tx) (err error) { inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID); return err }); err != nil {
		b.Fatal(err)
	}
	return e, p, prj, inst, size
}

// BenchmarkOnlineCopy: a clone's copy and first start without the job around them. For each number of
// workers in BENCH_COPY_WORKERS (1,2,4), with and without early writeback (BENCH_COPY_WRITEBACK: "on",
// "off" or "both", the default), BENCH_ROUNDS (3) rounds of postgres.Instance.OnlineCopy of the
// project's running server (cloneSource) into a new instance directory, then that instance's start (its
// recovery, PostgreSQL's sync of the copy first), then its removal. BENCH_COPY_CONF, when set, is appended
// to each copy's postgresql.auto.conf before its start (e.g. "fsync = off" to see what the sync costs).
func BenchmarkOnlineCopy(b *testing.B) {
	rounds := envInt(b, "BENCH_ROUNDS", 3)
	workers := envInts(b, "BENCH_COPY_WORKERS", []int{1, 2, 4})
	writeback := map[string][]bool{"on": {true}, "off": {false}, "both": {false, true}, "": {false, true}}[os.Getenv("BENCH_COPY_WRITEBACK")]
	if writeback == nil {
		b.Fatalf("BENCH_COPY_WRITEBACK=%q: want on, off or both", os.Getenv("BENCH_COPY_WRITEBACK"))
	}
	conf := os.Getenv("BENCH_COPY_CONF")
	e, _, _, inst, size := cloneSource(b)
	ctx := b.Context()
	user, admin := sourceAccess(b, e, inst)
	certPEM, keyPEM, caPEM, err := e.CA.InstanceTLS("127.0.0.1", "localhost")
	if err != nil {
		b.Fatal(err)
	}
	src := &postgres.Instance{ID: inst.ID, Dir: inst.Dir, Port: inst.Port, Bin: e.Bin, User: user}
	scratch := appliancetest.TraversableTempDir(b)
	b.Logf("project of %d MB; %d rounds each; copy, start and both in ms per round", size>>20, rounds)
	for _, wb := range writeback {
		for _, w := range workers {
			var copies, starts, totals []time.Duration
			for r := range rounds {
				port, err := postgres.FreePort()
				if err != nil {
					b.Fatal(err)
				}
				cp := &postgres.Instance{ID: fmt.Sprintf("copy-%d-%t-%d", w, wb, r), Dir: filepath.Join(scratch, fmt.Sprintf("%d-%t-%d", w, wb, r)),
					ListenHost: "127.0.0.1", Port: port, Bin: e.Bin, User: user}
				if err := user.Mkdir(cp.Dir, 0o700); err != nil {
					b.Fatal(err)
				}
				conn, err := src.ConnectWith(ctx, string(admin), "postgres", map[string]string{"statement_timeout": "0"})
				if err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				if _, err := src.OnlineCopy(ctx, conn, cp.DataDir(), postgres.CopyOptions{Label: "bench", Workers: w, Writeback: wb}); err != nil {
					b.Fatal(err)
				}
				copied := time.Since(t0)
				if err := cp.WriteTLS(certPEM, keyPEM, caPEM); err != nil {
					b.Fatal(err)
				}
				if err := cp.MarkInitialized(); err != nil {
					b.Fatal(err)
				}
				if conf != "" {
					f, err := os.OpenFile(filepath.Join(cp.DataDir(), "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
					if err != nil {
						b.Fatal(err)
					}
					fmt.Fprintf(f, "\n%s\n", conf)
					f.Close()
				}
				t1 := time.Now()
				if err := cp.Start(ctx, nil); err != nil {
					b.Fatal(err)
				}
				copies, starts, totals = append(copies, copied), append(starts, time.Since(t1)), append(totals, time.Since(t0))
				if err := cp.Remove(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.Logf("workers %d, writeback %t%s: median copy %.0f, start %.0f, both %.0f ms (copy %s; start %s)", w, wb,
				map[bool]string{true: ", " + conf}[conf != ""], ms(median(copies)), ms(median(starts)), ms(median(totals)), joinMS(copies), joinMS(starts))
		}
	}
}

// BenchmarkPreviewsIdle: BENCH_PREVIEWS (50) empty previews, idle, on one appliance (two projects on the
// scale plan, which allows 25 previews each): their total memory (PSS of each preview's postmaster, its
// children and its PgBouncer), and the API's latency meanwhile — BENCH_REQUESTS (1000) sequential
// GET /v1/projects/{id} (an answer the previews do not change) before the previews exist and again with
// them all running.
func BenchmarkPreviewsIdle(b *testing.B) {
	n, reqs := envInt(b, "BENCH_PREVIEWS", 50), envInt(b, "BENCH_REQUESTS", 1000)
	ctx := b.Context()
	e := appliancetest.New(b, appliancetest.Options{Instances: true, Ports: 2*n + 8})
	p, err := e.Svc.Identity().Authenticate(ctx, e.Bootstrap.APIKey)
	if err != nil {
		b.Fatal(err)
	}
	var parents []string
	for i := range (n + 24) / 25 {
		res, err := e.Svc.CreateProject(ctx, p, &appliance.CreateProjectRequest{Name: fmt.Sprintf("parent %d", i), Environment: "development", Plan: "scale"})
		if err != nil {
			b.Fatal(err)
		}
		if j := e.WaitJob(b, res.Job.ID); j.State != scheduler.StateCompleted {
			b.Fatal(j.Error)
		}
		parents = append(parents, res.Project.ID)
	}
	api := httptest.NewServer(httpapi.New(e.Svc, httpapi.Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}, Lane: e.Lane}))
	b.Cleanup(api.Close)
	list := func() []time.Duration {
		var out []time.Duration
		for i := range reqs {
			req, _ := http.NewRequest("GET", api.URL+"/v1/projects/"+parents[i%len(parents)], nil)
			req.Header.Set("Authorization", "Bearer "+e.Bootstrap.APIKey)
			t0 := time.Now()
			res, err := api.Client().Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				b.Fatalf("get project: %d", res.StatusCode)
			}
			out = append(out, time.Since(t0))
		}
		slices.Sort(out)
		return out
	}
	before := list()

	// The previews, four at a time (the job runner's workers).
	t0, ttl := time.Now(), 48
	ids := make([]string, n)
	jobs := make([]string, n)
	for i := range n {
		res, err := e.Svc.Previews().Create(ctx, p, parents[i/25], &appliance.CreatePreviewRequest{Name: fmt.Sprintf("idle-%02d", i), Mode: previews.ModeEmpty, TTLHours: &ttl})
		if err != nil {
			b.Fatal(err)
		}
		ids[i], jobs[i] = res.Preview.ID, res.Job.ID
	}
	for _, j := range jobs {
		if job := e.WaitJob(b, j); job.State != scheduler.StateCompleted {
			b.Fatalf("preview: %s", job.Error)
		}
	}
	b.Logf("%d empty previews made in %.1f s", n, time.Since(t0).Seconds())
	time.Sleep(idleFor)
	var total memory
	for _, id := range ids {
		m, err := projectMemory(ctx, e, id)
		if err != nil {
			b.Fatal(err)
		}
		total.rss, total.pss, total.uss, total.procs = total.rss+m.rss, total.pss+m.pss, total.uss+m.uss, total.procs+m.procs
		total.poolerPSS += m.poolerPSS
	}
	after := list()
	f := float64(n)
	b.ReportMetric(total.pss/1024, "pss-MB")
	b.Logf("%d idle previews: PSS %.0f MB in all (%.1f MB each, of which PgBouncer %.1f MB), USS %.0f MB, RSS %.0f MB, %d processes",
		n, total.pss/1024, total.pss/f/1024, total.poolerPSS/f/1024, total.uss/1024, total.rss/1024, total.procs)
	b.Logf("GET /v1/projects/{id}, %d sequential: before the previews p50 %v p99 %v; with %d running p50 %v p99 %v (p99 ratio %.2f)",
		reqs, percentile(before, 50), percentile(before, 99), n, percentile(after, 50), percentile(after, 99),
		float64(percentile(after, 99))/float64(percentile(before, 99)))
}
