package cmd

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/httpapi"
)

var previewIDRe = regexp.MustCompile(`prv_[0-9a-z]{26}`)

// TestCLIPreviews: create --wait, list, get, connections (a URL that works), extend, reset --wait and
// delete --wait of a clone; then a cutover of an empty preview: request, list, reject (a reason needed),
// get, request again and approve --wait, the project's URL reading the preview's table.
func TestCLIPreviews(t *testing.T) {
	e := setupCLI(t, cliSetupOpts{instances: true, limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}})
	p := e.login(t)
	prj := e.activeProject(t, p, "branched")
	conns, err := e.svc.ProjectConnections(t.Context(), p, prj)
	if err != nil {
		t.Fatal(err)
	}
	cliExec(t, conns.Connections.DirectURL, "CREATE TABLE t AS SELECT 42 AS answer")

	out, _ := e.mustRunJob("previews", "create", prj, "--name", "feature-x", "--ttl-hours", "6", "--wait")
	id := previewIDRe.FindString(out)
	if id == "" || !strings.Contains(out, "is active until") {
		t.Fatalf("previews create:\n%s", out)
	}
	if list, _ := e.mustRun("", "previews", "list", prj); !strings.Contains(lineWith(list, id), "clone") || !strings.Contains(lineWith(list, id), "active") {
		t.Fatalf("previews list:\n%s", list)
	}
	if got, _ := e.mustRun("", "previews", "get", prj, id); !strings.Contains(got, "feature-x") {
		t.Fatalf("previews get:\n%s", got)
	}
	url, _ := e.mustRun("", "previews", "connections", id)
	url = strings.TrimSpace(url)
	if got := cliQuery(t, url, "SELECT answer FROM t"); got != "42" {
		t.Fatalf("the preview's data: %q", got)
	}
	if out, _ := e.mustRun("", "previews", "extend", id, "--ttl-hours", "48"); !strings.Contains(out, "is kept until") {
		t.Fatalf("extend: %s", out)
	}
	cliExec(t, url, "DROP TABLE t")
	e.mustRunJob("previews", "reset", id, "--wait")
	if got := cliQuery(t, url, "SELECT answer FROM t"); got != "42" {
		t.Fatalf("after the reset: %q", got)
	}
	e.mustRunJob("previews", "delete", id, "--wait")
	if list, _ := e.mustRun("", "previews", "list", prj); strings.Contains(list, id) {
		t.Fatalf("a deleted preview is listed:\n%s", list)
	}

	// A cutover: an empty preview's data becomes the project's, behind the project's URL.
	out, _ = e.mustRunJob("previews", "create", prj, "--mode", "empty", "--wait")
	next := previewIDRe.FindString(out)
	nextURL, _ := e.mustRun("", "previews", "connections", next)
	cliExec(t, strings.TrimSpace(nextURL), "CREATE TABLE shipped AS SELECT 'v2' AS release")
	requested := func() string {
		out, _ := e.mustRun("", "cutover", "request", prj, next, "--note", "v2 is ready")
		id := cutoverIDRe.FindString(out)
		if id == "" {
			t.Fatalf("cutover request:\n%s", out)
		}
		return id
	}
	first := requested()
	if list, _ := e.mustRun("", "cutover", "list", prj); !strings.Contains(lineWith(list, first), "open") {
		t.Fatalf("cutover list:\n%s", list)
	}
	if _, stderr, err := e.run("", "cutover", "reject", prj, first); err == nil || !strings.Contains(err.Error()+stderr, "rejected_reason") {
		t.Fatalf("a rejection without a reason: %v\n%s", err, stderr)
	}
	e.mustRun("", "cutover", "reject", prj, first, "--reason", "not on a Friday")
	if got, _ := e.mustRun("", "cutover", "get", prj, first); !strings.Contains(got, "rejected") || !strings.Contains(got, "not on a Friday") {
		t.Fatalf("cutover get:\n%s", got)
	}
	second := requested()
	if out, _ := e.mustRunJob("cutover", "approve", prj, second, "--wait"); !strings.Contains(out, "holds the preview's data") {
		t.Fatalf("cutover approve:\n%s", out)
	}
	if got := cliQuery(t, conns.Connections.DirectURL, "SELECT release FROM shipped"); got != "v2" {
		t.Fatalf("the project after the cutover: %q", got)
	}
}

var cutoverIDRe = regexp.MustCompile(`cut_[0-9a-z]{26}`)

// cliExec runs one statement on a connection URL.
func cliExec(t *testing.T, connURL, sql string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), connURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
