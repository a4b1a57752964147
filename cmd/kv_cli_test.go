package cmd

import (
	"regexp"
	"strings"
	"testing"

	"github.com/theappliance/appliance/httpapi"
)

var kvTokenRe = regexp.MustCompile(`^kv_[0-9a-z]{52}$`)

// TestCLIKV: create prints the token alone on stdout; get and credentials never show it; kv cli runs
// redis-cli over TLS with it; rotate-token (confirmed) prints a new one and the old one fails; flush
// empties the store; delete removes it.
func TestCLIKV(t *testing.T) {
	e := setupCLI(t, cliSetupOpts{instances: true, kv: true, limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}})
	p := e.login(t)
	prj := e.activeProject(t, p, "cached")

	stdout, stderr := e.mustRunJob("kv", "create", prj, "--wait")
	token := strings.TrimSpace(stdout)
	if !kvTokenRe.MatchString(token) || !strings.Contains(stderr, "only time the token is shown") || !strings.Contains(stderr, "is running") {
		t.Fatalf("kv create: stdout %q\nstderr %s", stdout, stderr)
	}
	if strings.Contains(stderr, token) {
		t.Fatalf("kv create repeated the token on stderr:\n%s", stderr)
	}
	get, _ := e.mustRun("", "kv", "get", prj)
	if !strings.Contains(get, "running") || !strings.Contains(get, token[:11]+"…") || strings.Contains(get, token) {
		t.Fatalf("kv get:\n%s", get)
	}
	creds, _ := e.mustRun("", "kv", "credentials", prj)
	if !strings.Contains(creds, "rest_url") || !strings.Contains(creds, "rediss://localhost:") || strings.Contains(creds, token) {
		t.Fatalf("kv credentials:\n%s", creds)
	}
	if _, _, err := e.run("", "kv", "cli", prj, "--", "PING"); err == nil || !strings.Contains(err.Error(), "token is required") {
		t.Fatalf("kv cli without a token: %v", err)
	}
	if out, _ := e.mustRun("", "kv", "cli", prj, "--token", token, "--", "SET", "greeting", "hello"); strings.TrimSpace(out) != "OK" {
		t.Fatalf("kv cli SET: %q", out)
	}
	t.Setenv("APPLIANCE_KV_TOKEN", token)
	if out, _ := e.mustRun("", "kv", "cli", prj, "--", "GET", "greeting"); strings.TrimSpace(out) != "hello" {
		t.Fatalf("kv cli GET: %q", out)
	}

	if _, _, err := e.run("", "kv", "rotate-token", prj); err == nil || !strings.Contains(err.Error(), "--confirm") {
		t.Fatalf("rotate-token without --confirm: %v", err)
	}
	out, _ := e.mustRun("", "kv", "rotate-token", prj, "--confirm")
	newToken := strings.TrimSpace(out)
	if !kvTokenRe.MatchString(newToken) || newToken == token {
		t.Fatalf("rotate-token printed %q", out)
	}
	if out, errOut, _ := e.run("", "kv", "cli", prj, "--", "GET", "greeting"); !strings.Contains(out+errOut, "WRONGPASS") && !strings.Contains(out+errOut, "NOAUTH") {
		t.Fatalf("the old token after rotation: %q %q", out, errOut)
	}
	t.Setenv("APPLIANCE_KV_TOKEN", newToken)
	if out, _ := e.mustRun("", "kv", "cli", prj, "--", "GET", "greeting"); strings.TrimSpace(out) != "hello" {
		t.Fatalf("kv cli GET with the new token: %q", out)
	}

	if _, _, err := e.run("", "kv", "flush", prj); err == nil || !strings.Contains(err.Error(), "--confirm") {
		t.Fatalf("flush without --confirm: %v", err)
	}
	e.mustRunJob("kv", "flush", prj, "--confirm", "--wait")
	if out, _ := e.mustRun("", "kv", "cli", prj, "--", "DBSIZE"); strings.TrimSpace(out) != "0" {
		t.Fatalf("DBSIZE after flush: %q", out)
	}
	e.mustRunJob("kv", "delete", prj, "--confirm", "--wait")
	if _, _, err := e.run("", "kv", "get", prj); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("kv get after delete: %v", err)
	}
}
