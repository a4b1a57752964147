package appliance_test

import (
	"strings"
	"testing"
)

// TestScaleToZeroAdvisor: the index advisor and index hygiene answer a suspended project with an
// unavailable report saying so instead of waking it, and the sampler leaves it suspended.
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
	if a, err := e.Svc.Observe().IndexAdvice(ctx, p, prj.ID, 1, 30, true); err != nil || a.Advisor == nil || a.Advisor.Available || !strings.Contains(a.Advisor.Reason, "suspended") {
		t.Fatalf("the advisor on a suspended project: %+v, %v; want an unavailable report saying it is suspended", a, err)
	}
	if h, err := e.Svc.Observe().IndexHygiene(ctx, p, prj.ID); err != nil || h.Hygiene == nil || h.Hygiene.Available || !strings.Contains(h.Hygiene.Reason, "suspended") {
		t.Fatalf("index hygiene on a suspended project: %+v, %v; want an unavailable report saying it is suspended", h, err)
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
