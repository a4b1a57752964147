package appliance_test

import (
	"testing"
	"time"
)

// TestScaleToZeroHistoryAndUsage: a suspension is recorded as a period: the observability history marks it
// (suspended: from, to, ongoing while it lasts) and the organization's usage counts the project's compute
// seconds (its running time this month) without it, and its suspended seconds.
func TestScaleToZeroHistoryAndUsage(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	ctx := t.Context()
	prj := provision(t, e, p, "metered", "development")
	base := time.Now().UTC().Truncate(time.Second)
	at := func(d time.Duration) { e.Clock.Set(func() time.Time { return base.Add(d) }) }
	at(0)
	if _, err := e.Svc.SuspendProject(ctx, p, prj.ID); err != nil {
		t.Fatal(err)
	}
	at(5 * time.Minute)
	h, err := e.Svc.Observe().History(ctx, p, prj.ID, 1)
	if err != nil || len(h.Suspended) != 1 || !h.Suspended[0].Ongoing || !h.Suspended[0].From.Equal(base) || !h.Suspended[0].To.Equal(base.Add(5*time.Minute)) {
		t.Fatalf("history while suspended: %+v, %v; want one ongoing period from the suspension to now", h, err)
	}
	at(10 * time.Minute)
	if _, err := e.Svc.ResumeProject(ctx, p, prj.ID); err != nil {
		t.Fatal(err)
	}
	at(20 * time.Minute)
	h, err = e.Svc.Observe().History(ctx, p, prj.ID, 1)
	if err != nil || len(h.Suspended) != 1 || h.Suspended[0].Ongoing || !h.Suspended[0].To.Equal(base.Add(10*time.Minute)) {
		t.Fatalf("history after the wake: %+v, %v; want one ended period of 10 minutes", h.Suspended, err)
	}
	// A window that ends before the suspension shows none.
	at(2 * time.Hour)
	if h, err = e.Svc.Observe().History(ctx, p, prj.ID, 1); err != nil || len(h.Suspended) != 0 {
		t.Fatalf("a window after it: %+v, %v", h.Suspended, err)
	}
	at(20 * time.Minute)

	u, err := e.Svc.OrganizationUsage(ctx, p, prj.OrganizationID)
	if err != nil {
		t.Fatal(err)
	}
	now := base.Add(20 * time.Minute)
	from := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	if created := e.Project(t, prj.ID).CreatedAt; created.After(from) {
		from = created
	}
	want := int64(now.Sub(from)/time.Second) - 600
	for _, row := range u.Usage.Projects {
		if row.ProjectID != prj.ID {
			continue
		}
		if row.SuspendedSeconds != 600 || row.ComputeSeconds < want-1 || row.ComputeSeconds > want+1 {
			t.Fatalf("usage row: compute %d s, suspended %d s; want %d and 600", row.ComputeSeconds, row.SuspendedSeconds, want)
		}
	}
	if u.Usage.Totals.SuspendedSeconds != 600 || u.Usage.Totals.ComputeSeconds < want-1 {
		t.Fatalf("usage totals: compute %d s, suspended %d s", u.Usage.Totals.ComputeSeconds, u.Usage.Totals.SuspendedSeconds)
	}
}
