package cmd

import (
	"strings"
	"testing"
)

// TestCLIProjectsSuspendResumeUpdate: `projects update --suspend-after-seconds` changes the setting (and
// refuses nothing to change and bad values), `projects suspend` suspends, a connection wakes the project,
// `projects resume` leaves a running one as it is.
func TestCLIProjectsSuspendResumeUpdate(t *testing.T) {
	e := setupCLI(t, cliSetupOpts{instances: true})
	p := e.login(t)
	prj := e.activeProject(t, p, "dozy")
	conns, err := e.svc.ProjectConnections(t.Context(), p, prj)
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := e.mustRun("", "projects", "update", prj, "--suspend-after-seconds", "600"); !strings.Contains(out, "Suspend after:") || !strings.Contains(out, "600 s idle") {
		t.Fatalf("projects update:\n%s", out)
	}
	if _, stderr, err := e.run("", "projects", "update", prj); err == nil || !strings.Contains(err.Error()+stderr, "nothing to change") {
		t.Fatalf("projects update without flags: %v\n%s", err, stderr)
	}
	if _, stderr, err := e.run("", "projects", "update", prj, "--suspend-after-seconds", "5"); err == nil || !strings.Contains(err.Error()+stderr, "suspend_after_seconds must be 0") {
		t.Fatalf("projects update --suspend-after-seconds 5: %v\n%s", err, stderr)
	}
	if out, _ := e.mustRun("", "projects", "suspend", prj); !strings.Contains(out, "is suspended") {
		t.Fatalf("projects suspend:\n%s", out)
	}
	if got := cliQuery(t, conns.Connections.DirectURL, "SELECT 'awake'"); got != "awake" {
		t.Fatalf("the query that woke it: %q", got)
	}
	if out, _ := e.mustRun("", "projects", "resume", prj); !strings.Contains(out, "is active") {
		t.Fatalf("projects resume:\n%s", out)
	}
}
