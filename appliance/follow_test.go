package appliance_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/migrate"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// targetInt runs a query returning one integer as the project's admin (the admin sessions' search_path:
// tables are named with their schema).
func targetInt(t *testing.T, e *appliancetest.Env, prj *store.Project, query string) int {
	t.Helper()
	var inst *store.Instance
	if err := e.DB.View(func(tx *store.Tx) (err error) { inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID); return err }); err != nil {
		t.Fatal(err)
	}
	pw, err := e.Box.Open(inst.AdminPassword)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := (&postgres.Instance{Port: inst.Port}).Connect(t.Context(), string(pw), prj.DatabaseName)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(t.Context(), query).Scan(&n); err != nil {
		t.Fatalf("target: %s: %v", query, err)
	}
	return n
}

func mustComplete(t *testing.T, e *appliancetest.Env, jr *appliance.JobResponse, err error) *store.Job {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	j := e.WaitJob(t, jr.Job.ID)
	if j.State != scheduler.StateCompleted {
		t.Fatalf("job %s (%s) %s: %s\nstderr: %s", j.ID, j.Type, j.State, j.Error, j.LastStderr)
	}
	return j
}

func followStatus(t *testing.T, e *appliancetest.Env, p *appliance.Principal, prj *store.Project) *appliance.FollowReport {
	t.Helper()
	jr, err := e.Svc.Migrate().FollowStatus(t.Context(), p, prj.ID)
	j := mustComplete(t, e, jr, err)
	var rep appliance.FollowReport
	jsonUnmarshal(j.Result, &rep)
	return &rep
}

func checkStatus(t *testing.T, pf *appliance.Preflight, name, status string) {
	t.Helper()
	for _, c := range pf.Checks {
		if c.Name == name {
			if c.Status != status {
				t.Fatalf("check %s is %s (%s), want %s", name, c.Status, c.Detail, status)
			}
			return
		}
	}
	t.Fatalf("no check %s in %+v", name, pf.Checks)
}

func TestImportPreflightInputs(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "pfinputs", "development")
	for _, bad := range []string{"", "http://app:pw@127.0.0.1/shop", "postgres://app@127.0.0.1:5432/shop",
		"postgres://app:pw@127.0.0.1:5432/", "postgres://app:pw@%2Ftmp/shop", "postgres://app:pw@127.0.0.1:5432/shop?sslrootcert=/etc/shadow",
		"postgres://app:pw@127.0.0.1:5432/shop?sslmode=bogus", "postgres://app:pw@127.0.0.1:99999/shop"} {
		_, err := e.Svc.Migrate().Preflight(t.Context(), p, prj.ID, &appliance.PreflightRequest{SourceURL: bad})
		if appliance.KindOf(err) != appliance.KindInvalid {
			t.Errorf("source_url %q: %v, want invalid", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), "pw@") {
			t.Errorf("error echoes the password: %v", err)
		}
	}
	// Nobody listens there: ok false, a failing connect check, no source, and no password in the detail.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	res, err := e.Svc.Migrate().Preflight(t.Context(), p, prj.ID, &appliance.PreflightRequest{
		SourceURL: fmt.Sprintf("postgres://app:sekrit@127.0.0.1:%d/shop", port)})
	if err != nil {
		t.Fatal(err)
	}
	pf := res.Preflight
	if pf.OK || pf.Source != nil || len(pf.Checks) != 1 {
		t.Fatalf("unreachable source: %+v", pf)
	}
	checkStatus(t, pf, "connect", migrate.CheckFail)
	if strings.Contains(pf.Checks[0].Detail, "sekrit") {
		t.Fatalf("detail shows the password: %s", pf.Checks[0].Detail)
	}
	member := &appliance.Principal{AuthSource: appliance.SourceSession, OrganizationID: prj.OrganizationID, IDPOrganizationRole: appliance.RoleMember}
	if _, err := e.Svc.Migrate().Preflight(t.Context(), member, prj.ID, &appliance.PreflightRequest{SourceURL: "postgres://a:b@h/d"}); appliance.KindOf(err) != appliance.KindForbidden {
		t.Fatalf("member preflight: %v", err)
	}
}

// TestImportPreflightProvider builds a source that looks like a hosted provider's (Supabase's schemas and
// roles, a foreign key into auth.users, a policy calling auth.uid()) and one with wal_level = replica.
func TestImportPreflightProvider(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "pfprovider", "development")
	src := e.StartSource(t, "replica")
	src.Admin(t, "shop",
		"CREATE ROLE authenticated NOLOGIN", "CREATE ROLE anon NOLOGIN",
		"CREATE SCHEMA auth AUTHORIZATION app", "CREATE SCHEMA storage AUTHORIZATION app",
		"CREATE FUNCTION public.audit_noop() RETURNS event_trigger LANGUAGE plpgsql AS 'BEGIN END'",
		"CREATE EVENT TRIGGER audit_ddl ON ddl_command_end EXECUTE FUNCTION public.audit_noop()",
	)
	src.App(t, "shop",
		"CREATE TABLE auth.users (id uuid PRIMARY KEY)",
		"CREATE FUNCTION auth.uid() RETURNS uuid LANGUAGE sql STABLE AS 'SELECT NULL::uuid'",
		"CREATE TABLE storage.objects (id bigint PRIMARY KEY)",
		"CREATE TABLE public.profiles (id bigint PRIMARY KEY, user_id uuid CONSTRAINT profiles_user_fk REFERENCES auth.users)",
		"ALTER TABLE public.profiles ENABLE ROW LEVEL SECURITY",
		"CREATE POLICY own ON public.profiles USING (user_id = auth.uid())",
		"CREATE TABLE public.notes (body text)",
		"CREATE EXTENSION pgcrypto",
	)
	res, err := e.Svc.Migrate().Preflight(t.Context(), p, prj.ID, &appliance.PreflightRequest{SourceURL: src.URL("shop")})
	if err != nil {
		t.Fatal(err)
	}
	pf, s := res.Preflight, res.Preflight.Source
	if s == nil {
		t.Fatalf("no source: %+v", pf.Checks)
	}
	if s.Provider != "supabase" || !slices.Contains(s.ProviderSignals, "role:authenticated") || !slices.Contains(s.ProviderSignals, "schema:auth") {
		t.Fatalf("provider %q signals %v", s.Provider, s.ProviderSignals)
	}
	if !slices.Equal(s.ProviderSchemas, []string{"auth", "storage"}) || !slices.Equal(s.AppSchemas, []string{"public"}) {
		t.Fatalf("provider schemas %v, app schemas %v", s.ProviderSchemas, s.AppSchemas)
	}
	if len(s.ProviderAuthFKs) != 1 || s.ProviderAuthFKs[0] != (appliance.ProviderAuthFK{Constraint: "profiles_user_fk", SourceTable: "public.profiles", TargetTable: "auth.users"}) {
		t.Fatalf("provider auth fks %+v", s.ProviderAuthFKs)
	}
	if !slices.Equal(s.ProviderAuthPolicyTables, []string{"public.profiles"}) || !slices.Equal(s.EventTriggers, []string{"audit_ddl"}) {
		t.Fatalf("policy tables %v, event triggers %v", s.ProviderAuthPolicyTables, s.EventTriggers)
	}
	if !slices.Contains(s.Extensions, appliance.SourceExtension{Name: "pgcrypto", Version: s.Extensions[0].Version}) || s.DatabaseSizeBytes < 1<<20 ||
		!strings.HasPrefix(s.ServerVersion, "15.") {
		t.Fatalf("extensions %v size %d version %s", s.Extensions, s.DatabaseSizeBytes, s.ServerVersion)
	}
	r := s.Replication
	if r.Ready || r.WALLevel != "replica" || !r.RoleCanReplicate || r.MaxReplicationSlots != 10 || r.MaxWALSenders != 10 || r.UsedReplicationSlots != 0 {
		t.Fatalf("replication %+v", r)
	}
	blockers := strings.Join(r.Blockers, "\n")
	if !strings.Contains(blockers, "wal_level is replica") || !strings.Contains(blockers, "public.notes has no primary key") {
		t.Fatalf("blockers %q", blockers)
	}
	if pf.OK || pf.TargetVersion != prj.PostgresVersion || pf.StorageLimitBytes != prj.StorageLimitBytes {
		t.Fatalf("preflight %+v", pf)
	}
	checkStatus(t, pf, "connect", migrate.CheckPass)
	checkStatus(t, pf, "version", migrate.CheckPass)
	checkStatus(t, pf, "size", migrate.CheckPass)
	checkStatus(t, pf, "extensions", migrate.CheckPass)
	checkStatus(t, pf, "provider_objects", migrate.CheckFail)
	checkStatus(t, pf, "event_triggers", migrate.CheckWarn)
	checkStatus(t, pf, "replication", migrate.CheckWarn)

	// Follow is refused with the reasons, before anything is queued.
	_, err = e.Svc.Migrate().StartFollow(t.Context(), p, prj.ID, &appliance.FollowRequest{SourceURL: src.URL("shop"), Confirm: true})
	if appliance.KindOf(err) != appliance.KindConflict || !strings.Contains(err.Error(), "wal_level is replica") {
		t.Fatalf("follow of an unready source: %v", err)
	}
}

// TestImportFollow: follow a source, see changes stream, cut over (sequences carried), then follow into a
// second project and abort (the project is as before).
func TestImportFollow(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "follower", "development")
	src := e.StartSource(t, "logical")
	src.App(t, "shop",
		"CREATE EXTENSION pgcrypto",
		"CREATE SCHEMA sales",
		"CREATE TABLE public.customers (id serial PRIMARY KEY, name text NOT NULL, token text DEFAULT encode(gen_random_bytes(8), 'hex'))",
		"CREATE TABLE sales.orders (id bigserial PRIMARY KEY, customer_id int REFERENCES public.customers, total numeric)",
		"CREATE TABLE public.events (body text)",
		"INSERT INTO public.customers (name) SELECT 'c' || g FROM generate_series(1, 200) g",
		"INSERT INTO sales.orders (customer_id, total) SELECT 1 + g % 200, g FROM generate_series(1, 1000) g",
	)
	// A table without a primary key blocks follow (its UPDATEs would fail on the source once published).
	_, err := e.Svc.Migrate().StartFollow(t.Context(), p, prj.ID, &appliance.FollowRequest{SourceURL: src.URL("shop"), Confirm: true})
	if appliance.KindOf(err) != appliance.KindConflict || !strings.Contains(err.Error(), "public.events has no primary key") {
		t.Fatalf("follow with a table without a key: %v", err)
	}
	src.App(t, "shop", "ALTER TABLE public.events REPLICA IDENTITY FULL", "INSERT INTO public.events VALUES ('one')")
	if _, err := e.Svc.Migrate().StartFollow(t.Context(), p, prj.ID, &appliance.FollowRequest{SourceURL: src.URL("shop")}); appliance.KindOf(err) != appliance.KindInvalid {
		t.Fatalf("follow without confirm: %v", err)
	}
	if _, err := e.Svc.Migrate().FollowStatus(t.Context(), p, prj.ID); appliance.KindOf(err) != appliance.KindNotFound {
		t.Fatalf("status before any follow: %v", err)
	}

	jr, err := e.Svc.Migrate().StartFollow(t.Context(), p, prj.ID, &appliance.FollowRequest{SourceURL: src.URL("shop"), Confirm: true})
	mustComplete(t, e, jr, err)
	// The project's role (pg_monitor) reads every statement in pg_stat_statements: CREATE SUBSCRIPTION,
	// which holds the source's password, is not among them.
	c, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	var seen int
	if err := connect(t, c.Connections.DirectURL).QueryRow(t.Context(),
		"SELECT count(*) FROM pg_stat_statements WHERE query LIKE '%' || $1 || '%'", appliancetest.SourceAppPassword).Scan(&seen); err != nil || seen != 0 {
		t.Fatalf("the source's password is in pg_stat_statements %d times (%v)", seen, err)
	}
	if _, err := e.Svc.Migrate().StartFollow(t.Context(), p, prj.ID, &appliance.FollowRequest{SourceURL: src.URL("shop"), Confirm: true}); appliance.KindOf(err) != appliance.KindConflict {
		t.Fatalf("a second follow: %v", err)
	}
	var rep *appliance.FollowReport
	waitFor(t, "initial copy", func() bool {
		rep = followStatus(t, e, p, prj)
		return len(rep.Tables) == 3 && rep.TablesReady == 3
	})
	if rep.State != appliance.FollowFollowing || !rep.WorkerRunning || rep.LagBytes == nil {
		t.Fatalf("status %+v", rep)
	}
	if n := targetInt(t, e, prj, "SELECT count(*) FROM sales.orders"); n != 1000 {
		t.Fatalf("orders copied: %d", n)
	}
	// The project's role adds a CHECK constraint whose function tries to become a superuser: the
	// subscription's workers run it as their own non-superuser role, so RESET ROLE gains nothing.
	trap := connect(t, c.Connections.DirectURL)
	for _, q := range []string{
		`CREATE FUNCTION public.escalate(a int) RETURNS boolean LANGUAGE plpgsql AS $$
		 BEGIN
		   RESET ROLE;
		   EXECUTE 'CREATE ROLE pwned SUPERUSER';
		   RETURN true;
		 EXCEPTION WHEN insufficient_privilege THEN RETURN true;
		 END $$`,
		"ALTER TABLE public.customers ADD CONSTRAINT trap CHECK (public.escalate(id))",
	} {
		if _, err := trap.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// Changes stream while following.
	src.App(t, "shop", "INSERT INTO public.customers (name) VALUES ('late')", "UPDATE public.events SET body = 'two'",
		"INSERT INTO sales.orders (customer_id, total) SELECT 1, g FROM generate_series(1, 50) g")
	waitFor(t, "streamed rows", func() bool {
		return targetInt(t, e, prj, "SELECT count(*) FROM sales.orders") == 1050 &&
			targetInt(t, e, prj, "SELECT count(*) FROM public.events WHERE body = 'two'") == 1 &&
			targetInt(t, e, prj, "SELECT count(*) FROM public.customers WHERE name = 'late'") == 1
	})
	if n := targetInt(t, e, prj, "SELECT count(*) FROM pg_roles WHERE rolname = 'pwned' OR (rolsuper AND rolname <> 'appliance_admin')"); n != 0 {
		t.Fatalf("applying a followed row made %d superusers", n)
	}

	if _, err := e.Svc.Migrate().FollowCutover(t.Context(), p, prj.ID, &appliance.FollowCutoverRequest{}); appliance.KindOf(err) != appliance.KindInvalid {
		t.Fatalf("cutover without confirm: %v", err)
	}
	src.App(t, "shop", "INSERT INTO sales.orders (customer_id, total) VALUES (2, 2)")
	jr, err = e.Svc.Migrate().FollowCutover(t.Context(), p, prj.ID, &appliance.FollowCutoverRequest{Confirm: true})
	j := mustComplete(t, e, jr, err)
	var cut struct {
		LagBytes        int `json:"lag_bytes"`
		SequencesSynced int `json:"sequences_synced"`
	}
	jsonUnmarshal(j.Result, &cut)
	if cut.SequencesSynced != 2 {
		t.Fatalf("cutover result %s", j.Result)
	}
	if n := targetInt(t, e, prj, "SELECT count(*) FROM sales.orders"); n != 1051 {
		t.Fatalf("orders after cutover: %d", n)
	}
	// Sequences continue after the source's values: new rows do not collide.
	if n := targetInt(t, e, prj, "SELECT nextval('sales.orders_id_seq')::int"); n != 1052 {
		t.Fatalf("orders_id_seq next %d", n)
	}
	if n := targetInt(t, e, prj, "SELECT nextval('public.customers_id_seq')::int"); n != 202 {
		t.Fatalf("customers_id_seq next %d", n)
	}
	if n := src.Int(t, "shop", "SELECT count(*) FROM pg_replication_slots"); n != 0 {
		t.Fatalf("%d slots left on the source", n)
	}
	if n := src.Int(t, "shop", "SELECT count(*) FROM pg_publication"); n != 0 {
		t.Fatalf("%d publications left on the source", n)
	}
	if n := targetInt(t, e, prj, "SELECT count(*) FROM pg_subscription"); n != 0 {
		t.Fatalf("%d subscriptions left", n)
	}
	if rep := followStatus(t, e, p, prj); rep.State != appliance.FollowCompleted {
		t.Fatalf("status after cutover %+v", rep)
	}
	if _, err := e.Svc.Migrate().FollowAbort(t.Context(), p, prj.ID); appliance.KindOf(err) != appliance.KindConflict {
		t.Fatalf("abort after cutover: %v", err)
	}

	// Abort: the second project gets back exactly what it had.
	other := provision(t, e, p, "aborter", "development")
	if err := e.AdminExec(t, other.ID, "CREATE TABLE keepme AS SELECT g AS id FROM generate_series(1, 7) g"); err != nil {
		t.Fatal(err)
	}
	jr, err = e.Svc.Migrate().StartFollow(t.Context(), p, other.ID, &appliance.FollowRequest{SourceURL: src.URL("shop"), Confirm: true})
	mustComplete(t, e, jr, err)
	waitFor(t, "initial copy", func() bool { return followStatus(t, e, p, other).TablesReady == 3 })
	if n := src.Int(t, "shop", "SELECT count(*) FROM pg_replication_slots"); n != 1 {
		t.Fatalf("%d slots on the source while following", n)
	}
	jr, err = e.Svc.Migrate().FollowAbort(t.Context(), p, other.ID)
	j = mustComplete(t, e, jr, err)
	var ab struct {
		RestoreJobID string `json:"restore_job_id"`
	}
	jsonUnmarshal(j.Result, &ab)
	if ab.RestoreJobID == "" {
		t.Fatalf("abort result %s", j.Result)
	}
	if rj := e.WaitJob(t, ab.RestoreJobID); rj.State != scheduler.StateCompleted {
		t.Fatalf("restore after abort %s: %s", rj.State, rj.Error)
	}
	other = e.Project(t, other.ID)
	if n := targetInt(t, e, other, "SELECT count(*) FROM public.keepme"); n != 7 {
		t.Fatalf("keepme after abort: %d", n)
	}
	if n := targetInt(t, e, other, "SELECT count(*) FROM pg_class WHERE relname IN ('customers', 'orders', 'events')"); n != 0 {
		t.Fatalf("%d followed tables left after abort", n)
	}
	if n := targetInt(t, e, other, "SELECT count(*) FROM pg_subscription"); n != 0 {
		t.Fatalf("%d subscriptions left after abort", n)
	}
	if n := src.Int(t, "shop", "SELECT count(*) FROM pg_replication_slots"); n != 0 {
		t.Fatalf("%d slots left on the source after abort", n)
	}
	if rep := followStatus(t, e, p, other); rep.State != appliance.FollowAborted {
		t.Fatalf("status after abort %+v", rep)
	}

	// A follow whose schema copy fails (a view of the project's depends on a table the copy replaces):
	// the job fails with pg_restore's reason, the follow is failed, and abort restores the project.
	blocked := provision(t, e, p, "blocked", "development")
	if err := e.AdminExec(t, blocked.ID, "SET ROLE "+blocked.RoleName+"; CREATE TABLE public.customers (id int); CREATE VIEW public.vip AS SELECT id FROM public.customers"); err != nil {
		t.Fatal(err)
	}
	jr, err = e.Svc.Migrate().StartFollow(t.Context(), p, blocked.ID, &appliance.FollowRequest{SourceURL: src.URL("shop"), Confirm: true})
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, jr.Job.ID); j.State != scheduler.StateFailed || !strings.Contains(j.Error, "other objects depend on it") ||
		!strings.Contains(j.Error, "abort restores") || j.LastExitCode == nil || *j.LastExitCode != 1 {
		t.Fatalf("follow over a dependent view: %s %q", j.State, j.Error)
	}
	if rep := followStatus(t, e, p, blocked); rep.State != appliance.FollowFailed || !strings.Contains(rep.Error, "depend") {
		t.Fatalf("status of a failed follow %+v", rep)
	}
	if n := src.Int(t, "shop", "SELECT count(*) FROM pg_replication_slots") + src.Int(t, "shop", "SELECT count(*) FROM pg_publication"); n != 0 {
		t.Fatalf("a failed follow left %d slots and publications on the source", n)
	}
	jr, err = e.Svc.Migrate().FollowAbort(t.Context(), p, blocked.ID)
	j = mustComplete(t, e, jr, err)
	jsonUnmarshal(j.Result, &ab)
	if rj := e.WaitJob(t, ab.RestoreJobID); rj.State != scheduler.StateCompleted {
		t.Fatalf("restore after aborting a failed follow %s: %s", rj.State, rj.Error)
	}
	if n := targetInt(t, e, e.Project(t, blocked.ID), "SELECT count(*) FROM public.vip"); n != 0 {
		t.Fatalf("vip after abort: %d", n)
	}

	// Deleting a project that follows a source drops the source's slot and publication too.
	jr, err = e.Svc.Migrate().StartFollow(t.Context(), p, prj.ID, &appliance.FollowRequest{SourceURL: src.URL("shop"), Confirm: true})
	mustComplete(t, e, jr, err)
	// The subscription's own slot (a table's initial copy may still hold a temporary pg_<oid>_sync_<oid>
	// slot of its own for a moment, which PostgreSQL drops when the copy ends).
	if n := src.Int(t, "shop", `SELECT count(*) FROM pg_replication_slots WHERE slot_name NOT LIKE 'pg\_%\_sync\_%'`); n != 1 {
		t.Fatalf("%d slots on the source while following again", n)
	}
	del, err := e.Svc.DeleteProject(t.Context(), p, prj.ID, "")
	mustComplete(t, e, del, err)
	if n := src.Int(t, "shop", "SELECT count(*) FROM pg_replication_slots") + src.Int(t, "shop", "SELECT count(*) FROM pg_publication"); n != 0 {
		t.Fatalf("%d slots and publications left on the source after the project's deletion", n)
	}
}

// waitFor polls cond for up to two minutes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached in 2 minutes", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
