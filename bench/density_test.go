package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// BenchmarkScaleToZeroDensity: BENCH_ZERO_PROJECTS (100) development projects on one appliance, all running
// and idle: their total memory (PSS of each server's processes and its PgBouncer) and processes; then
// BENCH_ZERO_SUSPENDED (90) of them suspended (scale to zero): the same totals again, and what a suspended
// project leaves (its processes). See bench/README.md "100 projects, 90 suspended".
func BenchmarkScaleToZeroDensity(b *testing.B) {
	n, nSus := envInt(b, "BENCH_ZERO_PROJECTS", 100), envInt(b, "BENCH_ZERO_SUSPENDED", 90)
	if q := appliance.DefaultOrganizationQuota; q.ProjectsLimit < n {
		appliance.DefaultOrganizationQuota.ProjectsLimit = n
		b.Cleanup(func() { appliance.DefaultOrganizationQuota = q })
	}
	ctx := b.Context()
	e := appliancetest.New(b, appliancetest.Options{Instances: true, Ports: 2*n + 8})
	p, err := e.Svc.Identity().Authenticate(ctx, e.Bootstrap.APIKey)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	ids, jobs := make([]string, n), make([]string, n)
	for i := range n {
		res, err := e.Svc.CreateProject(ctx, p, &appliance.CreateProjectRequest{Name: fmt.Sprintf("dense %03d", i), Environment: "development"})
		if err != nil {
			b.Fatalf("project %d: %v", i, err)
		}
		ids[i], jobs[i] = res.Project.ID, res.Job.ID
	}
	for _, j := range jobs {
		if job := e.WaitJob(b, j); job.State != scheduler.StateCompleted {
			b.Fatalf("provision: %s", job.Error)
		}
	}
	b.Logf("%d projects provisioned in %.0f s", n, time.Since(t0).Seconds())
	measure := func(which []string) (total memory) {
		for _, id := range which {
			m, err := projectMemory(ctx, e, id)
			if err != nil {
				b.Fatal(err)
			}
			total.pss, total.rss, total.uss, total.procs = total.pss+m.pss, total.rss+m.rss, total.uss+m.uss, total.procs+m.procs
		}
		return total
	}
	time.Sleep(idleFor)
	all := measure(ids)
	b.ResetTimer()
	t1 := time.Now()
	for _, id := range ids[:nSus] {
		if _, err := e.Svc.SuspendProject(ctx, p, id); err != nil {
			b.Fatalf("suspend %s: %v", id, err)
		}
	}
	suspendTook := time.Since(t1)
	b.StopTimer()
	left := 0
	for _, id := range ids[:nSus] {
		var inst *store.Instance
		if err := e.DB.View(func(tx *store.Tx) error {
			prj, err := store.Projects.Get(tx, id)
			if err == nil {
				inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID)
			}
			return err
		}); err != nil {
			b.Fatal(err)
		}
		// pg_ctl stop returns once the postmaster removed its pid file; its last children exit right after.
		for deadline := time.Now().Add(30 * time.Second); len(appliancetest.ProcessesUnder(inst.Dir)) != 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		left += len(appliancetest.ProcessesUnder(inst.Dir))
	}
	time.Sleep(idleFor)
	running := measure(ids[nSus:])
	b.ReportMetric(all.pss/1024, "pss-all-running-MB")
	b.ReportMetric(running.pss/1024, "pss-with-suspended-MB")
	b.Logf("%d projects all running and idle: PSS %.0f MB (%.1f MB each), USS %.0f MB, RSS %.0f MB, %d processes",
		n, all.pss/1024, all.pss/float64(n)/1024, all.uss/1024, all.rss/1024, all.procs)
	b.Logf("%d of them suspended (in %.1f s): PSS %.0f MB for the %d running (%.1f %% of all running), %d processes; the suspended leave %d processes",
		nSus, suspendTook.Seconds(), running.pss/1024, n-nSus, 100*running.pss/all.pss, running.procs, left)
	b.Logf("load %s", loadavg())
}
