package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/store"
)

// mintServiceToken mints a service token as the operator and returns its id and plaintext.
func mintServiceToken(t *testing.T, b *bundle, operator, name string) (string, string) {
	t.Helper()
	r := b.do("POST", "/v1/service-tokens", operator, map[string]any{"name": name})
	if r.status != http.StatusCreated {
		t.Fatalf("mint service token: %d %s", r.status, r.body)
	}
	tok, _ := r.json["plaintext_token"].(string)
	if !strings.HasPrefix(tok, "svc_") || len(tok) != 36 || strings.Contains(tok, "_live_") {
		t.Fatalf("service token %q: want svc_ and 32 characters", tok)
	}
	st := r.json["service_token"].(map[string]any)
	if sc, _ := json.Marshal(st["scopes"]); string(sc) != `["program_applications:create"]` || st["is_active"] != true {
		t.Fatalf("service token: %s", r.body)
	}
	return st["id"].(string), tok
}

// storedApplications counts the program applications in the store.
func storedApplications(t *testing.T, b *bundle) int {
	t.Helper()
	var n int
	if err := b.db.View(func(tx *store.Tx) error {
		all, err := store.ProgramApplications.All(tx, nil)
		n = len(all)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestProgramApplicationCredentials: POST /v1/program-applications takes a service token and nothing
// else (no credential, an unknown or revoked token → 401; an API key with every scope, the owner's and an
// operator's sessions → 403; nothing stored), and a service token is refused on every other kind of route.
// Tokens are minted, listed and revoked by operators only; the store keeps their hash, not the plaintext.
func TestProgramApplicationCredentials(t *testing.T) {
	t.Parallel()
	b := setup(t)
	operator, owner := b.session("platform-admin"), b.session("owner")
	if r := b.do("POST", "/v1/service-tokens", owner, map[string]any{"name": "x"}); r.status != http.StatusForbidden {
		t.Errorf("an owner mints a service token: %d %s", r.status, r.body)
	}
	if r := b.do("POST", "/v1/service-tokens", b.adminKey, map[string]any{"name": "x"}); r.status != http.StatusForbidden {
		t.Errorf("an API key mints a service token: %d %s", r.status, r.body)
	}
	id, tok := mintServiceToken(t, b, operator, "www")
	revokedID, revoked := mintServiceToken(t, b, operator, "old www")
	if r := b.do("DELETE", "/v1/service-tokens/"+revokedID, operator, nil); r.status != http.StatusOK || r.json["service_token"].(map[string]any)["is_active"] != false {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	if r := b.do("DELETE", "/v1/service-tokens/"+revokedID, operator, nil); r.status != http.StatusConflict {
		t.Errorf("revoke twice: %d %s", r.status, r.body)
	}
	if err := b.db.View(func(tx *store.Tx) error {
		st, err := store.ServiceTokens.Get(tx, id)
		if err == nil && (st.TokenHash == tok || strings.Contains(st.TokenHash, tok[4:])) {
			t.Errorf("the store keeps the plaintext: %+v", st)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if r := b.do("GET", "/v1/service-tokens", operator, nil); r.status != http.StatusOK || len(r.json["service_tokens"].([]any)) != 2 {
		t.Errorf("list: %d %s", r.status, r.body)
	}

	body := programApplication("ada@example.com")
	for _, c := range []struct {
		what, cred string
		want       int
		says       string
	}{
		{"no credential", "", http.StatusUnauthorized, "missing credentials"},
		{"an unknown service token", "svc_0000000000000000000000000000000000", http.StatusUnauthorized, "invalid service token"},
		{"a revoked service token", revoked, http.StatusUnauthorized, "revoked"},
		{"an API key with every scope", b.adminKey, http.StatusForbidden, "service token"},
		{"the owner's session", owner, http.StatusForbidden, "service token"},
		{"an operator's session", operator, http.StatusForbidden, "service token"},
	} {
		r := b.do("POST", "/v1/program-applications", c.cred, body)
		if msg, _ := r.json["error"].(string); r.status != c.want || !strings.Contains(msg, c.says) {
			t.Errorf("%s: %d %s, want %d saying %q", c.what, r.status, r.body, c.want, c.says)
		}
	}
	if n := storedApplications(t, b); n != 0 {
		t.Fatalf("%d applications stored by refused callers", n)
	}

	// A service token on other routes: an organization's, a key-or-session one, an operator's, the
	// review of applications, the tokens' own.
	for _, c := range [][2]string{{"GET", "/v1/me"}, {"GET", "/v1/organizations/" + b.org.ID}, {"GET", "/v1/projects"},
		{"GET", "/v1/organizations"}, {"GET", "/v1/program-applications"}, {"POST", "/v1/service-tokens"}} {
		r := b.do(c[0], c[1], tok, nil)
		if msg, _ := r.json["error"].(string); r.status != http.StatusForbidden || !strings.Contains(msg, "only submits program applications") {
			t.Errorf("a service token on %s %s: %d %s", c[0], c[1], r.status, r.body)
		}
	}

	r := b.do("POST", "/v1/program-applications", tok, body)
	if r.status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	app := r.json["program_application"].(map[string]any)
	if app["status"] != "received" || app["email"] != "ada@example.com" || app["team_size"] != 4.0 || app["service_token_id"] != id ||
		app["decided_at"] != nil || app["discount_id"] != "" {
		t.Errorf("application: %s", r.body)
	}
	// Revoked after use: refused at once.
	if r := b.do("DELETE", "/v1/service-tokens/"+id, operator, nil); r.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	if r := b.do("POST", "/v1/program-applications", tok, programApplication("other@example.com")); r.status != http.StatusUnauthorized {
		t.Errorf("a token revoked after use: %d %s", r.status, r.body)
	}
	if n := storedApplications(t, b); n != 1 {
		t.Errorf("%d applications stored, want 1", n)
	}
}

// TestProgramApplicationValidation: the spec's rules and the documented bounds, each a 400 that stores
// nothing; an application from the same e-mail (in any case) within 24 hours is a 409 naming the first,
// and one a day later is received.
func TestProgramApplicationValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, tok := mintServiceToken(t, b, b.session("platform-admin"), "www")
	with := func(k string, v any) map[string]any {
		m := programApplication("grace@example.com")
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for _, c := range []struct {
		what string
		body any
		says string
	}{
		{"team_size 0", with("team_size", 0), "team_size"},
		{"team_size -3", with("team_size", -3), "team_size"},
		{"team_size not an integer", with("team_size", "four"), "team_size"},
		{"no company_name", with("company_name", nil), "company_name"},
		{"empty company_name", with("company_name", "  "), "company_name"},
		{"no contact_name", with("contact_name", nil), "contact_name"},
		{"no email", with("email", nil), "email"},
		{"no segment", with("segment", nil), "segment"},
		{"no use_case", with("use_case", nil), "use_case"},
		{"no program", with("program", nil), "program"},
		{"no team_size", with("team_size", nil), "team_size"},
		{"an unknown program", with("program", "bogus"), "program"},
		{"an e-mail without @", with("email", "grace.example.com"), "email"},
		{"an e-mail with a display name", with("email", "Grace <grace@example.com>"), "email"},
		{"two e-mails", with("email", "grace@example.com, ada@example.com"), "email"},
		{"an e-mail without a domain name", with("email", "grace@localhost"), "email"},
		{"a too long e-mail", with("email", strings.Repeat("g", 250)+"@example.com"), "email"},
		{"a too long company_name", with("company_name", strings.Repeat("x", 201)), "company_name"},
		{"a too long use_case", with("use_case", strings.Repeat("x", 2001)), "use_case"},
		{"a control character", with("contact_name", "Grace\x00Hopper"), "contact_name"},
		{"a website that is no URL", with("company_website", "javascript:alert(1)"), "company_website"},
		{"a bad locale", with("locale", "en_US!"), "locale"},
		{"an unknown field", with("favourite_colour", "blue"), "favourite_colour"},
	} {
		r := b.do("POST", "/v1/program-applications", tok, c.body)
		if msg, _ := r.json["error"].(string); r.status != http.StatusBadRequest || !strings.Contains(msg, c.says) {
			t.Errorf("%s: %d %s, want 400 naming %s", c.what, r.status, r.body, c.says)
		}
	}
	if n := storedApplications(t, b); n != 0 {
		t.Fatalf("%d applications stored from invalid bodies", n)
	}

	full := with("company_website", "https://grace.example.com")
	full["locale"], full["referral_source"], full["use_case"] = "pt-BR", "a podcast", "Line one.\nLine two."
	r := b.do("POST", "/v1/program-applications", tok, full)
	if r.status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	first := r.json["program_application"].(map[string]any)["id"].(string)
	r = b.do("POST", "/v1/program-applications", tok, with("email", "GRACE@Example.com"))
	if msg, _ := r.json["error"].(string); r.status != http.StatusConflict || !strings.Contains(msg, first) {
		t.Errorf("a second application within a day: %d %s, want 409 naming %s", r.status, r.body, first)
	}
	if n := storedApplications(t, b); n != 1 {
		t.Fatalf("%d applications stored, want 1", n)
	}
	b.env.Clock.Set(func() time.Time { return time.Now().Add(25 * time.Hour) })
	if r := b.do("POST", "/v1/program-applications", tok, full); r.status != http.StatusCreated {
		t.Errorf("an application a day later: %d %s", r.status, r.body)
	}
}

// TestProgramApplicationRateLimit: each service token has its own bucket, taken before the fields are
// judged (an invalid submission counts): past it a 429 with Retry-After that stores nothing, while another token still submits.
func TestProgramApplicationRateLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{limits: RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6},
		programRate: appliance.ProgramApplicationRate{Every: time.Hour, Burst: 3}})
	operator := b.session("platform-admin")
	_, tok := mintServiceToken(t, b, operator, "www")
	_, other := mintServiceToken(t, b, operator, "partners site")
	for i, email := range []string{"a@example.com", "b@example.com"} {
		if r := b.do("POST", "/v1/program-applications", tok, programApplication(email)); r.status != http.StatusCreated {
			t.Fatalf("submission %d: %d %s", i, r.status, r.body)
		}
	}
	invalid := programApplication("d@example.com")
	invalid["team_size"] = 0
	if r := b.do("POST", "/v1/program-applications", tok, invalid); r.status != http.StatusBadRequest {
		t.Fatalf("an invalid submission: %d %s", r.status, r.body)
	}
	r := b.do("POST", "/v1/program-applications", tok, programApplication("c@example.com"))
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
		t.Fatalf("past the token's rate: %d %v %s", r.status, r.header, r.body)
	}
	if n := storedApplications(t, b); n != 2 {
		t.Errorf("%d applications stored, want 2", n)
	}
	if r := b.do("POST", "/v1/program-applications", other, programApplication("c@example.com")); r.status != http.StatusCreated {
		t.Errorf("another token: %d %s", r.status, r.body)
	}
}

// hookReceiver records the event types of the webhook deliveries it gets.
type hookReceiver struct {
	mu     sync.Mutex
	events map[string]map[string]any // type → data
	got    chan struct{}
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ev struct {
		Type string         `json:"type"`
		Data map[string]any `json:"data"`
	}
	raw, _ := io.ReadAll(r.Body)
	if json.Unmarshal(raw, &ev) == nil {
		h.mu.Lock()
		h.events[ev.Type] = ev.Data
		h.mu.Unlock()
		select {
		case h.got <- struct{}{}:
		default:
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// waitEvents waits until every one of types was delivered, and returns their data.
func (h *hookReceiver) waitEvents(t *testing.T, types ...string) map[string]map[string]any {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		h.mu.Lock()
		have := 0
		for _, typ := range types {
			if _, ok := h.events[typ]; ok {
				have++
			}
		}
		h.mu.Unlock()
		if have == len(types) {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.events
		}
		select {
		case <-h.got:
		case <-deadline:
			t.Fatalf("webhook events %v not all delivered in 2 minutes: %v", types, h.events)
		}
	}
}

// TestProgramApplicationReview: operators list (by status), get, approve (a coupon and its promotion code
// made at stripe-mock, recorded with the decision) and reject applications; a second decision is a 409;
// everything is audited, and program_application.received, .approved and .rejected reach a webhook
// endpoint of the platform organization (the one made at the first start).
func TestProgramApplicationReview(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{limits: RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}, billing: stripeProvider(t)})
	b.env.StartWebhooks(t)
	hooks := &hookReceiver{events: map[string]map[string]any{}, got: make(chan struct{}, 1)}
	url := b.env.Serve(t, hooks)
	if r := b.do("POST", "/v1/organizations/"+b.org.ID+"/webhook-endpoints", b.adminKey, map[string]any{"url": url,
		"event_types": []string{"program_application.received", "program_application.approved", "program_application.rejected"}}); r.status != http.StatusCreated {
		t.Fatalf("webhook endpoint: %d %s", r.status, r.body)
	}
	operator, owner := b.session("platform-admin"), b.session("owner")
	me := b.do("GET", "/v1/me", operator, nil)
	operatorID, _ := me.json["principal"].(map[string]any)["user_id"].(string)
	if operatorID == "" {
		t.Fatalf("me: %s", me.body)
	}
	_, tok := mintServiceToken(t, b, operator, "www")
	submit := func(email string) string {
		r := b.do("POST", "/v1/program-applications", tok, programApplication(email))
		if r.status != http.StatusCreated {
			t.Fatalf("submit: %d %s", r.status, r.body)
		}
		return r.json["program_application"].(map[string]any)["id"].(string)
	}
	yes, no := submit("yes@example.com"), submit("no@example.com")

	if r := b.do("GET", "/v1/program-applications", owner, nil); r.status != http.StatusForbidden {
		t.Errorf("an owner lists applications: %d %s", r.status, r.body)
	}
	if r := b.do("POST", "/v1/program-applications/"+yes+"/approve", owner, map[string]any{"percent_off": 50}); r.status != http.StatusForbidden {
		t.Errorf("an owner approves: %d %s", r.status, r.body)
	}
	list := func(status string) []any {
		t.Helper()
		r := b.do("GET", "/v1/program-applications?status="+status, operator, nil)
		if r.status != http.StatusOK {
			t.Fatalf("list %s: %d %s", status, r.status, r.body)
		}
		return r.json["program_applications"].([]any)
	}
	if got := list("received"); len(got) != 2 || got[0].(map[string]any)["id"] != no {
		t.Errorf("received, newest first: %v", got)
	}
	if r := b.do("GET", "/v1/program-applications?status=pending", operator, nil); r.status != http.StatusBadRequest {
		t.Errorf("an unknown status: %d %s", r.status, r.body)
	}
	if r := b.do("GET", "/v1/program-applications/pap_nope", operator, nil); r.status != http.StatusNotFound {
		t.Errorf("get an unknown application: %d %s", r.status, r.body)
	}

	for _, bad := range []map[string]any{{"percent_off": 0}, {"percent_off": 101}, {"percent_off": 10, "duration_months": -1},
		{"percent_off": 10, "code": "has space"}, {}} {
		if r := b.do("POST", "/v1/program-applications/"+yes+"/approve", operator, bad); r.status != http.StatusBadRequest {
			t.Errorf("approve with %v: %d %s", bad, r.status, r.body)
		}
	}
	r := b.do("POST", "/v1/program-applications/"+yes+"/approve", operator, map[string]any{"percent_off": 50, "duration_months": 12,
		"code": "ACME50", "operator_note": "Welcome aboard."})
	if r.status != http.StatusOK {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	app := r.json["program_application"].(map[string]any)
	if app["status"] != "approved" || app["discount_id"] == "" || app["discount_code"] == "" || app["decided_by_user_id"] != operatorID ||
		app["decided_at"] == nil || app["operator_note"] != "Welcome aboard." {
		t.Errorf("approved: %s", r.body)
	}
	// The discount exists at the provider.
	if d, err := b.svc.Billing().GetDiscount(t.Context(), app["discount_id"].(string)); err != nil || d.ID == "" {
		t.Errorf("the recorded discount at the provider: %+v, %v", d, err)
	}
	got := b.do("GET", "/v1/program-applications/"+yes, operator, nil)
	if got.status != http.StatusOK || got.json["program_application"].(map[string]any)["discount_id"] != app["discount_id"] {
		t.Errorf("get: %d %s", got.status, got.body)
	}
	for _, again := range []struct{ path, says string }{{"/approve", "approved already"}, {"/reject", "approved already"}} {
		r := b.do("POST", "/v1/program-applications/"+yes+again.path, operator, map[string]any{"percent_off": 10})
		if again.path == "/reject" {
			r = b.do("POST", "/v1/program-applications/"+yes+again.path, operator, map[string]any{"operator_note": "no"})
		}
		if msg, _ := r.json["error"].(string); r.status != http.StatusConflict || !strings.Contains(msg, again.says) {
			t.Errorf("decide twice (%s): %d %s", again.path, r.status, r.body)
		}
	}

	r = b.do("POST", "/v1/program-applications/"+no+"/reject", operator, map[string]any{"operator_note": "Not a startup."})
	if r.status != http.StatusOK {
		t.Fatalf("reject: %d %s", r.status, r.body)
	}
	if app := r.json["program_application"].(map[string]any); app["status"] != "rejected" || app["operator_note"] != "Not a startup." ||
		app["discount_id"] != "" || app["decided_by_user_id"] != operatorID {
		t.Errorf("rejected: %s", r.body)
	}
	if r := b.do("POST", "/v1/program-applications/"+no+"/reject", operator, map[string]any{}); r.status != http.StatusConflict {
		t.Errorf("reject twice: %d %s", r.status, r.body)
	}
	if got := list("approved"); len(got) != 1 || got[0].(map[string]any)["id"] != yes {
		t.Errorf("approved: %v", got)
	}
	if got := list("rejected"); len(got) != 1 || got[0].(map[string]any)["id"] != no {
		t.Errorf("rejected: %v", got)
	}

	// Audited, under the platform organization.
	audit := b.do("GET", "/v1/organizations/"+b.org.ID+"/audit-events?limit=50", b.adminKey, nil)
	actions := map[string]bool{}
	for _, e := range audit.json["audit_events"].([]any) {
		actions[e.(map[string]any)["action"].(string)] = true
	}
	for _, a := range []string{"service_token.create", "program_application.receive", "program_application.approve", "program_application.reject"} {
		if !actions[a] {
			t.Errorf("no audit event %s: %v", a, actions)
		}
	}

	events := hooks.waitEvents(t, "program_application.received", "program_application.approved", "program_application.rejected")
	if a := events["program_application.approved"]["program_application"].(map[string]any); a["id"] != yes || a["discount_code"] == "" {
		t.Errorf("approved event: %v", a)
	}
	if a := events["program_application.rejected"]["program_application"].(map[string]any); a["id"] != no {
		t.Errorf("rejected event: %v", a)
	}
}

// TestProgramApplicationApproveWithoutBilling: with billing off, an approval is a 409 that says so and
// changes nothing; a rejection still works.
func TestProgramApplicationApproveWithoutBilling(t *testing.T) {
	t.Parallel()
	b := setup(t)
	operator := b.session("platform-admin")
	_, tok := mintServiceToken(t, b, operator, "www")
	r := b.do("POST", "/v1/program-applications", tok, programApplication("nobilling@example.com"))
	if r.status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	id := r.json["program_application"].(map[string]any)["id"].(string)
	r = b.do("POST", "/v1/program-applications/"+id+"/approve", operator, map[string]any{"percent_off": 20})
	if msg, _ := r.json["error"].(string); r.status != http.StatusConflict || !strings.Contains(msg, "billing is not configured") {
		t.Errorf("approve without billing: %d %s", r.status, r.body)
	}
	got := b.do("GET", "/v1/program-applications/"+id, operator, nil)
	if a := got.json["program_application"].(map[string]any); a["status"] != "received" || a["discount_id"] != "" || a["decided_at"] != nil {
		t.Errorf("after a refused approval: %s", got.body)
	}
	if r := b.do("POST", "/v1/program-applications/"+id+"/reject", operator, map[string]any{"operator_note": "later"}); r.status != http.StatusOK {
		t.Errorf("reject without billing: %d %s", r.status, r.body)
	}
}
