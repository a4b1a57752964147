package bench

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/previews"
	"github.com/theappliance/appliance/store"
)

// BenchmarkEphemeral measures, one after the other, POST /v1/ephemeral-databases (Service.CreateEphemeral,
// no account) to the first SELECT 1 on the direct URL it hands out: the client polls GET with the claim
// token every 5 ms, as `appliance ephemeral create` does (every 50 ms there), until the connections
// appear. Spare clusters (BENCH_SPARES, default 2) are refilled before each creation outside the measured
// time. BENCH_DATABASES (default 20) databases.
func BenchmarkEphemeral(b *testing.B) {
	n, spares := envInt(b, "BENCH_DATABASES", 20), envAtLeast(b, "BENCH_SPARES", 2, 0)
	ctx := b.Context()
	b.Logf("load average before: %s", loadavg())
	per := perEnv(spares)
	var envs []*appliancetest.Env
	for i := 0; i < n; i += per {
		e := appliancetest.New(b, appliancetest.Options{Instances: true, Spares: spares,
			Ephemeral: &appliance.EphemeralLimits{PerIPPerHour: n, Live: n, StorageBytes: previews.EphemeralStorageLimit}})
		envs = append(envs, e)
	}
	samples := make([]*sample, n)
	var splits []connSplit // the successful connection of each
	for i := range n {
		e := envs[i/per]
		if err := waitSpares(ctx, e, spares); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		c, err := e.Svc.Previews().CreateEphemeral(ctx, "192.0.2.1", &appliance.CreateEphemeralRequest{Name: fmt.Sprintf("eph %03d", i)})
		if err != nil {
			b.Fatal(err)
		}
		tCreated := time.Now()
		id := c.EphemeralDatabase.ProjectID
		var url string
		for deadline := t0.Add(2 * time.Minute); ; time.Sleep(pollInterval) {
			g, err := e.Svc.Previews().GetEphemeral(ctx, id, c.ClaimToken)
			if err != nil {
				b.Fatal(err)
			}
			if g.Connections != nil {
				url = g.Connections.DirectURL
				break
			}
			if g.EphemeralDatabase.State == appliance.ProjectFailed || time.Now().After(deadline) {
				b.Fatalf("ephemeral database %s: %s", id, g.EphemeralDatabase.State)
			}
		}
		tJobSeen := time.Now()
		tries := 0
		for {
			tries++
			split, err := selectOneSplit(ctx, url)
			if err == nil {
				splits = append(splits, split)
				break
			} else if tries > 400 {
				b.Fatal(err)
			}
			time.Sleep(pollInterval)
		}
		tSelect := time.Now()
		var job *store.Job
		e.DB.View(func(tx *store.Tx) error {
			prj, err := store.Projects.Get(tx, id)
			if err == nil {
				job, err = store.Jobs.Get(tx, prj.LatestJobID)
			}
			return err
		})
		s := &sample{env: e, project: id, total: tSelect.Sub(t0), tries: tries}
		s.phases = phases(e, id, job, t0, tCreated, tJobSeen, tSelect)
		var result struct {
			Timings map[string]float64 `json:"timings_ms"`
		}
		if job != nil && json.Unmarshal(job.Result, &result) == nil {
			s.steps = result.Timings
		}
		samples[i] = s
	}
	totals := make([]time.Duration, n)
	for i, s := range samples {
		totals[i] = s.total
	}
	all := make([]string, n)
	for i, d := range totals {
		all[i] = fmt.Sprintf("%.0f", ms(d))
	}
	slices.Sort(totals)
	b.ReportMetric(ms(percentile(totals, 50)), "p50-ms")
	b.ReportMetric(ms(percentile(totals, 95)), "p95-ms")
	b.Logf("%d ephemeral databases (%d spare clusters kept): POST -> first SELECT 1: p50 %.0f ms, p95 %.0f ms, min %.0f ms, max %.0f ms",
		n, spares, ms(percentile(totals, 50)), ms(percentile(totals, 95)), ms(totals[0]), ms(totals[n-1]))
	b.Logf("load average after: %s", loadavg())
	logPhases(b, samples)
	b.Logf("the client's connection and SELECT 1, p50 (ms): %s", connSplitP50(splits))
	b.Logf("each, in order (ms): %s", strings.Join(all, " "))
}
