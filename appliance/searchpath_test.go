package appliance_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
)

// A project's role owns its database and its public schema, may create schemas there and may set the
// database's default search_path. The traps below are what it can plant for the appliance's superuser
// sessions. Each calls public.sprung(name), which, when it runs as a superuser, advances the sequence
// public.sprung_<name> (sequences are not transactional: a trap that sprang inside a statement that then
// failed is still counted) and answers 'password' (so that the purge of pg_stat_statements goes on to its
// reset).
var trapNames = []string{"pgss_view", "pgss_reset", "current_setting", "available_extensions", "pg_extension", "regex_operator", "format"}

func sprungSQL() string {
	var b strings.Builder
	for _, n := range trapNames {
		fmt.Fprintf(&b, "CREATE SEQUENCE public.sprung_%s;\n", n)
	}
	b.WriteString(`CREATE FUNCTION public.sprung(trap text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user) THEN
		PERFORM pg_catalog.nextval(pg_catalog.format('public.%I', pg_catalog.concat('sprung_', trap))::pg_catalog.regclass);
	END IF;
	RETURN 'password';
END $$;`)
	return b.String()
}

// userSchemaTrapsSQL: with PostgreSQL's default search_path ("$user", public) a schema named like the admin
// role comes first after pg_catalog: its pg_stat_statements view and zero-argument reset hide the extension's
// in public (what instances.PurgeSecretStatements read and called), and unqualified objects are created in it.
var userSchemaTrapsSQL = `CREATE SCHEMA ` + postgres.AdminRole + `;
CREATE VIEW ` + postgres.AdminRole + `.pg_stat_statements AS SELECT public.sprung('pgss_view') AS query;
CREATE FUNCTION ` + postgres.AdminRole + `.pg_stat_statements_reset() RETURNS void LANGUAGE plpgsql AS $$
BEGIN PERFORM public.sprung('pgss_reset'); END $$;`

// publicFirstTrapsSQL: the database's default search_path puts public before pg_catalog, so that
// objects there hide the catalog's even with the same argument types: current_setting(text) (the import
// preflight's first statement), the pg_available_extensions view (the extension listing), pg_extension
// (what the extension job reads back) and the ~* operator on text (the purge of pg_stat_statements).
func publicFirstTrapsSQL(database string) string {
	return `ALTER DATABASE ` + pgx.Identifier{database}.Sanitize() + ` SET search_path = public, pg_catalog;
CREATE FUNCTION public.current_setting(text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.sprung('current_setting'); RETURN pg_catalog.current_setting($1); END $$;
CREATE VIEW public.pg_available_extensions AS SELECT a.name, a.default_version, a.installed_version, a.comment
	FROM pg_catalog.pg_available_extensions a WHERE public.sprung('available_extensions') IS NOT NULL;
CREATE VIEW public.pg_extension AS SELECT x.* FROM pg_catalog.pg_extension x WHERE public.sprung('pg_extension') IS NOT NULL;
CREATE FUNCTION public.regex_trap(text, text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM public.sprung('regex_operator'); RETURN pg_catalog.texticregexeq($1, $2); END $$;
CREATE OPERATOR public.~* (FUNCTION = public.regex_trap, LEFTARG = text, RIGHTARG = text);`
}

// sprung lists the traps that ran as a superuser in conn's database.
func sprung(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(t.Context(), `SELECT substr(sequencename, 8) FROM pg_catalog.pg_sequences
		WHERE schemaname = 'public' AND sequencename LIKE 'sprung\_%' AND last_value IS NOT NULL ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func noneSprung(t *testing.T, conn *pgx.Conn, after string) {
	t.Helper()
	if got := sprung(t, conn); len(got) > 0 {
		t.Errorf("after %s, the tenant's code ran as a superuser: %v", after, got)
	}
}

// unprotected is an admin session as the appliance's were: PostgreSQL's default search_path, or the
// database's.
func unprotected(t *testing.T, e *appliancetest.Env, projectID string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.ConnectConfig(t.Context(), e.AdminConfig(t, projectID))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// springs runs stmt, a statement the appliance ran as written, on an unprotected admin session and checks
// that it springs trap: the trap is live, and only the appliance's search_path keeps it shut.
func springs(t *testing.T, admin, tenant *pgx.Conn, trap, stmt string) {
	t.Helper()
	if _, err := admin.Exec(t.Context(), stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
	if !slices.Contains(sprung(t, tenant), trap) {
		t.Errorf("%s does not spring %s on an unprotected admin session: the test proves nothing", stmt, trap)
	}
}

func tenantConn(t *testing.T, e *appliancetest.Env, p *appliance.Principal, projectID string, preview bool) *pgx.Conn {
	t.Helper()
	var c *appliance.ConnectionsResponse
	var err error
	if preview {
		c, err = e.Svc.Previews().Connections(t.Context(), p, projectID)
	} else {
		c, err = e.Svc.ProjectConnections(t.Context(), p, projectID)
	}
	if err != nil {
		t.Fatal(err)
	}
	return connect(t, c.Connections.DirectURL)
}

func extensionSchemas(t *testing.T, conn *pgx.Conn) map[string]string {
	t.Helper()
	rows, err := conn.Query(t.Context(), `SELECT e.extname::text, n.nspname::text FROM pg_catalog.pg_extension e
		JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var name, schema string
		if err := rows.Scan(&name, &schema); err != nil {
			t.Fatal(err)
		}
		out[name] = schema
	}
	return out
}

// TestAdminSessionsNeverRunTheTenantsCode: a tenant plants, in its database, objects that PostgreSQL's
// name resolution would pick for the appliance's statements (a schema named like the admin role, then a
// database search_path that puts public first with overloads of the same signature as the catalog's), and
// the appliance provisions a clone preview of it, cuts the preview over, lists, enables (CASCADE, a fixed
// schema) and disables extensions, rotates the credential, adopts the instance (which purges
// pg_stat_statements), reads the index hygiene and runs an import preflight: no trap ever runs as a
// superuser, and extensions land where they always did (public, or their control file's schema; the
// database's default search_path gains topology after public as before). The same statements on an admin
// session without the appliance's search_path spring every trap. The tenant cannot plant anything in the
// postgres database, where the other admin sessions run.
func TestAdminSessionsNeverRunTheTenantsCode(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	ctx := t.Context()
	prj := provision(t, e, p, "traps", "development")
	tenant := tenantConn(t, e, p, prj.ID, false)
	if _, err := tenant.Exec(ctx, sprungSQL()+userSchemaTrapsSQL); err != nil {
		t.Fatal(err)
	}

	// A clone preview (its provisioning prepares the copy of the database), then its cutover (the staging
	// database is prepared, the preview's extensions created in it, and the swapped database prepared).
	clone, err := e.Svc.Previews().Create(ctx, p, prj.ID, &appliance.CreatePreviewRequest{Name: "trapped"})
	waitPreview(t, e, clone, err)
	noneSprung(t, tenantConn(t, e, p, clone.Preview.ID, true), "a clone preview's provisioning")
	req, err := e.Svc.Migrate().RequestCutover(ctx, p, prj.ID, &appliance.CreateCutoverRequest{PreviewID: clone.Preview.ID})
	if err != nil {
		t.Fatal(err)
	}
	ok, err := e.Svc.Migrate().ApproveCutover(ctx, p, prj.ID, req.CutoverRequest.ID, &appliance.ApproveCutoverRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, ok.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("cutover: %s\n%s", j.Error, j.LastStderr)
	}
	tenant = tenantConn(t, e, p, prj.ID, false) // the swap ended the session
	noneSprung(t, tenant, "a cutover")

	// Extensions: postgis_topology needs postgis (CASCADE) and fixes its schema; citext goes to public.
	if _, err := e.Svc.Extensions().List(ctx, p, prj.ID); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"postgis_topology", "citext"} {
		res, err := e.Svc.Extensions().Enable(ctx, p, prj.ID, &appliance.ExtensionRequest{Name: name})
		runJob(t, e, res, err)
	}
	got := extensionSchemas(t, tenant)
	for name, want := range map[string]string{"postgis": "public", "postgis_topology": "topology", "citext": "public", "pg_stat_statements": "public"} {
		if got[name] != want {
			t.Errorf("extension %s is in schema %q, want %s", name, got[name], want)
		}
	}
	// postgis_topology adds its schema to the database's default search_path, after PostgreSQL's default.
	if path := scalar[string](t, tenantConn(t, e, p, prj.ID, false), "SHOW search_path"); path != `"$user", public, topology` {
		t.Errorf("the project's sessions have search_path %q after postgis_topology", path)
	}
	res, err := e.Svc.Extensions().Disable(ctx, p, prj.ID, "citext")
	runJob(t, e, res, err)
	if _, err := e.Svc.Observe().IndexHygiene(ctx, p, prj.ID); err != nil {
		t.Fatal(err)
	}
	res, err = e.Svc.RotateCredentials(ctx, p, prj.ID, &appliance.RotateCredentialsRequest{OverlapSeconds: ptr(int64(600))})
	runJob(t, e, res, err)
	if err := e.Svc.AdoptInstances(ctx); err != nil { // purges pg_stat_statements
		t.Fatal(err)
	}
	noneSprung(t, tenant, "the extension jobs, a rotation and the adoption")

	// The traps are live: the appliance's statements as they were written spring them on a session with
	// PostgreSQL's default search_path, and objects would be created in the tenant's schema.
	admin := unprotected(t, e, prj.ID)
	springs(t, admin, tenant, "pgss_view", "SELECT count(*) FROM pg_stat_statements WHERE query ~* 'password|passwd'")
	springs(t, admin, tenant, "pgss_reset", "SELECT pg_stat_statements_reset()")
	if schema := scalar[string](t, admin, "SELECT current_schema()"); schema != postgres.AdminRole {
		t.Errorf("an unqualified object would be created in %q, not in the tenant's schema", schema)
	}
	if _, err := tenant.Exec(ctx, "SELECT pg_catalog.setval(format('public.%I', s), 1, false) FROM unnest($1::text[]) s",
		[]string{"sprung_pgss_view", "sprung_pgss_reset"}); err != nil {
		t.Fatal(err)
	}

	// The database's default search_path puts public first.
	if _, err := tenant.Exec(ctx, publicFirstTrapsSQL(prj.DatabaseName)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Svc.Extensions().List(ctx, p, prj.ID); err != nil {
		t.Fatal(err)
	}
	res, err = e.Svc.Extensions().Enable(ctx, p, prj.ID, &appliance.ExtensionRequest{Name: "citext"})
	runJob(t, e, res, err)
	if got := extensionSchemas(t, tenant)["citext"]; got != "public" {
		t.Errorf("citext is in %q, want public", got)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().(*net.TCPAddr).Port
	l.Close()
	if _, err := e.Svc.Migrate().Preflight(ctx, p, prj.ID, &appliance.PreflightRequest{SourceURL: fmt.Sprintf("postgres://app:pw@127.0.0.1:%d/shop", closed)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Svc.Observe().IndexHygiene(ctx, p, prj.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.Svc.AdoptInstances(ctx); err != nil {
		t.Fatal(err)
	}
	noneSprung(t, tenant, "the same with public first in the database's search_path")

	admin = unprotected(t, e, prj.ID)
	springs(t, admin, tenant, "current_setting", "SELECT current_setting('server_version_num')::int")
	springs(t, admin, tenant, "available_extensions", "SELECT name FROM pg_available_extensions")
	springs(t, admin, tenant, "pg_extension", "SELECT coalesce((SELECT extversion FROM pg_extension WHERE extname = 'citext'), '')")
	springs(t, admin, tenant, "regex_operator", "SELECT count(*) FROM pg_stat_statements WHERE query ~* 'password|passwd'")

	// The other admin sessions run in the postgres database: the tenant can create nothing there.
	cfg := tenant.Config().Copy()
	cfg.Database = "postgres"
	pg, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(context.Background())
	for _, q := range []string{"CREATE SCHEMA " + postgres.AdminRole,
		"CREATE FUNCTION public.current_setting(text) RETURNS text LANGUAGE sql AS 'SELECT $1'"} {
		_, err := pg.Exec(ctx, q)
		if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("%s in the postgres database: %v, want permission denied", q, err)
		}
	}
}

// formatTrapSQL: format(text, name, name) matches format('%I.%I', n.nspname, c.relname) better than the
// catalog's format(text, VARIADIC "any"), wherever it is in the search_path: PostgreSQL's default
// search_path is enough.
const formatTrapSQL = `CREATE FUNCTION public.format(text, name, name) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.sprung('format'); RETURN pg_catalog.format($1, $2, $3); END $$;`

// TestFollowNeverRunsTheTenantsCode: with an overload of format() in the project's public schema that the
// follow's status would pick (its table list formats names), a follow from a source, its status and its
// cutover (sequences set through to_regclass and setval) never run it as a superuser; the status's
// statement on an admin session with PostgreSQL's default search_path does.
func TestFollowNeverRunsTheTenantsCode(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	ctx := t.Context()
	prj := provision(t, e, p, "followtrap", "development")
	tenant := tenantConn(t, e, p, prj.ID, false)
	if _, err := tenant.Exec(ctx, sprungSQL()+formatTrapSQL); err != nil {
		t.Fatal(err)
	}
	src := e.StartSource(t, "logical")
	src.App(t, "shop", "CREATE TABLE public.items (id serial PRIMARY KEY, v text)", "INSERT INTO public.items (v) VALUES ('a'), ('b')")
	jr, err := e.Svc.Migrate().StartFollow(ctx, p, prj.ID, &appliance.FollowRequest{SourceURL: src.URL("shop"), Confirm: true})
	mustComplete(t, e, jr, err)
	waitFor(t, "initial copy", func() bool {
		rep := followStatus(t, e, p, prj)
		return len(rep.Tables) == 1 && rep.TablesReady == 1
	})
	jr, err = e.Svc.Migrate().FollowCutover(ctx, p, prj.ID, &appliance.FollowCutoverRequest{Confirm: true})
	mustComplete(t, e, jr, err)
	if n := scalar[int64](t, tenant, "SELECT count(*) FROM public.items"); n != 2 {
		t.Fatalf("%d rows followed", n)
	}
	noneSprung(t, tenant, "a follow, its status and its cutover")
	springs(t, unprotected(t, e, prj.ID), tenant, "format",
		"SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace LIMIT 1")
}

// TestAdminSessionsKeepTheirRole: the project's role owns its database and may set its defaults, the
// session's role among them (ALTER DATABASE … SET role), which PostgreSQL applies to a superuser's session
// too (a superuser is a member of every role). The appliance's admin sessions start with role = none, a
// startup parameter that outranks the database's defaults: they act as the admin role whatever the
// tenant set.
func TestAdminSessionsKeepTheirRole(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj, _, tenant := connected(t, e, p, "roles")
	if _, err := tenant.Exec(t.Context(), "ALTER DATABASE "+pgx.Identifier{prj.DatabaseName}.Sanitize()+" SET role = "+pgx.Identifier{prj.RoleName}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	// What the tenant set applies to a superuser who does not pin the role.
	var user string
	cfg := e.AdminConfig(t, prj.ID)
	plain, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(context.Background())
	if err := plain.QueryRow(t.Context(), "SELECT current_user").Scan(&user); err != nil || user != prj.RoleName {
		t.Fatalf("the fixture: a superuser's session in the database runs as %q (%v), want the tenant's role", user, err)
	}
	if err := e.Svc.AdminQueryRow(t.Context(), prj.ID, "SELECT current_user", nil, &user); err != nil || user != postgres.AdminRole {
		t.Errorf("an admin session runs as %q (%v)", user, err)
	}
	// The sampler's sessions (startup parameters of their own) too: its reading sees the admin role's rights.
	if res, err := e.Svc.Observe().Sample(t.Context()); err != nil || res.Failed != 0 {
		t.Errorf("a sweep: %+v %v", res, err)
	}
}
