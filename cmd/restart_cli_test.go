package cmd

import (
	"strings"
	"testing"
)

// TestCLIProjectsRestart: `projects restart --wait` restarts the server (its start time moves) and says when
// it started and how many sessions ended; the data stays.
func TestCLIProjectsRestart(t *testing.T) {
	e := setupCLI(t, cliSetupOpts{instances: true})
	p := e.login(t)
	prj := e.activeProject(t, p, "restarted")
	conns, err := e.svc.ProjectConnections(t.Context(), p, prj)
	if err != nil {
		t.Fatal(err)
	}
	url := conns.Connections.DirectURL
	cliExec(t, url, "CREATE TABLE t AS SELECT 42 AS answer")
	before := cliQuery(t, url, "SELECT pg_postmaster_start_time()::text")
	out, _ := e.mustRunJob("projects", "restart", prj, "--wait")
	if !strings.Contains(out, "Restarted: the server started at ") || !strings.Contains(out, "client sessions ended") {
		t.Fatalf("projects restart:\n%s", out)
	}
	if after := cliQuery(t, url, "SELECT pg_postmaster_start_time()::text"); after == before {
		t.Fatalf("the server's start time did not move: %s", after)
	}
	if got := cliQuery(t, url, "SELECT answer FROM t"); got != "42" {
		t.Fatalf("the data after the restart: %q", got)
	}
}
