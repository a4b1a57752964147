package appliance_test

import (
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// TestScaleToZeroScheduledBackup: the scheduled backup of a suspended project whose data has not changed
// since its last backup is skipped and says so (last_run_skipped, the audit action scheduled_backup.skip)
// without waking it; after a write, the next slot wakes it and backs it up.
func TestScaleToZeroScheduledBackup(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	ctx := t.Context()
	prj := provision(t, e, p, "sleepy backups", "development")
	inst := instanceOf(t, e, prj)
	if err := e.AdminExec(t, prj.ID, "CREATE TABLE before_backup AS SELECT 1 AS id"); err != nil {
		t.Fatal(err)
	}
	res, err := e.Svc.Backups().Create(ctx, p, prj.ID, &appliance.CreateBackupRequest{Label: "base"})
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, res.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("backup: %s %s", j.State, j.Error)
	}
	if _, err := e.Svc.Backups().PutSchedule(ctx, p, prj.ID, "default", &appliance.PutScheduledBackupRequest{
		CronHour: intp(0), CronMinute: intp(0), IsActive: boolp(true)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Svc.SuspendProject(ctx, p, prj.ID); err != nil {
		t.Fatal(err)
	}
	checkSuspended(t, e, prj.ID, inst)
	slot := func() time.Time { // a time after today's 00:00 slot, which has not run yet
		t.Helper()
		if err := e.DB.Update(func(tx *store.Tx) error {
			r, err := store.ScheduledBackups.Get(tx, prj.ID)
			if err != nil {
				return err
			}
			r.LastRunAt, r.UpdatedAt = nil, r.UpdatedAt.Add(-48*time.Hour)
			return store.ScheduledBackups.Put(tx, r)
		}); err != nil {
			t.Fatal(err)
		}
		return time.Now().UTC().Truncate(24 * time.Hour).Add(time.Minute)
	}

	run, err := e.Svc.Backups().RunScheduled(ctx, slot())
	if err != nil || run.Skipped != 1 || run.Enqueued != 0 {
		t.Fatalf("a suspended project without change: %+v, %v; want one skipped", run, err)
	}
	scheds, err := e.Svc.Backups().ListSchedules(ctx, p, prj.ID)
	if err != nil || len(scheds.ScheduledBackups) != 1 || scheds.ScheduledBackups[0].LastRunSkipped == "" || scheds.ScheduledBackups[0].LastRunAt == nil {
		t.Fatalf("schedules: %+v, %v; want the run recorded as skipped", scheds, err)
	}
	t.Logf("skipped: %s", scheds.ScheduledBackups[0].LastRunSkipped)
	if n := countAudit(t, e, p, prj.ID, "scheduled_backup.skip"); n != 1 {
		t.Fatalf("%d scheduled_backup.skip audit events, want 1", n)
	}
	checkSuspended(t, e, prj.ID, inst)

	// A write after the backup: the next slot wakes the project and backs it up.
	if _, err := e.Svc.ResumeProject(ctx, p, prj.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.AdminExec(t, prj.ID, "INSERT INTO before_backup VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Svc.SuspendProject(ctx, p, prj.ID); err != nil {
		t.Fatal(err)
	}
	checkSuspended(t, e, prj.ID, inst)
	run, err = e.Svc.Backups().RunScheduled(ctx, slot())
	if err != nil || run.Skipped != 0 || run.Enqueued != 1 {
		t.Fatalf("a suspended project with a change: %+v, %v; want one enqueued", run, err)
	}
	scheds, err = e.Svc.Backups().ListSchedules(ctx, p, prj.ID)
	if err != nil || scheds.ScheduledBackups[0].LastRunSkipped != "" || scheds.ScheduledBackups[0].LastJobID == "" {
		t.Fatalf("schedules: %+v, %v", scheds, err)
	}
	if j := e.WaitJob(t, scheds.ScheduledBackups[0].LastJobID); j.State != scheduler.StateCompleted {
		t.Fatalf("the scheduled backup: %s %s", j.State, j.Error)
	}
	if got := e.Project(t, prj.ID); got.RuntimeStatus != appliance.RuntimeActive || got.IdleSuspendedAt != nil {
		t.Fatalf("after the scheduled backup: runtime_status %s; want the project woken", got.RuntimeStatus)
	}
	// Suspended right after that backup: nothing changed since, the next slot is skipped again.
	if _, err := e.Svc.SuspendProject(ctx, p, prj.ID); err != nil {
		t.Fatal(err)
	}
	checkSuspended(t, e, prj.ID, inst)
	if run, err = e.Svc.Backups().RunScheduled(ctx, slot()); err != nil || run.Skipped != 1 {
		t.Fatalf("suspended after the new backup: %+v, %v; want one skipped", run, err)
	}
}

func countAudit(t *testing.T, e *appliancetest.Env, p *appliance.Principal, projectID, action string) int {
	t.Helper()
	evs, err := e.Svc.ListProjectAudit(t.Context(), p, projectID, appliance.AuditQuery{Limit: 0})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range evs.AuditEvents {
		if ev.Action == action {
			n++
		}
	}
	return n
}
