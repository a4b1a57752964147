package appliance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/observe"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// realEnv starts an appliance with a data plane and returns it with its admin principal.
func realEnv(t *testing.T) (*appliancetest.Env, *appliance.Principal) {
	t.Helper()
	return keyEnv(t, appliancetest.Options{Instances: true})
}

// provision creates a project through the service and waits for its job.
func provision(t *testing.T, e *appliancetest.Env, p *appliance.Principal, name, env string) *store.Project {
	t.Helper()
	res, err := e.Svc.CreateProject(t.Context(), p, &appliance.CreateProjectRequest{Name: name, Environment: env})
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, res.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("provision job %s: %s\nstderr: %s", j.State, j.Error, j.LastStderr)
	}
	return e.Project(t, res.Project.ID)
}

// connect opens a connection with a URL the API handed out (verify-full against the appliance CA).
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	// The pooled port is PgBouncer 1.18 in transaction mode: no protocol-level prepared statements.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatalf("connect %s: %v", redact(url), err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func redact(url string) string {
	if i, j := strings.Index(url, "://"), strings.Index(url, "@"); i > 0 && j > i {
		return url[:i+3] + "…" + url[j:]
	}
	return url
}

func scalar[T any](t *testing.T, conn *pgx.Conn, q string, args ...any) T {
	t.Helper()
	var v T
	if err := conn.QueryRow(t.Context(), q, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

func runJob(t *testing.T, e *appliancetest.Env, res *appliance.JobResponse, err error) *store.Job {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	j := e.WaitJob(t, res.Job.ID)
	if j.State != scheduler.StateCompleted {
		t.Fatalf("%s job %s: %s\nstderr: %s", j.Type, j.State, j.Error, j.LastStderr)
	}
	return j
}

func TestProvisionConnectAndChangePlan(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "Shop DB", "development")
	if prj.State != appliance.ProjectActive || prj.RuntimeStatus != appliance.RuntimeActive || !strings.HasPrefix(prj.PostgresVersion, "15.") {
		t.Fatalf("provisioned project: %+v", prj)
	}
	if prj.DirectPort == 0 || prj.PooledPort == 0 || prj.PrimaryInstanceID == "" || prj.MaxConnections != 20 {
		t.Fatalf("project fields: %+v", prj)
	}
	c, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.Connections.DirectURL, "sslmode=verify-full") || !strings.Contains(c.Connections.DirectURL, "sslrootcert=") {
		t.Fatalf("direct url lacks TLS verification: %s", redact(c.Connections.DirectURL))
	}
	direct := connect(t, c.Connections.DirectURL)
	if !scalar[bool](t, direct, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()") {
		t.Fatal("direct connection is not TLS")
	}
	if libs := scalar[string](t, direct, "SHOW shared_preload_libraries"); !strings.Contains(libs, "pg_stat_statements") {
		t.Fatalf("shared_preload_libraries = %q", libs)
	}
	if _, err := direct.Exec(t.Context(), "CREATE TABLE items (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Exec(t.Context(), "INSERT INTO items VALUES (1), (2)"); err != nil {
		t.Fatal(err)
	}
	pooled := connect(t, c.Connections.PooledURL)
	if n := scalar[int64](t, pooled, "SELECT count(*) FROM items"); n != 2 {
		t.Fatalf("pooled sees %d rows", n)
	}

	// A plan change restarts with the new max_connections; a timeout change reloads.
	res, err := e.Svc.PatchProject(t.Context(), p, prj.ID, &appliance.PatchProjectRequest{Plan: ptr("pro"), StatementTimeout: ptr("30s")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Project.MaxConnections != 100 || res.Project.LatestJobID == "" {
		t.Fatalf("patched project: %+v", res.Project)
	}
	if j := e.WaitJob(t, res.Project.LatestJobID); j.State != scheduler.StateCompleted {
		t.Fatalf("apply_plan: %s %s", j.Error, j.LastStderr)
	}
	after := connect(t, c.Connections.DirectURL)
	if v := scalar[string](t, after, "SHOW max_connections"); v != "100" {
		t.Fatalf("max_connections = %s after the plan change", v)
	}
	if v := scalar[string](t, after, "SHOW statement_timeout"); v != "30s" {
		t.Fatalf("statement_timeout = %s", v)
	}
	if n := scalar[int64](t, after, "SELECT count(*) FROM items"); n != 2 {
		t.Fatalf("rows after restart: %d", n)
	}
}

func ptr[T any](v T) *T { return &v }

func TestRotateCredentialsAcrossOverlap(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "rotating", "development")
	before, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Svc.RotateCredentials(t.Context(), p, prj.ID, &appliance.RotateCredentialsRequest{OverlapSeconds: ptr(int64(2))})
	j := runJob(t, e, res, err)
	after, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	if after.Connections.Username == before.Connections.Username || after.Connections.DirectURL == before.Connections.DirectURL {
		t.Fatalf("connections still show the old credential: %s", after.Connections.Username)
	}
	// During the overlap both credentials work, directly and through the pooler.
	for _, u := range []string{before.Connections.DirectURL, before.Connections.PooledURL, after.Connections.DirectURL, after.Connections.PooledURL} {
		c := connect(t, u)
		if who := scalar[string](t, c, "SELECT current_user"); who != prj.RoleName {
			t.Fatalf("logged in as %s, want the project role %s", who, prj.RoleName)
		}
	}
	old := connect(t, before.Connections.DirectURL)
	// After the overlap the old one is refused and its sessions are ended.
	var expireJob string
	if r, ok := jobResult(j)["expire_job_id"].(string); ok {
		expireJob = r
	}
	if ej := e.WaitJob(t, expireJob); ej.State != scheduler.StateCompleted {
		t.Fatalf("expire job: %s %s", ej.State, ej.Error)
	}
	for _, u := range []string{before.Connections.DirectURL, before.Connections.PooledURL} {
		cfg, _ := pgx.ParseConfig(u)
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		if c, err := pgx.ConnectConfig(t.Context(), cfg); err == nil {
			c.Close(t.Context())
			t.Fatalf("the old credential still works after the overlap: %s", redact(u))
		}
	}
	if err := old.Ping(t.Context()); err == nil {
		t.Fatal("the old credential's session survived the end of the overlap")
	}
	connect(t, after.Connections.PooledURL)
}

func jobResult(j *store.Job) map[string]any {
	m := map[string]any{}
	jsonUnmarshal(j.Result, &m)
	return m
}

func TestProductionDeleteNeedsApproval(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "prod", "production")
	inst := instanceOf(t, e, prj)
	if _, err := e.Svc.DeleteProject(t.Context(), p, prj.ID, ""); appliance.KindOf(err) != appliance.KindForbidden {
		t.Fatalf("delete without approval: %v", err)
	}
	if _, err := e.Svc.DeleteProject(t.Context(), p, prj.ID, "apr_wrong"); appliance.KindOf(err) != appliance.KindForbidden {
		t.Fatalf("delete with a wrong token: %v", err)
	}
	if got := e.Project(t, prj.ID); got.State != appliance.ProjectActive {
		t.Fatalf("a refused delete changed the project: %s", got.State)
	}
	apr, err := e.Svc.CreateApproval(t.Context(), p, prj.ID, &appliance.ApprovalRequest{Action: appliance.ActionProjectDelete})
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Svc.DeleteProject(t.Context(), p, prj.ID, apr.Approval.Token)
	runJob(t, e, res, err)
	got := e.Project(t, prj.ID)
	if got.State != appliance.ProjectDeleted || got.RuntimeStatus != appliance.RuntimeStopped || got.DeletedAt == nil {
		t.Fatalf("deleted project: %+v", got)
	}
	if _, err := osStat(inst.Dir); err == nil {
		t.Fatalf("instance dir %s still exists", inst.Dir)
	}
	if pids := processesUnder(inst.Dir); len(pids) > 0 {
		t.Fatalf("processes of the deleted instance still run: %v", pids)
	}
	// The token was single use.
	if _, err := e.Svc.DeleteProject(t.Context(), p, prj.ID, apr.Approval.Token); err == nil {
		t.Fatal("a second delete succeeded")
	}
}

func instanceOf(t *testing.T, e *appliancetest.Env, prj *store.Project) *store.Instance {
	t.Helper()
	var inst *store.Instance
	if err := e.DB.View(func(tx *store.Tx) (err error) { inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID); return err }); err != nil {
		t.Fatal(err)
	}
	return inst
}

func TestExtensionsEnableDisable(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "geo", "development")
	list, err := e.Svc.Extensions().List(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]appliance.Extension{}
	for _, x := range list.Extensions {
		byName[x.Name] = x
	}
	for _, name := range []string{"postgis", "hypopg", "pg_qualstats", "citext"} {
		if _, ok := byName[name]; !ok {
			t.Fatalf("extension %s is not offered (install postgresql-15-postgis-3, -hypopg, -pg-qualstats)", name)
		}
	}
	if x := byName["pg_stat_statements"]; !x.Enabled || !x.RequiresRestart || x.Category != "performance" {
		t.Fatalf("pg_stat_statements: %+v", x)
	}
	if x := byName["postgis"]; x.Enabled || x.Category != "geospatial" {
		t.Fatalf("postgis: %+v", x)
	}
	if _, ok := byName["file_fdw"]; ok {
		t.Fatal("file_fdw (server file access) is offered")
	}
	res, err := e.Svc.Extensions().Enable(t.Context(), p, prj.ID, &appliance.ExtensionRequest{Name: "postgis"})
	runJob(t, e, res, err)
	c, _ := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	conn := connect(t, c.Connections.DirectURL)
	if v := scalar[string](t, conn, "SELECT postgis_version()"); v == "" {
		t.Fatal("postgis_version() is empty")
	}
	if _, err := e.Svc.Extensions().Enable(t.Context(), p, prj.ID, &appliance.ExtensionRequest{Name: "postgis"}); appliance.KindOf(err) != appliance.KindConflict {
		t.Fatalf("enabling twice: %v", err)
	}
	if _, err := e.Svc.Extensions().Enable(t.Context(), p, prj.ID, &appliance.ExtensionRequest{Name: "no_such_ext"}); appliance.KindOf(err) != appliance.KindNotFound {
		t.Fatalf("unknown extension: %v", err)
	}
	res, err = e.Svc.Extensions().Disable(t.Context(), p, prj.ID, "postgis")
	runJob(t, e, res, err)
	if n := scalar[int64](t, conn, "SELECT count(*) FROM pg_extension WHERE extname = 'postgis'"); n != 0 {
		t.Fatal("postgis still installed after disable")
	}

	// An extension installed at an older version is offered an update, and the update job applies it.
	if err := e.AdminExec(t, prj.ID, "CREATE EXTENSION hstore VERSION '1.7'"); err != nil {
		t.Fatal(err)
	}
	if x := extension(t, e, p, prj.ID, "hstore"); !x.UpdateAvailable || x.InstalledVersion != "1.7" {
		t.Fatalf("hstore at 1.7: %+v", x)
	}
	res, err = e.Svc.Extensions().Update(t.Context(), p, prj.ID, "hstore")
	runJob(t, e, res, err)
	if x := extension(t, e, p, prj.ID, "hstore"); x.UpdateAvailable || x.InstalledVersion != x.AvailableVersion {
		t.Fatalf("hstore after update: %+v", x)
	}

	// One that needs shared_preload_libraries restarts the instance with it loaded.
	if x := extension(t, e, p, prj.ID, "pg_prewarm"); !x.RequiresRestart || x.Enabled {
		t.Fatalf("pg_prewarm: %+v", x)
	}
	res, err = e.Svc.Extensions().Enable(t.Context(), p, prj.ID, &appliance.ExtensionRequest{Name: "pg_prewarm"})
	j := runJob(t, e, res, err)
	if jobResult(j)["restarted"] != true {
		t.Fatalf("enabling pg_prewarm did not restart: %s", j.Result)
	}
	conn = connect(t, c.Connections.DirectURL)
	if libs := scalar[string](t, conn, "SHOW shared_preload_libraries"); !strings.Contains(libs, "pg_prewarm") {
		t.Fatalf("shared_preload_libraries = %q", libs)
	}
	res, err = e.Svc.Extensions().Disable(t.Context(), p, prj.ID, "pg_prewarm")
	j = runJob(t, e, res, err)
	conn = connect(t, c.Connections.DirectURL)
	if libs := scalar[string](t, conn, "SHOW shared_preload_libraries"); strings.Contains(libs, "pg_prewarm") || !strings.Contains(libs, "pg_stat_statements") {
		t.Fatalf("after disabling pg_prewarm: shared_preload_libraries = %q (%s)", libs, j.Result)
	}
}

func TestSupervisorRestartsAKilledInstance(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "crashy", "development")
	c, _ := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	conn := connect(t, c.Connections.DirectURL)
	if _, err := conn.Exec(t.Context(), "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before the crash')"); err != nil {
		t.Fatal(err)
	}
	post := postmasterPID(t, instanceOf(t, e, prj))
	if err := syscall.Kill(post, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		cfg, _ := pgx.ParseConfig(c.Connections.DirectURL)
		if c2, err := pgx.ConnectConfig(t.Context(), cfg); err == nil {
			v := ""
			err := c2.QueryRow(t.Context(), "SELECT v FROM kept").Scan(&v)
			c2.Close(t.Context())
			if err != nil || v != "before the crash" {
				t.Fatalf("after restart: %q %v", v, err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the instance did not come back within a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The death and the restart are recorded on the project's audit trail (the supervisor records the
	// restart just after the server accepts connections again).
	for {
		evs, err := e.Svc.ListProjectAudit(t.Context(), p, prj.ID, appliance.AuditQuery{Limit: 50})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, ev := range evs.AuditEvents {
			seen[ev.Action] = true
		}
		if seen["instance.died"] && seen["instance.restarted"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no instance.died and instance.restarted audit events: %v", seen)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := e.Project(t, prj.ID); got.RuntimeStatus != appliance.RuntimeActive {
		t.Fatalf("runtime_status after the restart: %s", got.RuntimeStatus)
	}
}

// A crash of a project's server is told (an instance.crashed event, an instance_crashed alert, resolved
// when it serves again), and runtime_status says active only when the server accepts connections: not
// when its pooler alone comes back while the server cannot start (F-L4).
func TestInstanceCrashIsToldAndActiveOnlyWhenServing(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	ctx := t.Context()
	prj := provision(t, e, p, "crash-told", "development")
	inst := instanceOf(t, e, prj)
	c, err := e.Svc.ProjectConnections(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	pos, err := e.Svc.Events().Position()
	if err != nil {
		t.Fatal(err)
	}
	crashes := func() (n int) {
		page, err := e.Svc.Events().ProjectEvents(ctx, p, prj.ID, pos, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range page.Events {
			if ev.Type == "instance.crashed" {
				var data observe.InstanceCrashedEvent
				if err := json.Unmarshal(ev.Data, &data); err != nil || data.ProjectID != prj.ID || data.PID == 0 {
					t.Fatalf("instance.crashed data %s: %v", ev.Data, err)
				}
				n++
			}
		}
		return n
	}
	crashAlert := func() *appliance.ProjectAlert {
		list, err := e.Svc.Observe().ListAlerts(ctx, p, prj.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range list.Alerts {
			if a.Kind == observe.AlertInstanceCrashed {
				return a
			}
		}
		return nil
	}
	audited := func(action string) int {
		evs, err := e.Svc.ListProjectAudit(ctx, p, prj.ID, appliance.AuditQuery{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, ev := range evs.AuditEvents {
			if ev.Action == action {
				n++
			}
		}
		return n
	}

	// The server cannot start again (its data directory is not marked initialized) and is killed.
	marker := filepath.Join(inst.Dir, "initialized")
	if err := os.Rename(marker, marker+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(postmasterPID(t, inst), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "an instance.crashed event", func() bool { return crashes() == 1 })
	if a := crashAlert(); a == nil || a.Severity != observe.SeverityCritical || a.ResolvedAt != nil {
		t.Fatalf("instance_crashed alert %+v", a)
	}
	waitFor(t, "a failed restart", func() bool { return audited("instance.restart_failed") > 0 })

	// Its pooler is killed too and comes back: the project is not active, its server does not run.
	if err := syscall.Kill(pidIn(t, filepath.Join(inst.Dir, "pooler", "pgbouncer.pid")), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pooler's restart", func() bool { return audited("instance.restarted") > 0 })
	if got := e.Project(t, prj.ID).RuntimeStatus; got == appliance.RuntimeActive {
		t.Fatalf("runtime_status %s while the server is down", got)
	}
	if n := crashes(); n != 2 {
		t.Fatalf("%d instance.crashed events, want 2 (the server's, the pooler's)", n)
	}

	// The server can start again: once the project says active, connections work at once.
	if err := os.Rename(marker+".aside", marker); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "runtime_status active", func() bool { return e.Project(t, prj.ID).RuntimeStatus == appliance.RuntimeActive })
	cfg, err := pgx.ParseConfig(c.Connections.DirectURL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("a connection once the project is active again: %v", err)
	}
	conn.Close(ctx)
	if a := crashAlert(); a == nil || a.ResolvedAt == nil || a.ObservedValue != 2 {
		t.Fatalf("instance_crashed alert after the restart %+v", a)
	}
}

// watchedCount is how many processes the supervisor watches.
func watchedCount(t *testing.T, e *appliancetest.Env) int {
	t.Helper()
	_, msg := e.Sup.Health(t.Context())
	var running, watched int
	if _, err := fmt.Sscanf(msg, "%d of %d watched", &running, &watched); err != nil {
		t.Fatalf("health %q: %v", msg, err)
	}
	return watched
}

// A delete killed with the appliance (SIGKILL) after it removed the instance and before it recorded that:
// the next start must not start that instance and its pooler again (the supervisor would make
// instances/<id>/{lifecycle.lock,pooler/} again, after the delete's retry removed them), and the retry
// leaves nothing behind (F-L3).
func TestDeleteInterruptedByACrashLeavesNothing(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "half-deleted", "development")
	inst := instanceOf(t, e, prj)
	// The crashed attempt: the project is deleting, its instance's processes and directory are gone.
	if err := e.DB.Update(func(tx *store.Tx) error {
		r, err := store.Projects.Get(tx, prj.ID)
		if err != nil {
			return err
		}
		r.State = appliance.ProjectDeleting
		return store.Projects.Put(tx, r)
	}); err != nil {
		t.Fatal(err)
	}
	e.Sup.Unwatch(inst.ID)
	e.Sup.Unwatch(inst.ID + "/pooler")
	for _, pid := range []int{postmasterPID(t, inst), pidIn(t, filepath.Join(inst.Dir, "pooler", "pgbouncer.pid"))} {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(inst.Dir); err != nil {
		t.Fatal(err)
	}
	before := watchedCount(t, e)
	// The next start.
	if err := e.Svc.AdoptInstances(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := watchedCount(t, e); n != before {
		t.Fatalf("the start watches %d processes, %d before: it started the deleting project's instance or pooler again", n, before)
	}
	if _, err := os.Stat(inst.Dir); !os.IsNotExist(err) {
		t.Fatalf("%s after the start: %v", inst.Dir, err)
	}
	// The delete's retry (a new request here: the crashed job is not in this store) completes.
	if err := e.DB.Update(func(tx *store.Tx) error {
		r, err := store.Projects.Get(tx, prj.ID)
		if err != nil {
			return err
		}
		r.State = appliance.ProjectActive
		return store.Projects.Put(tx, r)
	}); err != nil {
		t.Fatal(err)
	}
	res, err := e.Svc.DeleteProject(t.Context(), p, prj.ID, "")
	runJob(t, e, res, err)
	if _, err := os.Stat(inst.Dir); !os.IsNotExist(err) {
		t.Fatalf("%s after the delete: %v", inst.Dir, err)
	}
	if got := e.Project(t, prj.ID); got.State != appliance.ProjectDeleted {
		t.Fatalf("project %s", got.State)
	}
}

func TestUsageShowsRealSizesAndConnections(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "measured", "development")
	c, _ := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	conn := connect(t, c.Connections.DirectURL)
	if _, err := conn.Exec(t.Context(), "CREATE TABLE big AS SELECT g, repeat('x', 500) AS pad FROM generate_series(1, 20000) g"); err != nil {
		t.Fatal(err)
	}
	size := scalar[int64](t, conn, "SELECT pg_database_size(current_database())")
	u, err := e.Svc.OrganizationUsage(t.Context(), p, prj.OrganizationID)
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Usage.Projects) != 1 {
		t.Fatalf("usage rows: %+v", u.Usage.Projects)
	}
	row := u.Usage.Projects[0]
	if row.StorageBytes < 10<<20 || row.StorageBytes > size*2 || row.Connections < 1 || row.StorageLimitBytes != 1<<30 {
		t.Fatalf("usage row %+v (database size %d)", row, size)
	}
	if u.Usage.Totals.Projects != 1 || u.Usage.Totals.StorageBytes != row.StorageBytes || u.Usage.Totals.Connections != row.Connections {
		t.Fatalf("totals %+v", u.Usage.Totals)
	}
	// A base backup of the ~12 MB database shows in the backup storage, together with the archived WAL.
	before := u.Usage.Totals.BackupsStorageBytes
	bj, err := e.Svc.Backups().Create(t.Context(), p, prj.ID, &appliance.CreateBackupRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, bj.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("backup %s: %s", j.State, j.Error)
	}
	if u, err = e.Svc.OrganizationUsage(t.Context(), p, prj.OrganizationID); err != nil {
		t.Fatal(err)
	}
	if got := u.Usage.Totals.BackupsStorageBytes; got < before+10<<20 {
		t.Fatalf("backups_storage_bytes %d after a backup, %d before", got, before)
	}

	// Storage history: an hourly sample of the organization's storage, kept 30 days.
	if len(u.Usage.StorageHistory) != 0 {
		t.Fatalf("storage history before any sample: %+v", u.Usage.StorageHistory)
	}
	start := time.Now().UTC()
	for i, at := range []time.Time{start, start.Add(time.Hour), start.Add(31 * 24 * time.Hour)} {
		e.Clock.Set(func() time.Time { return at })
		if n, err := e.Svc.SampleStorage(t.Context()); err != nil || n != 1 {
			t.Fatalf("sample %d: %d organizations, %v", i, n, err)
		}
		if u, err = e.Svc.OrganizationUsage(t.Context(), p, prj.OrganizationID); err != nil {
			t.Fatal(err)
		}
		h := u.Usage.StorageHistory
		want := []int{1, 2, 1}[i] // the third sample is 31 days later: the first two are gone
		if len(h) != want || !h[len(h)-1].SampledAt.Equal(at) || h[len(h)-1].StorageBytes < 10<<20 {
			t.Fatalf("storage history after sample %d: %+v", i, h)
		}
	}
}

func extension(t *testing.T, e *appliancetest.Env, p *appliance.Principal, projectID, name string) appliance.Extension {
	t.Helper()
	list, err := e.Svc.Extensions().List(t.Context(), p, projectID)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range list.Extensions {
		if x.Name == name {
			return x
		}
	}
	t.Fatalf("extension %s not listed", name)
	return appliance.Extension{}
}

func TestMinorUpgradeRefusesActiveSessionsUnlessForced(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "minor", "development")
	c, _ := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	conn := connect(t, c.Connections.DirectURL)
	res, err := e.Svc.Upgrades().Minor(t.Context(), p, prj.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	j := e.WaitJob(t, res.Job.ID)
	if j.State != scheduler.StateFailed || !strings.Contains(j.Error, "client sessions are active") {
		t.Fatalf("minor upgrade with a session open: %s %q", j.State, j.Error)
	}
	if err := conn.Ping(t.Context()); err != nil {
		t.Fatal("the refused upgrade ended the session:", err)
	}
	// A member's session may not force it.
	member := &appliance.Principal{AuthSource: appliance.SourceSession, OrganizationID: prj.OrganizationID, IDPOrganizationRole: appliance.RoleMember}
	if _, err := e.Svc.Upgrades().Minor(t.Context(), member, prj.ID, true); appliance.KindOf(err) != appliance.KindForbidden {
		t.Fatalf("forced by a member: %v", err)
	}
	res, err = e.Svc.Upgrades().Minor(t.Context(), p, prj.ID, true)
	j = runJob(t, e, res, err)
	if r := jobResult(j); r["version_after"] == "" || r["sessions_ended"] != float64(1) {
		t.Fatalf("forced minor upgrade result: %s", j.Result)
	}
	if err := conn.Ping(t.Context()); err == nil {
		t.Fatal("the session survived the restart")
	}
	connect(t, c.Connections.DirectURL)
}

func TestMajorUpgradePreflightFailsClearlyForAnAbsentMajor(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "major", "development")
	for _, call := range []func() (*appliance.JobResponse, error){
		func() (*appliance.JobResponse, error) { return e.Svc.Upgrades().Preflight(t.Context(), p, prj.ID, 16) },
		func() (*appliance.JobResponse, error) { return e.Svc.Upgrades().Major(t.Context(), p, prj.ID, 16) },
	} {
		res, err := call()
		if err != nil {
			t.Fatal(err)
		}
		j := e.WaitJob(t, res.Job.ID)
		if j.State != scheduler.StateFailed || !strings.Contains(j.Error, "PostgreSQL 16 is not installed") {
			t.Fatalf("%s: %s %q", j.Type, j.State, j.Error)
		}
	}
	if _, err := e.Svc.Upgrades().Preflight(t.Context(), p, prj.ID, 15); appliance.KindOf(err) != appliance.KindInvalid {
		t.Fatalf("preflight to the current major: %v", err)
	}
	if _, err := e.Svc.Upgrades().Confirm(t.Context(), p, prj.ID); appliance.KindOf(err) != appliance.KindConflict {
		t.Fatalf("confirm without an upgrade: %v", err)
	}
	// The failed attempts left the project running on its data.
	c, _ := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	connect(t, c.Connections.DirectURL)
}

// spareEnv is an appliance with a data plane and one spare cluster ready, and its bootstrap principal.
func spareEnv(t *testing.T) (*appliancetest.Env, *appliance.Principal) {
	t.Helper()
	e := appliancetest.New(t, appliancetest.Options{Instances: true, Spares: 1})
	p, err := e.Svc.Identity().Authenticate(t.Context(), e.Bootstrap.APIKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Svc.EnsureSpares(t.Context()); err != nil {
		t.Fatal(err)
	}
	return e, p
}

func TestProvisionFromSpareCluster(t *testing.T) {
	t.Parallel()
	e, p := spareEnv(t)
	var spare *store.Instance
	e.DB.View(func(tx *store.Tx) error {
		all, err := store.Instances.All(tx, nil)
		if len(all) == 1 {
			spare = all[0]
		}
		return err
	})
	if spare == nil || spare.State != appliance.InstanceSpare || spare.Port == 0 || spare.PooledPort == 0 {
		t.Fatalf("spare: %+v", spare)
	}
	// Its PgBouncer runs already; the project keeps it (reloaded, not started again).
	poolerPid := pidIn(t, filepath.Join(spare.Dir, "pooler", "pgbouncer.pid"))
	prj := provision(t, e, p, "From Spare", "development")
	if prj.PrimaryInstanceID != spare.ID || prj.DirectPort != spare.Port || prj.PooledPort != spare.PooledPort {
		t.Fatalf("the project did not take the spare: instance %s ports %d/%d, spare %s ports %d/%d", prj.PrimaryInstanceID,
			prj.DirectPort, prj.PooledPort, spare.ID, spare.Port, spare.PooledPort)
	}
	if pid := pidIn(t, filepath.Join(spare.Dir, "pooler", "pgbouncer.pid")); pid != poolerPid {
		t.Fatalf("the spare's PgBouncer (pid %d) was replaced by pid %d", poolerPid, pid)
	}
	waitArchived(t, e, p, prj) // the claim rewrote the spare's archive_command for the project's backup store
	c, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	reachAs(t, c, "from_spare")
	conn := connect(t, c.Connections.DirectURL)
	if n := scalar[int64](t, conn, "SELECT count(*) FROM pg_roles WHERE rolname LIKE 'appliance_spare%'"); n != 0 {
		t.Fatalf("%d placeholder roles remain", n)
	}
	noClaimSecrets(t, e, prj, passwordOf(t, c.Connections.DirectURL))
	// The rotation's second login was renamed with the first.
	res, err := e.Svc.RotateCredentials(t.Context(), p, prj.ID, &appliance.RotateCredentialsRequest{OverlapSeconds: ptr(int64(0))})
	runJob(t, e, res, err)
	c, _ = e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if c.Connections.Username != "from_spare_alt" {
		t.Fatalf("rotated username %s", c.Connections.Username)
	}
	for _, u := range []string{c.Connections.DirectURL, c.Connections.PooledURL} {
		if who := scalar[string](t, connect(t, u), "SELECT current_user"); who != "from_spare" { // the second login acts as the role
			t.Fatalf("the rotated login acts as %s", who)
		}
	}
	waitSpares(t, e, 1)
}

// waitSpares waits until the pool holds n spare clusters again (refilled after a claim).
func waitSpares(t *testing.T, e *appliancetest.Env, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var spares int
		e.DB.View(func(tx *store.Tx) error {
			all, err := store.Instances.All(tx, func(i *store.Instance) bool { return i.State == appliance.InstanceSpare })
			spares = len(all)
			return err
		})
		if spares == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the spare pool was not refilled")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSpareClaimRetryConverges: a provision from a spare that is retried after its claim committed (the
// appliance stopped before the project was recorded active: the placeholders are renamed, the password set)
// finds no placeholder, completes, and leaves the project reachable with its credential.
func TestSpareClaimRetryConverges(t *testing.T) {
	t.Parallel()
	e, p := spareEnv(t)
	prj := provision(t, e, p, "Retried", "development")
	// What the store holds after a crash between the claim's transaction and the activation, and the
	// provision job's retry.
	retry := &store.Job{Type: appliance.JobProjectProvision, OrganizationID: prj.OrganizationID, ProjectID: prj.ID,
		LockedResource: prj.ID}
	err := e.DB.Update(func(tx *store.Tx) error {
		cur, err := store.Projects.Get(tx, prj.ID)
		if err != nil {
			return err
		}
		cur.State, cur.RuntimeStatus = appliance.ProjectProvisioning, appliance.RuntimeProvisioning
		if err := store.Projects.Put(tx, cur); err != nil {
			return err
		}
		return scheduler.Enqueue(tx, retry)
	})
	if err != nil {
		t.Fatal(err)
	}
	e.Runner.Notify()
	if j := e.WaitJob(t, retry.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("retried provision: %s %s", j.State, j.Error)
	}
	if got := e.Project(t, prj.ID); got.State != appliance.ProjectActive || got.PrimaryInstanceID != prj.PrimaryInstanceID {
		t.Fatalf("after the retry the project is %s on %s, want active on %s", got.State, got.PrimaryInstanceID, prj.PrimaryInstanceID)
	}
	c, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, conn := range reachAs(t, c, "retried") {
		if n := scalar[int64](t, conn, "SELECT count(*) FROM pg_roles WHERE rolname LIKE 'appliance_spare%' OR rolname LIKE 'retried%'"); n != 2 {
			t.Fatalf("%d roles named like the placeholders or the project's, want the project's two", n)
		}
	}
	noClaimSecrets(t, e, prj, passwordOf(t, c.Connections.DirectURL))
	waitSpares(t, e, 1) // no preparation left running under the test's directory
}

// reachAs connects over the direct and the pooled URL of c, and checks that each session's user and
// database are both name.
func reachAs(t *testing.T, c *appliance.ConnectionsResponse, name string) []*pgx.Conn {
	t.Helper()
	var conns []*pgx.Conn
	for _, u := range []string{c.Connections.DirectURL, c.Connections.PooledURL} {
		conn := connect(t, u)
		if who, db := scalar[string](t, conn, "SELECT current_user"), scalar[string](t, conn, "SELECT current_database()"); who != name || db != name {
			t.Fatalf("connected as %s to %s, want %s to %s", who, db, name, name)
		}
		conns = append(conns, conn)
	}
	return conns
}

// noClaimSecrets: the statements of a spare's claim (they carry the password's verifier) left no trace in the
// server's statistics (as its superuser reads them) or its log, and no file of the instance holds password.
func noClaimSecrets(t *testing.T, e *appliancetest.Env, prj *store.Project, password string) {
	t.Helper()
	admin, err := pgx.ConnectConfig(t.Context(), e.AdminConfig(t, prj.ID))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if n := scalar[int64](t, admin, "SELECT count(*) FROM public.pg_stat_statements WHERE query ILIKE '%RENAME%' OR query ILIKE '%PASSWORD%'"); n != 0 {
		t.Errorf("pg_stat_statements holds %d of the claim's statements", n)
	}
	if n := scalar[int64](t, admin, "SELECT count(*) FROM public.pg_stat_statements"); n == 0 {
		t.Error("pg_stat_statements is empty: the check reads nothing")
	}
	inst := instanceOf(t, e, prj)
	eachFile(inst.Dir, func(path string, b []byte) {
		if bytes.Contains(b, []byte(password)) {
			t.Errorf("%s holds the password", path)
		}
		if strings.HasPrefix(path, filepath.Join(inst.Dir, "pgdata", "log")) && bytes.Contains(b, []byte("SCRAM-SHA-256$")) {
			t.Errorf("the server's log %s holds a verifier", path)
		}
	})
}

// backupRecordCounts counts a project's Backup, RestorePoint, Export and Upload records, and whether it
// has a ScheduledBackup.
func backupRecordCounts(t *testing.T, e *appliancetest.Env, projectID string) ([4]int, bool) {
	t.Helper()
	var n [4]int
	schedule := false
	err := e.DB.View(func(tx *store.Tx) error {
		bs, err := store.Backups.Lookup(tx, store.BackupsByProject, projectID, store.Query{})
		if err != nil {
			return err
		}
		rps, err := store.RestorePoints.Lookup(tx, store.RestorePointsByProject, projectID, store.Query{})
		if err != nil {
			return err
		}
		xs, err := store.Exports.Lookup(tx, store.ExportsByProject, projectID, store.Query{})
		if err != nil {
			return err
		}
		us, err := store.Uploads.Lookup(tx, store.UploadsByProject, projectID, store.Query{})
		if err != nil {
			return err
		}
		n = [4]int{len(bs), len(rps), len(xs), len(us)}
		_, err = store.ScheduledBackups.Get(tx, projectID)
		schedule = err == nil
		if errors.Is(err, store.ErrNotFound) {
			err = nil
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, schedule
}

func projectJobCount(t *testing.T, e *appliancetest.Env, projectID string) int {
	t.Helper()
	var n int
	if err := e.DB.View(func(tx *store.Tx) error {
		js, err := store.Jobs.Lookup(tx, store.JobsByProject, projectID, store.Query{})
		n = len(js)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDeleteProjectDeletesItsBackups(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	ctx := t.Context()
	prj := provision(t, e, p, "doomed", "development")
	if err := e.AdminExec(t, prj.ID, "CREATE TABLE doomed_items AS SELECT g AS id FROM generate_series(1, 100) g"); err != nil {
		t.Fatal(err)
	}

	// A backup, a restore point, an export with a download URL, an uploaded and a pending upload, a schedule.
	bres, err := e.Svc.Backups().Create(ctx, p, prj.ID, &appliance.CreateBackupRequest{})
	runJob(t, e, bres, err)
	backups, err := e.Svc.Backups().List(ctx, p, prj.ID)
	if err != nil || len(backups.Backups) != 1 || backups.Backups[0].State != appliance.BackupCompleted {
		t.Fatalf("backups: %+v %v", backups, err)
	}
	if _, err := e.Svc.Backups().CreateRestorePoint(ctx, p, prj.ID, &appliance.RestorePointRequest{Label: "before"}); err != nil {
		t.Fatal(err)
	}
	xres, err := e.Svc.Exports().Create(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, xres.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("export job %s: %s\nstderr: %s", j.State, j.Error, j.LastStderr)
	}
	dl, err := e.Svc.Exports().Download(ctx, p, prj.ID, xres.ExportID)
	if err != nil {
		t.Fatal(err)
	}
	dlURL, err := url.Parse(dl.Download.DownloadURL)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(e.Dir, "backups", prj.ID)
	dump, err := os.ReadFile(filepath.Join(root, "exports", xres.ExportID+".dump"))
	if err != nil {
		t.Fatal(err)
	}
	up, err := e.Svc.Migrate().CreateUpload(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	uu, _ := url.Parse(up.Upload.UploadURL)
	if _, err := e.Svc.Migrate().ReceiveUpload(ctx, up.Upload.ID, uu.Query().Get("expires"), uu.Query().Get("sig"), -1, bytes.NewReader(dump)); err != nil {
		t.Fatal(err)
	}
	pending, err := e.Svc.Migrate().CreateUpload(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	pu, _ := url.Parse(pending.Upload.UploadURL)
	if _, err := e.Svc.Backups().PutSchedule(ctx, p, prj.ID, appliance.ScheduledBackupID, &appliance.PutScheduledBackupRequest{
		CronHour: intp(0), CronMinute: intp(0), IsActive: boolp(true)}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"wal", filepath.Join("base", backups.Backups[0].BackupKey, "backup_label"),
		filepath.Join("exports", xres.ExportID+".dump"), filepath.Join("imports", up.Upload.ID+".dump")} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Fatalf("before the delete: %v", err)
		}
	}
	if n, sched := backupRecordCounts(t, e, prj.ID); n != [4]int{1, 1, 1, 2} || !sched {
		t.Fatalf("before the delete: records %v, schedule %v", n, sched)
	}

	res, err := e.Svc.DeleteProject(ctx, p, prj.ID, "")
	runJob(t, e, res, err)

	// The backup store and every backup record of the project are gone.
	if _, err := os.Lstat(root); !os.IsNotExist(err) {
		t.Fatalf("the project's backup store is left: %v", err)
	}
	if n, sched := backupRecordCounts(t, e, prj.ID); n != [4]int{} || sched {
		t.Fatalf("after the delete: records %v, schedule %v", n, sched)
	}
	if l, err := e.Svc.Backups().List(ctx, p, prj.ID); err != nil || len(l.Backups) != 0 {
		t.Fatalf("backups of the deleted project: %+v %v", l, err)
	}
	if l, err := e.Svc.Backups().ListRestorePoints(ctx, p, prj.ID); err != nil || len(l.RestorePoints) != 0 {
		t.Fatalf("restore points of the deleted project: %+v %v", l, err)
	}
	if l, err := e.Svc.Exports().List(ctx, p, prj.ID); err != nil || len(l.Exports) != 0 {
		t.Fatalf("exports of the deleted project: %+v %v", l, err)
	}
	if l, err := e.Svc.Backups().ListSchedules(ctx, p, prj.ID); err != nil || len(l.ScheduledBackups) != 0 {
		t.Fatalf("schedules of the deleted project: %+v %v", l, err)
	}
	// Its signed URLs answer 403, a new download URL 404.
	if _, err := e.Svc.Exports().OpenDownload(t.Context(), xres.ExportID, dlURL.Query().Get("expires"), dlURL.Query().Get("sig")); appliance.KindOf(err) != appliance.KindForbidden {
		t.Fatalf("download of a deleted project's export: %v", err)
	}
	if _, err := e.Svc.Exports().Download(ctx, p, prj.ID, xres.ExportID); appliance.KindOf(err) != appliance.KindNotFound {
		t.Fatalf("download URL of a deleted project's export: %v", err)
	}
	if _, err := e.Svc.Migrate().ReceiveUpload(ctx, pending.Upload.ID, pu.Query().Get("expires"), pu.Query().Get("sig"), -1, bytes.NewReader(dump)); appliance.KindOf(err) != appliance.KindForbidden {
		t.Fatalf("upload to a deleted project: %v", err)
	}
	if _, err := os.Lstat(root); !os.IsNotExist(err) {
		t.Fatalf("a refused upload recreated the backup store: %v", err)
	}
	// The deletion of the backups is audited once, by the system, with what was deleted.
	evs, err := e.Svc.ListProjectAudit(ctx, p, prj.ID, appliance.AuditQuery{Limit: 0})
	if err != nil {
		t.Fatal(err)
	}
	var purged []map[string]any
	for _, ev := range evs.AuditEvents {
		if ev.Action == "project.backups_deleted" {
			m := map[string]any{}
			jsonUnmarshal(ev.Metadata, &m)
			m["actor_kind"] = ev.ActorKind
			purged = append(purged, m)
		}
	}
	if len(purged) != 1 || purged[0]["backups"] != 1.0 || purged[0]["restore_points"] != 1.0 || purged[0]["exports"] != 1.0 ||
		purged[0]["uploads"] != 2.0 || purged[0]["scheduled_backup"] != true || purged[0]["backup_store_removed"] != true ||
		purged[0]["actor_kind"] != appliance.ActorSystem {
		t.Fatalf("project.backups_deleted events: %v", purged)
	}

	// The schedule task enqueues nothing for it, even at a due slot.
	tomorrow := time.Now().UTC().Add(24 * time.Hour)
	jobs := projectJobCount(t, e, prj.ID)
	if r, err := e.Svc.Backups().RunScheduled(ctx, tomorrow); err != nil || r.Enqueued != 0 {
		t.Fatalf("scheduled backups after the delete: %+v %v", r, err)
	}
	// Nor for a schedule that is left (as a crash or an older version could leave it, with files): the
	// project's state stops it, and the sweep deletes what is left.
	if err := e.DB.Update(func(tx *store.Tx) error {
		return store.ScheduledBackups.Put(tx, &store.ScheduledBackup{ID: appliance.ScheduledBackupID, ProjectID: prj.ID,
			OrganizationID: prj.OrganizationID, Label: appliance.ScheduledBackupLabel, RetentionDays: 7, IsActive: true,
			CreatedAt: time.Now(), UpdatedAt: time.Now()})
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "wal"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "wal", "000000010000000000000009"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r, err := e.Svc.Backups().RunScheduled(ctx, tomorrow); err != nil || r.Enqueued != 0 {
		t.Fatalf("scheduled backups with a schedule left: %+v %v", r, err)
	}
	if n := projectJobCount(t, e, prj.ID); n != jobs {
		t.Fatalf("the schedule task enqueued %d jobs for the deleted project", n-jobs)
	}
	if n, _ := backupRecordCounts(t, e, prj.ID); n[0] != 0 {
		t.Fatalf("the schedule task recorded %d backups for the deleted project", n[0])
	}
	sw, err := e.Svc.Sweep(ctx)
	if err != nil || sw.ProjectsPurged != 1 {
		t.Fatalf("sweep: %+v %v", sw, err)
	}
	if _, err := os.Lstat(root); !os.IsNotExist(err) {
		t.Fatalf("the sweep left the backup store: %v", err)
	}
	if n, sched := backupRecordCounts(t, e, prj.ID); n != [4]int{} || sched {
		t.Fatalf("after the sweep: records %v, schedule %v", n, sched)
	}
	if sw, err := e.Svc.Sweep(ctx); err != nil || sw.ProjectsPurged != 0 {
		t.Fatalf("second sweep: %+v %v", sw, err)
	}
}

// A refill of the spare pool under way at shutdown (provisioning starts one after each claim) is
// interrupted and waited for by StopInstances, and none starts after it: no spare's server or PgBouncer
// outlives the appliance.
func TestStopInstancesEndsSpareRefill(t *testing.T) {
	t.Parallel()
	e := appliancetest.New(t, appliancetest.Options{Instances: true, Spares: 1})
	refilled := make(chan error, 1)
	go func() { refilled <- e.Svc.EnsureSpares(context.WithoutCancel(t.Context())) }()
	var preparing *store.Instance
	for deadline := time.Now().Add(time.Minute); preparing == nil; time.Sleep(5 * time.Millisecond) {
		e.DB.View(func(tx *store.Tx) error {
			all, err := store.Instances.All(tx, func(i *store.Instance) bool { return i.State == appliance.InstanceSparePreparing })
			if len(all) > 0 {
				preparing = all[0]
			}
			return err
		})
		if time.Now().After(deadline) {
			t.Fatal("no spare is being prepared")
		}
	}
	if err := e.Svc.StopInstances(t.Context()); err != nil {
		t.Fatal(err)
	}
	// EnsureSpares has returned by the time StopInstances does (it waits for the pool's lock); the
	// goroutine's send follows that return, so it gets a moment, not a refill's seconds.
	select {
	case <-refilled:
	case <-time.After(50 * time.Millisecond):
		t.Fatal("StopInstances returned while the refill still runs")
	}
	appliancetest.CheckNoProcessesUnder(t, e.Dir)
	if err := e.Svc.EnsureSpares(t.Context()); err != nil {
		t.Fatal(err)
	}
	var n int
	e.DB.View(func(tx *store.Tx) error {
		all, err := store.Instances.All(tx, func(i *store.Instance) bool { return i.State == appliance.InstanceSpare })
		n = len(all)
		return err
	})
	if n != 0 {
		t.Fatalf("%d spares prepared after StopInstances", n)
	}
	appliancetest.CheckNoProcessesUnder(t, e.Dir)
}

// A job the shutdown cancels may have started an instance before handing it to the supervisor: stopping
// the supervisor leaves it running, and StopInstances (the shutdown's last step) stops it.
func TestStopInstancesStopsWhatTheSupervisorDoesNotWatch(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "held", "development")
	inst := instanceOf(t, e, prj)
	e.Sup.Unwatch(inst.ID) // as a job holding it would
	e.Sup.Unwatch(inst.ID + "/pooler")
	if err := e.Sup.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	pid := postmasterPID(t, inst)
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the unwatched instance stopped with the supervisor: %v", err)
	}
	if len(processesUnder(inst.Dir)) < 2 {
		t.Fatalf("the instance and its pooler should still run: %v", processesUnder(inst.Dir))
	}
	if err := e.Svc.StopInstances(t.Context()); err != nil {
		t.Fatal(err)
	}
	appliancetest.CheckNoProcessesUnder(t, inst.Dir) // their exit is seen within appliancetest.LeakGrace
}

// TestASpareAProjectClaimedIsNeverHandedOutAgain: a claimed spare's directory names its project; metadata
// that still has it as a spare (an older meta.db put back) never hands it to another project, and
// reconcile names the mismatch.
func TestASpareAProjectClaimedIsNeverHandedOutAgain(t *testing.T) {
	t.Parallel()
	e, p := spareEnv(t)
	var spare *store.Instance
	e.DB.View(func(tx *store.Tx) error {
		all, err := store.Instances.All(tx, nil)
		if len(all) == 1 {
			spare = all[0]
		}
		return err
	})
	if spare == nil || spare.State != appliance.InstanceSpare {
		t.Fatalf("spare: %+v", spare)
	}
	a := provision(t, e, p, "First Owner", "development")
	if a.PrimaryInstanceID != spare.ID {
		t.Fatalf("the project did not take the spare %s: %s", spare.ID, a.PrimaryInstanceID)
	}
	if owner, err := os.ReadFile(filepath.Join(spare.Dir, "project")); err != nil || string(owner) != a.ID+"\n" {
		t.Fatalf("the claimed spare's directory names %q (%v), want %s", owner, err, a.ID)
	}
	// What the older metadata says: a spare still.
	if err := e.DB.Update(func(tx *store.Tx) error { return store.Instances.Put(tx, spare) }); err != nil {
		t.Fatal(err)
	}
	report, err := appliance.Reconcile(e.DB, e.Dir)
	if err != nil {
		t.Fatal(err)
	}
	want := "instance " + spare.ID + " is spare of project none in the metadata, but its directory belongs to project " + a.ID
	if !slices.ContainsFunc(report, func(s string) bool { return strings.HasPrefix(s, want) }) {
		t.Fatalf("reconcile: %q", report)
	}
	b := provision(t, e, p, "Second Owner", "development")
	if b.PrimaryInstanceID == spare.ID {
		t.Fatalf("project %s was given project %s's instance %s", b.ID, a.ID, spare.ID)
	}
}
