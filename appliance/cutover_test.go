package appliance_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/migrate"
	"github.com/theappliance/appliance/appliance/previews"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// TestCutoverSwapsThePreviewIn: a request for another project's preview is a 404; one request at a time;
// a member cannot approve; a rejection needs a reason; an approved request backs the project up, then swaps
// the preview's data in (its dropped table gone, its new rows, schema and extension there) behind the
// project's unchanged URLs and credential, deletes the preview and tells cutover.completed; the
// pre-cutover backup brings the old data back.
func TestCutoverSwapsThePreviewIn(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	ctx := t.Context()
	prj, pc, project := seeded(t, e, p, "shop", `CREATE TABLE orders (id int PRIMARY KEY, note text);
		INSERT INTO orders SELECT g, 'before' FROM generate_series(1, 100) g;
		CREATE TABLE legacy (v int); INSERT INTO legacy VALUES (1)`)
	res, err := e.Svc.Previews().Create(ctx, p, prj.ID, &appliance.CreatePreviewRequest{Name: "next"})
	waitPreview(t, e, res, err)
	prv := res.Preview
	cc, err := e.Svc.Previews().Connections(ctx, p, prv.ID)
	if err != nil {
		t.Fatal(err)
	}
	preview := connect(t, cc.Connections.DirectURL)
	if _, err := preview.Exec(ctx, `DROP TABLE legacy;
		INSERT INTO orders VALUES (1000, 'from the preview');
		CREATE SCHEMA ext; CREATE EXTENSION citext SCHEMA ext;
		CREATE TABLE users (email ext.citext PRIMARY KEY); INSERT INTO users VALUES ('Ann@Example.com')`); err != nil {
		t.Fatal(err)
	}
	if _, err := project.Exec(ctx, "INSERT INTO orders VALUES (2000, 'project only')"); err != nil {
		t.Fatal(err)
	}

	// Bad input changes nothing.
	if _, err := e.Svc.Migrate().RequestCutover(ctx, p, prj.ID, &appliance.CreateCutoverRequest{}); appliance.KindOf(err) != appliance.KindInvalid {
		t.Fatalf("no preview_id: %v", err)
	}
	other := provision(t, e, p, "other", "development")
	otherPrv, err := e.Svc.Previews().Create(ctx, p, other.ID, &appliance.CreatePreviewRequest{Mode: previews.ModeEmpty})
	waitPreview(t, e, otherPrv, err)
	if _, err := e.Svc.Migrate().RequestCutover(ctx, p, prj.ID, &appliance.CreateCutoverRequest{PreviewID: otherPrv.Preview.ID}); appliance.KindOf(err) != appliance.KindNotFound {
		t.Fatalf("another project's preview: %v", err)
	}
	if _, err := e.Svc.Migrate().RequestCutover(ctx, p, prj.ID, &appliance.CreateCutoverRequest{PreviewID: prj.ID}); appliance.KindOf(err) != appliance.KindNotFound {
		t.Fatalf("a project as preview: %v", err)
	}

	first, err := e.Svc.Migrate().RequestCutover(ctx, p, prj.ID, &appliance.CreateCutoverRequest{PreviewID: prv.ID, CustomerNote: "ship it"})
	if err != nil {
		t.Fatal(err)
	}
	if r := first.CutoverRequest; r.Status != migrate.CutoverOpen || r.PreviewDatabaseID != prv.ID || r.RequestedByActorKind != appliance.ActorAPIKey || r.CustomerNote != "ship it" {
		t.Fatalf("request: %+v", r)
	}
	if _, err := e.Svc.Migrate().RequestCutover(ctx, p, prj.ID, &appliance.CreateCutoverRequest{PreviewID: prv.ID}); appliance.KindOf(err) != appliance.KindConflict { // one per preview
		t.Fatalf("a second open request: %v", err)
	}
	member := &appliance.Principal{AuthSource: appliance.SourceSession, OrganizationID: prj.OrganizationID, IDPOrganizationRole: appliance.RoleMember}
	if _, err := e.Svc.Migrate().ApproveCutover(ctx, member, prj.ID, first.CutoverRequest.ID, &appliance.ApproveCutoverRequest{}); appliance.KindOf(err) != appliance.KindForbidden {
		t.Fatalf("a member approves: %v", err)
	}
	if _, err := e.Svc.Migrate().RejectCutover(ctx, p, prj.ID, first.CutoverRequest.ID, &appliance.RejectCutoverRequest{}); appliance.KindOf(err) != appliance.KindInvalid {
		t.Fatalf("a rejection without a reason: %v", err)
	}
	rej, err := e.Svc.Migrate().RejectCutover(ctx, p, prj.ID, first.CutoverRequest.ID, &appliance.RejectCutoverRequest{RejectedReason: "not on a Friday"})
	if err != nil {
		t.Fatal(err)
	}
	if r := rej.CutoverRequest; r.Status != migrate.CutoverRejected || r.RejectedReason != "not on a Friday" || r.AckAt == nil {
		t.Fatalf("rejected: %+v", r)
	}
	if _, err := e.Svc.Migrate().ApproveCutover(ctx, p, prj.ID, first.CutoverRequest.ID, &appliance.ApproveCutoverRequest{}); appliance.KindOf(err) != appliance.KindConflict {
		t.Fatalf("approving a rejected request: %v", err)
	}

	second, err := e.Svc.Migrate().RequestCutover(ctx, p, prj.ID, &appliance.CreateCutoverRequest{PreviewID: prv.ID})
	if err != nil {
		t.Fatal(err)
	}
	ok, err := e.Svc.Migrate().ApproveCutover(ctx, p, prj.ID, second.CutoverRequest.ID, &appliance.ApproveCutoverRequest{OperatorNote: "go", ExternalTicketRef: "CHG-7"})
	if err != nil {
		t.Fatal(err)
	}
	if r := ok.CutoverRequest; r.Status != migrate.CutoverApproved || r.PreCutoverBackupID == "" || r.PromoteJobID != ok.Job.ID || r.ExternalTicketRef != "CHG-7" {
		t.Fatalf("approved: %+v", r)
	}
	if _, err := e.Svc.Previews().Delete(ctx, p, prv.ID); appliance.KindOf(err) != appliance.KindConflict {
		t.Fatalf("deleting a preview being cut over: %v", err)
	}
	if j := e.WaitJob(t, ok.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("promotion: %s\n%s", j.Error, j.LastStderr)
	}
	got, err := e.Svc.Migrate().GetCutoverRequest(ctx, p, prj.ID, second.CutoverRequest.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r := got.CutoverRequest; r.Status != migrate.CutoverCompleted || r.CompletedAt == nil || r.LastError != "" {
		t.Fatalf("after the promotion: %+v", r)
	}

	// The same URLs and credential reach the preview's data, directly and through the pooler.
	for _, url := range []string{pc.Connections.DirectURL, pc.Connections.PooledURL} {
		c := connect(t, url)
		if n := scalar[int64](t, c, "SELECT count(*) FROM orders WHERE id <> 3000"); n != 101 {
			t.Fatalf("%s: %d orders after the cutover, want the preview's 101", redact(url), n)
		}
		if n := scalar[int64](t, c, "SELECT count(*) FROM orders WHERE id = 2000"); n != 0 {
			t.Fatal("the project's own later write survived the cutover")
		}
		if v := scalar[string](t, c, "SELECT email::text FROM users WHERE email OPERATOR(ext.=) 'ann@example.com'::ext.citext"); v != "Ann@Example.com" {
			t.Fatalf("citext lookup: %q", v)
		}
		if n := scalar[int64](t, c, "SELECT count(*) FROM pg_tables WHERE tablename = 'legacy'"); n != 0 {
			t.Fatal("the table the preview dropped is still there")
		}
		if _, err := c.Exec(ctx, "INSERT INTO orders VALUES (3000, 'after') ON CONFLICT DO NOTHING"); err != nil {
			t.Fatalf("a write after the cutover: %v", err)
		}
	}
	if n := scalar[int64](t, connect(t, pc.Connections.DirectURL), "SELECT count(*) FROM pg_database WHERE datname LIKE 'appliance_%cutover_%'"); n != 0 {
		t.Fatalf("%d cutover databases left", n)
	}
	// The preview goes; the event tells it.
	deadline := e.Project(t, prv.ID)
	if deadline.State != appliance.ProjectDeleting && deadline.State != appliance.ProjectDeleted {
		t.Fatalf("the preview is %s after the cutover", deadline.State)
	}
	e.WaitJob(t, deadline.LatestJobID)
	if seen := eventTypes(t, e, p, prj.ID); !seen["cutover.requested"] || !seen["cutover.completed"] || !seen["preview.deleted"] {
		t.Fatalf("events: %v", seen)
	}

	// The pre-cutover backup holds the project as it was.
	var b *store.Backup
	if err := e.DB.View(func(tx *store.Tx) (err error) {
		b, err = store.Backups.Get(tx, got.CutoverRequest.PreCutoverBackupID)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	rs, err := e.Svc.Backups().Restore(ctx, p, prj.ID, &appliance.RestoreRequest{BackupKey: b.BackupKey})
	runJob(t, e, rs, err)
	c := connect(t, pc.Connections.DirectURL)
	if n := scalar[int64](t, c, "SELECT count(*) FROM orders WHERE id = 2000"); n != 1 {
		t.Fatal("the pre-cutover backup does not hold the project's own write")
	}
	if n := scalar[int64](t, c, "SELECT count(*) FROM legacy"); n != 1 {
		t.Fatal("the pre-cutover backup does not hold the project's table")
	}
}

// TestFailedCutoverChangesNothing: a preview with an extension the appliance does not offer cannot be
// promoted; the request fails with why, the project keeps its data and its database its connection limit,
// no staging database is left, and the preview stays.
func TestFailedCutoverChangesNothing(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	ctx := t.Context()
	prj, pc, _ := seeded(t, e, p, "shop", "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('mine')")
	res, err := e.Svc.Previews().Create(ctx, p, prj.ID, &appliance.CreatePreviewRequest{Mode: previews.ModeEmpty})
	waitPreview(t, e, res, err)
	if err := e.AdminExec(t, res.Preview.ID, "CREATE EXTENSION file_fdw"); err != nil {
		t.Fatal(err)
	}
	req, err := e.Svc.Migrate().RequestCutover(ctx, p, prj.ID, &appliance.CreateCutoverRequest{PreviewID: res.Preview.ID})
	if err != nil {
		t.Fatal(err)
	}
	ok, err := e.Svc.Migrate().ApproveCutover(ctx, p, prj.ID, req.CutoverRequest.ID, &appliance.ApproveCutoverRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, ok.Job.ID); j.State != scheduler.StateFailed {
		t.Fatalf("the promotion %s", j.State)
	}
	got, err := e.Svc.Migrate().GetCutoverRequest(ctx, p, prj.ID, req.CutoverRequest.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r := got.CutoverRequest; r.Status != migrate.CutoverFailed || r.LastError == "" {
		t.Fatalf("failed request: %+v", r)
	}
	t.Logf("last_error: %s", got.CutoverRequest.LastError)
	c := connect(t, pc.Connections.PooledURL)
	if v := scalar[string](t, c, "SELECT v FROM kept"); v != "mine" {
		t.Fatalf("the project's data: %q", v)
	}
	if n := scalar[int32](t, c, "SELECT datconnlimit FROM pg_database WHERE datname = current_database()"); n != -1 {
		t.Fatalf("connection limit %d after a failed cutover", n)
	}
	if n := scalar[int64](t, c, "SELECT count(*) FROM pg_database WHERE datname LIKE 'appliance_%cutover_%'"); n != 0 {
		t.Fatalf("%d cutover databases left", n)
	}
	if st := e.Project(t, res.Preview.ID).State; st != appliance.ProjectActive {
		t.Fatalf("the preview is %s", st)
	}
	// Another request may follow a failed one.
	if _, err := e.Svc.Migrate().RequestCutover(ctx, p, prj.ID, &appliance.CreateCutoverRequest{PreviewID: res.Preview.ID}); err != nil {
		t.Fatal(err)
	}
}

// connected provisions a development project and returns it with its connections and a connection to
// its direct URL.
func connected(t *testing.T, e *appliancetest.Env, p *appliance.Principal, name string) (*store.Project, *appliance.ConnectionsResponse, *pgx.Conn) {
	t.Helper()
	prj := provision(t, e, p, name, "development")
	pc, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	return prj, pc, connect(t, pc.Connections.DirectURL)
}

// seeded is connected, with sql run in the new project.
func seeded(t *testing.T, e *appliancetest.Env, p *appliance.Principal, name, sql string) (*store.Project, *appliance.ConnectionsResponse, *pgx.Conn) {
	t.Helper()
	prj, pc, conn := connected(t, e, p, name)
	if _, err := conn.Exec(t.Context(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return prj, pc, conn
}

// eventTypes are the types of the project's events in the log.
func eventTypes(t *testing.T, e *appliancetest.Env, p *appliance.Principal, projectID string) map[string]bool {
	t.Helper()
	evs, err := e.Svc.Events().ProjectEvents(t.Context(), p, projectID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, ev := range evs.Events {
		seen[ev.Type] = true
	}
	return seen
}
