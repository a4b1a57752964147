package appliance_test

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/previews"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// TestScaleToZero: a development project idle for its suspend_after_seconds (a fake clock) is suspended —
// its server and pooler stop, runtime_status suspended, project.suspended — a connection that sends no
// PostgreSQL packet wakes nothing, and the first pgx connection (verify-full, direct or pooled) wakes it
// and runs SELECT 1; 20 concurrent first connections wake it once; a restart of the appliance keeps it
// suspended and wakeable; suspend_after_seconds is the project's to change.
func TestScaleToZero(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	ctx := t.Context()
	prj := provision(t, e, p, "sleepy", "development")
	inst := instanceOf(t, e, prj)
	if got, err := e.Svc.GetProject(ctx, p, prj.ID); err != nil || got.Project.SuspendAfterSeconds != 300 {
		t.Fatalf("a development project's suspend_after_seconds: %+v, %v; want 300", got, err)
	}
	c, err := e.Svc.ProjectConnections(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	direct, pooled := c.Connections.DirectURL, c.Connections.PooledURL
	base := time.Now().UTC()
	at := func(d time.Duration) { e.Clock.Set(func() time.Time { return base.Add(d) }) }
	suspendIdle := func(want int) {
		t.Helper()
		n, err := e.Svc.SuspendIdle(ctx)
		if err != nil || n != want {
			t.Fatalf("SuspendIdle: %d, %v; want %d", n, err, want)
		}
	}
	clients := func() int64 {
		var n int64
		if err := e.Svc.AdminQueryRow(ctx, prj.ID, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND usename = $1", []any{prj.RoleName}, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// A client connected: not idle, however long.
	at(0)
	conn := connect(t, direct)
	suspendIdle(0)
	at(time.Hour)
	suspendIdle(0)
	conn.Close(ctx)
	waitFor(t, "the client's backend gone", func() bool { return clients() == 0 })
	at(time.Hour + 299*time.Second)
	suspendIdle(0) // idle since the last pass that saw the client: 299 s
	at(time.Hour + 300*time.Second)
	suspendIdle(1)
	checkSuspended(t, e, prj.ID, inst)
	if !eventTypes(t, e, p, prj.ID)["project.suspended"] {
		t.Fatal("no project.suspended event")
	}

	// A port scan, a silent client and a foreign protocol wake nothing.
	for _, port := range []int{prj.DirectPort, prj.PooledPort} {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		scan, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("the front holds %s: %v", addr, err)
		}
		scan.Close()
		foreign, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := foreign.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		_ = foreign.SetReadDeadline(time.Now().Add(time.Minute))
		b, _ := io.ReadAll(foreign) // closed by the front without an answer
		foreign.Close()
		if len(b) != 0 {
			t.Fatalf("the front answered %q to HTTP", b)
		}
	}
	// Nor do the sampler and the usage page (they read stored data).
	if _, err := e.Svc.Observe().Sample(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Svc.OrganizationUsage(ctx, p, prj.OrganizationID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Svc.Storage().Enforce(ctx); err != nil {
		t.Fatal(err)
	}
	checkSuspended(t, e, prj.ID, inst)

	// The first connection wakes it: verify-full, SELECT 1.
	resumed := countEvents(t, e, prj.ID, "project.resumed")
	selectOne(t, direct)
	if got := e.Project(t, prj.ID); got.RuntimeStatus != appliance.RuntimeActive || got.IdleSuspendedAt != nil {
		t.Fatalf("after the wake: runtime_status %s, idle_suspended_at %v", got.RuntimeStatus, got.IdleSuspendedAt)
	}
	if n := countEvents(t, e, prj.ID, "project.resumed"); n != resumed+1 {
		t.Fatalf("%d project.resumed events, want %d", n, resumed+1)
	}

	// Suspended on request, woken through the pooler.
	if _, err := e.Svc.SuspendProject(ctx, p, prj.ID); err != nil {
		t.Fatal(err)
	}
	checkSuspended(t, e, prj.ID, inst)
	selectOne(t, pooled)

	// 20 first connections at once, half direct, half pooled: one wake, all served.
	if _, err := e.Svc.SuspendProject(ctx, p, prj.ID); err != nil {
		t.Fatal(err)
	}
	checkSuspended(t, e, prj.ID, inst)
	resumed = countEvents(t, e, prj.ID, "project.resumed")
	const n = 20
	var dialed, wg sync.WaitGroup
	dialed.Add(n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := direct
			if i%2 == 1 {
				url = pooled
			}
			cfg, err := pgx.ParseConfig(url)
			if err != nil {
				errs[i] = err
				dialed.Done()
				return
			}
			cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
			// Every connection is made before any sends its first packet: all are first connections
			// (the front's, not the woken server's).
			cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
				var d net.Dialer
				c, err := d.DialContext(ctx, network, addr)
				dialed.Done()
				dialed.Wait()
				return c, err
			}
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				errs[i] = err
				return
			}
			defer conn.Close(context.Background())
			var one int
			errs[i] = conn.QueryRow(ctx, "SELECT 1").Scan(&one)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("first connection %d: %v", i, err)
		}
	}
	if got := countEvents(t, e, prj.ID, "project.resumed"); got != resumed+1 {
		t.Fatalf("%d wakes for 20 concurrent first connections, want 1", got-resumed)
	}

	// A restart of the appliance with the project suspended: it stays suspended, and wakes.
	if _, err := e.Svc.SuspendProject(ctx, p, prj.ID); err != nil {
		t.Fatal(err)
	}
	appliance.ReleaseWakeFront(e.Svc, prj.ID) // the process exits: its listeners go
	if err := e.Svc.AdoptInstances(ctx); err != nil {
		t.Fatal(err)
	}
	checkSuspended(t, e, prj.ID, inst)
	selectOne(t, direct)

	// The studio's SQL console wakes it (its sessions reach the server through the front like a client's).
	if _, err := e.Svc.SuspendProject(ctx, p, prj.ID); err != nil {
		t.Fatal(err)
	}
	checkSuspended(t, e, prj.ID, inst)
	if res, err := e.Svc.Studio().RunSQL(ctx, p, prj.ID, &appliance.SQLRequest{Query: "SELECT 1 AS one"}); err != nil {
		t.Fatalf("the studio on a suspended project: %v", err)
	} else if len(res.Result.Rows) != 1 {
		t.Fatalf("the studio's answer: %+v", res.Result)
	}
	if got := e.Project(t, prj.ID).RuntimeStatus; got != appliance.RuntimeActive {
		t.Fatalf("runtime_status %s after the studio's query", got)
	}

	// suspend_after_seconds: 0 never suspends; out of bounds is refused and changes nothing.
	for _, bad := range []int{-1, 59, 30*24*3600 + 1} {
		if _, err := e.Svc.PatchProject(ctx, p, prj.ID, &appliance.PatchProjectRequest{SuspendAfterSeconds: &bad}); appliance.KindOf(err) != appliance.KindInvalid {
			t.Fatalf("suspend_after_seconds %d: %v", bad, err)
		}
	}
	zero := 0
	res, err := e.Svc.PatchProject(ctx, p, prj.ID, &appliance.PatchProjectRequest{SuspendAfterSeconds: &zero})
	if err != nil || res.Project.SuspendAfterSeconds != 0 {
		t.Fatalf("suspend_after_seconds 0: %+v, %v", res, err)
	}
	at(48 * time.Hour)
	suspendIdle(0)
	at(96 * time.Hour)
	suspendIdle(0)
}

// checkSuspended: the project says suspended and none of its processes runs.
func checkSuspended(t *testing.T, e *appliancetest.Env, projectID string, inst *store.Instance) {
	t.Helper()
	if got := e.Project(t, projectID); got.RuntimeStatus != appliance.RuntimeSuspended || got.IdleSuspendedAt == nil {
		t.Fatalf("runtime_status %s, idle_suspended_at %v; want suspended", got.RuntimeStatus, got.IdleSuspendedAt)
	}
	// pg_ctl stop returns once the postmaster removed its pid file; its last children exit right after.
	waitFor(t, "no process of the suspended project", func() bool { return len(appliancetest.ProcessesUnder(inst.Dir)) == 0 })
}

func selectOne(t *testing.T, url string) {
	t.Helper()
	conn := connect(t, url)
	var one int
	if err := conn.QueryRow(t.Context(), "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1: %d, %v", one, err)
	}
	conn.Close(t.Context())
}

// TestScaleToZeroPreviewAndOrganization: a production project is never suspended by default but its
// empty preview is (300 s idle, a fake clock), and the preview's first connection wakes it. An
// organization's suspension is another thing: a project both idle-suspended and of a suspended
// organization is not woken by a connection (the client reads why) nor by POST …/resume (409), and the
// organization's resume starts it.
func TestScaleToZeroPreviewAndOrganization(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	ctx := t.Context()
	prj := provision(t, e, p, "prod", "production")
	inst := instanceOf(t, e, prj)
	prv, err := e.Svc.Previews().Create(ctx, p, prj.ID, &appliance.CreatePreviewRequest{Mode: previews.ModeEmpty})
	waitPreview(t, e, prv, err)
	pc, err := e.Svc.Previews().Connections(ctx, p, prv.Preview.ID)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().UTC()
	at := func(d time.Duration) { e.Clock.Set(func() time.Time { return base.Add(d) }) }
	at(0)
	if n, err := e.Svc.SuspendIdle(ctx); err != nil || n != 0 {
		t.Fatalf("first pass: %d, %v", n, err)
	}
	at(301 * time.Second)
	if n, err := e.Svc.SuspendIdle(ctx); err != nil || n != 1 {
		t.Fatalf("after 301 s: %d suspended, %v; want the preview alone", n, err)
	}
	if got := e.Project(t, prj.ID).RuntimeStatus; got != appliance.RuntimeActive {
		t.Fatalf("the production project: %s", got)
	}
	prvRec := e.Project(t, prv.Preview.ID)
	checkSuspended(t, e, prvRec.ID, instanceOf(t, e, prvRec))
	selectOne(t, pc.Connections.DirectURL)
	if got := e.Project(t, prvRec.ID).RuntimeStatus; got != appliance.RuntimeActive {
		t.Fatalf("the preview after its first connection: %s", got)
	}

	// Idle-suspended, then its organization suspended by an operator.
	c, err := e.Svc.ProjectConnections(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Svc.SuspendProject(ctx, p, prj.ID); err != nil {
		t.Fatal(err)
	}
	checkSuspended(t, e, prj.ID, inst)
	added, err := e.Svc.Tenancy().AddOperator(ctx, &api.AddOperatorRequest{Email: "ops@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := e.Svc.Identity().CreateSession(ctx, &api.SessionRequest{Email: "ops@example.com", Password: added.Password})
	if err != nil {
		t.Fatal(err)
	}
	op, err := e.Svc.Identity().Authenticate(ctx, sess.Token)
	if err != nil {
		t.Fatal(err)
	}
	sus, err := e.Svc.Tenancy().SuspendOrganization(ctx, op, prj.OrganizationID, &api.SuspendOrganizationRequest{Reason: "unpaid invoice"})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range sus.Jobs {
		if got := e.WaitJob(t, j.ID); got.State != scheduler.StateCompleted {
			t.Fatalf("%s: %s %s", got.Type, got.State, got.Error)
		}
	}
	cfg, err := pgx.ParseConfig(c.Connections.DirectURL)
	if err != nil {
		t.Fatal(err)
	}
	if conn, err := pgx.ConnectConfig(ctx, cfg); err == nil {
		conn.Close(ctx)
		t.Fatal("a connection woke a project of a suspended organization")
	} else if !strings.Contains(err.Error(), "organization") || !strings.Contains(err.Error(), "57P03") {
		t.Fatalf("the client's error: %v; want the server's, naming the organization's suspension", err)
	}
	if _, err := e.Svc.ResumeProject(ctx, p, prj.ID); appliance.KindOf(err) != appliance.KindConflict {
		t.Fatalf("resume in a suspended organization: %v", err)
	}
	if procs := appliancetest.ProcessesUnder(inst.Dir); len(procs) != 0 {
		t.Fatalf("processes of the project: %v", procs)
	}

	res, err := e.Svc.Tenancy().ResumeOrganization(ctx, op, prj.OrganizationID)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range res.Jobs {
		if got := e.WaitJob(t, j.ID); got.State != scheduler.StateCompleted {
			t.Fatalf("%s: %s %s", got.Type, got.State, got.Error)
		}
	}
	if got := e.Project(t, prj.ID); got.RuntimeStatus != appliance.RuntimeActive || got.IdleSuspendedAt != nil {
		t.Fatalf("after the organization's resume: runtime_status %s, idle_suspended_at %v", got.RuntimeStatus, got.IdleSuspendedAt)
	}
	selectOne(t, c.Connections.DirectURL)

	// A suspended preview deleted: the front lets go of its ports, nothing is left.
	at(time.Hour)
	if _, err := e.Svc.SuspendIdle(ctx); err != nil {
		t.Fatal(err)
	}
	at(2 * time.Hour)
	if _, err := e.Svc.SuspendIdle(ctx); err != nil {
		t.Fatal(err)
	}
	prvRec = e.Project(t, prvRec.ID)
	checkSuspended(t, e, prvRec.ID, instanceOf(t, e, prvRec))
	del, err := e.Svc.Previews().Delete(ctx, p, prvRec.ID)
	runJob(t, e, del, err)
	for _, port := range []int{prvRec.DirectPort, prvRec.PooledPort} {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("port %d of the deleted preview: %v", port, err)
		}
		ln.Close()
	}
}

// TestScaleToZeroEphemeralAndFailedWake: an ephemeral database is suspended after 300 s idle; a wake that
// cannot start its server (the data directory's marker gone) answers the client with an ErrorResponse
// naming the reason, starts nothing and leaves it suspended; once the server can start, the next
// connection wakes it.
func TestScaleToZeroEphemeralAndFailedWake(t *testing.T) {
	t.Parallel()
	e, _ := realEnv(t)
	ctx := t.Context()
	base := time.Now().UTC()
	at := func(d time.Duration) { e.Clock.Set(func() time.Time { return base.Add(d) }) }
	at(0)
	created, err := e.Svc.Previews().CreateEphemeral(ctx, "192.0.2.1", &appliance.CreateEphemeralRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := created.EphemeralDatabase.ProjectID
	if j := e.WaitJob(t, e.Project(t, id).LatestJobID); j.State != scheduler.StateCompleted {
		t.Fatalf("provision: %s", j.Error)
	}
	got, err := e.Svc.Previews().GetEphemeral(ctx, id, created.ClaimToken)
	if err != nil {
		t.Fatal(err)
	}
	url := got.Connections.DirectURL
	if n, err := e.Svc.SuspendIdle(ctx); err != nil || n != 0 {
		t.Fatalf("first pass: %d, %v", n, err)
	}
	at(300 * time.Second)
	if n, err := e.Svc.SuspendIdle(ctx); err != nil || n != 1 {
		t.Fatalf("after 300 s: %d, %v", n, err)
	}
	prj := e.Project(t, id)
	inst := instanceOf(t, e, prj)
	checkSuspended(t, e, id, inst)

	marker := filepath.Join(inst.Dir, "initialized")
	if err := os.Rename(marker, marker+".aside"); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if conn, err := pgx.ConnectConfig(ctx, cfg); err == nil {
		conn.Close(ctx)
		t.Fatal("a server that cannot start answered")
	} else if !strings.Contains(err.Error(), "57P03") || !strings.Contains(err.Error(), "is not initialized") {
		t.Fatalf("the client's error: %v; want the start's reason", err)
	}
	checkSuspended(t, e, id, inst)
	if err := os.Rename(marker+".aside", marker); err != nil {
		t.Fatal(err)
	}
	selectOne(t, url)
	if got := e.Project(t, id).RuntimeStatus; got != appliance.RuntimeActive {
		t.Fatalf("after the wake: %s", got)
	}
}
