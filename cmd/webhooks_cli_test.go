package cmd

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/httpapi"
	"github.com/theappliance/appliance/store"
)

// TestCLIWebhooks: create prints the secret alone, list shows health, test and deliveries show the
// delivery, redeliver sends it again, rotate-secret prints a new secret, delete removes the endpoint.
func TestCLIWebhooks(t *testing.T) {
	e := setupWebhooksCLI(t)
	var hits atomic.Int64
	receiver := e.env.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))

	stdout, stderr := e.mustRun("", "webhooks", "create", "--url", receiver+"/hooks", "--event-type", "job.completed,job.failed", "--description", "ci")
	secret := strings.TrimSpace(stdout)
	if !strings.HasPrefix(secret, "whsec_") || strings.Contains(secret, "\n") || !strings.Contains(stderr, "only time it is shown") {
		t.Fatalf("create: stdout %q stderr %q", stdout, stderr)
	}
	id := regexp.MustCompile(`whe_[0-9a-z]{26}`).FindString(stderr)
	list, _ := e.mustRun("", "webhooks", "list")
	if row := lineWith(list, id); !strings.Contains(row, "job.completed,job.failed") || !strings.Contains(row, "healthy") || strings.Contains(list, secret) {
		t.Fatalf("list:\n%s", list)
	}
	out, _ := e.mustRun("", "webhooks", "test", id)
	msg := regexp.MustCompile(`msg_[0-9a-z]{26}`).FindString(out)
	for deadline := time.Now().Add(30 * time.Second); hits.Load() < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the test delivery never arrived")
		}
	}
	waitCLI(t, func() bool {
		d, _ := e.mustRun("", "webhooks", "deliveries", id)
		return strings.Contains(lineWith(d, msg), "delivered")
	})
	d, _ := e.mustRun("", "webhooks", "deliveries", id)
	if row := lineWith(d, msg); !strings.Contains(row, "webhook.test") || !strings.Contains(row, "1/8") || !strings.Contains(row, "204") {
		t.Fatalf("deliveries:\n%s", d)
	}
	if j, _ := e.mustRun("", "webhooks", "deliveries", id, "--json", "--limit", "1"); !strings.Contains(j, `"payload"`) || !strings.Contains(j, `"attempt_history"`) {
		t.Fatalf("deliveries --json:\n%s", j)
	}
	if out, _ := e.mustRun("", "webhooks", "redeliver", id, msg); !strings.Contains(out, "attempt 2") {
		t.Fatalf("redeliver: %s", out)
	}
	waitCLI(t, func() bool { return hits.Load() >= 2 })
	rotated, _ := e.mustRun("", "webhooks", "rotate-secret", id)
	if s := strings.TrimSpace(rotated); !strings.HasPrefix(s, "whsec_") || s == secret {
		t.Fatalf("rotate-secret: %q", rotated)
	}
	if _, _, err := e.run("", "webhooks", "create", "--url", "http://169.254.169.254/"); err == nil || !strings.Contains(err.Error(), "400") ||
		!strings.Contains(err.Error(), "refused by the outbound policy") {
		t.Fatalf("create on a metadata address: %v", err)
	}
	if out, _ := e.mustRun("", "webhooks", "delete", id); !strings.Contains(out, "Deleted webhook endpoint "+id) {
		t.Fatalf("delete: %s", out)
	}
	if list, _ := e.mustRun("", "webhooks", "list"); strings.Contains(list, id) {
		t.Fatalf("deleted endpoint still listed:\n%s", list)
	}
}

// setupWebhooksCLI is an API with the webhook worker running and the CLI pointed at it.
func setupWebhooksCLI(t *testing.T) *cliEnv {
	o := appliance.DefaultWebhookOptions
	o.Poll = 20 * time.Millisecond
	e := setupCLI(t, cliSetupOpts{limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}, webhooks: &o})
	t.Setenv("APPLIANCE_API_URL", e.url)
	t.Setenv("APPLIANCE_CA_CERT", e.caPath)
	t.Setenv("APPLIANCE_API_KEY", e.boot.APIKey)
	e.env.StartWebhooks(t)
	return e
}

func waitCLI(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}

// TestCLIEvents: `appliance events` prints the log's events then live ones, and resumes after a dropped
// connection (a proxy cuts the first stream after two events) missing nothing and repeating nothing.
func TestCLIEvents(t *testing.T) {
	e := setupCLI(t)
	t.Setenv("APPLIANCE_CA_CERT", e.caPath)
	t.Setenv("APPLIANCE_API_KEY", e.boot.APIKey)
	now := time.Now().UTC()
	prj := &store.Project{ID: ids.New("prj"), Name: "streamed", Slug: "streamed", OrganizationID: e.boot.OrganizationID, Plan: "free",
		Environment: "development", State: "active", RuntimeStatus: "active", CreatedAt: now, UpdatedAt: now}
	appendEvents := func(n int) {
		if err := e.env.DB.Update(func(tx *store.Tx) error {
			if err := store.Projects.Put(tx, prj); err != nil {
				return err
			}
			for i := range n {
				if err := store.AppendEvent(tx, &store.Event{Type: "job.completed", OrganizationID: prj.OrganizationID, ProjectID: prj.ID,
					Data: []byte(fmt.Sprintf(`{"n":%d}`, i)), CreatedAt: time.Now()}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	appendEvents(5)

	// The proxy: passes streams through, but ends the first one after two events.
	caPEM, err := os.ReadFile(e.caPath)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	upstream := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	var conns atomic.Int64
	proxy := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := conns.Add(1)
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, e.url+r.URL.RequestURI(), nil)
		req.Header = r.Header.Clone()
		resp, err := upstream.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		events := 0
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			io.WriteString(w, sc.Text()+"\n")
			w.(http.Flusher).Flush()
			if strings.HasPrefix(sc.Text(), "id: ") {
				events++
			}
			if sc.Text() == "" && n == 1 && events == 2 {
				return // drop the first connection after two whole events
			}
		}
	}))
	tlsCfg, err := e.env.CA.ServerTLS("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	proxy.TLS = tlsCfg
	proxy.StartTLS()
	t.Cleanup(proxy.Close)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	run := e.startCtx(ctx, "", "events", prj.ID, "--api", proxy.URL, "--json")
	lines := func() []string { return strings.Split(strings.TrimSpace(run.stdout.String()), "\n") }
	waitFor(t, "the five logged events", run, func() bool { return len(lines()) >= 5 })
	appendEvents(2)
	waitFor(t, "the two live events", run, func() bool { return len(lines()) >= 7 })
	cancel()
	if err := run.wait(t); err != nil {
		t.Fatalf("events ended with %v", err)
	}
	got := lines()
	if len(got) != 7 {
		t.Fatalf("%d lines, want 7:\n%s", len(got), run.stdout)
	}
	for i, l := range got {
		if !strings.Contains(l, fmt.Sprintf(`"id":"%d"`, i+1)) || !strings.Contains(l, `"type":"job.completed"`) {
			t.Fatalf("line %d: %s\nall:\n%s", i, l, run.stdout)
		}
	}
	if conns.Load() < 2 || !strings.Contains(run.stderr.String(), `reconnecting after event "2"`) {
		t.Fatalf("no reconnect (connections %d); stderr:\n%s", conns.Load(), run.stderr)
	}
	if out, _ := e.mustRun("", "events", prj.ID, "--api", e.url, "--no-follow", "--new"); out != "" {
		t.Fatalf("--new printed the log's events:\n%s", out)
	}
	if out, _ := e.mustRun("", "events", prj.ID, "--api", e.url, "--no-follow", "--after", "6"); strings.Count(out, "\n") != 1 {
		t.Fatalf("--after 6 --no-follow:\n%s", out)
	}
}

// TestCLIWebhooksListen: the receiver of `webhooks listen` verifies a real delivery with the secret that
// create printed, and refuses a forged one with 401.
func TestCLIWebhooksListen(t *testing.T) {
	e := setupWebhooksCLI(t)
	l := e.env.Listen(t)
	addr := l.Addr().String()
	l.Close()
	secret, _ := e.mustRun("", "webhooks", "create", "--url", "http://"+addr+"/hooks")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	listen := e.startCtx(ctx, "", "webhooks", "listen", "--listen", addr, "--secret", strings.TrimSpace(secret))
	waitFor(t, "the receiver", listen, func() bool { return strings.Contains(listen.stderr.String(), "Receiving webhooks") })
	id := regexp.MustCompile(`whe_[0-9a-z]{26}`).FindString(lineWith(func() string { s, _ := e.mustRun("", "webhooks", "list"); return s }(), "http://"+addr))
	out, _ := e.mustRun("", "webhooks", "test", id)
	msg := regexp.MustCompile(`msg_[0-9a-z]{26}`).FindString(out)
	waitFor(t, "the verified delivery", listen, func() bool { return strings.Contains(listen.stdout.String(), "verified "+msg+" webhook.test") })

	req, _ := http.NewRequest("POST", "http://"+addr+"/hooks", strings.NewReader(`{"type":"job.completed"}`))
	req.Header.Set("webhook-id", "msg_forged")
	req.Header.Set("webhook-timestamp", fmt.Sprint(time.Now().Unix()))
	req.Header.Set("webhook-signature", "v1,Zm9yZ2Vk")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized || !strings.Contains(listen.stdout.String(), "REFUSED msg_forged") {
		t.Fatalf("forged delivery: %d\n%s", res.StatusCode, listen.stdout)
	}
	cancel()
	if err := listen.wait(t); err != nil {
		t.Fatalf("listen ended with %v", err)
	}
}
