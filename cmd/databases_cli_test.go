package cmd

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/httpapi"
)

// TestCLIDatabasesAndRoles: databases list/create/delete (--confirm needed) and roles
// list/create/reset-password/delete against a real server: the password a command prints logs in, a reset
// one no longer does, a dropped role logs in nowhere and its database passes to the project's role; the
// reserved names are refused with the API's message.
func TestCLIDatabasesAndRoles(t *testing.T) {
	e := setupCLI(t, cliSetupOpts{instances: true, limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}})
	p := e.login(t)
	prj := e.activeProject(t, p, "cli dbs")
	rec := e.svcProject(prj)
	conns, err := e.svc.ProjectConnections(t.Context(), p, prj)
	if err != nil {
		t.Fatal(err)
	}
	as := func(db, user, password string) string {
		u, _ := url.Parse(conns.Connections.DirectURL)
		if user != "" {
			u.User = url.UserPassword(user, password)
		}
		u.Path = "/" + db
		return u.String()
	}
	password := func(out string) string {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		return lines[len(lines)-1]
	}

	if out, _ := e.mustRun("", "databases", "list", prj); !strings.Contains(lineWith(out, rec.DatabaseName), "yes") {
		t.Fatalf("databases list:\n%s", out)
	}
	out, _ := e.mustRun("", "roles", "create", prj, "reporter")
	pw := password(out)
	if !strings.Contains(out, "Created role reporter") || len(pw) < 20 {
		t.Fatalf("roles create:\n%s", out)
	}
	if got := cliQuery(t, as(rec.DatabaseName, "reporter", pw), "SELECT current_user::text"); got != "reporter" {
		t.Fatalf("logged in as %q", got)
	}
	out, _ = e.mustRun("", "roles", "reset-password", prj, "reporter")
	if npw := password(out); npw == pw || len(npw) < 20 {
		t.Fatalf("roles reset-password:\n%s", out)
	} else {
		cliQuery(t, as(rec.DatabaseName, "reporter", npw), "SELECT 1::text")
		if c, err := pgx.Connect(t.Context(), as(rec.DatabaseName, "reporter", pw)); err == nil {
			c.Close(context.Background())
			t.Fatal("the old password still logs in")
		}
		pw = npw
	}
	if out, _ := e.mustRun("", "roles", "list", prj); !strings.Contains(out, "reporter") || !strings.Contains(lineWith(out, rec.RoleName), "yes") {
		t.Fatalf("roles list:\n%s", out)
	}

	if out, _ := e.mustRun("", "databases", "create", prj, "reports", "--owner", "reporter"); !strings.Contains(out, "Created database reports (owner reporter)") {
		t.Fatalf("databases create:\n%s", out)
	}
	if got := cliQuery(t, as("reports", "reporter", pw), "SELECT current_database()::text"); got != "reports" {
		t.Fatalf("connected to %q", got)
	}
	// Refusals: the API's message, nothing changed.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"databases", "delete", prj, "reports"}, "--confirm"},
		{[]string{"databases", "delete", prj, rec.DatabaseName, "--confirm"}, "reserved"},
		{[]string{"roles", "delete", prj, rec.RoleName}, "reserved"},
		{[]string{"roles", "create", prj, "pg_mine"}, "reserved"},
	} {
		if _, stderr, err := e.run("", c.args...); err == nil || !strings.Contains(err.Error()+stderr, c.want) {
			t.Fatalf("appliance %s: %v %q, want an error saying %q", strings.Join(c.args, " "), err, stderr, c.want)
		}
	}
	if out, _ := e.mustRun("", "databases", "list", prj); !strings.Contains(lineWith(out, "reports"), "reporter") {
		t.Fatalf("databases list:\n%s", out)
	}

	if out, _ := e.mustRun("", "roles", "delete", prj, "reporter"); !strings.Contains(out, "Dropped role reporter") {
		t.Fatalf("roles delete:\n%s", out)
	}
	if c, err := pgx.Connect(t.Context(), as(rec.DatabaseName, "reporter", pw)); err == nil {
		c.Close(context.Background())
		t.Fatal("a dropped role still logs in")
	}
	out, _ = e.mustRun("", "databases", "list", prj, "--json")
	var dbs api.DatabaseList
	if err := json.Unmarshal([]byte(out), &dbs); err != nil {
		t.Fatalf("databases list --json: %v\n%s", err, out)
	}
	for _, d := range dbs.Databases {
		if d.Name == "reports" && d.Owner != rec.RoleName {
			t.Fatalf("the dropped role's database is owned by %s", d.Owner)
		}
	}
	if out, _ := e.mustRun("", "roles", "list", prj); strings.Contains(out, "reporter") {
		t.Fatalf("roles list after the drop:\n%s", out)
	}
	if out, _ := e.mustRun("", "databases", "delete", prj, "reports", "--confirm"); !strings.Contains(out, "Dropped database reports") {
		t.Fatalf("databases delete:\n%s", out)
	}
	if out, _ := e.mustRun("", "databases", "list", prj); strings.Contains(out, "reports") {
		t.Fatalf("databases list after the drop:\n%s", out)
	}
}
