package cmd

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance"
)

// The Go side of ui/e2e/consa.mjs (issue 28's defects, run by TestDashboardEndToEnd): each answers what the
// page asks, and says what is wrong instead of failing, so the script reports every defect of a run.

// consaConnect answers "refused" when url does not connect (a password rotated away), else "connects".
func consaConnect(t *testing.T, url string) string {
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		return "refused"
	}
	conn.Close(context.Background())
	return "connects"
}

// consaCLILogin starts a CLI login for the page to refuse and answers "session code".
func consaCLILogin(t *testing.T, e *cliEnv) (*cliRun, string) {
	r := e.start("", "login", "--api", e.url, "--ca-cert", e.caPath, "--device-name", "refused laptop", "--poll-interval", "50ms")
	id := waitSession(t, r)
	waitFor(t, "the login's code", r, func() bool { return userCodeRe.MatchString(r.stdout.String()) })
	return r, id + " " + userCodeRe.FindStringSubmatch(r.stdout.String())[1]
}

// consaRefused answers "refused" when the CLI of the login the page refused stopped with a "refused" error
// and the login can no longer be authorized; else what is wrong.
func consaRefused(t *testing.T, e *cliEnv, p *appliance.Principal, r *cliRun, sessionID string) string {
	if r == nil {
		return "no CLI login was started"
	}
	if err := r.wait(t); err == nil || !strings.Contains(err.Error(), "refused") {
		return "the CLI of the refused login ended with: " + strings.ReplaceAll(strings.TrimSpace(r.stdout.String()), "\n", " / ")
	}
	if _, err := e.svc.Identity().AuthorizeCLILogin(t.Context(), p, sessionID); err == nil || !strings.Contains(err.Error(), "refused") {
		return "the refused login can still be authorized"
	}
	return "refused"
}
