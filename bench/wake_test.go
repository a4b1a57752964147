package bench

import (
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// BenchmarkWake measures scale to zero's cold start (issue 33): a development project is suspended
// (Service.SuspendProject: its server and pooler stopped, the wake front on its ports) and a client then
// connects over direct_url as given (TLS, sslmode=verify-full, SCRAM) and runs SELECT 1: the clock runs
// from before the dial to SELECT 1's answer, WAKE_BENCH_ROUNDS (default 20) times. It also counts the
// processes a suspended project leaves (goal 0). See bench/README.md.
func BenchmarkWake(b *testing.B) {
	ctx := b.Context()
	rounds := envInt(b, "WAKE_BENCH_ROUNDS", 20)
	e := appliancetest.New(b, appliancetest.Options{Instances: true})
	p, err := e.Svc.Identity().Authenticate(ctx, e.Bootstrap.APIKey)
	if err != nil {
		b.Fatal(err)
	}
	res, err := e.Svc.CreateProject(ctx, p, &appliance.CreateProjectRequest{Name: "wake bench", Environment: "development"})
	if err != nil {
		b.Fatal(err)
	}
	if j := e.WaitJob(b, res.Job.ID); j.State != scheduler.StateCompleted {
		b.Fatalf("provision: %s %s", j.State, j.Error)
	}
	prj := e.Project(b, res.Project.ID)
	var inst *store.Instance
	if err := e.DB.View(func(tx *store.Tx) (err error) { inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID); return err }); err != nil {
		b.Fatal(err)
	}
	c, err := e.Svc.ProjectConnections(ctx, p, prj.ID)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(c.Connections.DirectURL)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var wakes []time.Duration
		maxProcs := 0
		for range rounds {
			if _, err := e.Svc.SuspendProject(ctx, p, prj.ID); err != nil {
				b.Fatal(err)
			}
			// pg_ctl stop returns once the postmaster removed its pid file; its last children exit after.
			deadline := time.Now().Add(30 * time.Second)
			for len(appliancetest.ProcessesUnder(inst.Dir)) != 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			maxProcs = max(maxProcs, len(appliancetest.ProcessesUnder(inst.Dir)))
			t0 := time.Now()
			if err := selectOne(ctx, cfg); err != nil {
				b.Fatalf("the waking connection: %v", err)
			}
			wakes = append(wakes, time.Since(t0))
		}
		slices.Sort(wakes)
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		b.Logf("%d wakes, connect (verify-full) + SELECT 1 on a suspended project: p50 %.0f ms, p95 %.0f ms, min %.0f ms, max %.0f ms; processes left by a suspended project: %d; load %s",
			len(wakes), ms(percentile(wakes, 50)), ms(percentile(wakes, 95)), ms(wakes[0]), ms(wakes[len(wakes)-1]), maxProcs, loadavg())
		b.ReportMetric(ms(percentile(wakes, 50)), "p50-ms")
		b.ReportMetric(ms(percentile(wakes, 95)), "p95-ms")
	}
}
