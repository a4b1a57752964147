package appliance_test

import (
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/cgroups"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/scheduler"
)

// TestCgroupMemoryLimitHolds: two projects on a small memory limit (128 MiB for the free plan here, the
// plan's CPU), each server in its own cgroup. A query of A that allocates past the limit fails (the
// kernel kills its backend in A's group; A's postmaster restarts A's backends) while B keeps answering
// on its session; A answers again afterwards. A plan change moves the limits, and the deletion removes
// the group. It needs writable cgroups (v2 or v1, as up --cgroups auto uses them): without them it fails.
func TestCgroupMemoryLimitHolds(t *testing.T) {
	t.Parallel()
	limits := map[string]int64{api.PlanFree: 128 << 20, api.PlanPro: 192 << 20}
	e, p := keyEnv(t, appliancetest.Options{Instances: true, Cgroups: true, ServerLimits: func(plan appliance.Plan) cgroups.Limits {
		return cgroups.Limits{MemoryBytes: limits[plan.Name], CPUCores: plan.CPUCores}
	}})
	if e.Cgroups.Version() == cgroups.None {
		t.Fatalf("this machine has no writable cgroups (v2 with memory and cpu, or v1's memory and cpu hierarchies), which this test needs: %s", e.Cgroups.Status())
	}
	a, ca, connA := connected(t, e, p, "greedy")
	b, _, connB := connected(t, e, p, "neighbour")
	instA, instB := instanceOf(t, e, a), instanceOf(t, e, b)
	for _, in := range []struct {
		id  string
		pid int
	}{{instA.ID, postmasterPID(t, instA)}, {instB.ID, postmasterPID(t, instB)}} {
		if l, err := e.Cgroups.Read(in.id); err != nil || l != (cgroups.Limits{MemoryBytes: 128 << 20, CPUCores: 0.5}) {
			t.Fatalf("group of %s: %+v, %v", in.id, l, err)
		}
		procs, err := e.Cgroups.Procs(in.id)
		if err != nil || !slices.Contains(procs, in.pid) || len(procs) < 3 {
			t.Fatalf("group of %s holds %v (%v), not its postmaster %d and its processes", in.id, procs, err, in.pid)
		}
	}
	var backendB int
	if err := connB.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&backendB); err != nil {
		t.Fatal(err)
	}
	if procs, _ := e.Cgroups.Procs(instB.ID); !slices.Contains(procs, backendB) {
		t.Fatalf("B's backend %d is not in B's group %v", backendB, procs)
	}
	postA := postmasterPID(t, instA)

	// About 750 MB in one backend of A: past A's 128 MiB.
	done := make(chan error, 1)
	go func() {
		var n int64
		done <- connA.QueryRow(t.Context(), "SELECT length(string_agg(repeat('x', 50000000), '')) FROM generate_series(1, 15)").Scan(&n)
	}()
	var errA error
	answered := 0
	for running := true; running; {
		select {
		case errA = <-done:
			running = false
		default:
		}
		var one int
		if err := connB.QueryRow(t.Context(), "SELECT count(*) FROM generate_series(1, 1000)").Scan(&one); err != nil || one != 1000 {
			t.Fatalf("B failed while A allocated: %v (%d)", err, one)
		}
		answered++
	}
	if errA == nil {
		t.Fatal("A's query past its memory limit succeeded")
	}
	t.Logf("A's query: %v; B answered %d queries meanwhile", errA, answered)
	if n, err := e.Cgroups.OOMKills(instA.ID); err != nil || n < 1 {
		t.Fatalf("A's group counts %d OOM kills (%v)", n, err)
	}
	if n, err := e.Cgroups.OOMKills(instB.ID); err != nil || n != 0 {
		t.Fatalf("B's group counts %d OOM kills (%v)", n, err)
	}
	// B's session lived through it; A's postmaster restarted A's backends only, and A answers again.
	var s string
	if err := connB.QueryRow(t.Context(), "SELECT 'still here'").Scan(&s); err != nil {
		t.Fatalf("B's session after A's kill: %v", err)
	}
	answersA := func() bool {
		c, err := pgx.Connect(t.Context(), ca.Connections.DirectURL)
		if err != nil {
			return false
		}
		defer c.Close(t.Context())
		var n int
		return c.QueryRow(t.Context(), "SELECT 1").Scan(&n) == nil && n == 1
	}
	waitFor(t, "A to answer again", answersA)
	if got := postmasterPID(t, instA); got != postA {
		t.Fatalf("A's postmaster was replaced (%d, was %d): only a backend should have been killed", got, postA)
	}
	if procs, _ := e.Cgroups.Procs(instA.ID); !slices.Contains(procs, postA) || len(procs) < 3 {
		t.Fatalf("A's group after the restart of its backends: %v", procs)
	}

	// A postmaster the supervisor starts again (after a crash here) is born outside and moved in.
	if err := syscall.Kill(postA, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A's server started again in its group", func() bool {
		pid, err := daemon.ReadPidFile(filepath.Join(instA.Dir, "pgdata", "postmaster.pid"))
		if err != nil || pid == 0 || pid == postA {
			return false
		}
		procs, _ := e.Cgroups.Procs(instA.ID)
		return slices.Contains(procs, pid)
	})
	waitFor(t, "A to answer after its restart", answersA)

	// A plan change gives the group the new plan's limits.
	pro := api.PlanPro
	res, err := e.Svc.PatchProject(t.Context(), p, a.ID, &appliance.PatchProjectRequest{Plan: &pro})
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, res.Project.LatestJobID); j.State != scheduler.StateCompleted {
		t.Fatalf("apply_plan: %s %s", j.Error, j.LastStderr)
	}
	if l, err := e.Cgroups.Read(instA.ID); err != nil || l != (cgroups.Limits{MemoryBytes: 192 << 20, CPUCores: 2}) {
		t.Fatalf("A's group after the plan change: %+v, %v", l, err)
	}

	// The deletion removes B's group.
	del, err := e.Svc.DeleteProject(t.Context(), p, b.ID, "")
	mustComplete(t, e, del, err)
	if _, err := e.Cgroups.Read(instB.ID); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("B's group after its deletion: %v", err)
	}
}
