package appliance_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/daemon"
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

	list, err := e.Svc.Backups().ListSchedules(ctx, p, prj.ID)
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
		if _, err := e.Svc.Backups().PutSchedule(ctx, p, prj.ID, "default", req); appliance.KindOf(err) != appliance.KindInvalid {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := e.Svc.Backups().PutSchedule(ctx, p, prj.ID, "other", &appliance.PutScheduledBackupRequest{
		CronHour: intp(1), CronMinute: intp(0), IsActive: boolp(true)}); appliance.KindOf(err) != appliance.KindNotFound {
		t.Errorf("schedule id other: %v", err)
	}

	put, err := e.Svc.Backups().PutSchedule(ctx, p, prj.ID, "default", &appliance.PutScheduledBackupRequest{
		CronHour: intp(2), CronMinute: intp(30), IsActive: boolp(true)})
	if err != nil {
		t.Fatal(err)
	}
	sb := put.ScheduledBackup
	if sb.ID != "default" || sb.RetentionDays != 7 || sb.CronHour != 2 || sb.CronMinute != 30 || !sb.IsActive ||
		sb.ProjectID != prj.ID || sb.Label != "scheduled" || sb.LastRunAt != nil {
		t.Fatalf("put %+v", sb)
	}
	list, err = e.Svc.Backups().ListSchedules(ctx, p, prj.ID)
	if err != nil || len(list.ScheduledBackups) != 1 || list.ScheduledBackups[0].CronMinute != 30 {
		t.Fatalf("after a PUT: %+v %v", list, err)
	}

	// Run on a day after today so that retention (7 days) finds nothing to delete; today's slot ran (else
	// it would run late tomorrow before 02:30: TestScheduledBackupMissedAcrossMidnight).
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 1)
	if err := e.DB.Update(func(tx *store.Tx) error {
		r, err := store.ScheduledBackups.Get(tx, prj.ID)
		if err != nil {
			return err
		}
		ran := day.Add(-24*time.Hour + 2*time.Hour + 30*time.Minute)
		r.LastRunAt = &ran
		return store.ScheduledBackups.Put(tx, r)
	}); err != nil {
		t.Fatal(err)
	}
	run := func(at time.Time, want int) {
		t.Helper()
		res, err := e.Svc.Backups().RunScheduled(ctx, at)
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
	list, err = e.Svc.Backups().ListSchedules(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	first := list.ScheduledBackups[0]
	if first.LastJobID == "" || first.LastRunAt == nil || !first.LastRunAt.Equal(day.Add(2*time.Hour+31*time.Minute)) {
		t.Fatalf("after the run: %+v", first)
	}
	run(day.AddDate(0, 0, 1).Add(5*time.Hour), 1) // the next day, late: once
	run(day.AddDate(0, 0, 1).Add(6*time.Hour), 0)

	if _, err := e.Svc.Backups().PutSchedule(ctx, p, prj.ID, "default", &appliance.PutScheduledBackupRequest{
		CronHour: intp(2), CronMinute: intp(30), IsActive: boolp(false)}); err != nil {
		t.Fatal(err)
	}
	run(day.AddDate(0, 0, 2).Add(3*time.Hour), 0) // inactive

	bs, err := e.Svc.Backups().List(ctx, p, prj.ID)
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
	list, _ = e.Svc.Backups().ListSchedules(ctx, p, prj.ID)
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
		res, err := e.Svc.Backups().Create(ctx, p, prj.ID, &appliance.CreateBackupRequest{Label: "manual"})
		runJob(t, e, res, err)
	}
	after := waitArchived(t, e, p, prj) // archived after the newest backup
	list, err := e.Svc.Backups().List(ctx, p, prj.ID)
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
	rps, err := e.Svc.Backups().ListRestorePoints(ctx, p, prj.ID)
	if err != nil || rps.PITRWindowDays != 5 {
		t.Fatalf("window before retention: %+v %v", rps, err)
	}

	if _, err := e.Svc.Backups().PutSchedule(ctx, p, prj.ID, "default", &appliance.PutScheduledBackupRequest{
		CronHour: intp(23), CronMinute: intp(59), IsActive: boolp(true), RetentionDays: intp(1)}); err != nil {
		t.Fatal(err)
	}
	// Midnight today: the 23:59 slot has not come, so only retention runs.
	res, err := e.Svc.Backups().RunScheduled(ctx, time.Now().UTC().Truncate(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if res.Enqueued != 0 || res.BackupsDeleted != 2 || res.WALDeleted == 0 {
		t.Fatalf("result %+v", res)
	}
	list, err = e.Svc.Backups().List(ctx, p, prj.ID)
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
	rps, err = e.Svc.Backups().ListRestorePoints(ctx, p, prj.ID)
	if err != nil || rps.PITRWindowDays != 3 {
		t.Fatalf("window after retention: %+v %v", rps, err)
	}
	// A second run has nothing left to delete.
	res, err = e.Svc.Backups().RunScheduled(ctx, time.Now().UTC().Truncate(24*time.Hour))
	if err != nil || res != (appliance.ScheduledRunResult{}) {
		t.Fatalf("second run %+v %v", res, err)
	}
}

// A daily slot missed because the appliance was down across UTC midnight runs at the first tick after
// the start, once; the next slot runs as usual (F-L1).
func TestScheduledBackupMissedAcrossMidnight(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "midnight", "development")
	ctx := t.Context()
	if _, err := e.Svc.Backups().PutSchedule(ctx, p, prj.ID, "default", &appliance.PutScheduledBackupRequest{
		CronHour: intp(23), CronMinute: intp(55), IsActive: boolp(true)}); err != nil {
		t.Fatal(err)
	}
	// It last ran at 23:55 today; tomorrow the appliance stops at 23:50 and starts again at 00:10 the day
	// after: tomorrow's slot was missed.
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 2) // the day the appliance comes back
	if err := e.DB.Update(func(tx *store.Tx) error {
		r, err := store.ScheduledBackups.Get(tx, prj.ID)
		if err != nil {
			return err
		}
		ran := day.Add(-48*time.Hour + 23*time.Hour + 55*time.Minute)
		r.LastRunAt = &ran
		return store.ScheduledBackups.Put(tx, r)
	}); err != nil {
		t.Fatal(err)
	}
	run := func(at time.Time, want int) {
		t.Helper()
		res, err := e.Svc.Backups().RunScheduled(ctx, at)
		if err != nil {
			t.Fatal(err)
		}
		if res.Enqueued != want {
			t.Fatalf("run at %s enqueued %d, want %d", at, res.Enqueued, want)
		}
	}
	run(day.Add(-24*time.Hour+23*time.Hour+50*time.Minute), 0) // the last tick before the stop
	run(day.Add(10*time.Minute), 1)                            // the first after the start: the missed slot runs late
	run(day.Add(11*time.Minute), 0)                            // once
	run(day.Add(23*time.Hour+54*time.Minute), 0)
	run(day.Add(23*time.Hour+55*time.Minute), 1) // that day's own slot
	list, err := e.Svc.Backups().ListSchedules(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, list.ScheduledBackups[0].LastJobID); j.State != scheduler.StateCompleted {
		t.Fatalf("scheduled job %+v", j)
	}
}

// ageBackups moves a project's backups back in time, the newest by back[0], the next by back[1]...
func ageBackups(t *testing.T, e *appliancetest.Env, p *appliance.Principal, prj *store.Project, back ...time.Duration) []string {
	t.Helper()
	list, err := e.Svc.Backups().List(t.Context(), p, prj.ID)
	if err != nil || len(list.Backups) != len(back) {
		t.Fatalf("%+v %v", list, err)
	}
	var keys []string
	for i, b := range list.Backups {
		keys = append(keys, b.BackupKey)
		if err := e.DB.Update(func(tx *store.Tx) error {
			r, err := store.Backups.Get(tx, b.ID)
			if err != nil {
				return err
			}
			r.CreatedAt = r.CreatedAt.Add(-back[i])
			c := r.CompletedAt.Add(-back[i])
			r.CompletedAt = &c
			return store.Backups.Put(tx, r)
		}); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// A project without a backup schedule has the default retention (7 days) too; a backup a restore point
// starts from is kept whatever its age while the point exists, with the WAL archived since (F-M3).
func TestDefaultRetentionWithoutSchedule(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "unscheduled", "development")
	ctx := t.Context()
	backup := func() {
		res, err := e.Svc.Backups().Create(ctx, p, prj.ID, &appliance.CreateBackupRequest{Label: "manual"})
		runJob(t, e, res, err)
	}
	before := waitArchived(t, e, p, prj) // archived before every backup
	backup()
	rp, err := e.Svc.Backups().CreateRestorePoint(ctx, p, prj.ID, &appliance.RestorePointRequest{Label: "pins the first backup"})
	if err != nil {
		t.Fatal(err)
	}
	between := waitArchived(t, e, p, prj) // archived after the first backup, before the others
	backup()
	backup()
	day := 24 * time.Hour
	keys := ageBackups(t, e, p, prj, 8*day, 9*day, 10*day) // newest first
	if rp.RestorePoint.BackupKey != keys[2] {
		t.Fatalf("the restore point starts from %s, want the first backup %s", rp.RestorePoint.BackupKey, keys[2])
	}
	exists := func(path string) bool { _, err := os.Stat(path); return err == nil }
	base := filepath.Join(e.Dir, "backups", prj.ID, "base")
	wal := filepath.Join(e.Dir, "backups", prj.ID, "wal")

	res, err := e.Svc.Backups().RunScheduled(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if res.BackupsDeleted != 1 || res.WALDeleted == 0 {
		t.Fatalf("first run %+v: want the middle backup deleted, the newest and the pinned one kept", res)
	}
	if !exists(filepath.Join(base, keys[0])) || exists(filepath.Join(base, keys[1])) || !exists(filepath.Join(base, keys[2])) {
		t.Fatalf("after the first run: backup directories %v %v %v", exists(filepath.Join(base, keys[0])),
			exists(filepath.Join(base, keys[1])), exists(filepath.Join(base, keys[2])))
	}
	if exists(filepath.Join(wal, before)) || !exists(filepath.Join(wal, between)) {
		t.Fatalf("after the first run: segment before the pinned backup kept %v, after it kept %v",
			exists(filepath.Join(wal, before)), exists(filepath.Join(wal, between)))
	}

	// Without the point, the first backup goes too, and the WAL before the newest one.
	if _, err := e.Svc.Backups().DeleteRestorePoint(ctx, p, prj.ID, rp.RestorePoint.ID); err != nil {
		t.Fatal(err)
	}
	if res, err = e.Svc.Backups().RunScheduled(ctx, time.Now()); err != nil || res.BackupsDeleted != 1 || res.WALDeleted == 0 {
		t.Fatalf("second run %+v %v", res, err)
	}
	if !exists(filepath.Join(base, keys[0])) || exists(filepath.Join(base, keys[2])) || exists(filepath.Join(wal, between)) {
		t.Fatal("after the second run: the newest backup must stay, the first one and the WAL before the newest go")
	}
	list, err := e.Svc.Backups().List(ctx, p, prj.ID)
	if err != nil || len(list.Backups) != 1 || list.Backups[0].BackupKey != keys[0] {
		t.Fatalf("after retention: %+v %v", list, err)
	}
	// Nothing is left to delete: the newest backup is kept whatever its age.
	if res, err = e.Svc.Backups().RunScheduled(ctx, time.Now()); err != nil || res != (appliance.ScheduledRunResult{}) {
		t.Fatalf("third run %+v %v", res, err)
	}
}

// A scheduled backup that pg_basebackup fails for a real reason gives a failed job carrying the tool's exit
// code and stderr, and a failed backup record; once the cause is gone, the next day's slot enqueues a backup
// that completes. Two real causes: a tablespace (a plain-format backup on the same machine cannot copy it
// onto itself; always run) and a full disk (the project's base backup directory on a 4 MB tmpfs: run only
// as root where mount is permitted, skipped otherwise).
func TestScheduledBackupFailureThenNextSlot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		stderr    string                                                                    // in the failed job's stderr
		breakIt   func(t *testing.T, e *appliancetest.Env, prj *store.Project) (fix func()) // makes pg_basebackup fail
		wantError string                                                                    // in the job's error
	}{
		{"tablespace", "not empty", breakWithTablespace, "pg_basebackup"},
		{"disk full", "No space left on device", breakWithFullDisk, "pg_basebackup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, p := realEnv(t)
			prj := provision(t, e, p, "scheduled "+tc.name, "development")
			ctx := t.Context()
			if _, err := e.Svc.Backups().PutSchedule(ctx, p, prj.ID, "default", &appliance.PutScheduledBackupRequest{
				CronHour: intp(4), CronMinute: intp(0), IsActive: boolp(true)}); err != nil {
				t.Fatal(err)
			}
			fix := tc.breakIt(t, e, prj)

			day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 1)
			slot := func(at time.Time) *store.Job {
				t.Helper()
				res, err := e.Svc.Backups().RunScheduled(ctx, at)
				if err != nil || res.Enqueued != 1 {
					t.Fatalf("run at %s: %+v %v", at, res, err)
				}
				list, err := e.Svc.Backups().ListSchedules(ctx, p, prj.ID)
				if err != nil {
					t.Fatal(err)
				}
				return e.WaitJob(t, list.ScheduledBackups[0].LastJobID)
			}
			j := slot(day.Add(4*time.Hour + time.Minute))
			if j.State != scheduler.StateFailed || j.Type != appliance.JobBackupCreate ||
				!strings.Contains(j.Error, tc.wantError) || !strings.Contains(j.Error, "exited with code") || !strings.Contains(j.Error, tc.stderr) ||
				!strings.Contains(j.LastStderr, tc.stderr) || j.LastExitCode == nil || *j.LastExitCode == 0 {
				t.Fatalf("failed slot's job: %s %q\nexit code %v\nstderr: %s", j.State, j.Error, j.LastExitCode, j.LastStderr)
			}
			bs, err := e.Svc.Backups().List(ctx, p, prj.ID)
			if err != nil || len(bs.Backups) != 1 {
				t.Fatalf("%+v %v", bs, err)
			}
			if b := bs.Backups[0]; b.State != appliance.BackupFailed || b.Label != "scheduled" ||
				b.VerificationState != appliance.VerificationFailed || b.SizeBytes != 0 || b.ID != backupOf(t, e, j).ID {
				t.Fatalf("failed backup %+v", b)
			}
			if rec := backupOf(t, e, j); !strings.Contains(rec.Error, tc.stderr) {
				t.Fatalf("the failed backup's recorded error does not quote pg_basebackup: %q", rec.Error)
			}
			if _, err := os.Stat(filepath.Join(e.Dir, "backups", prj.ID, "base", bs.Backups[0].BackupKey)); !os.IsNotExist(err) {
				t.Fatalf("the failed backup's directory is left (%v)", err)
			}

			// The slot ran (failing is running): the same day does not retry it; the next day's does.
			if res, err := e.Svc.Backups().RunScheduled(ctx, day.Add(5*time.Hour)); err != nil || res.Enqueued != 0 {
				t.Fatalf("same day again: %+v %v", res, err)
			}
			fix()
			j = slot(day.AddDate(0, 0, 1).Add(4*time.Hour + time.Minute))
			if j.State != scheduler.StateCompleted {
				t.Fatalf("next slot's job: %s %q\nstderr: %s", j.State, j.Error, j.LastStderr)
			}
			bs, err = e.Svc.Backups().List(ctx, p, prj.ID)
			if err != nil || len(bs.Backups) != 2 {
				t.Fatalf("%+v %v", bs, err)
			}
			if b := bs.Backups[0]; b.State != appliance.BackupCompleted || b.VerificationState != appliance.VerificationVerified || b.Label != "scheduled" {
				t.Fatalf("next slot's backup %+v", b)
			}
		})
	}
}

// backupOf reads the backup record a backup.create job took.
func backupOf(t *testing.T, e *appliancetest.Env, j *store.Job) *store.Backup {
	t.Helper()
	var pl struct {
		BackupID string `json:"backup_id"`
	}
	if err := json.Unmarshal(j.Payload, &pl); err != nil {
		t.Fatal(err)
	}
	var b *store.Backup
	if err := e.DB.View(func(tx *store.Tx) (err error) { b, err = store.Backups.Get(tx, pl.BackupID); return err }); err != nil {
		t.Fatal(err)
	}
	return b
}

// breakWithTablespace gives the project a tablespace; fix drops it.
func breakWithTablespace(t *testing.T, e *appliancetest.Env, prj *store.Project) func() {
	t.Helper()
	dir := filepath.Join(e.Dir, "tablespace")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	user, err := daemon.DefaultOSUser()
	if err != nil {
		t.Fatal(err)
	}
	if err := user.Chown(dir); err != nil {
		t.Fatal(err)
	}
	if err := e.AdminExec(t, prj.ID, "CREATE TABLESPACE extra LOCATION '"+dir+"'"); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := e.AdminExec(t, prj.ID, "DROP TABLESPACE extra"); err != nil {
			t.Fatal(err)
		}
	}
}

// breakWithFullDisk mounts a 4 MB tmpfs on the project's base backup directory (a fresh cluster's backup
// is tens of MB); fix unmounts it. It skips the test unless it runs as root and mount is permitted.
func breakWithFullDisk(t *testing.T, e *appliancetest.Env, prj *store.Project) func() {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a full disk needs a tmpfs mount: not root")
	}
	user, err := daemon.DefaultOSUser()
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(e.Dir, "backups", prj.ID, "base")
	if err := os.MkdirAll(base, 0o700); err != nil {
		t.Fatal(err)
	}
	opts := fmt.Sprintf("size=4m,mode=0700,uid=%d,gid=%d", user.UID, user.GID)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "tmpfs", base).CombinedOutput(); err != nil {
		t.Skipf("a full disk needs a tmpfs mount, which is not permitted here: %v: %s", err, out)
	}
	mounted := true
	unmount := func() {
		if !mounted {
			return
		}
		if out, err := exec.Command("umount", base).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", base, err, out)
			_ = exec.Command("umount", "-l", base).Run()
		}
		mounted = false
	}
	t.Cleanup(unmount)
	return unmount
}
