package appliance_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/observe"
	"github.com/theappliance/appliance/store"
)

const week = 7 * 24 * time.Hour

// backupRecord is the stored backup of key.
func backupRecord(t *testing.T, e *appliancetest.Env, projectID, key string) *store.Backup {
	t.Helper()
	var out *store.Backup
	if err := e.Svc.DB().View(func(tx *store.Tx) error {
		bs, err := store.Backups.Lookup(tx, store.BackupsByProject, projectID, store.Query{})
		for _, b := range bs {
			if b.BackupKey == key {
				out = b
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if out == nil {
		t.Fatalf("project %s has no backup %s", projectID, key)
	}
	return out
}

// takeBackup takes a backup of the project and returns its key.
func takeBackup(t *testing.T, e *appliancetest.Env, p *appliance.Principal, prj *store.Project) string {
	t.Helper()
	res, err := e.Svc.Backups().Create(t.Context(), p, prj.ID, &appliance.CreateBackupRequest{Label: "to restore-test"})
	runJob(t, e, res, err)
	list, err := e.Svc.Backups().List(t.Context(), p, prj.ID)
	if err != nil || len(list.Backups) == 0 {
		t.Fatalf("backups after a backup: %+v %v", list, err)
	}
	return list.Backups[0].BackupKey
}

// noScratchLeft fails when a restore test left its scratch directory in the instances directory.
func noScratchLeft(t *testing.T, e *appliancetest.Env) {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(e.Dir, "instances", "*.verify")) // e.Dir is the data directory
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("restore test scratch directories left: %v", left)
	}
}

// TestVerifyBackupsFromBucket: the periodic restore test, with a bucket as the backup store. A good backup
// is fetched from the bucket, recovered in a scratch server and queried: verified (verified_at, the
// restore_tested_at of the record, backup.verified), nothing written into the project's archive by the
// scratch server's new timeline, the scratch directory gone. A pass within the interval tests nothing; a
// project without a backup is never picked. After a byte of the backup's pg_control is flipped in the
// bucket, the next pass due reports it failed naming the object (backup.verification_failed, the
// backup_unrestorable alert) and the project's database keeps its rows; a backup known bad is not tested
// again, and a new good backup is, which resolves the alert.
func TestVerifyBackupsFromBucket(t *testing.T) {
	t.Parallel()
	e, p, srv, _ := bucketEnv(t)
	ctx := t.Context()
	prj, c, conn := connected(t, e, p, "restore-tested")
	if _, err := conn.Exec(ctx, "CREATE TABLE items (n int); INSERT INTO items SELECT generate_series(1, 100); CREATE SCHEMA other; CREATE TABLE other.\"Mixed Case\" (s text); INSERT INTO other.\"Mixed Case\" VALUES ('x')"); err != nil {
		t.Fatal(err)
	}
	idle, _, _ := connected(t, e, p, "never backed up")
	key := takeBackup(t, e, p, prj)

	now := time.Now()
	res, err := e.Svc.VerifyBackups(ctx, now, week)
	if err != nil || res != (appliance.VerifyBackupsResult{Verified: 1}) {
		t.Fatalf("first pass: %+v %v", res, err)
	}
	b := backupRecord(t, e, prj.ID, key)
	if b.VerificationState != appliance.VerificationVerified || b.VerificationError != "" || b.VerifiedAt == nil || b.RestoreTestedAt == nil {
		t.Fatalf("after the restore test: %s %q verified_at %v restore_tested_at %v", b.VerificationState, b.VerificationError, b.VerifiedAt, b.RestoreTestedAt)
	}
	if n := countEvents(t, e, prj.ID, appliance.EventBackupVerified); n != 1 {
		t.Fatalf("%d backup.verified events, want 1", n)
	}
	if n := countEvents(t, e, idle.ID, appliance.EventBackupVerified) + countEvents(t, e, idle.ID, appliance.EventBackupVerificationFailed); n != 0 {
		t.Fatalf("the project without a backup has %d restore test events", n)
	}
	noScratchLeft(t, e)
	// The scratch server promoted to a new timeline with its WAL discarded: nothing of it in the archive.
	for o := range srv.Client().ListObjects(ctx, srv.Bucket, minio.ListObjectsOptions{Prefix: "appliance/" + prj.ID + "/wal/", Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if name := filepath.Base(o.Key); !strings.HasPrefix(name, "00000001") {
			t.Errorf("the project's archive has %s: the scratch server archived into it", o.Key)
		}
	}

	// Within the interval nothing is due.
	if res, err := e.Svc.VerifyBackups(ctx, now.Add(time.Hour), week); err != nil || res != (appliance.VerifyBackupsResult{}) {
		t.Fatalf("a pass within the interval: %+v %v", res, err)
	}

	// Tampered in the bucket: failed, naming the object; the project is untouched.
	obj := "appliance/" + prj.ID + "/base/" + key + "/global/pg_control"
	data, err := os.ReadFile(srv.Path(obj))
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 1
	if err := os.WriteFile(srv.Path(obj), data, 0o644); err != nil {
		t.Fatal(err)
	}
	later := now.Add(week + time.Hour)
	if res, err := e.Svc.VerifyBackups(ctx, later, week); err != nil || res != (appliance.VerifyBackupsResult{Failed: 1}) {
		t.Fatalf("the pass after the tampering: %+v %v", res, err)
	}
	b = backupRecord(t, e, prj.ID, key)
	if b.VerificationState != appliance.VerificationFailed || !strings.Contains(b.VerificationError, "global/pg_control") {
		t.Fatalf("a tampered backup: %s %q", b.VerificationState, b.VerificationError)
	}
	t.Logf("verification_error: %s", b.VerificationError)
	if n := countEvents(t, e, prj.ID, appliance.EventBackupVerificationFailed); n != 1 {
		t.Fatalf("%d backup.verification_failed events, want 1", n)
	}
	if a := openAlert(t, e, p, prj.ID, observe.AlertBackupUnrestorable); a == nil || !strings.Contains(a.Message, key) {
		t.Fatalf("backup_unrestorable alert: %+v", a)
	}
	if n := scalar[int64](t, connect(t, c.Connections.DirectURL), "SELECT count(*) FROM items"); n != 100 {
		t.Fatalf("after the failed restore test the project has %d rows, want 100", n)
	}
	noScratchLeft(t, e)

	// The backup known bad is not tested again; a new good one is, and resolves the alert.
	if res, err := e.Svc.VerifyBackups(ctx, later.Add(week+time.Hour), week); err != nil || res != (appliance.VerifyBackupsResult{}) {
		t.Fatalf("a pass with only a failed backup: %+v %v", res, err)
	}
	key2 := takeBackup(t, e, p, prj)
	if res, err := e.Svc.VerifyBackups(ctx, later.Add(week+time.Hour), week); err != nil || res != (appliance.VerifyBackupsResult{Verified: 1}) {
		t.Fatalf("a pass with a new backup: %+v %v", res, err)
	}
	if b := backupRecord(t, e, prj.ID, key2); b.VerificationState != appliance.VerificationVerified || b.RestoreTestedAt == nil {
		t.Fatalf("the new backup: %s %q", b.VerificationState, b.VerificationError)
	}
	if a := openAlert(t, e, p, prj.ID, observe.AlertBackupUnrestorable); a != nil {
		t.Fatalf("backup_unrestorable still open after a good restore test: %+v", a)
	}
}

// TestVerifyBackupsLocalStore: with the local backup store, a backup restore-tests the same way, and
// VerifyBackups with no interval does nothing.
func TestVerifyBackupsLocalStore(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	ctx := t.Context()
	prj, _, conn := connected(t, e, p, "restore-tested locally")
	if _, err := conn.Exec(ctx, "CREATE TABLE items (n int); INSERT INTO items SELECT generate_series(1, 10)"); err != nil {
		t.Fatal(err)
	}
	key := takeBackup(t, e, p, prj)
	if res, err := e.Svc.VerifyBackups(ctx, time.Now(), 0); err != nil || res != (appliance.VerifyBackupsResult{}) {
		t.Fatalf("no interval: %+v %v", res, err)
	}
	if res, err := e.Svc.VerifyBackups(ctx, time.Now(), week); err != nil || res != (appliance.VerifyBackupsResult{Verified: 1}) {
		t.Fatalf("restore test: %+v %v", res, err)
	}
	if b := backupRecord(t, e, prj.ID, key); b.VerificationState != appliance.VerificationVerified || b.RestoreTestedAt == nil {
		t.Fatalf("after the restore test: %s %q", b.VerificationState, b.VerificationError)
	}
	if n := countEvents(t, e, prj.ID, appliance.EventBackupVerified); n != 1 {
		t.Fatalf("%d backup.verified events, want 1", n)
	}
	noScratchLeft(t, e)
}
