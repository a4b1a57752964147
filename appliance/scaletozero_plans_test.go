package appliance_test

import (
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/tenancy"
)

// TestScaleToZeroPlanDefaults: the idle times of projects that chose none are their plan's, which an
// operator sets (suspend_after_seconds for development projects, previews and ephemeral databases,
// production_suspend_after_seconds for the others); the idle pass follows them; a plans file or a PUT
// without them gets the built-in ones (300 and 0); a value outside 0 or 60 to 30 days is refused.
func TestScaleToZeroPlanDefaults(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	ctx := t.Context()
	dev := provision(t, e, p, "dev on plan", "development")
	prod := provision(t, e, p, "prod on plan", "production")
	suspendAfter := func(id string) int {
		t.Helper()
		got, err := e.Svc.GetProject(ctx, p, id)
		if err != nil {
			t.Fatal(err)
		}
		return got.Project.SuspendAfterSeconds
	}
	if d, pr := suspendAfter(dev.ID), suspendAfter(prod.ID); d != 300 || pr != 0 {
		t.Fatalf("built-in defaults: development %d, production %d; want 300 and 0", d, pr)
	}
	op := operator(t, e, "idle@example.com")
	free, _ := e.Svc.PlanByName("free")
	put := func(devS, prodS *int) (*api.PlanChange, error) {
		return e.Svc.Tenancy().PutPlan(ctx, op, "free", &api.PutPlanRequest{MaxConnections: free.MaxConnections, StorageLimitBytes: free.StorageLimitBytes,
			KVMemoryMB: free.KVMemoryMB, PreviewsLimit: free.PreviewsLimit, AIUsesPerMonth: free.AIUsesPerMonth, MemoryBytes: free.MemoryBytes,
			CPUCores: free.CPUCores, SuspendAfterSeconds: devS, ProductionSuspendAfterSeconds: prodS})
	}
	for _, bad := range []int{-1, 30, 30*24*3600 + 1} {
		if _, err := put(&bad, nil); appliance.KindOf(err) != appliance.KindInvalid || !strings.Contains(err.Error(), "suspend_after_seconds") {
			t.Fatalf("suspend_after_seconds %d: %v; want invalid", bad, err)
		}
	}
	res, err := put(intp(120), intp(600))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 0 { // the sizes did not change: nothing to apply to the servers (nor to wake)
		t.Fatalf("jobs of a change of the idle times alone: %+v", res.Jobs)
	}
	if got, _ := e.Svc.PlanByName("free"); got.SuspendAfterSeconds != 120 || got.ProductionSuspendAfterSeconds != 600 {
		t.Fatalf("the plan: %+v", got)
	}
	if d, pr := suspendAfter(dev.ID), suspendAfter(prod.ID); d != 120 || pr != 600 {
		t.Fatalf("after the operator's change: development %d, production %d; want 120 and 600", d, pr)
	}

	// The idle pass follows the plan: at 121 s the development project is suspended, the production one not yet.
	base := time.Now().UTC()
	e.Clock.Set(func() time.Time { return base })
	if n, err := e.Svc.SuspendIdle(ctx); err != nil || n != 0 {
		t.Fatalf("first pass: %d, %v", n, err)
	}
	e.Clock.Set(func() time.Time { return base.Add(121 * time.Second) })
	if n, err := e.Svc.SuspendIdle(ctx); err != nil || n != 1 {
		t.Fatalf("at 121 s: %d suspended, %v; want 1", n, err)
	}
	checkSuspended(t, e, dev.ID, instanceOf(t, e, dev))
	if got := e.Project(t, prod.ID); got.RuntimeStatus != appliance.RuntimeActive {
		t.Fatalf("the production project: %s", got.RuntimeStatus)
	}

	// A PUT without them sets the built-in ones again.
	if _, err = put(nil, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.Svc.PlanByName("free"); got.SuspendAfterSeconds != 300 || got.ProductionSuspendAfterSeconds != 0 {
		t.Fatalf("the plan after a PUT without them: %+v", got)
	}

	// A plans file: absent keys are the built-in defaults, given ones are checked.
	plan := `{"name":"free","max_connections":20,"storage_limit_bytes":1073741824,"kv_memory_mb":32,"previews_limit":2,"ai_uses_per_month":1,"memory_bytes":536870912,"cpu_cores":0.5%s}`
	file := func(extra string) string {
		return `{"plans":[` + strings.Replace(plan, "%s", extra, 1) + `],"organization_quota":{"projects_limit":1,"previews_limit":1,"storage_limit_bytes":1}}`
	}
	cfg, err := tenancy.ParsePlansConfig(strings.NewReader(file("")))
	if err != nil || cfg.Plans[0].SuspendAfterSeconds != 300 || cfg.Plans[0].ProductionSuspendAfterSeconds != 0 {
		t.Fatalf("a plans file without them: %+v, %v", cfg, err)
	}
	cfg, err = tenancy.ParsePlansConfig(strings.NewReader(file(`,"suspend_after_seconds":0,"production_suspend_after_seconds":3600`)))
	if err != nil || cfg.Plans[0].SuspendAfterSeconds != 0 || cfg.Plans[0].ProductionSuspendAfterSeconds != 3600 {
		t.Fatalf("a plans file with them: %+v, %v", cfg, err)
	}
	if _, err := tenancy.ParsePlansConfig(strings.NewReader(file(`,"suspend_after_seconds":10`))); err == nil || !strings.Contains(err.Error(), "plans[0].suspend_after_seconds") {
		t.Fatalf("a plans file with 10 s: %v; want refused", err)
	}
}
