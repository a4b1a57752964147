package appliance_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/outbound"
	"github.com/theappliance/appliance/appliance/webhook"
	"github.com/theappliance/appliance/store"
)

// received is one request a receiver took.
type received struct {
	header http.Header
	body   []byte
}

// receiver is a webhook receiver: answer gives the status (and headers) of the n-th request (1-based)
// carrying a webhook-id; every request is recorded.
type receiver struct {
	mu     sync.Mutex
	got    []received
	perID  map[string]int
	answer func(n int, w http.ResponseWriter) int
}

func newReceiver(answer func(n int, w http.ResponseWriter) int) *receiver {
	if answer == nil {
		answer = func(int, http.ResponseWriter) int { return http.StatusNoContent }
	}
	return &receiver{perID: map[string]int{}, answer: answer}
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.got = append(rc.got, received{header: r.Header.Clone(), body: body})
	id := r.Header.Get("webhook-id")
	rc.perID[id]++
	n := rc.perID[id]
	rc.mu.Unlock()
	w.WriteHeader(rc.answer(n, w))
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

// fastHooks deliver with a short schedule.
func fastHooks(schedule ...time.Duration) *appliance.WebhookOptions {
	o := appliance.DefaultWebhookOptions
	o.Schedule, o.Poll, o.Timeout = schedule, 20*time.Millisecond, 2*time.Second
	return &o
}

func createEndpoint(t *testing.T, e *appliancetest.Env, p *appliance.Principal, url string, types ...api.EventType) *appliance.WebhookEndpointWithSecret {
	t.Helper()
	res, err := e.Svc.Webhooks().CreateEndpoint(t.Context(), p, p.OrganizationID, &appliance.CreateWebhookEndpointRequest{URL: url, EventTypes: types})
	if err != nil {
		t.Fatalf("create endpoint %s: %v", url, err)
	}
	return res
}

// waitDelivery waits until the delivery is no longer pending and returns it.
func waitDelivery(t *testing.T, e *appliancetest.Env, id string) *store.WebhookDelivery {
	t.Helper()
	return waitForDelivery(t, e, id, func(d *store.WebhookDelivery) bool { return d.State != webhook.DeliveryPending })
}

// waitAttempts waits until the delivery has n recorded attempts and none in flight.
func waitAttempts(t *testing.T, e *appliancetest.Env, id string, n int) *store.WebhookDelivery {
	t.Helper()
	return waitForDelivery(t, e, id, func(d *store.WebhookDelivery) bool { return d.Attempts >= n && d.ClaimedAt == nil })
}

func waitForDelivery(t *testing.T, e *appliancetest.Env, id string, done func(*store.WebhookDelivery) bool) *store.WebhookDelivery {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		var d *store.WebhookDelivery
		if err := e.DB.View(func(tx *store.Tx) (err error) { d, err = store.WebhookDeliveries.Get(tx, id); return err }); err != nil {
			t.Fatal(err)
		}
		if done(d) {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivery %s after a minute: %+v", id, d)
		}
	}
}

func sendTest(t *testing.T, e *appliancetest.Env, p *appliance.Principal, endpointID string) string {
	t.Helper()
	res, err := e.Svc.Webhooks().TestEndpoint(t.Context(), p, p.OrganizationID, endpointID)
	if err != nil {
		t.Fatal(err)
	}
	return res.Delivery.ID
}

func endpoint(t *testing.T, e *appliancetest.Env, p *appliance.Principal, id string) appliance.WebhookEndpoint {
	t.Helper()
	list, err := e.Svc.Webhooks().ListEndpoints(t.Context(), p, p.OrganizationID)
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range list.WebhookEndpoints {
		if ep.ID == id {
			return ep
		}
	}
	t.Fatalf("endpoint %s not listed", id)
	return appliance.WebhookEndpoint{}
}

// keyEnv starts an appliance with o and returns it with its bootstrap admin key's principal.
func keyEnv(t *testing.T, o appliancetest.Options) (*appliancetest.Env, *appliance.Principal) {
	t.Helper()
	e := appliancetest.New(t, o)
	p, err := e.Svc.Identity().Authenticate(t.Context(), e.Bootstrap.APIKey)
	if err != nil {
		t.Fatal(err)
	}
	return e, p
}

// TestWebhooksSignedAndVerified: a project's job events reach an endpoint signed the Standard Webhooks
// way: the Standard Webhooks Go library accepts every delivery, with the secret returned at create and,
// after a rotation, with the new and (during the overlap) the old one.
func TestWebhooksSignedAndVerified(t *testing.T) {
	t.Parallel()
	e, p := keyEnv(t, appliancetest.Options{Instances: true, Webhooks: fastHooks(50 * time.Millisecond)})
	e.StartWebhooks(t)
	rc := newReceiver(nil)
	ep := createEndpoint(t, e, p, e.Serve(t, rc)+"/hooks")
	if !strings.HasPrefix(ep.PlaintextSecret, "whsec_") || ep.WebhookEndpoint.Health != webhook.HealthHealthy {
		t.Fatalf("created: %+v", ep)
	}
	prj := provision(t, e, p, "hooked", "development")

	verify := func(secret string, r received) {
		t.Helper()
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(r.body, r.header); err != nil {
			t.Errorf("delivery %s does not verify: %v\nheaders %v", r.header.Get("webhook-id"), err, r.header)
		}
	}
	want := map[string]bool{"job.completed": false, "project.ready": false}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		for _, r := range rc.requests() {
			var body struct {
				Type      string    `json:"type"`
				Timestamp time.Time `json:"timestamp"`
				Data      struct {
					Job struct{ ID, ProjectID, State string } `json:"job"`
				} `json:"data"`
			}
			if err := json.Unmarshal(r.body, &body); err != nil {
				t.Fatalf("body %s: %v", r.body, err)
			}
			verify(ep.PlaintextSecret, r)
			if _, ok := want[body.Type]; ok && body.Timestamp.IsZero() == false && body.Data.Job.ID != "" {
				want[body.Type] = true
			}
		}
		if want["job.completed"] && want["project.ready"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after provisioning %s the receiver has %d requests, want job.completed and project.ready: %v", prj.ID, len(rc.requests()), want)
		}
	}

	rot, err := e.Svc.Webhooks().RotateSecret(t.Context(), p, p.OrganizationID, ep.WebhookEndpoint.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rot.PlaintextSecret == ep.PlaintextSecret {
		t.Fatal("rotation returned the same secret")
	}
	d := waitDelivery(t, e, sendTest(t, e, p, ep.WebhookEndpoint.ID))
	if d.State != webhook.DeliveryDelivered || d.Attempts != 1 {
		t.Fatalf("test delivery: %+v", d)
	}
	last := rc.requests()[len(rc.requests())-1]
	if last.header.Get("webhook-id") != d.ID || !strings.Contains(string(last.body), `"type":"webhook.test"`) {
		t.Fatalf("last request %v %s, want the test delivery %s", last.header, last.body, d.ID)
	}
	verify(rot.PlaintextSecret, last)
	verify(ep.PlaintextSecret, last) // the previous secret signs beside the new one during the overlap
}

// TestWebhookRetries: a receiver that fails twice then succeeds shows three attempts with their statuses
// and one webhook-id; a receiver that always fails exhausts max_attempts and turns the endpoint failing.
func TestWebhookRetries(t *testing.T) {
	t.Parallel()
	e, p := keyEnv(t, appliancetest.Options{Webhooks: fastHooks(30*time.Millisecond, 30*time.Millisecond, 30*time.Millisecond)})
	e.StartWebhooks(t)
	flaky := newReceiver(func(n int, _ http.ResponseWriter) int {
		if n <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	ep := createEndpoint(t, e, p, e.Serve(t, flaky))
	d := waitDelivery(t, e, sendTest(t, e, p, ep.WebhookEndpoint.ID))
	if d.State != webhook.DeliveryDelivered || d.Attempts != 3 || d.MaxAttempts != 4 || d.DeliveredAt == nil || d.ResponseStatus != 200 {
		t.Fatalf("delivery: %+v", d)
	}
	var statuses []int
	for _, a := range d.History {
		statuses = append(statuses, a.ResponseStatus)
	}
	if fmt.Sprint(statuses) != "[500 500 200]" || d.History[0].Error != "HTTP 500" {
		t.Fatalf("attempts: %+v", d.History)
	}
	reqs := flaky.requests()
	if len(reqs) != 3 {
		t.Fatalf("receiver got %d requests", len(reqs))
	}
	for _, r := range reqs {
		if r.header.Get("webhook-id") != d.ID {
			t.Fatalf("webhook-id %q, want %q on every attempt", r.header.Get("webhook-id"), d.ID)
		}
	}
	if h := endpoint(t, e, p, ep.WebhookEndpoint.ID).Health; h != webhook.HealthHealthy {
		t.Fatalf("health after a success: %s", h)
	}

	dead := createEndpoint(t, e, p, e.Serve(t, newReceiver(func(int, http.ResponseWriter) int { return http.StatusBadGateway })))
	d = waitDelivery(t, e, sendTest(t, e, p, dead.WebhookEndpoint.ID))
	if d.State != webhook.DeliveryFailed || d.Attempts != 4 || d.LastError != "HTTP 502" || d.NextAttemptAt != nil {
		t.Fatalf("delivery to a dead endpoint: %+v", d)
	}
	if h := endpoint(t, e, p, dead.WebhookEndpoint.ID); h.Health != webhook.HealthFailing || !h.IsActive {
		t.Fatalf("endpoint after 4 failures: %+v", h)
	}
	// Redeliver sends it again as one more attempt, with the same webhook-id.
	red, err := e.Svc.Webhooks().Redeliver(t.Context(), p, p.OrganizationID, dead.WebhookEndpoint.ID, d.ID)
	if err != nil || red.Delivery.State != webhook.DeliveryPending {
		t.Fatalf("redeliver: %+v %v", red, err)
	}
	if d = waitDelivery(t, e, d.ID); d.Attempts != 5 || d.State != webhook.DeliveryFailed {
		t.Fatalf("after redeliver: %+v", d)
	}
	if st, msg := e.Svc.Webhooks().Health(t.Context()); st != appliance.StatusOperational || msg != "2 endpoints (1 failing, 0 disabled), 0 deliveries pending" {
		t.Errorf("webhook health: %s %q", st, msg)
	}
	usage, err := e.Svc.OrganizationUsage(t.Context(), p, p.OrganizationID)
	if err != nil {
		t.Fatal(err)
	}
	if r := usage.Usage.Totals.WebhookDeliveryRate7d; r != 0.5 {
		t.Errorf("webhook_delivery_rate_7d %v, want 0.5 (one delivered, one failed)", r)
	}
}

// TestWebhookReceiverSignals: Retry-After on 429/503 sets the next attempt; 410 Gone disables the
// endpoint at once (its pending deliveries fail, webhook_endpoint.disabled is logged); an endpoint with
// nothing but failures for DisableAfter is disabled.
func TestWebhookReceiverSignals(t *testing.T) {
	t.Parallel()
	o := fastHooks(300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond)
	o.DisableAfter = 200 * time.Millisecond
	e, p := keyEnv(t, appliancetest.Options{Webhooks: o})
	e.StartWebhooks(t)

	// These two take only test deliveries: the disabled events of the others would fail on them too.
	busy := createEndpoint(t, e, p, e.Serve(t, newReceiver(func(n int, w http.ResponseWriter) int {
		w.Header().Set("Retry-After", "3")
		return http.StatusTooManyRequests
	})), "webhook.test")
	d := waitAttempts(t, e, sendTest(t, e, p, busy.WebhookEndpoint.ID), 1)
	if wait := d.NextAttemptAt.Sub(d.History[0].At); wait < 3*time.Second || d.ResponseStatus != 429 {
		t.Fatalf("next attempt %v after a 429 with Retry-After: 3 (status %d)", wait, d.ResponseStatus)
	}

	gone := createEndpoint(t, e, p, e.Serve(t, newReceiver(func(int, http.ResponseWriter) int { return http.StatusGone })))
	d = waitDelivery(t, e, sendTest(t, e, p, gone.WebhookEndpoint.ID))
	if d.State != webhook.DeliveryFailed || d.Attempts != 1 {
		t.Fatalf("delivery answered 410: %+v", d)
	}
	if ep := endpoint(t, e, p, gone.WebhookEndpoint.ID); ep.IsActive || ep.Health != webhook.HealthDisabled {
		t.Fatalf("endpoint after 410: %+v", ep)
	}
	if _, err := e.Svc.Webhooks().TestEndpoint(t.Context(), p, p.OrganizationID, gone.WebhookEndpoint.ID); appliance.KindOf(err) != appliance.KindConflict {
		t.Fatalf("test on a disabled endpoint: %v", err)
	}

	failing := createEndpoint(t, e, p, e.Serve(t, newReceiver(func(int, http.ResponseWriter) int { return http.StatusInternalServerError })), "webhook.test")
	d = waitDelivery(t, e, sendTest(t, e, p, failing.WebhookEndpoint.ID))
	if ep := endpoint(t, e, p, failing.WebhookEndpoint.ID); ep.IsActive || d.State != webhook.DeliveryFailed || d.Attempts != 2 ||
		!strings.Contains(d.LastError, "no attempt succeeded for") {
		t.Fatalf("endpoint failing for longer than DisableAfter: %+v, delivery %+v", ep, d)
	}

	var reasons []string
	e.DB.View(func(tx *store.Tx) error {
		evs, err := store.Events.Lookup(tx, store.EventsByOrg, p.OrganizationID, store.Query{})
		for _, ev := range evs {
			if ev.Type == "webhook_endpoint.disabled" {
				var data webhook.DisabledEvent
				json.Unmarshal(ev.Data, &data)
				reasons = append(reasons, data.WebhookEndpoint.ID+": "+data.Reason)
			}
		}
		return err
	})
	if len(reasons) != 2 || !strings.Contains(reasons[0], "410 Gone") || !strings.HasPrefix(reasons[1], failing.WebhookEndpoint.ID) {
		t.Fatalf("webhook_endpoint.disabled events: %q", reasons)
	}
	// Re-enabling resets health and deliveries flow again.
	if _, err := e.Svc.Webhooks().PatchEndpoint(t.Context(), p, p.OrganizationID, gone.WebhookEndpoint.ID, &appliance.PatchWebhookEndpointRequest{IsActive: ptrTo(true)}); err != nil {
		t.Fatal(err)
	}
	if ep := endpoint(t, e, p, gone.WebhookEndpoint.ID); !ep.IsActive || ep.Health != webhook.HealthHealthy {
		t.Fatalf("re-enabled: %+v", ep)
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestWebhookSSRF: under the default policy (here allowing only 127.0.0.2, as an operator's
// --outbound-allow would), endpoints on loopback, metadata, IPv6 loopback or a name resolving to loopback
// are refused when saved, saying why; a receiver that redirects to loopback is not followed.
func TestWebhookSSRF(t *testing.T) {
	t.Parallel()
	e, p := keyEnv(t, appliancetest.Options{Outbound: &outbound.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}},
		Webhooks: fastHooks(time.Hour)})
	e.StartWebhooks(t)
	inner := newReceiver(nil)
	innerURL := e.Serve(t, inner) // on 127.0.0.1: refused
	port := strings.TrimPrefix(innerURL, "http://127.0.0.1:")
	for url, why := range map[string]string{
		innerURL:                           "127.0.0.1 is a loopback address",
		"http://169.254.169.254/latest":    "169.254.169.254 is a link-local or cloud metadata address",
		"http://[::1]:" + port + "/":       "::1 is a loopback address",
		"http://localhost:" + port + "/":   "localhost resolves to an address that is a loopback address",
		"http://0.0.0.0:" + port + "/":     "0.0.0.0",
		"https://100.100.100.200/metadata": "cloud metadata",
	} {
		_, err := e.Svc.Webhooks().CreateEndpoint(t.Context(), p, p.OrganizationID, &appliance.CreateWebhookEndpointRequest{URL: url})
		if appliance.KindOf(err) != appliance.KindInvalid || !strings.Contains(err.Error(), "refused by the outbound policy") || !strings.Contains(err.Error(), why) {
			t.Errorf("create %s: %v, want a 400 saying %q", url, err, why)
		}
	}
	// A receiver the policy allows (127.0.0.2) that redirects to loopback.
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	redirector := httptest.NewUnstartedServer(http.RedirectHandler(innerURL+"/stolen", http.StatusFound))
	redirector.Listener.Close()
	redirector.Listener = l
	redirector.Start()
	t.Cleanup(redirector.Close)
	ep := createEndpoint(t, e, p, redirector.URL)
	d := waitAttempts(t, e, sendTest(t, e, p, ep.WebhookEndpoint.ID), 1)
	if d.State != webhook.DeliveryPending || d.ResponseStatus != http.StatusFound || d.LastError != "HTTP 302 (redirects are not followed)" {
		t.Fatalf("delivery to a redirector: %+v", d)
	}
	if n := len(inner.requests()); n != 0 {
		t.Fatalf("the loopback receiver got %d requests through a redirect", n)
	}
}

// TestWebhookEndpointInput: bad input is a 400 naming the problem and changes nothing.
func TestWebhookEndpointInput(t *testing.T) {
	t.Parallel()
	e, p := keyEnv(t, appliancetest.Options{})
	for _, c := range []struct {
		req  appliance.CreateWebhookEndpointRequest
		want string
	}{
		{appliance.CreateWebhookEndpointRequest{URL: "http://127.0.0.1:9/x", EventTypes: []api.EventType{"job.completed", "job.exploded", "nope"}}, "unknown event types: job.exploded, nope"},
		{appliance.CreateWebhookEndpointRequest{URL: "/relative"}, "absolute http:// or https:// URL"},
		{appliance.CreateWebhookEndpointRequest{URL: "ftp://example.com/"}, "absolute http:// or https:// URL"},
		{appliance.CreateWebhookEndpointRequest{URL: "https://user:pw@example.com/"}, "credentials"},
		{appliance.CreateWebhookEndpointRequest{URL: "https://bücher.example/hook"}, "xn-- form"},
		{appliance.CreateWebhookEndpointRequest{URL: ""}, "url is required"},
		{appliance.CreateWebhookEndpointRequest{URL: "http://127.0.0.1:9/", Description: "a\nb"}, "control characters"},
	} {
		_, err := e.Svc.Webhooks().CreateEndpoint(t.Context(), p, p.OrganizationID, &c.req)
		if appliance.KindOf(err) != appliance.KindInvalid || !strings.Contains(err.Error(), c.want) {
			t.Errorf("create %+v: %v, want 400 with %q", c.req, err, c.want)
		}
	}
	list, err := e.Svc.Webhooks().ListEndpoints(t.Context(), p, p.OrganizationID)
	if err != nil || len(list.WebhookEndpoints) != 0 {
		t.Fatalf("after refused creates: %+v %v", list, err)
	}
	if st, _ := e.Svc.Webhooks().Health(t.Context()); st != appliance.StatusDown {
		t.Errorf("webhook health without the worker: %s", st)
	}
}

// TestWebhookPolicyAtEveryAttempt: the outbound policy is applied when dialing, not only when the URL was
// saved: an endpoint saved while its address was allowed is refused at its attempt once the policy refuses
// the address (here the deny list changes; a name whose DNS answer changes meets the same check), the
// receiver gets nothing, and the delivery says only that the policy refused it.
func TestWebhookPolicyAtEveryAttempt(t *testing.T) {
	t.Parallel()
	pol := &outbound.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}}
	e, p := keyEnv(t, appliancetest.Options{Outbound: pol, Webhooks: fastHooks(time.Hour)})
	e.StartWebhooks(t)
	rc := newReceiver(nil)
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(rc)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	ep := createEndpoint(t, e, p, srv.URL)                           // allowed when saved, never dialed yet
	pol.Deny = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")} // the worker is idle: no dial reads it now
	d := waitAttempts(t, e, sendTest(t, e, p, ep.WebhookEndpoint.ID), 1)
	if d.LastError != "refused by the outbound policy" || d.ResponseStatus != 0 || d.State != webhook.DeliveryPending {
		t.Fatalf("once refused: %+v", d)
	}
	if n := len(rc.requests()); n != 0 {
		t.Fatalf("the receiver got %d requests", n)
	}
}
