package cmd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/integrations/deploya/deployatest"
	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/appliance/webhook"
	"github.com/theappliance/appliance/httpapi"
	"github.com/theappliance/appliance/scheduler"
)

// TestDashboardEndToEnd drives the dashboard in headless Chromium (ui/e2e/dashboard.mjs) against a real
// appliance: sign in, create a project and see it active, run select 1 with the connection string it
// shows, see a failed job's error, take a backup, create an API key (it works) and revoke it (it does
// not), add a member, watch the project's Monitoring tab (charts, top queries, an alert acknowledged, the
// live log), see where backups live and the WAL archiving on the Backups tab, approve a login started by the real CLI (which then has its key), sign out. Screenshots of every page at desktop and phone width go to the test's output directory
// (APPLIANCE_E2E_OUT, default ui/test-results/screenshots, which git ignores; the path is logged).
func TestDashboardEndToEnd(t *testing.T) {
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat("/usr/bin/chromium")
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the dashboard test needs node and /usr/bin/chromium: %v", err)
		}
		t.Skip("node or chromium missing")
	}
	// The webhook worker (started when the page asks for a receiver) fails each delivery's first attempt
	// quickly, then takes it.
	hookOpts := appliance.DefaultWebhookOptions
	hookOpts.Schedule, hookOpts.Poll = []time.Duration{300 * time.Millisecond, time.Second}, 50*time.Millisecond
	deployA := deployatest.Start(t, e2eDeployAToken, e2eDeployAProject) // ui/e2e/integrations.mjs's platform
	e := setupCLI(t, cliSetupOpts{instances: true, kv: true, webhooks: &hookOpts, integrationURLs: map[string]string{provider.DeployA: deployA.URL},
		limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}})
	e2eUpgradeTarget(t, e) // PostgreSQL 17 for ui/e2e/upgrades.mjs
	work := e2eScript(t)
	out := os.Getenv("APPLIANCE_E2E_OUT")
	if out == "" {
		if out, err = filepath.Abs(filepath.Join("..", "ui", "test-results", "screenshots")); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", out)

	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute) // a loaded machine (CI, parallel suites) is slow
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(work, "e2e", "dashboard.mjs"))
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "BASE_URL="+e.url, "EMAIL="+e.boot.Email, "PASSWORD="+e.boot.Password, "OUT_DIR="+out)
	stdin, _ := cmd.StdinPipe()
	stdoutPipe, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p, err := e.svc.Identity().Authenticate(t.Context(), e.boot.APIKey)
	if err != nil {
		t.Fatal(err)
	}
	var login, refusedLogin *cliRun
	hooks := &e2eHookReceiver{seen: map[string]int{}}
	answer := func(v string) { fmt.Fprintln(stdin, "ok "+v) }
	done := false
	sc := bufio.NewScanner(stdoutPipe)
	for sc.Scan() {
		line := sc.Text()
		what, arg, _ := strings.Cut(strings.TrimPrefix(line, "need "), " ")
		switch {
		case line == "done":
			done = true
		case strings.HasPrefix(line, "error "):
			t.Errorf("dashboard: %s", strings.TrimPrefix(line, "error "))
		case what == "select1":
			conn, err := pgx.Connect(t.Context(), arg)
			if err != nil {
				t.Fatalf("connect with the dashboard's connection string: %v", err)
			}
			var one int
			if err := conn.QueryRow(t.Context(), "select 1").Scan(&one); err != nil || one != 1 {
				t.Fatalf("select 1: %v", err)
			}
			conn.Close(context.Background())
			answer("")
		case what == "write" || what == "query": // "URL SQL": a statement, or a query that must return a row
			url, sql, _ := strings.Cut(arg, " ")
			conn, err := pgx.Connect(t.Context(), url)
			if err != nil {
				t.Fatalf("%s: connect: %v", what, err)
			}
			if what == "write" {
				_, err = conn.Exec(t.Context(), sql)
			} else {
				var v any
				err = conn.QueryRow(t.Context(), sql).Scan(&v)
			}
			conn.Close(context.Background())
			if err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
			answer("")
		case what == "key-works" || what == "key-revoked":
			want := map[string]int{"key-works": 200, "key-revoked": 401}[what]
			if _, err := e.svc.Identity().Authenticate(t.Context(), arg); (err == nil) != (want == 200) {
				t.Fatalf("%s: the key from the page authenticates: %v", what, err)
			}
			answer("")
		case what == "dump-file": // the export the page made, as a file to upload
			dumps, _ := filepath.Glob(filepath.Join(e.env.Dir, "backups", arg, "exports", "*.dump"))
			if len(dumps) == 0 {
				t.Fatalf("no export of %s on disk", arg)
			}
			answer(dumps[0])
		case what == "archived-sample": // the project's archive advanced, and the sampler read it
			archivedSample(t, e, arg)
			answer("")
		case what == "failed-job":
			answer(failImport(t, e, p, arg))
		case what == "webhook-receiver": // fails each delivery's first attempt, then takes it
			e.env.StartWebhooks(t)
			answer(e.env.Serve(t, hooks) + "/hooks")
		case what == "webhook-secret":
			hooks.secret.Store(&arg)
			answer("")
		case what == "webhook-verified":
			if n := hooks.verified.Load(); n < 1 {
				t.Fatalf("the receiver verified %d deliveries with the secret the page showed", n)
			}
			answer("")
		case what == "kv-works": // the token the page showed, from a Redis client through the RESP front
			c := e.kvClient(t, arg)
			if err := c.Set(t.Context(), "hello", "world", 0).Err(); err != nil {
				t.Fatalf("the token the page showed: %v", err)
			}
			answer("")
		case what == "kv-rotated":
			old, rotated, _ := strings.Cut(arg, " ")
			if err := e.kvClient(t, old).Ping(t.Context()).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
				t.Fatalf("the token before the page's rotation: %v", err)
			}
			if v, err := e.kvClient(t, rotated).Get(t.Context(), "hello").Result(); err != nil || v != "world" {
				t.Fatalf("the rotated token: %q %v", v, err)
			}
			answer("")
		case what == "kv-empty":
			c := e.kvClient(t, arg)
			waitCLI(t, func() bool { n, err := c.DBSize(t.Context()).Result(); return err == nil && n == 0 })
			answer("")
		case what == "ephemeral": // a database made with no account, ready; the page opens its claim_url
			c, err := e.svc.Previews().CreateEphemeral(t.Context(), "192.0.2.9", &api.CreateEphemeralRequest{Name: "claimed scratch"})
			if err != nil {
				t.Fatal(err)
			}
			waitCLI(t, func() bool {
				g, err := e.svc.Previews().GetEphemeral(t.Context(), c.EphemeralDatabase.ProjectID, c.ClaimToken)
				return err == nil && g.Connections != nil
			})
			u, err := url.Parse(c.ClaimURL)
			if err != nil {
				t.Fatal(err)
			}
			answer(u.Path + "#" + u.Fragment)
		case what == "create-project":
			if _, err := e.svc.CreateProject(t.Context(), p, &api.CreateProjectRequest{Name: arg, Environment: "development"}); err != nil {
				t.Fatalf("create project: %v", err)
			}
			answer(arg)
		case what == "monitoring": // a history, top queries, an alert and a running statement for the Monitoring tab
			monitoringData(t, e, p, arg)
			answer("")
		case what == "alert-acknowledged":
			alertAcknowledged(t, e, p, arg)
			answer("")
		case what == "log-marker": // "project marker": a line in the project's server log
			id, marker, _ := strings.Cut(arg, " ")
			logMarker(t, e, id, marker)
			answer("")
		case what == "cli-login":
			login = e.start("", "login", "--api", e.url, "--ca-cert", e.caPath, "--device-name", "e2e laptop", "--poll-interval", "50ms")
			answer(waitSession(t, login))
		case what == "consa-connect": // ui/e2e/consa.mjs (cmd/dashboard_consa_test.go)
			answer(consaConnect(t, arg))
		case what == "consa-cli-login":
			var code string
			refusedLogin, code = consaCLILogin(t, e)
			answer(code)
		case what == "consa-cli-refused":
			answer(consaRefused(t, e, p, refusedLogin, arg))
		case what == "home-data": // ui/e2e/home.mjs (cmd/dashboard_home_test.go)
			homeData(t, e, arg)
			answer("")
		case what == "home-started":
			answer(homeStarted(t, e, arg))
		case what == "zero-suspended": // ui/e2e/zero.mjs (cmd/dashboard_zero_test.go)
			zeroSuspended(t, e, p, arg)
			answer("")
		case what == "palette-invite": // ui/e2e/palette.mjs (cmd/dashboard_palette_test.go)
			answer(paletteInvite(t, e, p))
		case what == "palette-joined":
			answer(paletteJoined(t, e, p))
		case what == "operator" || what == "operator-suspended": // ui/e2e/operator.mjs (cmd/dashboard_operator_test.go)
			answer(operatorStep(t, e, what, arg))
		case strings.HasPrefix(what, "programs-"): // ui/e2e/programs.mjs (cmd/dashboard_programs_test.go)
			answer(programsStep(t, e, what, arg))
		case strings.HasPrefix(what, "plans-"): // ui/e2e/plans.mjs (cmd/dashboard_plans_test.go)
			answer(plansStep(t, e, what, arg))
		case strings.HasPrefix(what, "signup-"): // ui/e2e/signup.mjs (cmd/dashboard_signup_test.go)
			answer(signupStep(t, e, what, arg))
		case strings.HasPrefix(what, "integrations-"): // ui/e2e/integrations.mjs (cmd/dashboard_integrations_test.go)
			answer(integrationsStep(t, e, deployA, what, arg))
		case what == "cli-key":
			if err := login.wait(t); err != nil {
				t.Fatalf("the CLI login the dashboard approved: %v\n%s", err, login.stderr)
			}
			if key := e.readCLIConfig().APIKey; !strings.Contains(key, "_live_") {
				t.Fatalf("the CLI has no key after approval: %q", key)
			}
			answer("")
		default:
			t.Logf("dashboard: %s", line)
		}
	}
	err = cmd.Wait()
	if err != nil || !done {
		t.Fatalf("dashboard script: %v\n%s", err, stderr.String())
	}
	for _, page := range []string{"docs", "signin", "projects-empty", "project", "project-backups", "project-backups-archiving", "project-exports", "project-extensions",
		"project-settings", "project-audit", "project-imports", "project-monitoring", "projects", "api-keys", "members", "webhooks", "overview", "account", "cli-login", "palette", "project-audit-filtered", "invitation"} {
		for _, w := range []string{"desktop", "phone"} {
			if st, err := os.Stat(filepath.Join(out, page+"-"+w+".png")); err != nil || st.Size() < 1000 {
				t.Errorf("screenshot %s-%s: %v", page, w, err)
			}
		}
	}
}

// archivedSample waits until the project's server archived a WAL file (its backup ended a segment), then
// runs a sampling sweep, so the Backups tab shows the archiving as read.
func archivedSample(t *testing.T, e *cliEnv, projectID string) {
	t.Helper()
	waitCLI(t, func() bool {
		var n int64
		err := e.svc.AdminQueryRow(t.Context(), projectID, "SELECT archived_count FROM pg_stat_archiver", nil, &n)
		return err == nil && n > 0
	})
	if res, err := e.svc.Observe().Sample(t.Context()); err != nil || res.Failed != 0 || res.Projects == 0 {
		t.Fatalf("sample: %+v %v", res, err)
	}
}

// e2eHookReceiver answers 500 to each delivery's first attempt and 204 after, and counts the deliveries
// whose signature verifies with the secret the page showed.
type e2eHookReceiver struct {
	mu       sync.Mutex
	seen     map[string]int
	secret   atomic.Pointer[string]
	verified atomic.Int64
}

func (h *e2eHookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	h.seen[r.Header.Get("webhook-id")]++
	n := h.seen[r.Header.Get("webhook-id")]
	h.mu.Unlock()
	if n == 1 {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	if s := h.secret.Load(); s != nil && webhook.Verify(*s, r.Header, body, time.Now(), 5*time.Minute) == nil {
		h.verified.Add(1)
	}
	w.WriteHeader(http.StatusNoContent)
}

// e2eScript copies the dashboard's package files and e2e scripts to a temp dir and installs
// playwright-core there (npm ci; the browser is Debian's chromium, never downloaded).
func e2eScript(t *testing.T) string {
	t.Helper()
	work := t.TempDir()
	for _, name := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join("..", "ui", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.CopyFS(filepath.Join(work, "e2e"), os.DirFS(filepath.Join("..", "ui", "e2e"))); err != nil {
		t.Fatal(err)
	}
	npm := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	npm.Dir = work
	npm.Env = append(os.Environ(), "NO_UPDATE_NOTIFIER=1")
	if b, err := npm.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, b)
	}
	return work
}

// failImport makes a real job fail: a file that is not a dump, uploaded and imported. It returns a piece
// of the job's error for the page to show.
func failImport(t *testing.T, e *cliEnv, p *appliance.Principal, projectID string) string {
	t.Helper()
	up, err := e.svc.Migrate().CreateUpload(t.Context(), p, projectID)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("PUT", up.Upload.UploadURL, strings.NewReader("PGDMP this is not a dump at all"))
	cl, err := newAPIClient(e.url, "", e.caPath)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cl.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("upload: %d %s", res.StatusCode, body)
	}
	jr, err := e.svc.Migrate().CreateImport(t.Context(), p, projectID, &api.ImportRequest{Confirm: true, UploadID: up.Upload.ID})
	if err != nil {
		t.Fatal(err)
	}
	j := e.env.WaitJob(t, jr.Job.ID)
	if j.State != scheduler.StateFailed || j.Error == "" {
		t.Fatalf("the import of a non-dump: %s %q", j.State, j.Error)
	}
	marker := j.Error
	if len(marker) > 40 {
		marker = marker[:40]
	}
	return marker
}

// kvClient is a go-redis client of the test's RESP front with token (verify-full against the CA).
func (e *cliEnv) kvClient(t *testing.T, token string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: e.kvAddr, Password: token, MaxRetries: -1,
		TLSConfig: &tls.Config{RootCAs: e.env.CA.Pool(), ServerName: "localhost"}})
	t.Cleanup(func() { c.Close() })
	return c
}
