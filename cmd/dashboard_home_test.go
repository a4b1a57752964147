package cmd

import (
	"testing"
	"time"

	"github.com/theappliance/appliance/store"
)

// homeData (ui/e2e/home.mjs) gives the project a storage alert and a fresh sample: its limit just above the
// database's size (88 %, a warning), then a sweep now, which reads storage, connections, CPU and memory.
func homeData(t *testing.T, e *cliEnv, projectID string) {
	t.Helper()
	var size int64
	if err := e.svc.AdminQueryRow(t.Context(), projectID, "SELECT pg_database_size(current_database())", nil, &size); err != nil {
		t.Fatal(err)
	}
	err := e.svc.DB().Update(func(tx *store.Tx) error {
		prj, err := store.Projects.Get(tx, projectID)
		if err != nil {
			return err
		}
		prj.StorageLimitBytes = size * 100 / 88
		return store.Projects.Put(tx, prj)
	})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := e.svc.Observe().Sample(t.Context()); err != nil || res.Failed != 0 || res.Projects == 0 {
		t.Fatalf("sample: %+v %v", res, err)
	}
}

// homeStarted (ui/e2e/home.mjs) is when the project's server last started, read from the server itself.
func homeStarted(t *testing.T, e *cliEnv, projectID string) string {
	t.Helper()
	var at time.Time
	if err := e.svc.AdminQueryRow(t.Context(), projectID, "SELECT pg_postmaster_start_time()", nil, &at); err != nil {
		t.Fatal(err)
	}
	return at.UTC().Format("2006-01-02T15:04:05.000000Z07:00") // a fixed width: the script compares them as text
}
