package appliance_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// waitArchived switches to a new WAL segment and waits until the archiver copied the finished one into
// the project's WAL directory of the backup store.
func waitArchived(t *testing.T, e *appliancetest.Env, p *appliance.Principal, prj *store.Project) string {
	t.Helper()
	c, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, c.Connections.DirectURL)
	seg := scalar[string](t, conn, "SELECT pg_walfile_name(pg_current_wal_lsn())")
	if err := e.AdminExec(t, prj.ID, "SELECT pg_switch_wal()"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.Dir, "backups", prj.ID, "wal", seg)
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(path); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("segment %s not in the backup store's WAL directory after a minute", seg)
		}
		time.Sleep(50 * time.Millisecond) // polling the archiver's progress, as WaitJob polls a job
	}
	return seg
}

func TestWALArchivedIntoBackupStore(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "archived", "development")
	waitArchived(t, e, p, prj)
	fi, err := os.Stat(filepath.Join(e.Dir, "backups", prj.ID, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("wal dir mode %v", fi.Mode())
	}
}

func TestBackupTakenAndVerified(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "backed up", "development")
	if err := e.AdminExec(t, prj.ID, "CREATE TABLE t AS SELECT g AS id FROM generate_series(1, 1000) g"); err != nil {
		t.Fatal(err)
	}
	res, err := e.Svc.Backups().Create(t.Context(), p, prj.ID, &appliance.CreateBackupRequest{Label: "first"})
	j := runJob(t, e, res, err)
	if j.Type != appliance.JobBackupCreate || j.LastExitCode == nil || *j.LastExitCode != 0 {
		t.Fatalf("job %+v", j)
	}
	list, err := e.Svc.Backups().List(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Backups) != 1 {
		t.Fatalf("%d backups", len(list.Backups))
	}
	b := list.Backups[0]
	if b.State != appliance.BackupCompleted || b.VerificationState != appliance.VerificationVerified || b.VerifiedAt == nil ||
		b.SizeBytes <= 0 || b.Label != "first" || b.DatabaseName != prj.DatabaseName || b.BackupKey == "" {
		t.Fatalf("backup %+v", b)
	}
	dir := filepath.Join(e.Dir, "backups", prj.ID, "base", b.BackupKey)
	for _, f := range []string{"backup_manifest", "PG_VERSION", "settings.conf"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("backup lacks %s: %v", f, err)
		}
	}

	if _, err := e.Svc.Backups().Create(t.Context(), p, prj.ID, &appliance.CreateBackupRequest{Label: strings.Repeat("é", 101)}); appliance.KindOf(err) != appliance.KindInvalid {
		t.Fatalf("a 101-character label: %v", err)
	}
}

func TestRestoreToTimeRestorePointAndBackup(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "restored", "development")
	c, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string) {
		t.Helper()
		conn := connect(t, c.Connections.DirectURL)
		if _, err := conn.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rows := func() string {
		t.Helper()
		conn := connect(t, c.Connections.DirectURL)
		return scalar[string](t, conn, "SELECT coalesce(string_agg(v, ',' ORDER BY v), '') FROM items")
	}
	exec("CREATE TABLE items (v text)")
	res, err := e.Svc.Backups().Create(t.Context(), p, prj.ID, &appliance.CreateBackupRequest{Label: "base"})
	runJob(t, e, res, err)
	list, err := e.Svc.Backups().List(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	backupKey := list.Backups[0].BackupKey

	exec("INSERT INTO items VALUES ('a')")
	conn := connect(t, c.Connections.DirectURL)
	noted := scalar[time.Time](t, conn, "SELECT clock_timestamp()")
	exec("INSERT INTO items VALUES ('b')")
	rp, err := e.Svc.Backups().CreateRestorePoint(t.Context(), p, prj.ID, &appliance.RestorePointRequest{Label: "after b"})
	if err != nil {
		t.Fatal(err)
	}
	if rp.RestorePoint.Kind != "named" || rp.RestorePoint.State != "active" || rp.RestorePoint.BackupKey != backupKey ||
		rp.RestorePoint.CreatedByActorKind != appliance.ActorAPIKey || rp.RestorePoint.CreatedByActorID == "" {
		t.Fatalf("restore point %+v", rp.RestorePoint)
	}
	exec("INSERT INTO items VALUES ('c')")
	if got := rows(); got != "a,b,c" {
		t.Fatalf("before the restores: %q", got)
	}
	rps, err := e.Svc.Backups().ListRestorePoints(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rps.RestorePoints) != 1 || rps.PITRWindowDays != 0 {
		t.Fatalf("restore points %+v", rps)
	}

	for _, step := range []struct {
		name string
		req  appliance.RestoreRequest
		want string
	}{
		{"time", appliance.RestoreRequest{RestoreTime: noted.UTC().Format(time.RFC3339Nano)}, "a"},
		{"restore point", appliance.RestoreRequest{RestorePointID: rp.RestorePoint.ID}, "a,b"},
		{"backup", appliance.RestoreRequest{BackupKey: backupKey}, ""},
	} {
		res, err := e.Svc.Backups().Restore(t.Context(), p, prj.ID, &step.req)
		j := runJob(t, e, res, err)
		if got := rows(); got != step.want {
			t.Fatalf("after the restore to the %s (%s): rows %q, want %q", step.name, j.Result, got, step.want)
		}
		if step.name == "restore point" {
			wantRecoveryStopTime(t, instanceOf(t, e, prj), rp.RestorePoint)
		}
		if got := e.Project(t, prj.ID); got.RuntimeStatus != appliance.RuntimeActive || got.State != appliance.ProjectActive {
			t.Fatalf("project after restore: %s %s", got.State, got.RuntimeStatus)
		}
		// Archiving continues on the new timeline, and the pooled port serves the restored data.
		waitArchived(t, e, p, prj)
		pooled := connect(t, c.Connections.PooledURL)
		if n := scalar[int64](t, pooled, "SELECT count(*) FROM items"); n != int64(len(strings.Split(step.want, ","))) && step.want != "" {
			t.Fatalf("pooled sees %d rows", n)
		}
	}
	inst := instanceOf(t, e, prj)
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(inst.Dir), inst.ID+".restore-*"))
	more, _ := filepath.Glob(filepath.Join(inst.Dir, "pgdata.pre-restore-*"))
	if len(leftovers)+len(more) > 0 {
		t.Fatalf("left behind: %v %v", leftovers, more)
	}

	if _, err := e.Svc.Backups().DeleteRestorePoint(t.Context(), p, prj.ID, rp.RestorePoint.ID); err != nil {
		t.Fatal(err)
	}
	if res, err := e.Svc.Backups().DeleteRestorePoint(t.Context(), p, prj.ID, rp.RestorePoint.ID); err != nil || !res.Deleted {
		t.Fatalf("second delete (idempotent): %v", err)
	}
	if _, err := e.Svc.Backups().DeleteRestorePoint(t.Context(), p, prj.ID, "rp_nope"); appliance.KindOf(err) != appliance.KindNotFound {
		t.Fatalf("delete of an unknown point: %v", err)
	}
	if rps, err := e.Svc.Backups().ListRestorePoints(t.Context(), p, prj.ID); err != nil || len(rps.RestorePoints) != 0 {
		t.Fatalf("after delete: %+v %v", rps, err)
	}
	if _, err := e.Svc.Backups().Restore(t.Context(), p, prj.ID, &appliance.RestoreRequest{RestorePointID: rp.RestorePoint.ID}); appliance.KindOf(err) != appliance.KindInvalid {
		t.Fatalf("restore to a deleted point: %v", err)
	}
}

// wantRecoveryStopTime checks a restore point's pitr_time against the time PostgreSQL wrote in its WAL
// record, which recovery logs on stopping there: "recovery stopping at restore point "<name>", time <t>".
func wantRecoveryStopTime(t *testing.T, inst *store.Instance, rp *appliance.RestorePoint) {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(inst.Dir, "pgdata", "log", "*.json"))
	re := regexp.MustCompile(`recovery stopping at restore point \\"` + rp.ID + `\\", time ([0-9: .+-]+)`)
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m := re.FindSubmatch(b)
		if m == nil {
			continue
		}
		logged, err := time.Parse("2006-01-02 15:04:05.999999-07", string(m[1]))
		if err != nil {
			t.Fatalf("recovery's stop time %q: %v", m[1], err)
		}
		if !logged.Equal(rp.PITRTime) {
			t.Fatalf("pitr_time %s, but PostgreSQL recorded the point at %s", rp.PITRTime.Format(time.RFC3339Nano), logged.UTC().Format(time.RFC3339Nano))
		}
		return
	}
	t.Fatalf("no log line of the recovery stopping at %s in %v", rp.ID, logs)
}

func TestRestoreRequestsRefused(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "refusals", "development")
	for name, req := range map[string]appliance.RestoreRequest{
		"none":           {},
		"two":            {BackupKey: "x", RestorePointID: "rp_x"},
		"bad time":       {RestoreTime: "yesterday"},
		"future":         {RestoreTime: time.Now().Add(time.Hour).Format(time.RFC3339)},
		"before backups": {RestoreTime: time.Now().Add(-time.Hour).Format(time.RFC3339)},
		"unknown key":    {BackupKey: "nope"},
		"unknown point":  {RestorePointID: "rp_nope"},
	} {
		if _, err := e.Svc.Backups().Restore(t.Context(), p, prj.ID, &req); appliance.KindOf(err) != appliance.KindInvalid {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
	if _, err := e.Svc.Backups().CreateRestorePoint(t.Context(), p, prj.ID, &appliance.RestorePointRequest{}); appliance.KindOf(err) != appliance.KindInvalid {
		t.Errorf("restore point without label: %v", err)
	}
}

// A plain-format pg_basebackup on the same machine cannot copy a tablespace onto itself: a real failure,
// which must fail the job with the tool's stderr and mark the backup failed.
func TestBackupFailureIsReported(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "no backup", "development")
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
	res, err := e.Svc.Backups().Create(t.Context(), p, prj.ID, &appliance.CreateBackupRequest{})
	if err != nil {
		t.Fatal(err)
	}
	j := e.WaitJob(t, res.Job.ID)
	if j.State != scheduler.StateFailed || !strings.Contains(j.Error, "pg_basebackup") ||
		!strings.Contains(j.LastStderr, "not empty") || j.LastExitCode == nil || *j.LastExitCode == 0 {
		t.Fatalf("job %s: %s\nstderr: %s", j.State, j.Error, j.LastStderr)
	}
	list, err := e.Svc.Backups().List(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	if b := list.Backups[0]; b.State != appliance.BackupFailed || b.VerificationState != appliance.VerificationFailed || b.SizeBytes != 0 {
		t.Fatalf("backup %+v", b)
	}
}

// A restore starts a new timeline. A restore to a time is read on the history the project had at that time:
// a time before the last restore uses the old timeline (a backup of it, recovery_target_timeline set to
// it), a time after it the new one (its own backup once there is one, or, before that backup completed,
// the backup the restore started from, following the new timeline's history).
func TestRestoreToTimesAcrossTimelines(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "timelines", "development")
	c, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string) {
		t.Helper()
		conn := connect(t, c.Connections.DirectURL)
		if _, err := conn.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rows := func() string {
		t.Helper()
		conn := connect(t, c.Connections.DirectURL)
		return scalar[string](t, conn, "SELECT coalesce(string_agg(v, ',' ORDER BY v), '') FROM items")
	}
	now := func() time.Time {
		t.Helper()
		return scalar[time.Time](t, connect(t, c.Connections.DirectURL), "SELECT clock_timestamp()")
	}
	type payload struct {
		BackupID string `json:"backup_id"`
		Timeline int    `json:"timeline"`
	}
	type result struct {
		Timeline     int    `json:"timeline"`
		FromTimeline int    `json:"from_timeline"`
		BackupJobID  string `json:"backup_job_id"`
	}
	restore := func(at time.Time, want string) (payload, result) {
		t.Helper()
		res, err := e.Svc.Backups().Restore(t.Context(), p, prj.ID, &appliance.RestoreRequest{RestoreTime: at.UTC().Format(time.RFC3339Nano)})
		j := runJob(t, e, res, err)
		var pl payload
		var r result
		if err := json.Unmarshal(j.Payload, &pl); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(j.Result, &r); err != nil {
			t.Fatal(err)
		}
		if got := rows(); got != want {
			t.Fatalf("restore to %s (payload %+v, result %s): rows %q, want %q", at, pl, j.Result, got, want)
		}
		return pl, r
	}
	backupByJob := func(jobID string) *store.Backup {
		t.Helper()
		var out *store.Backup
		if err := e.DB.View(func(tx *store.Tx) error {
			bs, err := store.Backups.Lookup(tx, store.BackupsByProject, prj.ID, store.Query{})
			for _, b := range bs {
				if b.JobID == jobID {
					out = b
				}
			}
			return err
		}); err != nil || out == nil {
			t.Fatalf("no backup of job %s (%v)", jobID, err)
		}
		return out
	}

	exec("CREATE TABLE items (v text)")
	res, err := e.Svc.Backups().Create(t.Context(), p, prj.ID, &appliance.CreateBackupRequest{Label: "base"})
	first := backupByJob(runJob(t, e, res, err).ID)
	if first.Timeline != 1 {
		t.Fatalf("first backup on timeline %d", first.Timeline)
	}
	exec("INSERT INTO items VALUES ('a')")
	t1 := now()
	exec("INSERT INTO items VALUES ('b')")
	tOld := now()
	exec("INSERT INTO items VALUES ('c')")

	// Timeline 1 → 2: the state at t1.
	pl, r := restore(t1, "a")
	if pl.Timeline != 1 || pl.BackupID != first.ID || r.Timeline != 2 || r.FromTimeline != 1 {
		t.Fatalf("first restore: payload %+v result %+v", pl, r)
	}
	// A time on timeline 2 right after the restore, probably before timeline 2's first backup completed.
	tEarly := now()
	if j := e.WaitJob(t, r.BackupJobID); j.State != scheduler.StateCompleted {
		t.Fatalf("after-restore backup: %s %s", j.State, j.Error)
	}
	second := backupByJob(r.BackupJobID)
	if second.Timeline != 2 {
		t.Fatalf("after-restore backup on timeline %d", second.Timeline)
	}
	exec("INSERT INTO items VALUES ('x')")
	tNew := now()
	exec("INSERT INTO items VALUES ('y')")

	// Before the restore: timeline 1's state at tOld, from timeline 1's backup.
	pl, r = restore(tOld, "a,b")
	if pl.Timeline != 1 || pl.BackupID != first.ID || r.Timeline != 3 || r.FromTimeline != 2 {
		t.Fatalf("restore to a time on the old timeline: payload %+v result %+v", pl, r)
	}
	// After it: timeline 2's state at tNew, from timeline 2's backup.
	pl, r = restore(tNew, "a,x")
	if pl.Timeline != 2 || pl.BackupID != second.ID || r.Timeline != 4 || r.FromTimeline != 3 {
		t.Fatalf("restore to a time on the new timeline: payload %+v result %+v", pl, r)
	}
	// Timeline 2 just after its start: from its own backup if it was complete by then, else from the
	// backup the restore started from.
	wantBase := first.ID
	if !second.CompletedAt.After(tEarly) {
		wantBase = second.ID
	}
	t.Logf("tEarly %s, timeline 2's backup completed %s: base %s", tEarly, second.CompletedAt, wantBase)
	pl, r = restore(tEarly, "a")
	if pl.Timeline != 2 || pl.BackupID != wantBase || r.Timeline != 5 || r.FromTimeline != 4 {
		t.Fatalf("restore to the start of timeline 2: payload %+v result %+v", pl, r)
	}
}

// A base backup taken by the appliance before the backup store was objects (pg_basebackup's plain-format
// directory straight into backups/<project>/base/<key>, no manifest) stays restorable after an upgrade in
// place: it is fetched file by file, with the data directory's empty directories made again.
func TestLegacyBackupRestores(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "legacy", "development")
	c, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string) {
		t.Helper()
		if _, err := connect(t, c.Connections.DirectURL).Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rows := func() string {
		t.Helper()
		return scalar[string](t, connect(t, c.Connections.DirectURL), "SELECT coalesce(string_agg(v, ',' ORDER BY v), '') FROM items")
	}
	exec("CREATE TABLE items (v text)")
	exec("INSERT INTO items VALUES ('a')")
	// The backup's record, as the old code made it; its objects are then replaced by what the old code
	// wrote, with a row the new backup does not have.
	res, err := e.Svc.Backups().Create(t.Context(), p, prj.ID, &appliance.CreateBackupRequest{Label: "legacy"})
	runJob(t, e, res, err)
	list, err := e.Svc.Backups().List(t.Context(), p, prj.ID)
	if err != nil || len(list.Backups) != 1 {
		t.Fatalf("%+v %v", list, err)
	}
	key := list.Backups[0].BackupKey
	baseDir := filepath.Join(e.Dir, "backups", prj.ID, "base")
	if err := os.RemoveAll(filepath.Join(baseDir, key)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(baseDir, key+".backup.json")); err != nil {
		t.Fatal(err)
	}
	exec("INSERT INTO items VALUES ('x')")
	user, err := daemon.DefaultOSUser()
	if err != nil {
		t.Fatal(err)
	}
	basebackup, err := e.Bin.Path("pg_basebackup")
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.AdminConfig(t, prj.ID)
	cmd := user.Command(basebackup, "-D", filepath.Join(baseDir, key), "-F", "p", "-X", "stream", "--checkpoint=fast", "--no-password",
		"--label", "appliance "+key, "-h", "127.0.0.1", "-p", strconv.Itoa(int(cfg.Port)), "-U", cfg.User)
	cmd.Env = append(cmd.Env, "PGPASSWORD="+cfg.Password, "PGSSLMODE=disable", "PGCONNECT_TIMEOUT=10")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pg_basebackup: %v: %s", err, out)
	}
	exec("INSERT INTO items VALUES ('b')")
	if got := rows(); got != "a,b,x" {
		t.Fatalf("before the restore: %q", got)
	}
	res, err = e.Svc.Backups().Restore(t.Context(), p, prj.ID, &appliance.RestoreRequest{BackupKey: key})
	j := runJob(t, e, res, err)
	if j.State != scheduler.StateCompleted {
		t.Fatalf("restore: %s %s", j.State, j.Error)
	}
	if got := rows(); got != "a,x" {
		t.Fatalf("after the restore to the legacy backup: %q (%s)", got, j.Result)
	}
	// Retention reads where its WAL starts from its backup_label.
	if _, err := e.Svc.Backups().RunScheduled(t.Context(), time.Now()); err != nil {
		t.Fatal(err)
	}
}
