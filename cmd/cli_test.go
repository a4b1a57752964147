package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/identity"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/httpapi"
	"github.com/theappliance/appliance/store"
	"github.com/theappliance/appliance/ui"
)

// cliEnv is a real appliance API served over HTTPS with a certificate from a local CA, and an isolated
// CLI config for the client commands under test.
type cliEnv struct {
	t       *testing.T
	env     *appliancetest.Env
	svc     *appliance.Service
	url     string
	caPath  string
	boot    *appliance.Bootstrap
	cfgPath string
	kvAddr  string // the RESP front (with cliSetupOpts.kv)
}

type cliSetupOpts struct {
	clock  func() time.Time
	limits httpapi.RateLimits
	// instances starts the data plane and the job runner: projects become real PostgreSQL instances.
	instances bool
	// kv starts the key-value fronts (RESP and REST) as up does.
	kv bool
	// webhooks tune the webhook worker the test may start (env.StartWebhooks; nil: the defaults).
	webhooks *appliance.WebhookOptions
	// metricsToken is the API's metrics token (up --metrics-token): /status's details for its bearer.
	metricsToken string
	// integrationURLs are the integration providers' API base URLs (local fakes).
	integrationURLs map[string]string
}

func setupCLI(t *testing.T, opts ...cliSetupOpts) *cliEnv {
	t.Helper()
	o := cliSetupOpts{limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}}
	if len(opts) > 0 {
		o = opts[0]
	}
	// The listener first: the service hands out signed URLs under the API's real address.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	env := appliancetest.New(t, appliancetest.Options{Instances: o.instances, APIURL: "https://" + ln.Addr().String(), IntegrationBaseURLs: o.integrationURLs, // the same stack every API test runs on
		Webhooks: o.webhooks})
	svc, ca, boot := env.Svc, env.CA, env.Bootstrap
	if o.clock != nil {
		env.Clock.Set(o.clock)
	}
	tlsCfg, err := ca.ServerTLS("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	api := httpapi.New(svc, httpapi.Options{Log: logger, Limits: o.limits, Lane: env.Lane, MetricsToken: o.metricsToken})
	ts := httptest.NewUnstartedServer(ui.Mount(api))
	ts.Listener.Close()
	ts.Listener = ln
	ts.TLS = tlsCfg
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // handshake failures are expected in the TLS test
	ts.StartTLS()
	t.Cleanup(func() { api.Close(); ts.Close() })

	kvAddr := ""
	if o.kv {
		kvAddr = env.StartKVFronts(t).RESP.ListenAddr()
	}
	e := &cliEnv{t: t, env: env, svc: svc, url: ts.URL, caPath: ca.CertPath(), boot: boot, kvAddr: kvAddr,
		cfgPath: filepath.Join(t.TempDir(), "cli", "config.json")}
	t.Setenv("APPLIANCE_CONFIG", e.cfgPath)
	t.Setenv("APPLIANCE_DATA_DIR", t.TempDir()) // no local appliance (the machine's must not answer)
	for _, v := range []string{"APPLIANCE_API_URL", "APPLIANCE_API_KEY", "APPLIANCE_CA_CERT", "APPLIANCE_PASSWORD", "APPLIANCE_EMAIL"} {
		t.Setenv(v, "")
	}
	return e
}

// login points the CLI at the test's appliance with the bootstrap admin key, and returns its principal.
func (e *cliEnv) login(t *testing.T) *appliance.Principal {
	t.Helper()
	t.Setenv("APPLIANCE_API_URL", e.url)
	t.Setenv("APPLIANCE_CA_CERT", e.caPath)
	t.Setenv("APPLIANCE_API_KEY", e.boot.APIKey)
	p, err := e.svc.Identity().Authenticate(t.Context(), e.boot.APIKey)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// activeProject provisions a development project and waits until it is active; it returns its id.
func (e *cliEnv) activeProject(t *testing.T, p *appliance.Principal, name string) string {
	t.Helper()
	res, err := e.svc.CreateProject(t.Context(), p, &api.CreateProjectRequest{Name: name, Environment: "development"})
	if err != nil {
		t.Fatal(err)
	}
	if j := e.env.WaitJob(t, res.Job.ID); j.State != "completed" {
		t.Fatalf("provision %s: %s", name, j.Error)
	}
	return res.Project.ID
}

// syncBuffer is a bytes.Buffer safe for a command writing while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newCLIRoot is a fresh command tree with the client commands, so that commands can run concurrently
// and flag values never leak from one run to the next.
func newCLIRoot() *cobra.Command {
	r := &cobra.Command{Use: "appliance", SilenceUsage: true, SilenceErrors: true}
	addClientCommands(r)
	r.AddCommand(newOperatorsCmd()) // a local command, run in the CLI tests too
	return r
}

type cliRun struct {
	stdout, stderr *syncBuffer
	done           chan error
}

// start runs the command line in a goroutine.
func (e *cliEnv) start(stdin string, args ...string) *cliRun {
	return e.startCtx(e.t.Context(), stdin, args...)
}

// startCtx is start with a context that ends the command.
func (e *cliEnv) startCtx(ctx context.Context, stdin string, args ...string) *cliRun {
	r := &cliRun{stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan error, 1)}
	c := newCLIRoot()
	c.SetArgs(args)
	c.SetIn(strings.NewReader(stdin))
	c.SetOut(r.stdout)
	c.SetErr(r.stderr)
	go func() { r.done <- c.ExecuteContext(ctx) }()
	return r
}

// wait returns the command's error, failing the test if it does not end.
func (r *cliRun) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("command did not finish\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		return nil
	}
}

// run runs the command line to its end.
func (e *cliEnv) run(stdin string, args ...string) (stdout, stderr string, err error) {
	e.t.Helper()
	r := e.start(stdin, args...)
	err = r.wait(e.t)
	return r.stdout.String(), r.stderr.String(), err
}

// mustRun runs the command line and fails the test on error.
func (e *cliEnv) mustRun(stdin string, args ...string) (stdout, stderr string) {
	e.t.Helper()
	stdout, stderr, err := e.run(stdin, args...)
	if err != nil {
		e.t.Fatalf("appliance %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout, stderr)
	}
	return stdout, stderr
}

// waitFor polls cond until it holds; it fails early if the background command ended.
func waitFor(t *testing.T, what string, r *cliRun, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		select {
		case err := <-r.done:
			t.Fatalf("waiting for %s: command ended (err %v)\nstdout:\n%s\nstderr:\n%s", what, err, r.stdout, r.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s\nstdout:\n%s\nstderr:\n%s", what, r.stdout, r.stderr)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var sessionIDRe = regexp.MustCompile(`cli_[0-9a-z]{26}`)

// waitSession waits until the login command printed its session id.
func waitSession(t *testing.T, r *cliRun) string {
	t.Helper()
	waitFor(t, "the login session id", r, func() bool { return sessionIDRe.MatchString(r.stdout.String()) })
	return sessionIDRe.FindString(r.stdout.String())
}

// readCLIConfig reads the config file, checking its mode and its directory's.
func (e *cliEnv) readCLIConfig() *cliConfig {
	e.t.Helper()
	fi, err := os.Stat(e.cfgPath)
	if err != nil {
		e.t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		e.t.Errorf("config mode %v, want 0600", fi.Mode().Perm())
	}
	di, err := os.Stat(filepath.Dir(e.cfgPath))
	if err != nil {
		e.t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		e.t.Errorf("config dir mode %v, want 0700", di.Mode().Perm())
	}
	b, err := os.ReadFile(e.cfgPath)
	if err != nil {
		e.t.Fatal(err)
	}
	var cfg cliConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		e.t.Fatalf("config is not JSON: %v\n%s", err, b)
	}
	return &cfg
}

func (e *cliEnv) orgName() string {
	e.t.Helper()
	p, err := e.svc.Identity().Authenticate(e.t.Context(), e.boot.APIKey)
	if err != nil {
		e.t.Fatal(err)
	}
	me, err := e.svc.Identity().Me(e.t.Context(), p)
	if err != nil {
		e.t.Fatal(err)
	}
	return me.Organization.Name
}

func TestCLILoginDeviceFlow(t *testing.T) {
	e := setupCLI(t)
	org := e.orgName()

	login := e.start("", "login", "--api", e.url, "--ca-cert", e.caPath, "--device-name", "test laptop", "--poll-interval", "10ms")
	id := waitSession(t, login)
	out := login.stdout.String()
	for _, want := range []string{
		"Open " + e.url + "/cli/login/" + id + " in a signed-in browser",
		"appliance login approve " + id + " --api " + e.url,
		"--email <you>",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("login output lacks %q:\n%s", want, out)
		}
	}

	approveOut, _ := e.mustRun(e.boot.Password+"\n", "login", "approve", id, "--api", e.url, "--ca-cert", e.caPath,
		"--email", e.boot.Email, "--password-stdin")
	for _, want := range []string{"test laptop", "CLI on test laptop", "projects:read", "Approved login session " + id, org + " (" + e.boot.OrganizationID + ")", "state: authorized"} {
		if !strings.Contains(approveOut, want) {
			t.Errorf("approve output lacks %q:\n%s", want, approveOut)
		}
	}

	if err := login.wait(t); err != nil {
		t.Fatalf("login: %v\nstdout:\n%s\nstderr:\n%s", err, login.stdout, login.stderr)
	}
	out = login.stdout.String()
	if want := "Logged in to organization " + org + " (" + e.boot.OrganizationID + ")"; !strings.Contains(out, want) {
		t.Errorf("login output lacks %q:\n%s", want, out)
	}

	cfg := e.readCLIConfig()
	if cfg.APIURL != e.url || !strings.Contains(cfg.APIKey, "_live_") || cfg.PendingLogin != nil {
		t.Fatalf("config = %+v", cfg)
	}
	for _, s := range []string{out, login.stderr.String(), approveOut} {
		if strings.Contains(s, cfg.APIKey) {
			t.Errorf("the API key was printed:\n%s", s)
		}
	}
	// The CA was copied next to the config so the login survives the server's data dir moving.
	if filepath.Dir(cfg.CACert) != filepath.Dir(e.cfgPath) {
		t.Errorf("ca_cert %q is not in the config dir", cfg.CACert)
	}
	want, _ := os.ReadFile(e.caPath)
	if got, err := os.ReadFile(cfg.CACert); err != nil || !bytes.Equal(got, want) {
		t.Errorf("saved CA differs from the server's (err %v)", err)
	}
	p, err := e.svc.Identity().Authenticate(t.Context(), cfg.APIKey)
	if err != nil || p.OrganizationID != e.boot.OrganizationID || p.APIKeyID == "" {
		t.Fatalf("saved key authenticates as %+v, %v", p, err)
	}

	// whoami with nothing but the config.
	whoami, _ := e.mustRun("", "whoami")
	for _, want := range []string{org + " (" + e.boot.OrganizationID + ")", "api_key (" + p.APIKeyID + ")", "organizations:read"} {
		if !strings.Contains(whoami, want) {
			t.Errorf("whoami lacks %q:\n%s", want, whoami)
		}
	}
	raw, _ := e.mustRun("", "whoami", "--json")
	var me struct {
		Organization struct{ Name string } `json:"organization"`
		Principal    struct {
			OrganizationID string `json:"organization_id"`
		} `json:"principal"`
	}
	if err := json.Unmarshal([]byte(raw), &me); err != nil || me.Principal.OrganizationID != e.boot.OrganizationID || me.Organization.Name != org {
		t.Fatalf("whoami --json = %s (%v)", raw, err)
	}

	// The session is completed: approving it again is refused.
	_, _, err = e.run(e.boot.Password, "login", "approve", id, "--email", e.boot.Email, "--password-stdin")
	if err == nil || !strings.Contains(err.Error(), "completed") {
		t.Errorf("second approve: %v", err)
	}
}

func TestCLILoginNoWaitResume(t *testing.T) {
	e := setupCLI(t)
	t.Setenv("APPLIANCE_CA_CERT", e.caPath)
	out, _ := e.mustRun("", "login", "--api", e.url, "--no-wait")
	id := sessionIDRe.FindString(out)
	if id == "" || !strings.Contains(out, "appliance login --resume") {
		t.Fatalf("login --no-wait output:\n%s", out)
	}
	cfg := e.readCLIConfig()
	if cfg.PendingLogin == nil || cfg.PendingLogin.SessionID != id || cfg.APIKey != "" {
		t.Fatalf("config after --no-wait = %+v", cfg)
	}

	// Resuming before approval waits; a short timeout ends it.
	_, _, err := e.run("", "login", "--resume", "--poll-interval", "10ms", "--timeout", "50ms")
	if err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("resume before approval: %v", err)
	}

	t.Setenv("APPLIANCE_PASSWORD", e.boot.Password)
	e.mustRun("", "login", "approve", id, "--api", e.url, "--email", e.boot.Email)

	t.Setenv("APPLIANCE_CA_CERT", "") // the pending login carries the CA
	out, _ = e.mustRun("", "login", "--resume", "--poll-interval", "10ms")
	if !strings.Contains(out, "Logged in to organization") {
		t.Fatalf("resume output:\n%s", out)
	}
	cfg = e.readCLIConfig()
	if cfg.PendingLogin != nil || !strings.Contains(cfg.APIKey, "_live_") || cfg.CACert == "" {
		t.Fatalf("config after resume = %+v", cfg)
	}
	if _, err := e.svc.Identity().Authenticate(t.Context(), cfg.APIKey); err != nil {
		t.Fatal(err)
	}
}

func TestCLILoginExpired(t *testing.T) {
	var offset atomic.Int64
	e := setupCLI(t, cliSetupOpts{
		clock:  func() time.Time { return time.Now().Add(time.Duration(offset.Load())) },
		limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6},
	})
	login := e.start("", "login", "--api", e.url, "--ca-cert", e.caPath, "--poll-interval", "10ms")
	id := waitSession(t, login)
	offset.Store(int64(identity.CLILoginTTL + time.Minute))
	err := login.wait(t)
	if err == nil || !strings.Contains(err.Error(), "expired") || !strings.Contains(err.Error(), id) {
		t.Fatalf("login of an expired session: %v\nstdout:\n%s", err, login.stdout)
	}
	if strings.Contains(login.stdout.String(), "Logged in") {
		t.Fatalf("login claims success:\n%s", login.stdout)
	}
	if cfg := e.readCLIConfig(); cfg.APIKey != "" {
		t.Fatalf("config got a key: %+v", cfg)
	}
	// Approving the expired session is refused too.
	_, _, err = e.run(e.boot.Password, "login", "approve", id, "--api", e.url, "--ca-cert", e.caPath, "--email", e.boot.Email, "--password-stdin")
	if err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("approve of an expired session: %v", err)
	}
}

func TestCLILoginHonoursRetryAfter(t *testing.T) {
	// Strict bucket: 2 requests, then 1 per second. Start and the first poll pass; the next poll is refused
	// with Retry-After: 1.
	e := setupCLI(t, cliSetupOpts{limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1, StrictBurst: 2}})
	login := e.start("", "login", "--api", e.url, "--ca-cert", e.caPath, "--poll-interval", "1ms")
	id := waitSession(t, login)
	waitFor(t, "a rate-limited poll", login, func() bool { return strings.Contains(login.stderr.String(), "Rate limited") })

	// Approve directly in the service (the HTTP sign-in shares the exhausted strict bucket).
	sess, err := e.svc.Identity().CreateSession(t.Context(), &api.SessionRequest{Email: e.boot.Email, Password: e.boot.Password})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.svc.Identity().Authenticate(t.Context(), sess.Token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Identity().AuthorizeCLILogin(t.Context(), p, id); err != nil {
		t.Fatal(err)
	}
	if err := login.wait(t); err != nil {
		t.Fatalf("login: %v\nstderr:\n%s", err, login.stderr)
	}
	stderr := login.stderr.String()
	// Polling every millisecond while ignoring Retry-After would be refused hundreds of times.
	if n := strings.Count(stderr, "Rate limited"); n > 3 {
		t.Errorf("%d rate-limited polls; Retry-After was not honoured:\n%s", n, stderr)
	}
	if !strings.Contains(stderr, "polling again in 1s") {
		t.Errorf("stderr does not show the Retry-After wait:\n%s", stderr)
	}
	if !strings.Contains(login.stdout.String(), "Logged in to organization") {
		t.Errorf("login output:\n%s", login.stdout)
	}
}

func TestCLIAPIKeysCreateListRevoke(t *testing.T) {
	e := setupCLI(t)
	t.Setenv("APPLIANCE_API_URL", e.url)
	t.Setenv("APPLIANCE_CA_CERT", e.caPath)
	t.Setenv("APPLIANCE_API_KEY", e.boot.APIKey)

	stdout, stderr := e.mustRun("", "api-keys", "create", "--name", "ci key", "--scope", "projects:read",
		"--scope", "jobs:read,organizations:read", "--expires-in-days", "7")
	key := strings.TrimSpace(stdout)
	if !strings.Contains(key, "_live_") || strings.Contains(key, "\n") {
		t.Fatalf("create stdout is not the key alone: %q", stdout)
	}
	if !strings.Contains(stderr, "only time the key is shown") {
		t.Errorf("create does not warn:\n%s", stderr)
	}
	keyID := regexp.MustCompile(`key_[0-9a-z]{26}`).FindString(stderr)
	if keyID == "" {
		t.Fatalf("create does not name the key id:\n%s", stderr)
	}

	list, _ := e.mustRun("", "api-keys", "list")
	row := lineWith(list, keyID)
	for _, want := range []string{"ci key", "projects:read,jobs:read,organizations:read", " yes ", "never"} {
		if !strings.Contains(row, want) {
			t.Errorf("list row lacks %q: %q\n%s", want, row, list)
		}
	}
	if !strings.HasPrefix(list, "ID") || strings.Contains(list, key) || strings.Contains(list, e.boot.APIKey) {
		t.Errorf("list output:\n%s", list)
	}
	if row := lineWith(list, "bootstrap admin key"); !strings.Contains(row, " all ") {
		t.Errorf("the bootstrap key (every scope) is not listed with scopes \"all\":\n%s", list)
	}

	who, _ := e.mustRun("", "whoami", "--api-key", key)
	if !strings.Contains(who, "projects:read, jobs:read, organizations:read") || !strings.Contains(who, keyID) {
		t.Errorf("whoami with the new key:\n%s", who)
	}

	out, _ := e.mustRun("", "api-keys", "revoke", keyID, "--org", e.boot.OrganizationID)
	if !strings.Contains(out, "Revoked API key "+keyID) {
		t.Errorf("revoke output: %s", out)
	}
	list, _ = e.mustRun("", "api-keys", "list")
	if row := lineWith(list, keyID); !strings.Contains(row, "revoked") {
		t.Errorf("revoked key row: %q", row)
	}
	_, _, err := e.run("", "whoami", "--api-key", key)
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("whoami with a revoked key: %v", err)
	}
	out, _ = e.mustRun("", "api-keys", "revoke", keyID)
	if !strings.Contains(out, "already revoked") {
		t.Errorf("second revoke: %s", out)
	}

	// API errors carry the status and the API's message.
	_, _, err = e.run("", "api-keys", "create", "--name", "x", "--scope", "no:such")
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), `unknown scope "no:such"`) {
		t.Errorf("create with a bad scope: %v", err)
	}
	_, _, err = e.run("", "api-keys", "revoke", "key_missing")
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("revoke of a missing key: %v", err)
	}
}

func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

func TestCLIWhoamiTLSAndCredentials(t *testing.T) {
	e := setupCLI(t)
	// Without the CA the appliance's certificate is not trusted.
	_, _, err := e.run("", "whoami", "--api", e.url, "--api-key", e.boot.APIKey)
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("whoami without the CA: %v", err)
	}
	// Without a key: advice, no request.
	_, _, err = e.run("", "whoami", "--api", e.url, "--ca-cert", e.caPath)
	if err == nil || !strings.Contains(err.Error(), "not logged in") {
		t.Fatalf("whoami without a key: %v", err)
	}
	// Without an API URL.
	_, _, err = e.run("", "whoami")
	if err == nil || !strings.Contains(err.Error(), "no API URL") {
		t.Fatalf("whoami without an API URL: %v", err)
	}
	// A wrong key: 401.
	_, _, err = e.run("", "whoami", "--api", e.url, "--ca-cert", e.caPath, "--api-key", "apl_live_nope")
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("whoami with a wrong key: %v", err)
	}
	// Inline PEM works as --ca-cert too.
	pemBytes, _ := os.ReadFile(e.caPath)
	out, _ := e.mustRun("", "whoami", "--api", e.url, "--ca-cert", string(pemBytes), "--api-key", e.boot.APIKey)
	if !strings.Contains(out, e.boot.OrganizationID) {
		t.Fatalf("whoami:\n%s", out)
	}

	// The saved key is never sent to another API than the one it was saved for.
	if err := saveConfig(&cliConfig{APIURL: e.url, APIKey: e.boot.APIKey, CACert: e.caPath}); err != nil {
		t.Fatal(err)
	}
	e.mustRun("", "whoami")
	_, _, err = e.run("", "whoami", "--api", "https://localhost:1")
	if err == nil || !strings.Contains(err.Error(), "not logged in to https://localhost:1") {
		t.Fatalf("whoami against another API: %v", err)
	}
	// A password sign-in failure is reported with its status.
	_, _, err = e.run("wrong password", "login", "approve", "cli_x", "--email", e.boot.Email, "--password-stdin")
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("approve with a wrong password: %v", err)
	}
}

// The package's real root command carries the client commands and flags.
func TestCLIRootRegistersClientCommands(t *testing.T) {
	e := setupCLI(t)
	for _, path := range [][]string{{"login"}, {"login", "approve"}, {"whoami"}, {"api-keys", "list"}, {"api-keys", "create"}, {"api-keys", "revoke"},
		{"projects", "list"}, {"projects", "get"}, {"projects", "create"}, {"projects", "delete"}, {"projects", "connections"},
		{"backups", "list"}, {"backups", "create"}, {"restore"}, {"restore-points", "list"}, {"restore-points", "create"},
		{"restore-points", "delete"}, {"users", "list"}, {"users", "add"}, {"users", "set-role"}, {"users", "remove"}, {"users", "password"}} {
		c, _, err := root.Find(path)
		if err != nil || c.Name() != path[len(path)-1] {
			t.Errorf("root.Find(%v) = %v, %v", path, c, err)
		}
	}
	for _, f := range []string{"api", "api-key", "ca-cert"} {
		if root.PersistentFlags().Lookup(f) == nil {
			t.Errorf("root lacks --%s", f)
		}
	}
	var out bytes.Buffer
	root.SetArgs([]string{"whoami", "--json", "--api", e.url, "--ca-cert", e.caPath, "--api-key", e.boot.APIKey})
	root.SetOut(&out)
	t.Cleanup(func() { root.SetArgs(nil); root.SetOut(nil) })
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"organization_id": "`+e.boot.OrganizationID+`"`) {
		t.Fatalf("whoami --json:\n%s", out.String())
	}
}

func TestCLIParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"": 0, "3": 3 * time.Second, "-1": 0, "soon": 0,
		now.Add(90 * time.Second).Format("Mon, 02 Jan 2006 15:04:05 GMT"): 90 * time.Second,
	} {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}

// ---- projects, backups and restores ----------------------------------------------------------------

// cliJobDeadline bounds a command that waits for jobs on real instances (provision, backup, restore) on a
// slow, shared machine.
const cliJobDeadline = 5 * time.Minute

// mustRunJob is mustRun for a command that waits for a job.
func (e *cliEnv) mustRunJob(args ...string) (stdout, stderr string) {
	e.t.Helper()
	r := e.start("", args...)
	select {
	case err := <-r.done:
		if err != nil {
			e.t.Fatalf("appliance %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, r.stdout, r.stderr)
		}
	case <-time.After(cliJobDeadline):
		e.t.Fatalf("appliance %s did not finish in %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), cliJobDeadline, r.stdout, r.stderr)
	}
	return r.stdout.String(), r.stderr.String()
}

var (
	projectIDRe = regexp.MustCompile(`prj_[0-9a-z]{26}`)
	jobIDRe     = regexp.MustCompile(`job_[0-9a-z]{26}`)
)

// cliQuery runs SQL on a connection URL and returns the first column of the first row as text.
func cliQuery(t *testing.T, connURL, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, connURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	var out string
	if err := conn.QueryRow(ctx, sql).Scan(&out); err != nil && err != pgx.ErrNoRows {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// The CLI drives a project's whole life on real instances: create --wait, list, get, connections, a backup,
// a restore point, a restore to the backup, and deletes of a development and of a production project.
func TestCLIProjectsBackupsRestore(t *testing.T) {
	e := setupCLI(t, cliSetupOpts{instances: true,
		limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}})
	t.Setenv("APPLIANCE_API_URL", e.url)
	t.Setenv("APPLIANCE_CA_CERT", e.caPath)
	t.Setenv("APPLIANCE_API_KEY", e.boot.APIKey)

	out, _ := e.mustRunJob("projects", "create", "scratch db", "--environment", "development", "--wait")
	id, jobID := projectIDRe.FindString(out), jobIDRe.FindString(out)
	if id == "" || jobID == "" {
		t.Fatalf("create does not print the project and job IDs:\n%s", out)
	}
	for _, want := range []string{"Creating project " + id + " (scratch db), development, plan free",
		"Job " + jobID + " (project.provision) completed.", "Project " + id + " (scratch db) is active (runtime active)."} {
		if !strings.Contains(out, want) {
			t.Errorf("create --wait output lacks %q:\n%s", want, out)
		}
	}

	list, _ := e.mustRun("", "projects", "list")
	if !strings.HasPrefix(list, "ID  ") || !strings.Contains(list, "RUNTIME") || !strings.Contains(list, "VERSION") {
		t.Errorf("list header:\n%s", list)
	}
	row := lineWith(list, id)
	for _, want := range []string{"scratch db", " active ", " development ", " free ", " 15"} {
		if !strings.Contains(row, want) {
			t.Errorf("list row lacks %q: %q", want, row)
		}
	}

	got, _ := e.mustRun("", "projects", "get", id)
	for _, want := range []string{id, "scratch_db", "active (runtime active)", "free (max_connections 20, storage 1.0 GiB)"} {
		if !strings.Contains(got, want) {
			t.Errorf("get lacks %q:\n%s", want, got)
		}
	}
	raw, _ := e.mustRun("", "projects", "get", id, "--json")
	var pr api.ProjectResponse
	if err := json.Unmarshal([]byte(raw), &pr); err != nil || pr.Project == nil || pr.Project.ID != id || pr.Project.State != "active" {
		t.Fatalf("get --json = %s (%v)", raw, err)
	}

	conns, _ := e.mustRun("", "projects", "connections", id)
	direct := strings.TrimSpace(strings.TrimPrefix(lineWith(conns, "Direct:"), "Direct:"))
	if !strings.HasPrefix(direct, "postgresql://") || !strings.Contains(direct, "sslmode=verify-full") ||
		!strings.Contains(lineWith(conns, "Pooled:"), "sslmode=verify-full") {
		t.Fatalf("connections:\n%s", conns)
	}
	raw, _ = e.mustRun("", "projects", "connections", id, "--json")
	var cr api.ConnectionsResponse
	if err := json.Unmarshal([]byte(raw), &cr); err != nil || cr.Connections.DirectURL != direct {
		t.Fatalf("connections --json = %s (%v)", raw, err)
	}
	cliQuery(t, direct, "CREATE TABLE items (v int PRIMARY KEY)")
	cliQuery(t, direct, "INSERT INTO items VALUES (1)")

	out, _ = e.mustRunJob("backups", "create", id, "--label", "first", "--wait")
	m := regexp.MustCompile(`Backup (\S+) \(key (\S+)\): .*, verification verified\.`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "(backup.create) completed.") {
		t.Fatalf("backups create --wait output:\n%s", out)
	}
	backupID, backupKey := m[1], m[2]
	cliQuery(t, direct, "INSERT INTO items VALUES (2)") // after the backup: the restore drops it

	list, _ = e.mustRun("", "backups", "list", id)
	row = lineWith(list, backupID)
	for _, want := range []string{backupKey, " first ", " completed ", " verified ", "MiB"} {
		if !strings.Contains(row, want) {
			t.Errorf("backups list row lacks %q: %q\n%s", want, row, list)
		}
	}

	out, _ = e.mustRun("", "restore-points", "create", id, "--label", "after two")
	rpID := regexp.MustCompile(`rp_[0-9a-z]{26}`).FindString(out)
	if rpID == "" || !strings.Contains(out, "(after two)") {
		t.Fatalf("restore-points create:\n%s", out)
	}
	list, _ = e.mustRun("", "restore-points", "list", id)
	if row := lineWith(list, rpID); !strings.Contains(row, "after two") || !strings.Contains(row, backupKey) || !strings.Contains(list, "Point-in-time window: 0 day(s).") {
		t.Errorf("restore-points list:\n%s", list)
	}

	out, _ = e.mustRunJob("restore", id, "--backup-key", backupKey, "--wait")
	for _, want := range []string{"Restoring project " + id + " to backup " + backupKey, "(backup.restore) completed.", "is active"} {
		if !strings.Contains(out, want) {
			t.Errorf("restore --wait output lacks %q:\n%s", want, out)
		}
	}
	if n := cliQuery(t, direct, "SELECT string_agg(v::text, ',' ORDER BY v) FROM items"); n != "1" {
		t.Errorf("after the restore the table holds %q, want the backup's rows (1)", n)
	}

	// Server-side validation comes through as the API's message.
	_, _, err := e.run("", "restore", id, "--backup-key", "no-such-key")
	if err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("restore to an unknown backup: %v", err)
	}

	out, _ = e.mustRunJob("projects", "delete", id, "--wait")
	if !strings.Contains(out, "(project.delete) completed.") || !strings.Contains(out, "is deleted") {
		t.Errorf("delete --wait output:\n%s", out)
	}
	if list, _ := e.mustRun("", "projects", "list"); strings.Contains(list, id) {
		t.Errorf("a deleted project is listed:\n%s", list)
	}

	// A production project (the default) needs an approval to be deleted.
	out, _ = e.mustRunJob("projects", "create", "prod", "--wait")
	prod := projectIDRe.FindString(out)
	if prod == "" || !strings.Contains(out, "production") {
		t.Fatalf("create prod:\n%s", out)
	}
	_, _, err = e.run("", "projects", "delete", prod)
	if err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "project.delete requires an approval token") ||
		!strings.Contains(err.Error(), "--approve") {
		t.Fatalf("delete of a production project without approval: %v", err)
	}
	if p := e.svcProject(prod); p.State != "active" {
		t.Fatalf("the refused delete changed the project: %s", p.State)
	}
	_, _, err = e.run("", "projects", "delete", prod, "--approval-token", "apr_wrong")
	if err == nil || !strings.Contains(err.Error(), "403") || strings.Contains(err.Error(), "apr_wrong") {
		t.Fatalf("delete with a wrong token: %v", err)
	}
	out, stderr := e.mustRunJob("projects", "delete", prod, "--approve", "--wait")
	if !strings.Contains(stderr, "Minted approval apr_") || !strings.Contains(out, "(project.delete) completed.") || !strings.Contains(out, "is deleted") {
		t.Fatalf("delete --approve --wait:\nstdout:\n%s\nstderr:\n%s", out, stderr)
	}
}

func (e *cliEnv) svcProject(id string) *api.Project {
	e.t.Helper()
	p, err := e.svc.Identity().Authenticate(e.t.Context(), e.boot.APIKey)
	if err != nil {
		e.t.Fatal(err)
	}
	res, err := e.svc.GetProject(e.t.Context(), p, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Project
}

// fakeAPI is a stand-in API that records the requests it gets and answers from a handler.
func fakeAPI(t *testing.T, h func(w http.ResponseWriter, r *http.Request)) (url string, requests *atomic.Int64) {
	t.Helper()
	requests = &atomic.Int64{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		h(w, r)
	}))
	t.Cleanup(ts.Close)
	cfg := filepath.Join(t.TempDir(), "config.json")
	t.Setenv("APPLIANCE_CONFIG", cfg)
	t.Setenv("APPLIANCE_API_URL", ts.URL)
	t.Setenv("APPLIANCE_API_KEY", "apl_live_test")
	t.Setenv("APPLIANCE_CA_CERT", "")
	return ts.URL, requests
}

// Bad usage is refused locally, before any request.
func TestCLIRestoreNeedsExactlyOneTarget(t *testing.T) {
	_, requests := fakeAPI(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	e := &cliEnv{t: t}
	for _, args := range [][]string{
		{"restore", "prj_x", "--backup-key", "k", "--time", "2026-01-02T15:04:05Z"},
		{"restore", "prj_x", "--backup-key", "k", "--restore-point", "rp_x"},
		{"restore", "prj_x"},
	} {
		_, _, err := e.run("", args...)
		if err == nil || !strings.Contains(err.Error(), "exactly one target: --backup-key, --time or --restore-point") {
			t.Errorf("%v: %v", args, err)
		}
	}
	_, _, err := e.run("", "projects", "delete", "prj_x", "--approve", "--approval-token", "apr_x")
	if err == nil || !strings.Contains(err.Error(), "none of the others can be") {
		t.Errorf("delete with --approve and --approval-token: %v", err)
	}
	_, _, err = e.run("", "restore-points", "create", "prj_x")
	if err == nil || !strings.Contains(err.Error(), "--label is required") {
		t.Errorf("restore-points create without a label: %v", err)
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests were sent", n)
	}
}

// A failed job ends --wait with the job's error and the tail of its stderr, and a non-zero exit.
func TestCLIWaitReportsFailedJob(t *testing.T) {
	var polls atomic.Int64
	stderrLines := make([]string, 30)
	for i := range stderrLines {
		stderrLines[i] = fmt.Sprintf("line %d", i+1)
	}
	_, _ = fakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		job := map[string]any{"id": "job_1", "type": "backup.create", "state": "pending", "attempts": 0}
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/projects/prj_x/backups":
			w.WriteHeader(http.StatusAccepted)
		case r.Method == http.MethodGet && r.URL.Path == "/v1/jobs/job_1":
			if polls.Add(1) < 3 {
				job["state"] = "running"
			} else {
				job["state"], job["attempts"], job["error"] = "failed", 3, "pg_basebackup: exit status 1"
				job["last_stderr"] = strings.Join(stderrLines, "\n") + "\n"
			}
		default:
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(map[string]string{"error": "no route"})
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"job": job})
	})
	e := &cliEnv{t: t}
	stdout, stderr, err := e.run("", "backups", "create", "prj_x", "--wait")
	if err == nil || err.Error() != "job job_1 (backup.create) failed: pg_basebackup: exit status 1" {
		t.Fatalf("err = %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if polls.Load() != 3 {
		t.Errorf("%d polls, want 3 (until the job failed)", polls.Load())
	}
	if !strings.Contains(stderr, "failed after 3 attempt(s)") || !strings.Contains(stderr, "  line 30\n") ||
		!strings.Contains(stderr, "  line 11\n") || strings.Contains(stderr, "line 10\n") {
		t.Errorf("stderr does not show the job's last 20 stderr lines:\n%s", stderr)
	}
	if strings.Contains(stdout, "completed") {
		t.Errorf("stdout claims success:\n%s", stdout)
	}

	// Without --wait the command ends at once with the job's ID.
	polls.Store(0)
	stdout, _, err = e.run("", "backups", "create", "prj_x")
	if err != nil || !strings.Contains(stdout, "Backing up project prj_x: job job_1 (backup.create).") || polls.Load() != 0 {
		t.Errorf("create without --wait: %v, %d polls\n%s", err, polls.Load(), stdout)
	}

	// An API error comes through with its status and message.
	_, _, err = e.run("", "projects", "get", "prj_x")
	if err == nil || err.Error() != "GET /v1/projects/prj_x: 404 Not Found: no route" {
		t.Errorf("get of an unknown project: %v", err)
	}
}

// Ctrl-C (the context ending) stops waiting without failing the job.
func TestCLIWaitStopsWithContext(t *testing.T) {
	_, _ = fakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusAccepted)
		}
		json.NewEncoder(w).Encode(map[string]any{"job": map[string]any{"id": "job_1", "type": "backup.restore", "state": "running"}})
	})
	ctx, cancel := context.WithCancel(t.Context())
	c := newCLIRoot()
	var out, errw syncBuffer
	c.SetOut(&out)
	c.SetErr(&errw)
	c.SetArgs([]string{"restore", "prj_x", "--backup-key", "k", "--wait"})
	done := make(chan error, 1)
	go func() { done <- c.ExecuteContext(ctx) }()
	r := &cliRun{stdout: &out, stderr: &errw, done: done}
	waitFor(t, "the restore to start", r, func() bool { return strings.Contains(out.String(), "job job_1") })
	cancel()
	err := r.wait(t)
	if err == nil || !strings.Contains(err.Error(), "stopped waiting for job job_1 (backup.restore), which keeps running on the server") {
		t.Fatalf("err = %v", err)
	}
}

// TestCLIImportsAndExports moves data in and out through the CLI: preflight, follow, status and cutover
// of a second local PostgreSQL; an export downloaded, uploaded again and restored.
func TestCLIImportsAndExports(t *testing.T) {
	e := setupCLI(t, cliSetupOpts{instances: true,
		limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}})
	t.Setenv("APPLIANCE_API_URL", e.url)
	t.Setenv("APPLIANCE_CA_CERT", e.caPath)
	t.Setenv("APPLIANCE_API_KEY", e.boot.APIKey)
	out, _ := e.mustRunJob("projects", "create", "dest", "--environment", "development", "--wait")
	id := projectIDRe.FindString(out)
	src := e.env.StartSource(t, "logical")
	src.App(t, "shop", "CREATE TABLE items (id serial PRIMARY KEY, name text)",
		"INSERT INTO items (name) SELECT 'i' || g FROM generate_series(1, 300) g")

	// The source URL from the environment: no password on the command line.
	if _, _, err := e.run("", "imports", "preflight", id); err == nil || !strings.Contains(err.Error(), "APPLIANCE_SOURCE_URL") {
		t.Fatalf("preflight without a source: %v", err)
	}
	t.Setenv("APPLIANCE_SOURCE_URL", src.URL("shop"))
	pf, _ := e.mustRun("", "imports", "preflight", id)
	for _, want := range []string{"provider self_hosted", "wal_level logical", "ready for follow: true", "OK: nothing stops an import."} {
		if !strings.Contains(pf, want) {
			t.Errorf("preflight output lacks %q:\n%s", want, pf)
		}
	}
	if _, _, err := e.run("", "imports", "follow", id); err == nil || !strings.Contains(err.Error(), "--confirm") {
		t.Fatalf("follow without --confirm: %v", err)
	}
	out, _ = e.mustRunJob("imports", "follow", id, "--confirm", "--wait")
	if !strings.Contains(out, "(import.follow) completed") {
		t.Fatalf("follow --wait:\n%s", out)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st, _ := e.mustRunJob("imports", "status", id)
		if strings.Contains(st, "Tables ready: 1 of 1") && strings.Contains(st, "public.items  ready") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed the table ready:\n%s", st)
		}
		time.Sleep(250 * time.Millisecond)
	}
	src.App(t, "shop", "INSERT INTO items (name) VALUES ('late')")
	out, _ = e.mustRunJob("imports", "cutover", id, "--confirm", "--wait")
	if !strings.Contains(out, "(import.follow_cutover) completed") {
		t.Fatalf("cutover --wait:\n%s", out)
	}
	if st, _ := e.mustRunJob("imports", "status", id); !strings.Contains(st, ": completed, from postgres://app:xxxxx@") {
		t.Fatalf("status after the cutover:\n%s", st)
	}

	// Out and in again: an export, downloaded, uploaded and restored.
	out, _ = e.mustRunJob("exports", "create", id, "--wait")
	exportID := regexp.MustCompile(`exp_[0-9a-z]{26}`).FindString(out)
	if exportID == "" || !strings.Contains(out, "(export.create) completed") {
		t.Fatalf("exports create --wait:\n%s", out)
	}
	if list, _ := e.mustRun("", "exports", "list", id); !strings.Contains(lineWith(list, exportID), "completed") {
		t.Fatalf("exports list:\n%s", list)
	}
	dump := filepath.Join(t.TempDir(), "dest.dump")
	e.mustRun("", "exports", "download", id, exportID, "-o", dump)
	b, err := os.ReadFile(dump)
	if err != nil || !bytes.HasPrefix(b, []byte("PGDMP")) {
		t.Fatalf("downloaded dump: %d bytes, %v", len(b), err)
	}
	if out, _ = e.mustRun("", "imports", "upload", id, dump); !strings.Contains(out, "Uploaded dest.dump") {
		t.Fatalf("upload:\n%s", out)
	}
	if _, _, err := e.run("", "imports", "restore", id); err == nil || !strings.Contains(err.Error(), "--confirm") {
		t.Fatalf("restore without --confirm: %v", err)
	}
	if out, _ = e.mustRunJob("imports", "restore", id, "--confirm", "--wait"); !strings.Contains(out, "(import.restore) completed") {
		t.Fatalf("imports restore --wait:\n%s", out)
	}
}

func TestCLIUsers(t *testing.T) {
	e := setupCLI(t)
	t.Setenv("APPLIANCE_API_URL", e.url)
	t.Setenv("APPLIANCE_CA_CERT", e.caPath)
	t.Setenv("APPLIANCE_API_KEY", e.boot.APIKey)

	stdout, stderr := e.mustRun("", "users", "add", "dana@example.com", "--role", "member", "--name", "Dana Müller")
	password := strings.TrimSpace(stdout)
	userID := regexp.MustCompile(`usr_[0-9a-z]{26}`).FindString(stderr)
	if len(password) < 12 || strings.Contains(password, "\n") || userID == "" || !strings.Contains(stderr, "shown only this once") {
		t.Fatalf("add: stdout %q stderr %q", stdout, stderr)
	}
	list, _ := e.mustRun("", "users", "list")
	if row := lineWith(list, userID); !strings.Contains(row, "dana@example.com") || !strings.Contains(row, "Dana Müller") || !strings.Contains(row, " member ") {
		t.Errorf("list row of Dana: %q\n%s", row, list)
	}
	if row := lineWith(list, appliance.BootstrapOwnerEmail); !strings.Contains(row, " owner ") {
		t.Errorf("the bootstrap owner is not listed as owner:\n%s", list)
	}

	out, _ := e.mustRun(password+"\nDana's own passphrase\n", "users", "password", "--email", "dana@example.com", "--password-stdin")
	if !strings.Contains(out, "Changed the password of dana@example.com") {
		t.Errorf("password: %s", out)
	}
	if _, _, err := e.run(password+"\nyet another passphrase\n", "users", "password", "--email", "dana@example.com", "--password-stdin"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("the initial password still signs in after the change: %v", err)
	}

	out, _ = e.mustRun("", "users", "set-role", userID, "admin")
	if !strings.Contains(out, "is now admin") {
		t.Errorf("set-role: %s", out)
	}
	if _, _, err := e.run("", "users", "set-role", appliance.BootstrapOwnerEmail, "admin"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("set-role of an email, not a user id: %v", err)
	}
	if _, _, err := e.run("", "users", "add", "x@example.com"); err == nil || !strings.Contains(err.Error(), "--role is required") {
		t.Errorf("add without a role: %v", err)
	}
	out, _ = e.mustRun("", "users", "remove", userID)
	if !strings.Contains(out, "Removed "+userID) || !strings.Contains(out, "revoked 0 API key(s)") {
		t.Errorf("remove: %s", out)
	}
	list, _ = e.mustRun("", "users", "list")
	if strings.Contains(list, userID) {
		t.Errorf("removed user still listed:\n%s", list)
	}
	// Dana has a user now: adding her again invites her, and neither her ID nor her name is shown.
	stdout, stderr = e.mustRun("", "users", "add", "dana@example.com", "--role", "member")
	if stdout != "" || !strings.Contains(stderr, "invited to organization") || !strings.Contains(stderr, "inv_") ||
		strings.Contains(stderr, userID) || strings.Contains(stderr, "Dana Müller") {
		t.Errorf("add an existing user: stdout %q stderr %q", stdout, stderr)
	}
	// Another organization's user is invited, lists the invitation and accepts it signed in.
	now := time.Now().UTC()
	other := &store.Organization{ID: ids.New("org"), Name: "Elsewhere", Slug: "elsewhere", BillingPlan: "none", CreatedAt: now, UpdatedAt: now}
	if err := e.env.DB.Update(func(tx *store.Tx) error {
		if err := store.Organizations.Put(tx, other); err != nil {
			return err
		}
		_, err := e.svc.Identity().CreateUser(tx, "erin@elsewhere.example", "Erin", "erin's own passphrase", false, store.Membership{OrganizationID: other.ID, Role: "owner"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	_, stderr = e.mustRun("", "users", "add", "erin@elsewhere.example", "--role", "admin")
	inv := regexp.MustCompile(`inv_[0-9a-z]{26}`).FindString(stderr)
	if inv == "" {
		t.Fatalf("add erin: %s", stderr)
	}
	out, _ = e.mustRun("erin's own passphrase", "users", "invitations", "--email", "erin@elsewhere.example", "--password-stdin")
	if row := lineWith(out, inv); !strings.Contains(row, " admin ") {
		t.Errorf("invitations: %q", out)
	}
	out, _ = e.mustRun("erin's own passphrase", "users", "accept", inv, "--email", "erin@elsewhere.example", "--password-stdin")
	if !strings.Contains(out, "Joined the organization as admin") {
		t.Errorf("accept: %s", out)
	}
	if list, _ := e.mustRun("", "users", "list"); !strings.Contains(lineWith(list, "erin@elsewhere.example"), " admin ") {
		t.Errorf("erin is not listed as admin:\n%s", list)
	}
}

// TestCLINeverFollowsRedirects: a server answering a DELETE with a redirect gets one request, and the
// CLI reports the redirect instead of sending the DELETE elsewhere. Path segments are escaped, dots
// included, so ".." reaches the server as a segment it refuses.
func TestCLINeverFollowsRedirects(t *testing.T) {
	var paths []string
	_, requests := fakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.Method+" "+r.URL.EscapedPath())
		w.Header().Set("Location", "/v1/projects/prj_1")
		w.WriteHeader(http.StatusTemporaryRedirect)
	})
	e := &cliEnv{t: t}
	_, _, err := e.run("", "restore-points", "delete", "prj_1", "..")
	if err == nil || !strings.Contains(err.Error(), "redirect") || !strings.Contains(err.Error(), "never follows") {
		t.Fatalf("err = %v", err)
	}
	if n := requests.Load(); n != 1 || paths[0] != "DELETE /v1/projects/prj_1/restore-points/%2E%2E" {
		t.Fatalf("%d requests: %v", n, paths)
	}
}

// TestCLIDotDotDeletesNothing: against the real API, `restore-points delete P ..` is refused (400) and the
// project is still there.
func TestCLIDotDotDeletesNothing(t *testing.T) {
	e := setupCLI(t)
	p := e.login(t)
	res, err := e.svc.CreateProject(t.Context(), p, &api.CreateProjectRequest{Name: "kept", Environment: "development"})
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{"..", "."} {
		_, _, err = e.run("", "restore-points", "delete", res.Project.ID, arg)
		if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "not clean") {
			t.Errorf("delete %q: %v", arg, err)
		}
	}
	if _, err := e.svc.GetProject(t.Context(), p, res.Project.ID); err != nil {
		t.Fatalf("the project is gone: %v", err)
	}
}
