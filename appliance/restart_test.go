package appliance_test

import (
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// TestRestartProject: a restart is for administrators, refused while another job holds the project, and
// restarts the server (its postmaster start time moves, its sessions end) and the pooler with the data kept.
func TestRestartProject(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "restart", "development")
	c, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, c.Connections.DirectURL)
	if _, err := conn.Exec(t.Context(), "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before the restart')"); err != nil {
		t.Fatal(err)
	}
	started := func() time.Time {
		t.Helper()
		var at time.Time
		c := connect(t, c.Connections.DirectURL)
		defer c.Close(t.Context())
		if err := c.QueryRow(t.Context(), "SELECT pg_postmaster_start_time()").Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	before := started()

	// A member's session may not (the route table's tests cover the scopes and the keys).
	member := &appliance.Principal{AuthSource: appliance.SourceSession, OrganizationID: prj.OrganizationID, IDPOrganizationRole: appliance.RoleMember}
	if _, err := e.Svc.Upgrades().Restart(t.Context(), member, prj.ID); appliance.KindOf(err) != appliance.KindForbidden {
		t.Fatalf("restart by a member: %v", err)
	}

	// Busy: a job of the project waiting out a retry backoff holds it (it runs before anything queued
	// behind it): 409, and nothing is enqueued.
	hold := &store.Job{Type: "test.hold", OrganizationID: prj.OrganizationID, ProjectID: prj.ID, LockedResource: prj.ID, RunAfter: time.Now().Add(time.Hour)}
	if err := e.DB.Update(func(tx *store.Tx) error {
		if err := scheduler.Enqueue(tx, hold); err != nil {
			return err
		}
		hold.Attempts = 1
		return store.Jobs.Put(tx, hold)
	}); err != nil {
		t.Fatal(err)
	}
	latest := e.Project(t, prj.ID).LatestJobID
	if _, err := e.Svc.Upgrades().Restart(t.Context(), p, prj.ID); appliance.KindOf(err) != appliance.KindConflict {
		t.Fatalf("restart while job %s holds the project: %v", hold.ID, err)
	}
	if got := e.Project(t, prj.ID).LatestJobID; got != latest {
		t.Fatalf("the refused restart enqueued job %s", got)
	}
	if err := e.DB.Update(func(tx *store.Tx) error {
		hold.State = scheduler.StateFailed
		return store.Jobs.Put(tx, hold)
	}); err != nil {
		t.Fatal(err)
	}

	res, err := e.Svc.Upgrades().Restart(t.Context(), p, prj.ID)
	j := runJob(t, e, res, err)
	if r := jobResult(j); r["sessions_ended"] != float64(1) || r["started_at"] == nil {
		t.Fatalf("restart result: %s", j.Result)
	}
	if after := started(); !after.After(before) {
		t.Fatalf("postmaster start time %s, before the restart %s", after, before)
	}
	if err := conn.Ping(t.Context()); err == nil {
		t.Fatal("a session survived the restart")
	}
	var v string
	if err := connect(t, c.Connections.PooledURL).QueryRow(t.Context(), "SELECT v FROM kept").Scan(&v); err != nil || v != "before the restart" {
		t.Fatalf("the data through the pooler after the restart: %q %v", v, err)
	}
	if got := e.Project(t, prj.ID); got.RuntimeStatus != appliance.RuntimeActive || got.LatestJobID != j.ID {
		t.Fatalf("after the restart: runtime %s, latest job %s (want %s)", got.RuntimeStatus, got.LatestJobID, j.ID)
	}
}
