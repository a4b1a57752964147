package appliance_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/store"
)

// TestBackupsListSaysWhereBackupsLive: the backups list answers where the project's backups live (the
// local directory, or the bucket's s3:// location without its endpoint) and, once the sampler read the
// project's server, its WAL archiving: the last archived segment, the WAL waiting on the local disk and
// the lag since the archive last advanced.
func TestBackupsListSaysWhereBackupsLive(t *testing.T) {
	t.Parallel()
	t.Run("Local", func(t *testing.T) {
		t.Parallel()
		e, p := realEnv(t)
		prj, _, conn := connected(t, e, p, "on this disk")
		st := backupStorage(t, e, p, prj.ID)
		if st.Kind != api.BackupStorageLocal || st.Location != filepath.Join(e.Dir, "backups", prj.ID)+"/" || st.Archiving != nil {
			t.Fatalf("before a sample: %+v", st)
		}
		seg := archiveOne(t, e, conn, prj)
		checkLag(t, e, p, prj, conn, seg)
	})
	t.Run("Bucket", func(t *testing.T) {
		t.Parallel()
		e, p, srv, bs := bucketEnv(t)
		prj, _, conn := connected(t, e, p, "in a bucket")
		st := backupStorage(t, e, p, prj.ID)
		if st.Kind != api.BackupStorageBucket || st.Location != "s3://"+srv.Bucket+"/appliance/"+prj.ID+"/" || st.Archiving != nil {
			t.Fatalf("before a sample: %+v", st)
		}
		if strings.Contains(st.Location, srv.Addr) {
			t.Fatalf("the location names the endpoint: %s", st.Location)
		}
		seg := waitArchivedIn(t, e, bs, conn, prj)
		checkLag(t, e, p, prj, conn, seg)
	})
}

// backupStorage is the backups list's storage of the project.
func backupStorage(t *testing.T, e *appliancetest.Env, p *appliance.Principal, projectID string) *api.BackupStorage {
	t.Helper()
	list, err := e.Svc.Backups().List(t.Context(), p, projectID)
	if err != nil {
		t.Fatal(err)
	}
	if list.Storage == nil {
		t.Fatal("the backups list has no storage")
	}
	return list.Storage
}

// archiveOne switches the project's server to a new WAL segment and waits until the archiver archived the
// finished one (pg_stat_archiver says so); it returns the segment's name.
func archiveOne(t *testing.T, e *appliancetest.Env, conn *pgx.Conn, prj *store.Project) string {
	t.Helper()
	seg := scalar[string](t, conn, "SELECT pg_walfile_name(pg_current_wal_lsn())")
	if err := e.AdminExec(t, prj.ID, "SELECT pg_switch_wal()"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for scalar[string](t, conn, "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver") < seg {
		if time.Now().After(deadline) {
			t.Fatalf("segment %s not archived after a minute", seg)
		}
		time.Sleep(50 * time.Millisecond) // polling the archiver's progress, as WaitJob polls a job
	}
	return seg
}

// checkLag writes past the archived segment seg and samples ten minutes later (the service's clock): the
// list shows seg archived, WAL waiting, and a lag of at least those ten minutes, computed at the sample.
func checkLag(t *testing.T, e *appliancetest.Env, p *appliance.Principal, prj *store.Project, conn *pgx.Conn, seg string) {
	t.Helper()
	if _, err := conn.Exec(t.Context(), "CREATE TABLE waiting AS SELECT g FROM generate_series(1, 1000) g"); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(10 * time.Minute)
	e.Clock.Set(func() time.Time { return later })
	res, err := e.Svc.Observe().Sample(t.Context())
	if err != nil || res.Failed != 0 {
		t.Fatalf("sample: %+v %v", res, err)
	}
	a := backupStorage(t, e, p, prj.ID).Archiving
	if a == nil {
		t.Fatal("after a sample, no archiving")
	}
	if !a.SampledAt.Equal(later) || a.LastArchivedWAL < seg || a.LastArchivedAt == nil || a.Failing || a.LastFailedAt != nil || a.PendingBytes <= 0 {
		t.Fatalf("after a sample: %+v", a)
	}
	if want := int64(later.Sub(*a.LastArchivedAt) / time.Second); a.LagSeconds == nil || *a.LagSeconds != want || want < 600 {
		t.Fatalf("lag %v, want %d (≥ 600 s)", a.LagSeconds, want)
	}
}
