package appliance_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

func intp(v int) *int    { return &v }
func boolp(v bool) *bool { return &v }

func TestScheduledBackupsPutGetAndRun(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "scheduled", "development")
	ctx := t.Context()

	list, err := e.Svc.ListScheduledBackups(ctx, p, prj.ID)
	if err != nil || len(list.ScheduledBackups) != 0 {
		t.Fatalf("before a PUT: %+v %v", list, err)
	}
	for name, req := range map[string]*appliance.PutScheduledBackupRequest{
		"hour 24":       {CronHour: intp(24), CronMinute: intp(0), IsActive: boolp(true)},
		"hour -1":       {CronHour: intp(-1), CronMinute: intp(0), IsActive: boolp(true)},
		"minute 60":     {CronHour: intp(1), CronMinute: intp(60), IsActive: boolp(true)},
		"retention 0":   {CronHour: intp(1), CronMinute: intp(0), IsActive: boolp(true), RetentionDays: intp(0)},
		"retention 366": {CronHour: intp(1), CronMinute: intp(0), IsActive: boolp(true), RetentionDays: intp(366)},
		"no is_active":  {CronHour: intp(1), CronMinute: intp(0)},
		"no cron_hour":  {CronMinute: intp(0), IsActive: boolp(true)},
	} {
		if _, err := e.Svc.PutScheduledBackup(ctx, p, prj.ID, "default", req); appliance.KindOf(err) != appliance.KindInvalid {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := e.Svc.PutScheduledBackup(ctx, p, prj.ID, "other", &appliance.PutScheduledBackupRequest{
		CronHour: intp(1), CronMinute: intp(0), IsActive: boolp(true)}); appliance.KindOf(err) != appliance.KindNotFound {
		t.Errorf("schedule id other: %v", err)
	}

	put, err := e.Svc.PutScheduledBackup(ctx, p, prj.ID, "default", &appliance.PutScheduledBackupRequest{
		CronHour: intp(2), CronMinute: intp(30), IsActive: boolp(true)})
	if err != nil {
		t.Fatal(err)
	}
	sb := put.ScheduledBackup
	if sb.ID != "default" || sb.RetentionDays != 7 || sb.CronHour != 2 || sb.CronMinute != 30 || !sb.IsActive ||
		sb.ProjectID != prj.ID || sb.Label != "scheduled" || sb.LastRunAt != nil {
		t.Fatalf("put %+v", sb)
	}
	list, err = e.Svc.ListScheduledBackups(ctx, p, prj.ID)
	if err != nil || len(list.ScheduledBackups) != 1 || list.ScheduledBackups[0].CronMinute != 30 {
		t.Fatalf("after a PUT: %+v %v", list, err)
	}

	// Run on a day after today so that retention (7 days) finds nothing to delete.
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 1)
	run := func(at time.Time, want int) {
		t.Helper()
		res, err := e.Svc.RunScheduledBackups(ctx, at)
		if err != nil {
			t.Fatal(err)
		}
		if res.Enqueued != want {
			t.Fatalf("run at %s enqueued %d, want %d", at, res.Enqueued, want)
		}
	}
	run(day.Add(2*time.Hour+29*time.Minute), 0) // before the slot
	run(day.Add(2*time.Hour+31*time.Minute), 1) // past it
	run(day.Add(2*time.Hour+32*time.Minute), 0) // the same slot again
	run(day.Add(23*time.Hour), 0)               // later that day
	list, err = e.Svc.ListScheduledBackups(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	first := list.ScheduledBackups[0]
	if first.LastJobID == "" || first.LastRunAt == nil || !first.LastRunAt.Equal(day.Add(2*time.Hour+31*time.Minute)) {
		t.Fatalf("after the run: %+v", first)
	}
	run(day.AddDate(0, 0, 1).Add(5*time.Hour), 1) // the next day, late: once
	run(day.AddDate(0, 0, 1).Add(6*time.Hour), 0)

	if _, err := e.Svc.PutScheduledBackup(ctx, p, prj.ID, "default", &appliance.PutScheduledBackupRequest{
		CronHour: intp(2), CronMinute: intp(30), IsActive: boolp(false)}); err != nil {
		t.Fatal(err)
	}
	run(day.AddDate(0, 0, 2).Add(3*time.Hour), 0) // inactive

	bs, err := e.Svc.ListBackups(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(bs.Backups) != 2 {
		t.Fatalf("%d backups, want 2", len(bs.Backups))
	}
	for _, b := range bs.Backups {
		if b.Label != "scheduled" {
			t.Errorf("backup %+v", b)
		}
	}
	list, _ = e.Svc.ListScheduledBackups(ctx, p, prj.ID)
	if j := e.WaitJob(t, list.ScheduledBackups[0].LastJobID); j.State != scheduler.StateCompleted || j.Type != appliance.JobBackupCreate {
		t.Fatalf("scheduled job %+v", j)
	}
	if j := e.WaitJob(t, first.LastJobID); j.State != scheduler.StateCompleted {
		t.Fatalf("first scheduled job %+v", j)
	}
}

func TestScheduledBackupRetention(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "retained", "development")
	ctx := t.Context()

	var segs []string // a segment archived before each backup
	var keys []string
	for range 3 {
		segs = append(segs, waitArchived(t, e, p, prj))
		res, err := e.Svc.CreateBackup(ctx, p, prj.ID, &appliance.CreateBackupRequest{Label: "manual"})
		runJob(t, e, res, err)
	}
	after := waitArchived(t, e, p, prj) // archived after the newest backup
	list, err := e.Svc.ListBackups(ctx, p, prj.ID)
	if err != nil || len(list.Backups) != 3 {
		t.Fatalf("%+v %v", list, err)
	}
	// Newest first: move them 3, 4 and 5 days back.
	for i, b := range list.Backups {
		keys = append(keys, b.BackupKey)
		back := time.Duration(3+i) * 24 * time.Hour
		if err := e.DB.Update(func(tx *store.Tx) error {
			r, err := store.Backups.Get(tx, b.ID)
			if err != nil {
				return err
			}
			r.CreatedAt = r.CreatedAt.Add(-back)
			c := r.CompletedAt.Add(-back)
			r.CompletedAt = &c
			return store.Backups.Put(tx, r)
		}); err != nil {
			t.Fatal(err)
		}
	}
	rps, err := e.Svc.ListRestorePoints(ctx, p, prj.ID)
	if err != nil || rps.PITRWindowDays != 5 {
		t.Fatalf("window before retention: %+v %v", rps, err)
	}

	if _, err := e.Svc.PutScheduledBackup(ctx, p, prj.ID, "default", &appliance.PutScheduledBackupRequest{
		CronHour: intp(23), CronMinute: intp(59), IsActive: boolp(true), RetentionDays: intp(1)}); err != nil {
		t.Fatal(err)
	}
	// Midnight today: the 23:59 slot has not come, so only retention runs.
	res, err := e.Svc.RunScheduledBackups(ctx, time.Now().UTC().Truncate(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if res.Enqueued != 0 || res.BackupsDeleted != 2 || res.WALDeleted == 0 {
		t.Fatalf("result %+v", res)
	}
	list, err = e.Svc.ListBackups(ctx, p, prj.ID)
	if err != nil || len(list.Backups) != 1 || list.Backups[0].BackupKey != keys[0] {
		t.Fatalf("after retention: %+v %v", list, err)
	}
	base := filepath.Join(e.Dir, "backups", prj.ID, "base")
	for i, k := range keys {
		_, err := os.Stat(filepath.Join(base, k))
		if i == 0 && err != nil {
			t.Errorf("the newest backup's directory: %v", err)
		}
		if i > 0 && !os.IsNotExist(err) {
			t.Errorf("backup %s's directory still there: %v", k, err)
		}
	}
	wal := filepath.Join(e.Dir, "backups", prj.ID, "wal")
	for _, s := range segs {
		if _, err := os.Stat(filepath.Join(wal, s)); !os.IsNotExist(err) {
			t.Errorf("segment %s archived before the kept backup is still there: %v", s, err)
		}
	}
	if _, err := os.Stat(filepath.Join(wal, after)); err != nil {
		t.Errorf("segment %s archived after the kept backup: %v", after, err)
	}
	rps, err = e.Svc.ListRestorePoints(ctx, p, prj.ID)
	if err != nil || rps.PITRWindowDays != 3 {
		t.Fatalf("window after retention: %+v %v", rps, err)
	}
	// A second run has nothing left to delete.
	res, err = e.Svc.RunScheduledBackups(ctx, time.Now().UTC().Truncate(24*time.Hour))
	if err != nil || res != (appliance.ScheduledRunResult{}) {
		t.Fatalf("second run %+v %v", res, err)
	}
}
