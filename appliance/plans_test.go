package appliance_test

import (
	"strings"
	"testing"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// TestPlanChangeAppliesToProjects: an operator's change of a plan reaches the running project on it
// through its project.apply_plan job: the server's max_connections, the project's storage limit, its
// key-value store's maxmemory (the record, and the running redis-server), and its memory and CPU. The
// organization's previews quota, set by the operator, holds at a preview's creation.
func TestPlanChangeAppliesToProjects(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	ctx := t.Context()
	prj := provision(t, e, p, "sized", "development")
	kvRes, err := e.Svc.KV().Create(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, kvRes.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("kv.create: %s %s", j.State, j.Error)
	}
	op := operator(t, e, "sizes@example.com")
	free, _ := e.Svc.PlanByName("free")
	res, err := e.Svc.Tenancy().PutPlan(ctx, op, "free", &api.PutPlanRequest{MaxConnections: 33, StorageLimitBytes: 2 << 30, KVMemoryMB: 48,
		PreviewsLimit: free.PreviewsLimit, AIUsesPerMonth: free.AIUsesPerMonth, MemoryBytes: 768 << 20, CPUCores: 0.75})
	if err != nil || len(res.Jobs) != 1 || res.Jobs[0].Type != "project.apply_plan" {
		t.Fatalf("change the free plan: %+v %v", res, err)
	}
	j := e.WaitJob(t, res.Jobs[0].ID)
	if j.State != scheduler.StateCompleted {
		t.Fatalf("apply_plan: %s %s", j.State, j.Error)
	}
	for _, want := range []string{`"max_connections":33`, `"kv_memory_mb":48`, `"memory_bytes":805306368`, `"cpu_cores":0.75`, `"storage_limit_bytes":2147483648`} {
		if !strings.Contains(string(j.Result), want) {
			t.Errorf("apply_plan's result %s lacks %s", j.Result, want)
		}
	}
	c, err := e.Svc.ProjectConnections(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, c.Connections.DirectURL)
	defer conn.Close(ctx)
	if v := scalar[string](t, conn, "SHOW max_connections"); v != "33" {
		t.Errorf("the server's max_connections: %s", v)
	}
	if got := e.Project(t, prj.ID); got.MaxConnections != 33 || got.StorageLimitBytes != 2<<30 {
		t.Errorf("the project record: %d connections, %d bytes", got.MaxConnections, got.StorageLimitBytes)
	}
	var rec *store.KVStore
	if err := e.DB.View(func(tx *store.Tx) (err error) {
		rec, err = store.KVStores.First(tx, store.KVStoresByProject, prj.ID)
		return err
	}); err != nil || rec.MaxMemoryMB != 48 {
		t.Fatalf("the key-value store's record: %+v %v", rec, err)
	}
	srv, admin, err := e.Svc.KV().Server(rec)
	if err != nil {
		t.Fatal(err)
	}
	info, err := srv.Admin(ctx, admin, []string{"INFO", "memory"})
	if err != nil || len(info) != 1 || !strings.Contains(info[0], "maxmemory:50331648\r\n") {
		t.Fatalf("the running store's maxmemory: %v %v", info, err)
	}

	// The organization's previews quota holds (the plan would allow 2).
	zero := 0
	if _, err := e.Svc.Tenancy().PatchQuota(ctx, op, prj.OrganizationID, &api.PatchOrganizationQuotaRequest{PreviewsLimit: &zero}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Svc.Previews().Create(ctx, p, prj.ID, &appliance.CreatePreviewRequest{Name: "over"}); appliance.KindOf(err) != appliance.KindForbidden ||
		!strings.Contains(err.Error(), "the organization has 0 of 0 previews") {
		t.Fatalf("a preview past the organization's quota: %v", err)
	}
}
