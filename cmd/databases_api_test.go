package cmd

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/httpapi"
)

// TestDatabasesAndRolesAPI drives the databases and roles endpoints over HTTP against real PostgreSQL and
// PgBouncer: a new database connects directly and pooled; a new role logs in with the password shown
// once; a reset makes the old one fail and the new one work, both ways; the refusals (reserved, bad and
// duplicate names, another project's key) are JSON 4xx that change nothing; a dropped database is gone.
func TestDatabasesAndRolesAPI(t *testing.T) {
	e := setupCLI(t, cliSetupOpts{instances: true, limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}})
	p := e.login(t)
	a := e.activeProject(t, p, "dbs a")
	b := e.activeProject(t, p, "dbs b")
	prj := e.svcProject(a)
	key, err := e.svc.Identity().CreateAPIKey(t.Context(), p, prj.OrganizationID, &api.CreateAPIKeyRequest{Name: "b only",
		Scopes: []string{"projects:read", "projects:write", "credentials:read"}, ProjectID: b})
	if err != nil {
		t.Fatal(err)
	}
	keyB := key.PlaintextAPIKey
	pem, err := os.ReadFile(e.caPath)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	do := func(method, path, key string, body any, want int, out any) map[string]any {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, e.url+path, rd)
		req.Header.Set("Authorization", "Bearer "+key)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		if res.StatusCode != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, res.StatusCode, raw, want)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("%s %s: not JSON: %s", method, path, raw)
		}
		if want >= 400 {
			if msg, _ := m["error"].(string); msg == "" {
				t.Fatalf("%s %s: %d without an error message: %s", method, path, want, raw)
			}
		} else if out != nil {
			if err := json.Unmarshal(raw, out); err != nil {
				t.Fatal(err)
			}
		}
		return m
	}
	admin := e.boot.APIKey
	base := "/v1/projects/" + a
	var conns api.ConnectionsResponse
	do("GET", base+"/connections", admin, nil, 200, &conns)
	// at is one of the project's URLs for another database and login.
	at := func(raw, db, user, password string) string {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			u.User = url.UserPassword(user, password)
		}
		u.Path = "/" + db
		return u.String()
	}
	tryConnect := func(u string) (*pgx.Conn, error) {
		cfg, err := pgx.ParseConfig(u)
		if err != nil {
			t.Fatal(err)
		}
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol // PgBouncer in transaction mode
		return pgx.ConnectConfig(t.Context(), cfg)
	}
	mustQuery := func(u, q string) string {
		t.Helper()
		c, err := tryConnect(u)
		if err != nil {
			t.Fatalf("connect %s: %v", redactURL(u), err)
		}
		defer c.Close(context.Background())
		var v string
		if err := c.QueryRow(t.Context(), q).Scan(&v); err != nil {
			t.Fatalf("%s on %s: %v", q, redactURL(u), err)
		}
		return v
	}
	mustConn := func(u string) *pgx.Conn {
		t.Helper()
		c, err := tryConnect(u)
		if err != nil {
			t.Fatalf("connect %s: %v", redactURL(u), err)
		}
		return c
	}
	refused := func(u string) {
		t.Helper()
		if c, err := tryConnect(u); err == nil {
			c.Close(context.Background())
			t.Fatalf("%s still connects", redactURL(u))
		}
	}
	names := func(path string, field string) []string {
		t.Helper()
		m := do("GET", base+path, admin, nil, 200, nil)
		var out []string
		for _, x := range m[field].([]any) {
			out = append(out, x.(map[string]any)["name"].(string))
		}
		return out
	}

	// A database: reachable directly and pooled by the project's login, which owns it.
	var db api.DatabaseResponse
	do("POST", base+"/databases", admin, map[string]any{"name": "analytics"}, 201, &db)
	if db.Database.Name != "analytics" || db.Database.Owner != prj.RoleName || db.Database.Reserved {
		t.Fatalf("created %+v", db.Database)
	}
	for _, u := range []string{conns.Connections.DirectURL, conns.Connections.PooledURL} {
		if got := mustQuery(at(u, "analytics", "", ""), "SELECT current_database() || ' ' || current_user"); got != "analytics "+prj.RoleName {
			t.Fatalf("connected to %q", got)
		}
	}
	c, err := tryConnect(at(conns.Connections.DirectURL, "analytics", "", ""))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(t.Context(), "CREATE TABLE events (id int)"); err != nil {
		t.Fatalf("the owner cannot create a table in the new database: %v", err)
	}
	c.Close(context.Background())

	// A role: logs in with the password shown once, directly and pooled; nothing more than a login.
	var role api.RolePassword
	do("POST", base+"/roles", admin, map[string]any{"name": "reporter"}, 201, &role)
	if role.Role.Name != "reporter" || len(role.Password) < 20 {
		t.Fatalf("created role %+v", role.Role)
	}
	for _, u := range []string{conns.Connections.DirectURL, conns.Connections.PooledURL} {
		if got := mustQuery(at(u, prj.DatabaseName, "reporter", role.Password), "SELECT current_user::text"); got != "reporter" {
			t.Fatalf("logged in as %q", got)
		}
	}
	var attrs string
	if err := e.svc.AdminQueryRow(t.Context(), a, "SELECT concat_ws(',', rolsuper, rolreplication, rolcreaterole, rolcreatedb, rolbypassrls) FROM pg_roles WHERE rolname = 'reporter'", nil, &attrs); err != nil || attrs != "f,f,f,f,f" {
		t.Fatalf("reporter's attributes (super, replication, createrole, createdb, bypassrls): %s %v", attrs, err)
	}
	if got := names("/roles", "roles"); !slices.Equal(got, []string{prj.RoleName, "reporter"}) {
		t.Fatalf("roles %v", got)
	}

	// A reset: the old password fails, the new one works, both ways.
	var reset api.RolePassword
	do("POST", base+"/roles/reporter/reset-password", admin, nil, 200, &reset)
	if reset.Password == role.Password || reset.Password == "" {
		t.Fatal("the reset gave no new password")
	}
	for _, u := range []string{conns.Connections.DirectURL, conns.Connections.PooledURL} {
		refused(at(u, prj.DatabaseName, "reporter", role.Password))
		if got := mustQuery(at(u, prj.DatabaseName, "reporter", reset.Password), "SELECT current_user::text"); got != "reporter" {
			t.Fatalf("logged in as %q", got)
		}
	}

	// Refusals: JSON 4xx, nothing changed.
	dbsBefore, rolesBefore := names("/databases", "databases"), names("/roles", "roles")
	for _, c := range []struct {
		method, path, key string
		body              any
		want              int
	}{
		{"POST", base + "/databases", admin, map[string]any{"name": "postgres"}, 400},
		{"POST", base + "/databases", admin, map[string]any{"name": "template1"}, 400},
		{"POST", base + "/databases", admin, map[string]any{"name": prj.DatabaseName}, 400},
		{"POST", base + "/databases", admin, map[string]any{"name": "pg_mine"}, 400},
		{"POST", base + "/databases", admin, map[string]any{"name": "Bad-Name"}, 400},
		{"POST", base + "/databases", admin, map[string]any{"name": `x"; DROP DATABASE analytics; --`}, 400},
		{"POST", base + "/databases", admin, map[string]any{"name": ""}, 400},
		{"POST", base + "/databases", admin, map[string]any{"name": "analytics"}, 409},
		{"POST", base + "/databases", admin, map[string]any{"name": "other", "owner": "appliance_admin"}, 400},
		{"DELETE", base + "/databases/" + prj.DatabaseName, admin, nil, 400},
		{"DELETE", base + "/databases/template0", admin, nil, 400},
		{"DELETE", base + "/databases/postgres", admin, nil, 400},
		{"DELETE", base + "/databases/nothere", admin, nil, 404},
		{"POST", base + "/roles", admin, map[string]any{"name": "appliance_admin"}, 400},
		{"POST", base + "/roles", admin, map[string]any{"name": prj.RoleName}, 400},
		{"POST", base + "/roles", admin, map[string]any{"name": prj.RoleName + "_alt"}, 400},
		{"POST", base + "/roles", admin, map[string]any{"name": "postgres"}, 400},
		{"POST", base + "/roles", admin, map[string]any{"name": "pg_monitor"}, 400},
		{"POST", base + "/roles", admin, map[string]any{"name": "Robert'); --"}, 400},
		{"POST", base + "/roles", admin, map[string]any{"name": "reporter"}, 409},
		{"POST", base + "/roles/" + prj.RoleName + "/reset-password", admin, nil, 400},
		{"POST", base + "/roles/appliance_admin/reset-password", admin, nil, 400},
		{"POST", base + "/roles/nobody/reset-password", admin, nil, 404},
		{"DELETE", base + "/roles/" + prj.RoleName, admin, nil, 400},
		{"DELETE", base + "/roles/" + prj.RoleName + "_alt", admin, nil, 400},
		{"DELETE", base + "/roles/appliance_admin", admin, nil, 400},
		{"DELETE", base + "/roles/postgres", admin, nil, 400},
		{"DELETE", base + "/roles/nobody", admin, nil, 404},
		// A key of another project sees nothing of this one.
		{"GET", base + "/databases", keyB, nil, 403},
		{"POST", base + "/databases", keyB, map[string]any{"name": "sneaky"}, 403},
		{"DELETE", base + "/databases/analytics", keyB, nil, 403},
		{"POST", base + "/roles", keyB, map[string]any{"name": "sneaky"}, 403},
		{"POST", base + "/roles/reporter/reset-password", keyB, nil, 403},
		{"DELETE", base + "/roles/reporter", keyB, nil, 403},
	} {
		do(c.method, c.path, c.key, c.body, c.want, nil)
	}
	if got := names("/databases", "databases"); !slices.Equal(got, dbsBefore) {
		t.Fatalf("databases after the refusals %v, before %v", got, dbsBefore)
	}
	if got := names("/roles", "roles"); !slices.Equal(got, rolesBefore) {
		t.Fatalf("roles after the refusals %v, before %v", got, rolesBefore)
	}
	mustQuery(at(conns.Connections.PooledURL, prj.DatabaseName, "reporter", reset.Password), "SELECT current_user::text")
	// The other project's key works on its own project.
	do("POST", "/v1/projects/"+b+"/databases", keyB, map[string]any{"name": "mine"}, 201, nil)

	// Dropping a role: what it owns (a database, a table) passes to the project's role, its open session
	// ends, it logs in nowhere, and the drop is audited.
	do("POST", base+"/databases", admin, map[string]any{"name": "reports", "owner": "reporter"}, 201, nil)
	rc := mustConn(at(conns.Connections.DirectURL, "reports", "reporter", reset.Password))
	if _, err := rc.Exec(t.Context(), "CREATE TABLE reporter_notes (id int)"); err != nil {
		t.Fatal(err)
	}
	rc.Close(context.Background())
	open := mustConn(at(conns.Connections.DirectURL, prj.DatabaseName, "reporter", reset.Password))
	defer open.Close(context.Background())
	do("DELETE", base+"/roles/reporter", admin, nil, 200, nil)
	for _, u := range []string{conns.Connections.DirectURL, conns.Connections.PooledURL} {
		refused(at(u, prj.DatabaseName, "reporter", reset.Password))
	}
	if _, err := open.Exec(t.Context(), "SELECT 1"); err == nil {
		t.Fatal("the dropped role's open session still runs statements")
	}
	if got := names("/roles", "roles"); slices.Contains(got, "reporter") {
		t.Fatalf("roles after the drop: %v", got)
	}
	owners := mustQuery(at(conns.Connections.DirectURL, "reports", "", ""), `SELECT (SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'reports') || ' ' ||
		(SELECT tableowner FROM pg_tables WHERE tablename = 'reporter_notes')`)
	if owners != prj.RoleName+" "+prj.RoleName {
		t.Fatalf("owners of the dropped role's database and table: %q", owners)
	}
	do("DELETE", base+"/roles/reporter", admin, nil, 404, nil)
	var audit api.AuditEventList
	do("GET", base+"/audit-events?limit=100", admin, nil, 200, &audit)
	if !slices.ContainsFunc(audit.AuditEvents, func(ev *api.AuditEvent) bool {
		var md struct{ Role string }
		return ev.Action == "project.role.drop" && json.Unmarshal(ev.Metadata, &md) == nil && md.Role == "reporter"
	}) {
		t.Fatal("the role's drop is not in the project's audit events")
	}

	// Drop: gone, directly and pooled.
	do("DELETE", base+"/databases/analytics", admin, nil, 200, nil)
	refused(at(conns.Connections.DirectURL, "analytics", "", ""))
	refused(at(conns.Connections.PooledURL, "analytics", "", ""))
	if got := names("/databases", "databases"); slices.Contains(got, "analytics") {
		t.Fatalf("databases after the drop: %v", got)
	}
}

func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(url)"
	}
	return p.Redacted()
}
