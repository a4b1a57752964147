package appliance_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

func wantKind(t *testing.T, err error, kind appliance.Kind) {
	t.Helper()
	var ae *appliance.Error
	if !errors.As(err, &ae) || ae.Kind != kind {
		t.Fatalf("want an error of kind %d, got %v", kind, err)
	}
}

// wantRetryAfter checks that a 429 says when trying again can succeed: after more than 0 and at most max.
func wantRetryAfter(t *testing.T, err error, max time.Duration) {
	t.Helper()
	var ae *appliance.Error
	if !errors.As(err, &ae) || ae.Kind != appliance.KindTooMany || ae.RetryAfter <= 0 || ae.RetryAfter > max {
		t.Fatalf("want a 429 with a Retry-After in (0, %v], got %+v", max, err)
	}
}

// TestEphemeralDatabaseClaimKeepsItsData: an ephemeral database made with no account works with the URL
// it hands out; a wrong or missing claim token learns nothing; claimed into an organization it keeps its
// data and URLs, and lives past 72 hours.
func TestEphemeralDatabaseClaimKeepsItsData(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	now := time.Now()
	e.Clock.Set(func() time.Time { return now })
	created, err := e.Svc.Previews().CreateEphemeral(t.Context(), "192.0.2.1", &appliance.CreateEphemeralRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id, token := created.EphemeralDatabase.ProjectID, created.ClaimToken
	if created.EphemeralDatabase.ExpiresAt.Sub(created.EphemeralDatabase.CreatedAt) != 72*time.Hour || len(token) < 40 {
		t.Fatalf("created: %+v", created)
	}
	var prj *store.Project
	e.DB.View(func(tx *store.Tx) (err error) { prj, err = store.Projects.Get(tx, id); return err })
	if j := e.WaitJob(t, prj.LatestJobID); j.State != scheduler.StateCompleted {
		t.Fatalf("provision: %s", j.Error)
	}
	got, err := e.Svc.Previews().GetEphemeral(t.Context(), id, token)
	if err != nil || got.Connections == nil || got.EphemeralDatabase.State != appliance.ProjectActive {
		t.Fatalf("get: %+v %v", got, err)
	}
	conn := connect(t, got.Connections.DirectURL)
	if _, err := conn.Exec(t.Context(), "CREATE TABLE notes (id int); INSERT INTO notes VALUES (1), (2), (3)"); err != nil {
		t.Fatal(err)
	}
	_, err = e.Svc.Previews().GetEphemeral(t.Context(), id, "")
	wantKind(t, err, appliance.KindUnauthenticated)
	_, err = e.Svc.Previews().GetEphemeral(t.Context(), id, "eph_wrong")
	wantKind(t, err, appliance.KindNotFound)
	_, err = e.Svc.Previews().GetEphemeral(t.Context(), "prj_nope", token)
	wantKind(t, err, appliance.KindNotFound)
	if _, err := e.Svc.GetProject(t.Context(), p, id); err == nil {
		t.Fatal("an organization sees an unclaimed ephemeral database")
	}

	_, err = e.Svc.Previews().ClaimEphemeral(t.Context(), p, id, &appliance.ClaimRequest{ClaimToken: "eph_wrong"})
	wantKind(t, err, appliance.KindNotFound)
	claimed, err := e.Svc.Previews().ClaimEphemeral(t.Context(), p, id, &appliance.ClaimRequest{ClaimToken: token})
	if err != nil {
		t.Fatal(err)
	}
	if !claimed.Project.AlwaysOn || claimed.Project.OrganizationID != p.OrganizationID {
		t.Fatalf("claimed: %+v", claimed.Project)
	}
	_, err = e.Svc.Previews().ClaimEphemeral(t.Context(), p, id, &appliance.ClaimRequest{ClaimToken: token})
	wantKind(t, err, appliance.KindConflict)
	_, err = e.Svc.Previews().GetEphemeral(t.Context(), id, token) // a project now: the token no longer reads it
	wantKind(t, err, appliance.KindNotFound)
	conns, err := e.Svc.ProjectConnections(t.Context(), p, id)
	if err != nil || conns.Connections.DirectURL != got.Connections.DirectURL {
		t.Fatalf("connections after the claim: %+v %v", conns, err)
	}
	if n := scalar[int64](t, connect(t, conns.Connections.DirectURL), "SELECT count(*) FROM notes"); n != 3 {
		t.Fatalf("%d rows after the claim", n)
	}
	// 73 hours later the claimed database is still there.
	now = now.Add(73 * time.Hour)
	if n, err := e.Svc.Previews().SweepEphemeral(t.Context()); err != nil || n != 0 {
		t.Fatalf("sweep after the claim: %d %v", n, err)
	}
	if got, err := e.Svc.GetProject(t.Context(), p, id); err != nil || got.Project.State != appliance.ProjectActive {
		t.Fatalf("the claimed project: %+v %v", got, err)
	}
}

// TestEphemeralDatabaseExpires: 72 hours after creation (the clock is injected) the sweep deletes an
// unclaimed database, its instance and everything it held.
func TestEphemeralDatabaseExpires(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	now := time.Now()
	e.Clock.Set(func() time.Time { return now })
	created, err := e.Svc.Previews().CreateEphemeral(t.Context(), "192.0.2.2", &appliance.CreateEphemeralRequest{Name: "throwaway"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.EphemeralDatabase.ProjectID
	prj := e.Project(t, id)
	e.WaitJob(t, prj.LatestJobID)
	inst := instanceOf(t, e, e.Project(t, id))
	now = now.Add(71 * time.Hour)
	if n, _ := e.Svc.Previews().SweepEphemeral(t.Context()); n != 0 {
		t.Fatalf("deleted %d before the 72 hours", n)
	}
	now = now.Add(2 * time.Hour)
	if n, err := e.Svc.Previews().SweepEphemeral(t.Context()); err != nil || n != 1 {
		t.Fatalf("sweep after 73 hours: %d %v", n, err)
	}
	if j := e.WaitJob(t, e.Project(t, id).LatestJobID); j.Type != "project.delete" || j.State != scheduler.StateCompleted {
		t.Fatalf("the expiry's job: %s %s %s", j.Type, j.State, j.Error)
	}
	if got := e.Project(t, id); got.State != appliance.ProjectDeleted {
		t.Fatalf("after expiry: %s", got.State)
	}
	if left := processesUnder(inst.Dir); len(left) > 0 {
		t.Fatalf("processes of the expired database still run: %v", left)
	}
	_, err = e.Svc.Previews().GetEphemeral(t.Context(), id, created.ClaimToken)
	wantKind(t, err, appliance.KindNotFound)
	_, err = e.Svc.Previews().ClaimEphemeral(t.Context(), p, id, &appliance.ClaimRequest{ClaimToken: created.ClaimToken})
	if err == nil {
		t.Fatal("an expired database was claimed")
	}
}

// TestEphemeralLimits: a client IP's rate and the appliance's cap of live databases are refused clearly;
// bad input is refused before anything is made.
func TestEphemeralLimits(t *testing.T) {
	t.Parallel()
	e, _ := keyEnv(t, appliancetest.Options{Ephemeral: &appliance.EphemeralLimits{PerIPPerHour: 2, Live: 3}})
	// One IPv6 client is its /64: a fresh address of it is no fresh bucket.
	for _, ip := range []string{"2001:db8:1:2::1", "2001:db8:1:2:ffff::7"} {
		if _, err := e.Svc.Previews().CreateEphemeral(t.Context(), ip, &appliance.CreateEphemeralRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := e.Svc.Previews().CreateEphemeral(t.Context(), "2001:db8:1:2::3", &appliance.CreateEphemeralRequest{})
	wantRetryAfter(t, err, time.Hour)
	if _, err := e.Svc.Previews().CreateEphemeral(t.Context(), "198.51.100.2", &appliance.CreateEphemeralRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err = e.Svc.Previews().CreateEphemeral(t.Context(), "198.51.100.3", &appliance.CreateEphemeralRequest{})
	wantKind(t, err, appliance.KindUnavailable)
	_, err = e.Svc.Previews().CreateEphemeral(t.Context(), "198.51.100.4", &appliance.CreateEphemeralRequest{Region: "mars"})
	wantKind(t, err, appliance.KindInvalid)
	_, err = e.Svc.Previews().CreateEphemeral(t.Context(), "198.51.100.4", &appliance.CreateEphemeralRequest{Name: "pg_mine"})
	wantKind(t, err, appliance.KindInvalid)
}

// TestEphemeralStorageLimit: over its storage limit an ephemeral database refuses writes (new sessions
// are read-only, open ones are ended); a client that switches its session back and keeps writing past
// StorageLockGrowth loses its logins; a claim lifts both.
func TestEphemeralStorageLimit(t *testing.T) {
	t.Parallel()
	// An empty database is about 7.5 MB: 9 MB is over after a few MB of rows.
	e, p := keyEnv(t, appliancetest.Options{Instances: true,
		Ephemeral: &appliance.EphemeralLimits{PerIPPerHour: 10, Live: 5, StorageBytes: 9 << 20}})
	created, err := e.Svc.Previews().CreateEphemeral(t.Context(), "192.0.2.3", &appliance.CreateEphemeralRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id, token := created.EphemeralDatabase.ProjectID, created.ClaimToken
	e.WaitJob(t, e.Project(t, id).LatestJobID)
	got, err := e.Svc.Previews().GetEphemeral(t.Context(), id, token)
	if err != nil || got.Connections == nil {
		t.Fatalf("get: %+v %v", got, err)
	}
	url := got.Connections.DirectURL
	conn := connect(t, url)
	if n, err := e.Svc.Storage().Enforce(t.Context()); err != nil || n != 0 {
		t.Fatalf("an empty database was locked: %d %v", n, err)
	}
	if _, err := conn.Exec(t.Context(), "CREATE TABLE fill AS SELECT g, repeat('x', 1000) AS pad FROM generate_series(1, 3000) g"); err != nil {
		t.Fatal(err)
	}
	if n, err := e.Svc.Storage().Enforce(t.Context()); err != nil || n != 1 {
		t.Fatalf("over the limit: %d locks, %v", n, err)
	}
	if conn.Ping(t.Context()) == nil {
		t.Fatal("a session open when the limit was reached was not ended")
	}
	again := connect(t, url)
	if _, err := again.Exec(t.Context(), "INSERT INTO fill VALUES (0, 'more')"); err == nil || !strings.Contains(err.Error(), "read-only transaction") {
		t.Fatalf("a write over the limit: %v", err)
	}
	if n := scalar[int64](t, again, "SELECT count(*) FROM fill"); n != 3000 {
		t.Fatalf("reads over the limit: %d rows", n)
	}
	// A client that switches the default off and keeps writing loses its logins (the growth).
	if _, err := again.Exec(t.Context(), "SET default_transaction_read_only = off"); err != nil {
		t.Fatal(err)
	}
	if _, err := again.Exec(t.Context(), "INSERT INTO fill SELECT g, repeat('y', 1000) FROM generate_series(1, 5000) g"); err != nil {
		t.Fatal(err)
	}
	if n, err := e.Svc.Storage().Enforce(t.Context()); err != nil || n != 1 {
		t.Fatalf("past 1.5 times the limit: %d locks, %v", n, err)
	}
	if c, err := pgx.Connect(t.Context(), url); err == nil {
		c.Close(t.Context())
		t.Fatal("a login past 1.5 times the limit was accepted")
	}
	// Claimed, it is a project with its plan's limit: logins and writes work again.
	if _, err := e.Svc.Previews().ClaimEphemeral(t.Context(), p, id, &appliance.ClaimRequest{ClaimToken: token}); err != nil {
		t.Fatal(err)
	}
	if _, err := connect(t, url).Exec(t.Context(), "INSERT INTO fill VALUES (-1, 'claimed')"); err != nil {
		t.Fatalf("a write after the claim: %v", err)
	}
}

// TestEphemeralTotalStorageCap: the appliance refuses an ephemeral database whose storage limit would take
// the live ones' sum past the operator's total, even under the count cap.
func TestEphemeralTotalStorageCap(t *testing.T) {
	t.Parallel()
	e, _ := keyEnv(t, appliancetest.Options{
		Ephemeral: &appliance.EphemeralLimits{PerIPPerHour: 10, Live: 10, StorageBytes: 100 << 20, TotalStorageBytes: 250 << 20}})
	for i := range 2 {
		if _, err := e.Svc.Previews().CreateEphemeral(t.Context(), "198.51.100.20", &appliance.CreateEphemeralRequest{}); err != nil {
			t.Fatalf("database %d: %v", i+1, err)
		}
	}
	_, err := e.Svc.Previews().CreateEphemeral(t.Context(), "198.51.100.21", &appliance.CreateEphemeralRequest{})
	wantKind(t, err, appliance.KindUnavailable)
}
