package appliance_test

import (
	"testing"

	"github.com/theappliance/appliance/appliance"
)

// TestScaleToZeroAdvisor: the index advisor and index hygiene refuse a suspended project (409) instead of
// waking it, and the sampler leaves it suspended.
func TestScaleToZeroAdvisor(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	ctx := t.Context()
	prj := provision(t, e, p, "sleepy advice", "development")
	inst := instanceOf(t, e, prj)
	if _, err := e.Svc.SuspendProject(ctx, p, prj.ID); err != nil {
		t.Fatal(err)
	}
	checkSuspended(t, e, prj.ID, inst)
	if _, err := e.Svc.Observe().Sample(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Svc.Observe().IndexAdvice(ctx, p, prj.ID, 1, 30, true); appliance.KindOf(err) != appliance.KindConflict {
		t.Fatalf("the advisor on a suspended project: %v; want a conflict", err)
	}
	if _, err := e.Svc.Observe().IndexHygiene(ctx, p, prj.ID); appliance.KindOf(err) != appliance.KindConflict {
		t.Fatalf("index hygiene on a suspended project: %v; want a conflict", err)
	}
	checkSuspended(t, e, prj.ID, inst)
	if n := countEvents(t, e, prj.ID, "project.resumed"); n != 0 {
		t.Fatalf("%d project.resumed events; want none", n)
	}
	// Once it runs, the advisor answers.
	if _, err := e.Svc.ResumeProject(ctx, p, prj.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Svc.Observe().IndexHygiene(ctx, p, prj.ID); err != nil {
		t.Fatalf("index hygiene after the resume: %v", err)
	}
}
