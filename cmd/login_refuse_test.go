package cmd

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/theappliance/appliance/api"
)

var userCodeRe = regexp.MustCompile(`Code: ([A-Z]{4}-[A-Z]{4})`)

// TestCLILoginRefused: the CLI prints a short code that the approval page's details show too; a login
// refused on the server ends the waiting CLI with a "refused" error (non-zero exit), saves no key, and can
// no longer be approved, from the API or from `login approve`.
func TestCLILoginRefused(t *testing.T) {
	e := setupCLI(t)
	login := e.start("", "login", "--api", e.url, "--ca-cert", e.caPath, "--device-name", "stolen laptop", "--poll-interval", "10ms")
	id := waitSession(t, login)
	waitFor(t, "the login's code", login, func() bool { return userCodeRe.MatchString(login.stdout.String()) })
	code := userCodeRe.FindStringSubmatch(login.stdout.String())[1]

	anon, err := newAPIClient(e.url, "", e.caPath)
	if err != nil {
		t.Fatal(err)
	}
	var sess struct {
		Token string `json:"token"`
	}
	if err := anon.do(t.Context(), http.MethodPost, "/v1/auth/sessions", map[string]any{"email": e.boot.Email, "password": e.boot.Password}, &sess); err != nil {
		t.Fatal(err)
	}
	cl := anon.withToken(sess.Token)
	base := "/v1/cli/login/sessions/" + id
	var det struct { // the fields this test reads (api.CLILoginDetails)
		State    string `json:"state"`
		UserCode string `json:"user_code"`
	}
	if err := cl.do(t.Context(), http.MethodGet, base+"/details", nil, &det); err != nil || det.UserCode != code || det.State != "pending" {
		t.Fatalf("details: %+v %v (the CLI printed %s)", det, err, code)
	}

	var res api.CLILoginResult
	if err := cl.do(t.Context(), http.MethodPost, base+"/refuse", nil, &res); err != nil || res.State != "refused" {
		t.Fatalf("refuse: %+v %v", res, err)
	}
	err = login.wait(t)
	if err == nil || !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), id) {
		t.Fatalf("the CLI of a refused login: %v\nstdout:\n%s", err, login.stdout)
	}
	if cfg := e.readCLIConfig(); cfg.APIKey != "" || cfg.PendingLogin != nil {
		t.Fatalf("config after a refused login: %+v", cfg)
	}

	// Refused stays refused: approving is a conflict, refusing again answers the same.
	if err := cl.do(t.Context(), http.MethodPost, base+"/authorize", nil, &res); apiStatus(err) != http.StatusConflict || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("authorize after refuse: %v", err)
	}
	if err := cl.do(t.Context(), http.MethodPost, base+"/refuse", nil, &res); err != nil || res.State != "refused" {
		t.Fatalf("refuse again: %+v %v", res, err)
	}
	_, _, err = e.run(e.boot.Password, "login", "approve", id, "--api", e.url, "--ca-cert", e.caPath, "--email", e.boot.Email, "--password-stdin")
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("login approve of a refused login: %v", err)
	}
	// An unknown login is 404.
	if err := cl.do(t.Context(), http.MethodPost, "/v1/cli/login/sessions/cli_00000000000000000000000000/refuse", nil, &res); apiStatus(err) != http.StatusNotFound {
		t.Fatalf("refuse of an unknown login: %v", err)
	}
}
