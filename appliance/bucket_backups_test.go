package appliance_test

import (
	"bytes"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/backup/s3store"
	"github.com/theappliance/appliance/appliance/backup/s3store/s3test"
	"github.com/theappliance/appliance/appliance/backups"
	"github.com/theappliance/appliance/appliance/observe"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// bucketEnv is an appliance whose backup store is a bucket of a real S3 server (versitygw), under the
// prefix "appliance/", sealed with a random data key; it returns the server and the store on it.
func bucketEnv(t *testing.T) (*appliancetest.Env, *appliance.Principal, *s3test.Server, *backup.Store) {
	t.Helper()
	return bucketEnvWith(t, appliancetest.Options{Instances: true})
}

// bucketEnvWith is bucketEnv with options (its BackupObjects is the bucket's).
func bucketEnvWith(t *testing.T, o appliancetest.Options) (*appliancetest.Env, *appliance.Principal, *s3test.Server, *backup.Store) {
	t.Helper()
	srv := s3test.StartIn(t, appliancetest.TraversableTempDir(t)) // the Envs' filesystem (MainOnScratchFS)
	var bs *backup.Store
	o.BackupObjects = func(dir string, chown func(string) error) (backup.Objects, error) {
		cfg := srv.Config("appliance/")
		cfg.DataKey = make([]byte, 32)
		rand.Read(cfg.DataKey)
		cfg.Spool, cfg.Chown = filepath.Join(dir, "spool"), chown
		cfg.UploadState = filepath.Join(dir, "spool", "uploads") // as up has it
		b, err := s3store.New(cfg)
		if err != nil {
			return nil, err
		}
		if err := b.Check(t.Context()); err != nil {
			return nil, err
		}
		bs = backup.New(b)
		return b, nil
	}
	e, p := keyEnv(t, o)
	return e, p, srv, bs
}

// waitArchivedIn switches to a new WAL segment and waits until the archiver stored the finished one in
// bs (PostgreSQL's archive_command returned: the bucket has it).
func waitArchivedIn(t *testing.T, e *appliancetest.Env, bs *backup.Store, conn *pgx.Conn, prj *store.Project) string {
	t.Helper()
	seg := scalar[string](t, conn, "SELECT pg_walfile_name(pg_current_wal_lsn())")
	if err := e.AdminExec(t, prj.ID, "SELECT pg_switch_wal()"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		ok, err := bs.WALArchived(t.Context(), prj.ID, "", seg)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return seg
		}
		if time.Now().After(deadline) {
			t.Fatalf("segment %s not in the bucket after a minute", seg)
		}
		time.Sleep(50 * time.Millisecond) // polling the archiver's progress, as WaitJob polls a job
	}
}

// TestBucketBackupRestoreAndPreview: with a bucket as the backup store, the WAL archive and the base
// backups are objects in the bucket (none in the local directory), sealed (a row's text and the
// backup_label's are nowhere in the clear), and restores to a time and to a backup and a preview as of a
// past time read them back through the appliance.
func TestBucketBackupRestoreAndPreview(t *testing.T) {
	t.Parallel()
	e, p, srv, bs := bucketEnv(t)
	prj, c, conn := connected(t, e, p, "in a bucket")
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
	const marker = "a-row-the-bucket-holder-must-not-read"
	exec("CREATE TABLE items (v text)")
	res, err := e.Svc.Backups().Create(t.Context(), p, prj.ID, &appliance.CreateBackupRequest{Label: "base"})
	runJob(t, e, res, err)
	list, err := e.Svc.Backups().List(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	b := list.Backups[0]
	if b.State != appliance.BackupCompleted || b.VerificationState != appliance.VerificationVerified || b.SizeBytes <= 0 {
		t.Fatalf("backup %+v", b)
	}
	exec("INSERT INTO items VALUES ('a'), ('" + marker + "')")
	time.Sleep(1100 * time.Millisecond) // commit timestamps on either side of the target
	target := time.Now().UTC()
	time.Sleep(1100 * time.Millisecond)
	exec("INSERT INTO items VALUES ('b')")
	seg := waitArchivedIn(t, e, bs, conn, prj)

	// The bucket holds the project's objects, and nothing of them in the clear.
	objects := map[string]bool{}
	for o := range srv.Client().ListObjects(t.Context(), srv.Bucket, minio.ListObjectsOptions{Prefix: "appliance/" + prj.ID + "/", Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		objects[strings.TrimPrefix(o.Key, "appliance/"+prj.ID+"/")] = true
	}
	for _, want := range []string{"wal/" + seg, "base/" + b.BackupKey + ".backup.json", "base/" + b.BackupKey + "/backup_label", "base/" + b.BackupKey + "/PG_VERSION"} {
		if !objects[want] {
			t.Errorf("the bucket lacks %s (it holds %d objects of the project)", want, len(objects))
		}
	}
	for name := range objects {
		raw, err := os.ReadFile(srv.Path("appliance/" + prj.ID + "/" + name))
		if err != nil {
			t.Fatal(err)
		}
		for _, clear := range []string{marker, "START WAL LOCATION", "PostgreSQL"} {
			if bytes.Contains(raw, []byte(clear)) {
				t.Errorf("the bucket's object %s holds %q in the clear", name, clear)
			}
		}
	}
	if local, _ := filepath.Glob(filepath.Join(e.Dir, "backups", prj.ID, "wal", "0*")); len(local) > 0 {
		t.Errorf("WAL archived into the local directory too: %v", local)
	}
	// What the store gives back is the segment PostgreSQL wrote (16 MiB).
	rc, err := bs.GetWAL(t.Context(), prj.ID, "", seg)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, rc)
	rc.Close()
	if err != nil || n != 16<<20 {
		t.Fatalf("segment %s from the bucket: %d bytes, %v", seg, n, err)
	}

	// The organization's usage counts the bucket's objects, the export's among them: its local file is a
	// cache of the object, not counted again.
	ex, err := e.Svc.Exports().Create(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, ex.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("export job %s: %s", j.State, j.Error)
	}
	exported, err := os.Stat(filepath.Join(e.Dir, "backups", prj.ID, "exports", ex.ExportID+".dump"))
	if err != nil {
		t.Fatalf("the export's local file: %v", err)
	}
	if _, err := os.Stat(srv.Path("appliance/" + prj.ID + "/exports/" + ex.ExportID + ".dump")); err != nil {
		t.Fatalf("the export is not in the bucket: %v", err)
	}
	if usage, inBucket := stableUsage(t, e, p, bs, prj); usage != inBucket || inBucket <= exported.Size() {
		t.Errorf("backups_storage_bytes %d: the bucket holds %d, the export (in it, and cached locally) %d", usage, inBucket, exported.Size())
	}

	// A preview as of the target recovers from the bucket.
	pv, err := e.Svc.Previews().Create(t.Context(), p, prj.ID, &appliance.CreatePreviewRequest{Name: "as-of", SourceRestoreTime: target.Format(time.RFC3339Nano)})
	waitPreview(t, e, pv, err)
	cc, err := e.Svc.Previews().Connections(t.Context(), p, pv.Preview.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := scalar[string](t, connect(t, cc.Connections.DirectURL), "SELECT string_agg(v, ',' ORDER BY v) FROM items"); got != "a,"+marker {
		t.Fatalf("the preview as of the target holds %q", got)
	}

	// Restores to the time and to the backup.
	for _, step := range []struct {
		name string
		req  appliance.RestoreRequest
		want string
	}{
		{"time", appliance.RestoreRequest{RestoreTime: target.Format(time.RFC3339Nano)}, "a," + marker},
		{"backup", appliance.RestoreRequest{BackupKey: b.BackupKey}, ""},
	} {
		res, err := e.Svc.Backups().Restore(t.Context(), p, prj.ID, &step.req)
		j := runJob(t, e, res, err)
		if got := rows(); got != step.want {
			t.Fatalf("after the restore to the %s (%s): rows %q, want %q", step.name, j.Result, got, step.want)
		}
		// Archiving goes on into the bucket on the new timeline.
		waitArchivedIn(t, e, bs, connect(t, c.Connections.DirectURL), prj)
	}
}

// TestBucketDownWhileWritingArchivingCatchesUp: the S3 server dies while the project writes: archiving
// fails (pg_stat_archiver counts it) and no segment is lost; once the server is back the archive catches
// up, and a restore to the latest time sees every row.
func TestBucketDownWhileWritingArchivingCatchesUp(t *testing.T) {
	t.Parallel()
	e, p, srv, bs := bucketEnv(t)
	prj, c, conn := connected(t, e, p, "bucket goes away")
	if _, err := conn.Exec(t.Context(), "CREATE TABLE items (n int)"); err != nil {
		t.Fatal(err)
	}
	res, err := e.Svc.Backups().Create(t.Context(), p, prj.ID, &appliance.CreateBackupRequest{Label: "base"})
	runJob(t, e, res, err)
	failedBefore := scalar[int64](t, conn, "SELECT failed_count FROM pg_stat_archiver")
	// With a bucket, a segment holding writes is switched within a minute (what a lost disk loses).
	if v := scalar[string](t, conn, "SHOW archive_timeout"); v != "1min" {
		t.Fatalf("archive_timeout = %s, want 1min", v)
	}
	if c := statusComponent(t, e, "backup-store"); c.Status != appliance.StatusOperational {
		t.Fatalf("/status before the bucket went away: %+v", c)
	}

	srv.Stop()
	for i := range 3 {
		if _, err := conn.Exec(t.Context(), "INSERT INTO items SELECT g FROM generate_series($1::int, $1::int + 999) g", i*1000); err != nil {
			t.Fatal(err)
		}
		if err := e.AdminExec(t, prj.ID, "SELECT pg_switch_wal()"); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for scalar[int64](t, conn, "SELECT failed_count FROM pg_stat_archiver") <= failedBefore {
		if time.Now().After(deadline) {
			t.Fatal("the archiver reported no failure in a minute with the bucket down")
		}
		time.Sleep(100 * time.Millisecond) // polling the archiver's progress
	}
	// The sample that sees the archiver failing raises backup_store_unreachable (and its event), with the
	// WAL waiting on the local disk as its observed value; /status's backup store is degraded, naming the
	// project and the failed upload.
	if _, err := e.Svc.Observe().Sample(t.Context()); err != nil {
		t.Fatal(err)
	}
	alert := openAlert(t, e, p, prj.ID, observe.AlertBackupStoreUnreachable)
	if alert == nil || alert.Severity != observe.SeverityWarning || alert.ObservedValue < 2*16<<20 || !strings.Contains(alert.Message, "WAL is not reaching the backup store") {
		t.Fatalf("with the bucket down, the alert: %+v", alert)
	}
	if n := countEvents(t, e, prj.ID, observe.EventBackupStoreUnreachable); n != 1 {
		t.Fatalf("%d %s events, want 1", n, observe.EventBackupStoreUnreachable)
	}
	if c := statusComponent(t, e, "backup-store"); c.Status != appliance.StatusDegraded || !strings.Contains(c.Message, "archiving fails for 1 of 1 projects: "+prj.ID) ||
		!strings.Contains(c.Message, "the last upload failed") || !strings.Contains(c.Message, "s3://"+srv.Bucket+"/appliance/") {
		t.Fatalf("/status with the bucket down: %+v", c)
	}
	// The backups list tells the project's tenant the same: archiving fails, WAL waits, and for how long.
	if a := backupStorage(t, e, p, prj.ID).Archiving; a == nil || !a.Failing || a.LastFailedWAL == "" || a.LastFailedAt == nil ||
		a.PendingBytes < 2*16<<20 || a.LagSeconds == nil {
		t.Fatalf("the backups list with the bucket down: %+v", a)
	}

	srv.Restart()
	waitArchivedIn(t, e, bs, conn, prj)
	if _, err := e.Svc.Observe().Sample(t.Context()); err != nil {
		t.Fatal(err)
	}
	if a := openAlert(t, e, p, prj.ID, observe.AlertBackupStoreUnreachable); a != nil {
		t.Fatalf("archiving caught up, and the alert is still open: %+v", a)
	}
	if c := statusComponent(t, e, "backup-store"); c.Status != appliance.StatusOperational || !strings.Contains(c.Message, "last upload") {
		t.Fatalf("/status once archiving caught up: %+v", c)
	}
	target := scalar[time.Time](t, conn, "SELECT clock_timestamp()")
	time.Sleep(1100 * time.Millisecond) // a commit after the target
	if _, err := conn.Exec(t.Context(), "INSERT INTO items VALUES (-1)"); err != nil {
		t.Fatal(err)
	}
	rres, err := e.Svc.Backups().Restore(t.Context(), p, prj.ID, &appliance.RestoreRequest{RestoreTime: target.UTC().Format(time.RFC3339Nano)})
	runJob(t, e, rres, err)
	got := connect(t, c.Connections.DirectURL)
	if n, sum := scalar[int64](t, got, "SELECT count(*) FROM items"), scalar[int64](t, got, "SELECT coalesce(sum(n), 0) FROM items"); n != 3000 || sum != 2999*3000/2 {
		t.Fatalf("after the restore: %d rows summing to %d, want 3000 rows (0..2999)", n, sum)
	}
}

// openAlert is the project's open alert of kind (nil: none).
func openAlert(t *testing.T, e *appliancetest.Env, p *appliance.Principal, projectID, kind string) *appliance.ProjectAlert {
	t.Helper()
	list, err := e.Svc.Observe().ListAlerts(t.Context(), p, projectID)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range list.Alerts {
		if a.Kind == kind && a.ResolvedAt == nil {
			return a
		}
	}
	return nil
}

// statusComponent is /status's component named name.
func statusComponent(t *testing.T, e *appliancetest.Env, name string) appliance.Component {
	t.Helper()
	for _, c := range e.Svc.Status(t.Context()).Components {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("/status has no %s component", name)
	return appliance.Component{}
}

// countEvents counts the project's events of type typ in the log.
func countEvents(t *testing.T, e *appliancetest.Env, projectID, typ string) int {
	t.Helper()
	n := 0
	if err := e.Svc.DB().View(func(tx *store.Tx) error {
		evs, err := store.Events.All(tx, func(ev *store.Event) bool { return ev.ProjectID == projectID && ev.Type == typ })
		n = len(evs)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestBucketRetentionAndTamperedObject: retention applies to the bucket — the expired backups' objects
// and manifests and the WAL archived before the oldest kept backup are deleted, the kept backup, the WAL
// after it and another project's objects are not; then a tampered object of the kept backup fails the
// restore to it with an error naming the object, and the project's database is left as it was.
func TestBucketRetentionAndTamperedObject(t *testing.T) {
	t.Parallel()
	e, p, srv, bs := bucketEnv(t)
	ctx := t.Context()
	prj, c, conn := connected(t, e, p, "retained in a bucket")
	other, _, otherConn := connected(t, e, p, "left alone")
	waitArchivedIn(t, e, bs, otherConn, other)
	objectsOf := func(id string) map[string]bool {
		t.Helper()
		out := map[string]bool{}
		for o := range srv.Client().ListObjects(ctx, srv.Bucket, minio.ListObjectsOptions{Prefix: "appliance/" + id + "/", Recursive: true}) {
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			out[strings.TrimPrefix(o.Key, "appliance/"+id+"/")] = true
		}
		return out
	}
	otherBefore := objectsOf(other.ID)

	if _, err := conn.Exec(ctx, "CREATE TABLE items (n int); INSERT INTO items SELECT generate_series(1, 100)"); err != nil {
		t.Fatal(err)
	}
	var segs []string // a segment archived before each backup
	for range 3 {
		segs = append(segs, waitArchivedIn(t, e, bs, conn, prj))
		res, err := e.Svc.Backups().Create(ctx, p, prj.ID, &appliance.CreateBackupRequest{Label: "manual"})
		runJob(t, e, res, err)
	}
	after := waitArchivedIn(t, e, bs, conn, prj) // archived after the newest backup
	keys := ageBackups(t, e, p, prj, 3*24*time.Hour, 4*24*time.Hour, 5*24*time.Hour)
	if _, err := e.Svc.Backups().PutSchedule(ctx, p, prj.ID, "default", &appliance.PutScheduledBackupRequest{
		CronHour: intp(23), CronMinute: intp(59), IsActive: boolp(true), RetentionDays: intp(1)}); err != nil {
		t.Fatal(err)
	}
	res, err := e.Svc.Backups().RunScheduled(ctx, time.Now().UTC().Truncate(24*time.Hour)) // only retention runs
	if err != nil || res.BackupsDeleted != 2 || res.WALDeleted == 0 {
		t.Fatalf("retention: %+v %v", res, err)
	}
	objs := objectsOf(prj.ID)
	for i, k := range keys {
		kept := objs["base/"+k+".backup.json"] && objs["base/"+k+"/backup_label"]
		if i == 0 && !kept {
			t.Errorf("the kept backup %s lost its objects", k)
		}
		for name := range objs {
			if i > 0 && strings.HasPrefix(name, "base/"+k) {
				t.Errorf("the expired backup %s still has %s in the bucket", k, name)
			}
		}
	}
	for _, s := range segs {
		if objs["wal/"+s] {
			t.Errorf("segment %s, archived before the kept backup, is still in the bucket", s)
		}
	}
	if !objs["wal/"+after] {
		t.Errorf("segment %s, archived after the kept backup, was deleted", after)
	}
	for name := range otherBefore {
		if !objectsOf(other.ID)[name] {
			t.Errorf("another project's object %s was deleted", name)
		}
	}

	// A byte of the kept backup's pg_control flipped in the bucket: the restore to it fails naming the
	// object, and the project keeps its rows.
	key := "appliance/" + prj.ID + "/base/" + keys[0] + "/global/pg_control"
	data, err := os.ReadFile(srv.Path(key))
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 1
	if err := os.WriteFile(srv.Path(key), data, 0o644); err != nil {
		t.Fatal(err)
	}
	rres, err := e.Svc.Backups().Restore(ctx, p, prj.ID, &appliance.RestoreRequest{BackupKey: keys[0]})
	if err != nil {
		t.Fatal(err)
	}
	j := e.WaitJob(t, rres.Job.ID)
	if j.State != scheduler.StateFailed || !strings.Contains(j.Error, "global/pg_control") {
		t.Fatalf("restore from a tampered object: %s, %q", j.State, j.Error)
	}
	if n := scalar[int64](t, connect(t, c.Connections.DirectURL), "SELECT count(*) FROM items"); n != 100 {
		t.Fatalf("after the failed restore the project has %d rows, want 100", n)
	}
}

// TestBucketFirstBackup: with a bucket, the scheduled-backups run takes a first base backup of an active
// project that has none (the machine's loss would lose a project never backed up), once; a preview gets
// none, nor a project being moved (its move takes one).
func TestBucketFirstBackup(t *testing.T) {
	t.Parallel()
	e, p, _, _ := bucketEnv(t)
	ctx := t.Context()
	prj := provision(t, e, p, "never backed up", "development")
	pv, err := e.Svc.Previews().Create(ctx, p, prj.ID, &appliance.CreatePreviewRequest{Name: "no backup"})
	waitPreview(t, e, pv, err)
	// Not while the project is being moved (the move takes its own first).
	moving := func(job string) {
		t.Helper()
		if err := e.DB.Update(func(tx *store.Tx) error { return tx.SetMeta("move/"+prj.ID, job) }); err != nil {
			t.Fatal(err)
		}
	}
	moving("job_moving")
	if res, err := e.Svc.Backups().RunScheduled(ctx, time.Now()); err != nil || res.First != 0 {
		t.Fatalf("a run while the project is being moved: %+v %v", res, err)
	}
	moving("")
	res, err := e.Svc.Backups().RunScheduled(ctx, time.Now())
	if err != nil || res.First != 1 || res.Enqueued != 0 {
		t.Fatalf("the first run: %+v %v", res, err)
	}
	list, err := e.Svc.Backups().List(ctx, p, prj.ID)
	if err != nil || len(list.Backups) != 1 || list.Backups[0].Label != backups.FirstBackupLabel {
		t.Fatalf("backups after the first run: %+v %v", list, err)
	}
	var rec *store.Backup
	if err := e.DB.View(func(tx *store.Tx) (err error) { rec, err = store.Backups.Get(tx, list.Backups[0].ID); return err }); err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, rec.JobID); j.State != scheduler.StateCompleted {
		t.Fatalf("the first backup's job: %s %s", j.State, j.Error)
	}
	if res, err := e.Svc.Backups().RunScheduled(ctx, time.Now()); err != nil || res.First != 0 {
		t.Fatalf("a run once the project has a backup: %+v %v", res, err)
	}
}
