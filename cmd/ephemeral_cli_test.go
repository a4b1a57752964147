package cmd

import (
	"regexp"
	"strings"
	"testing"

	"github.com/theappliance/appliance/httpapi"
)

var claimTokenRe = regexp.MustCompile(`eph_[0-9a-z]{52}`)

// TestCLIEphemeral: with no login at all, `ephemeral create` prints a connection string that works;
// get shows it with the claim token; claim (logged in) makes it a project of the organization; delete
// destroys another.
func TestCLIEphemeral(t *testing.T) {
	e := setupCLI(t, cliSetupOpts{instances: true, limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}})
	t.Setenv("APPLIANCE_API_URL", e.url)
	t.Setenv("APPLIANCE_CA_CERT", e.caPath)

	stdout, stderr := e.mustRunJob("ephemeral", "create", "--name", "scratch")
	url := strings.TrimSpace(stdout)
	token := claimTokenRe.FindString(stderr)
	id := projectIDRe.FindString(stderr)
	if !strings.HasPrefix(url, "postgresql://") || token == "" || id == "" {
		t.Fatalf("ephemeral create: stdout %q\nstderr %s", stdout, stderr)
	}
	// The claim link is printed whole: without its #token= fragment the page cannot claim.
	if !strings.Contains(stderr, "/claim/"+id+"#token="+token) {
		t.Fatalf("ephemeral create does not print the whole claim link:\n%s", stderr)
	}
	if got := cliQuery(t, url, "SELECT 1"); got != "1" {
		t.Fatalf("SELECT 1 on the printed URL: %q", got)
	}
	if _, _, err := e.run("", "ephemeral", "get", id); err == nil || !strings.Contains(err.Error(), "claim token is required") {
		t.Fatalf("get without a token: %v", err)
	}
	if _, _, err := e.run("", "ephemeral", "get", id, "--token", "eph_wrong"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("get with a wrong token: %v", err)
	}
	got, _ := e.mustRun("", "ephemeral", "get", id, "--token", token)
	if !strings.Contains(got, "active") || !strings.Contains(got, url) {
		t.Fatalf("ephemeral get:\n%s", got)
	}
	if _, _, err := e.run("", "ephemeral", "claim", id, "--token", token); err == nil || !strings.Contains(err.Error(), "not logged in") {
		t.Fatalf("claim without a login: %v", err)
	}
	t.Setenv("APPLIANCE_API_KEY", e.boot.APIKey)
	if out, _ := e.mustRun("", "ephemeral", "claim", id, "--token", token); !strings.Contains(out, "Claimed "+id) {
		t.Fatalf("claim: %s", out)
	}
	if list, _ := e.mustRun("", "projects", "list"); !strings.Contains(list, id) {
		t.Fatalf("the claimed database is not among the projects:\n%s", list)
	}

	t.Setenv("APPLIANCE_API_KEY", "")
	_, stderr = e.mustRunJob("ephemeral", "create", "--no-wait")
	other, otherToken := projectIDRe.FindString(stderr), claimTokenRe.FindString(stderr)
	t.Setenv("APPLIANCE_CLAIM_TOKEN", otherToken)
	if out, _ := e.mustRun("", "ephemeral", "delete", other); !strings.Contains(out, "Destroying ephemeral database "+other) {
		t.Fatalf("delete: %s", out)
	}
}
