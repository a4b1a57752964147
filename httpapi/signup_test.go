package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/billing"
	"github.com/theappliance/appliance/appliance/billing/stripetest"
	"github.com/theappliance/appliance/store"
)

// counts are the users, organizations, sessions, sign-up invites and referrals stored.
func (b *bundle) counts() [5]int {
	b.t.Helper()
	var c [5]int
	err := b.db.View(func(tx *store.Tx) error {
		u, err := store.Users.All(tx, nil)
		if err != nil {
			return err
		}
		o, err := store.Organizations.All(tx, nil)
		if err != nil {
			return err
		}
		s, err := store.Sessions.All(tx, nil)
		if err != nil {
			return err
		}
		i, err := store.SignupInvites.All(tx, nil)
		if err != nil {
			return err
		}
		r, err := store.Referrals.All(tx, nil)
		c = [5]int{len(u), len(o), len(s), len(i), len(r)}
		return err
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return c
}

func (b *bundle) signup(body map[string]any) *response {
	b.t.Helper()
	return b.do("POST", "/v1/signup", "", body)
}

// TestSignupModes: closed refuses with a clear 403; open takes anyone (a user, an organization they own, a
// session that works, audited; the dashboard's cookie); bad input is a JSON 4xx that stores nothing;
// invite needs an operator's invite (minted, listed, revoked by operators only), used once, before it
// expires, by the e-mail it names; sign-up is rate-limited per client address as sign-in is.
func TestSignupModes(t *testing.T) {
	b := setup(t)
	ten := b.svc.Tenancy()
	if r := b.do("GET", "/v1/signup", "", nil); r.status != http.StatusOK || r.json["mode"] != "closed" {
		t.Fatalf("GET /v1/signup: %d %s", r.status, r.body)
	}
	good := func(email string) map[string]any {
		return map[string]any{"email": email, "password": "a long enough password", "organization_name": "Founders Inc"}
	}

	// Closed (the default).
	before := b.counts()
	r := b.signup(good("first@example.com"))
	if r.status != http.StatusForbidden || !strings.Contains(fmt.Sprint(r.json["error"]), "sign-up is closed") {
		t.Fatalf("closed: %d %s", r.status, r.body)
	}
	if after := b.counts(); after != before {
		t.Fatalf("a refused sign-up stored something: %v → %v", before, after)
	}

	// Open: bad input first, each a JSON 4xx storing nothing.
	if err := ten.SetSignupMode("open"); err != nil {
		t.Fatal(err)
	}
	if err := ten.SetSignupMode("sometimes"); err == nil {
		t.Fatal("SetSignupMode took an unknown mode")
	}
	for name, c := range map[string]struct {
		body   any
		status int
		msg    string
	}{
		"bad email":      {map[string]any{"email": "not-an-email", "password": "a long enough password", "organization_name": "X Co"}, 400, "email"},
		"short password": {map[string]any{"email": "a@example.com", "password": "short", "organization_name": "X Co"}, 400, "password"},
		"no org name":    {map[string]any{"email": "a@example.com", "password": "a long enough password", "organization_name": "  "}, 400, "organization_name"},
		"not JSON":       {"{nope", 400, ""},
		"unknown field":  {map[string]any{"email": "a@example.com", "password": "a long enough password", "organization_name": "X Co", "plan": "scale"}, 400, ""},
		"existing user":  {good(appliance.BootstrapOwnerEmail), 409, "exists"},
	} {
		r := b.call(t, "POST", "/v1/signup", nil, c.body)
		if r.status != c.status || r.json["error"] == nil || !strings.Contains(fmt.Sprint(r.json["error"]), c.msg) {
			t.Errorf("%s: %d %s, want %d naming %q", name, r.status, r.body, c.status, c.msg)
		}
	}
	if after := b.counts(); after != before {
		t.Fatalf("bad sign-ups stored something: %v → %v", before, after)
	}

	r = b.signup(good("First@Example.com"))
	if r.status != http.StatusCreated || r.json["referral_code_status"] != "none" || r.json["referral"] != nil {
		t.Fatalf("open sign-up: %d %s", r.status, r.body)
	}
	org := r.json["organization"].(map[string]any)
	sess := r.json["session"].(map[string]any)
	if org["name"] != "Founders Inc" || org["slug"] != "founders-inc" || sess["organization_id"] != org["id"] || sess["role"] != "owner" || sess["token"] == "" {
		t.Fatalf("signed up: %s", r.body)
	}
	me := b.do("GET", "/v1/me", sess["token"].(string), nil)
	if me.status != http.StatusOK || me.json["principal"].(map[string]any)["organization_id"] != org["id"] ||
		me.json["principal"].(map[string]any)["idp_organization_role"] != "owner" {
		t.Fatalf("the new session: %d %s", me.status, me.body)
	}
	// The new owner may act in their organization, and only there.
	if r := b.do("GET", "/v1/organizations/"+org["id"].(string)+"/members", sess["token"].(string), nil); r.status != http.StatusOK {
		t.Fatalf("the owner lists their members: %d %s", r.status, r.body)
	}
	if r := b.do("GET", "/v1/organizations/"+b.org.ID, sess["token"].(string), nil); r.status != http.StatusForbidden && r.status != http.StatusNotFound {
		t.Fatalf("the new owner reads another organization: %d %s", r.status, r.body)
	}
	audited := false
	for _, e := range b.auditEvents() {
		if e.Action == "organization.signup" && e.OrganizationID == org["id"] && e.ActorID == r.json["user_id"] {
			audited = true
		}
	}
	if !audited {
		t.Error("no organization.signup audit event by the new user")
	}
	// The same organization name again: a slug of its own.
	body := good("second@example.com")
	body["cookie"] = true
	r = b.signup(body)
	if r.status != http.StatusCreated || r.json["session"].(map[string]any)["token"] != "" || !strings.Contains(r.header.Get("Set-Cookie"), SessionCookie+"=ses_") {
		t.Fatalf("sign-up with cookie: %d %s %v", r.status, r.body, r.header)
	}
	if slug := r.json["organization"].(map[string]any)["slug"]; slug == "founders-inc" {
		t.Fatalf("a second organization of the same name took the first's slug")
	}

	// Invite.
	if err := ten.SetSignupMode("invite"); err != nil {
		t.Fatal(err)
	}
	before = b.counts()
	for name, tok := range map[string]string{"no invite": "", "unknown invite": "sgi_notatoken"} {
		body := good("third@example.com")
		body["invite_token"] = tok
		if r := b.signup(body); r.status != http.StatusForbidden || !strings.Contains(fmt.Sprint(r.json["error"]), "invite") {
			t.Errorf("%s: %d %s", name, r.status, r.body)
		}
	}
	if after := b.counts(); after != before {
		t.Fatalf("refused sign-ups stored something: %v → %v", before, after)
	}
	op := b.session("platform-admin")
	member := b.session("owner")
	if r := b.do("POST", "/v1/signup-invites", member, map[string]any{}); r.status != http.StatusForbidden {
		t.Fatalf("an organization owner minted a sign-up invite: %d %s", r.status, r.body)
	}
	if r := b.do("POST", "/v1/signup-invites", op, map[string]any{"expires_in_hours": 100000}); r.status != http.StatusBadRequest {
		t.Fatalf("an invite for 100000 hours: %d %s", r.status, r.body)
	}
	mint := func(req map[string]any) (id, token string) {
		t.Helper()
		r := b.do("POST", "/v1/signup-invites", op, req)
		if r.status != http.StatusCreated {
			t.Fatalf("mint an invite: %d %s", r.status, r.body)
		}
		token = r.json["token"].(string)
		if !strings.HasSuffix(r.json["url"].(string), "/signup?invite="+token) || r.json["signup_invite"].(map[string]any)["state"] != "pending" {
			t.Fatalf("minted: %s", r.body)
		}
		return r.json["signup_invite"].(map[string]any)["id"].(string), token
	}
	id1, tok1 := mint(map[string]any{"note": "for Third"})
	var stored *store.SignupInvite
	b.db.View(func(tx *store.Tx) (err error) { stored, err = store.SignupInvites.Get(tx, id1); return err })
	if stored == nil || strings.Contains(stored.TokenHash, tok1) || stored.TokenHash == "" {
		t.Fatalf("the invite's token is not kept hashed: %+v", stored)
	}
	body = good("third@example.com")
	body["invite_token"] = tok1
	if r := b.signup(body); r.status != http.StatusCreated {
		t.Fatalf("sign-up with an invite: %d %s", r.status, r.body)
	}
	body = good("fourth@example.com")
	body["invite_token"] = tok1
	if r := b.signup(body); r.status != http.StatusForbidden || !strings.Contains(fmt.Sprint(r.json["error"]), "used") {
		t.Fatalf("an invite used twice: %d %s", r.status, r.body)
	}
	id2, tok2 := mint(map[string]any{})
	if r := b.do("DELETE", "/v1/signup-invites/"+id2, op, nil); r.status != http.StatusOK || r.json["signup_invite"].(map[string]any)["state"] != "revoked" {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	if r := b.do("DELETE", "/v1/signup-invites/"+id2, op, nil); r.status != http.StatusConflict {
		t.Fatalf("revoke twice: %d %s", r.status, r.body)
	}
	body["invite_token"] = tok2
	if r := b.signup(body); r.status != http.StatusForbidden || !strings.Contains(fmt.Sprint(r.json["error"]), "revoked") {
		t.Fatalf("a revoked invite: %d %s", r.status, r.body)
	}
	_, tok3 := mint(map[string]any{"email": "named@example.com"})
	body["invite_token"] = tok3
	if r := b.signup(body); r.status != http.StatusForbidden || !strings.Contains(fmt.Sprint(r.json["error"]), "another e-mail") {
		t.Fatalf("another's invite: %d %s", r.status, r.body)
	}
	_, tok4 := mint(map[string]any{"expires_in_hours": 1})
	later := time.Now().Add(2 * time.Hour)
	b.env.Clock.Set(func() time.Time { return later })
	body["invite_token"] = tok4
	if r := b.signup(body); r.status != http.StatusForbidden || !strings.Contains(fmt.Sprint(r.json["error"]), "expired") {
		t.Fatalf("an expired invite: %d %s", r.status, r.body)
	}
	b.env.Clock.Set(time.Now)
	r = b.do("GET", "/v1/signup-invites", op, nil)
	if r.status != http.StatusOK {
		t.Fatalf("list invites: %d %s", r.status, r.body)
	}
	states := map[string]string{}
	for _, x := range r.json["signup_invites"].([]any) {
		inv := x.(map[string]any)
		states[inv["id"].(string)] = inv["state"].(string)
		if inv["id"] == id1 && (inv["organization_id"] == "" || inv["used_by_user_id"] == "") {
			t.Errorf("the used invite does not name its organization and user: %v", inv)
		}
	}
	if len(states) != 4 || states[id1] != "used" || states[id2] != "revoked" {
		t.Fatalf("invites: %v", states)
	}

	// Rate-limited per client address, as sign-in is (the strict bucket).
	lim := setup(t, setupOpts{limits: RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 0.001, StrictBurst: 2}})
	lim.svc.Tenancy().SetSignupMode("open")
	codes := []int{}
	for i := range 3 {
		codes = append(codes, lim.signup(good(fmt.Sprintf("rate%d@example.com", i))).status)
	}
	if codes[0] != http.StatusCreated || codes[2] != http.StatusTooManyRequests {
		t.Fatalf("three sign-ups in a row from one address: %v, want 201 first and 429 last", codes)
	}
}

// stripeFront is stripe-mock behind a proxy that answers Stripe's resource_missing 404 for coupons named
// missing_* (stripe-mock answers every id with its fixture), fails the next coupon creations on demand with
// Stripe's error, and counts the coupons made.
type stripeFront struct {
	mu       sync.Mutex
	failNext int
	coupons  int
}

func (f *stripeFront) provider(t *testing.T) appliance.BillingProvider {
	t.Helper()
	target, err := url.Parse(stripetest.Start(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		switch {
		case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/coupons/missing_"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"error":{"type":"invalid_request_error","code":"resource_missing","param":"id","message":"No such coupon: '%s'"}}`, strings.TrimPrefix(r.URL.Path, "/v1/coupons/"))
			return
		case r.Method == http.MethodPost && r.URL.Path == "/v1/coupons" && f.failNext > 0:
			f.failNext--
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":{"type":"invalid_request_error","message":"injected failure"}}`)
			return
		case r.Method == http.MethodPost && r.URL.Path == "/v1/coupons":
			f.coupons++
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p, err := billing.NewStripe(billing.StripeConfig{SecretKey: "sk_test_fixture", WebhookSecret: testWebhookSecret, URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (f *stripeFront) made() int { f.mu.Lock(); defer f.mu.Unlock(); return f.coupons }

// TestReferralEndToEnd: against stripe-mock, an organization makes its referral code (one: a second POST
// returns it) and sets its discount (an unknown one is 400 and changes nothing); an organization signs up
// with the code; its subscription and first paid invoice arrive as signed Stripe webhooks; the referrer is
// rewarded with a discount at the provider (after a failed provider call, retried), exactly once (a
// replayed invoice.paid and a second invoice reward nothing); a self-referral is void; an unknown code
// lets the sign-up through, reported invalid; a cancellation or a refund within the first period voids.
func TestReferralEndToEnd(t *testing.T) {
	front := &stripeFront{}
	b := setup(t, setupOpts{limits: RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}, billing: front.provider(t)})
	ctx := context.Background()
	if _, err := b.svc.Billing().EnsureCustomers(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.svc.Tenancy().SetSignupMode("open"); err != nil {
		t.Fatal(err)
	}
	codePath := "/v1/organizations/" + b.org.ID + "/referral-code"
	if r := b.do("GET", codePath, b.adminKey, nil); r.status != http.StatusOK || r.json["referral_code"] != nil {
		t.Fatalf("GET before a code: %d %s", r.status, r.body)
	}
	reader := b.key("", appliance.ScopeOrganizationsRead)
	if r := b.do("POST", codePath, reader, map[string]any{}); r.status != http.StatusForbidden {
		t.Fatalf("POST with organizations:read only: %d %s", r.status, r.body)
	}
	r := b.do("POST", codePath, b.adminKey, map[string]any{})
	if r.status != http.StatusOK {
		t.Fatalf("create the code: %d %s", r.status, r.body)
	}
	rc := r.json["referral_code"].(map[string]any)
	code := rc["code"].(string)
	if len(code) < 6 || rc["organization_id"] != b.org.ID || rc["discount_id"] != "" || !strings.HasSuffix(rc["signup_url"].(string), "/signup?ref="+code) {
		t.Fatalf("code: %s", r.body)
	}
	if r := b.do("POST", codePath, b.adminKey, map[string]any{"locale": "de"}); r.status != http.StatusOK || r.json["referral_code"].(map[string]any)["code"] != code {
		t.Fatalf("a second POST: %d %s, want the same code", r.status, r.body)
	}
	if r := b.do("POST", codePath, b.adminKey, map[string]any{"locale": "not a locale!"}); r.status != http.StatusBadRequest {
		t.Fatalf("bad locale: %d %s", r.status, r.body)
	}
	for _, bad := range []map[string]any{{"discount_id": "missing_coupon"}, {"discount_id": ""}, {}} {
		if r := b.do("PATCH", codePath, b.adminKey, bad); r.status != http.StatusBadRequest || r.json["error"] == nil {
			t.Fatalf("PATCH %v: %d %s, want 400", bad, r.status, r.body)
		}
	}
	if r := b.do("GET", codePath, reader, nil); r.status != http.StatusOK || r.json["referral_code"].(map[string]any)["discount_id"] != "" {
		t.Fatalf("after refused PATCHes: %d %s", r.status, r.body)
	}
	if r := b.do("PATCH", codePath, b.adminKey, map[string]any{"discount_id": "co_referred"}); r.status != http.StatusOK || r.json["referral_code"].(map[string]any)["discount_id"] != "co_referred" {
		t.Fatalf("PATCH a discount: %d %s", r.status, r.body)
	}

	signup := func(email, code string) (orgID, customer string, res *response) {
		t.Helper()
		res = b.signup(map[string]any{"email": email, "password": "a long enough password", "organization_name": "Referred " + email[:4], "referral_code": code})
		if res.status != http.StatusCreated {
			t.Fatalf("sign-up of %s: %d %s", email, res.status, res.body)
		}
		orgID = res.json["organization"].(map[string]any)["id"].(string)
		b.db.View(func(tx *store.Tx) error {
			o, err := store.Organizations.Get(tx, orgID)
			if err == nil {
				customer = o.BillingCustomerID
			}
			return err
		})
		if !strings.HasPrefix(customer, "cus_") {
			t.Fatalf("the signed-up organization has no Stripe customer: %q", customer)
		}
		return orgID, customer, res
	}
	deliver := func(payload []byte, outcome string) {
		t.Helper()
		r := b.call(t, "POST", "/v1/billing/stripe/webhook", http.Header{"Stripe-Signature": {stripetest.Sign(payload, testWebhookSecret)}}, string(payload))
		if r.status != http.StatusOK || r.json["outcome"] != outcome {
			t.Fatalf("webhook: %d %s, want outcome %s", r.status, r.body, outcome)
		}
	}
	referrals := func() map[string]map[string]any {
		t.Helper()
		r := b.do("GET", "/v1/organizations/"+b.org.ID+"/referrals", reader, nil)
		if r.status != http.StatusOK {
			t.Fatalf("list referrals: %d %s", r.status, r.body)
		}
		out := map[string]map[string]any{}
		for _, x := range r.json["referrals"].([]any) {
			ref := x.(map[string]any)
			out[ref["referred_organization_id"].(string)] = ref
		}
		return out
	}

	// The sign-up with the code (typed in lower case): a pending referral.
	referred, cus, res := signup("ada@startup.example", strings.ToLower(code))
	if res.json["referral_code_status"] != "applied" || res.json["referral"].(map[string]any)["status"] != "pending" {
		t.Fatalf("sign-up with the code: %s", res.body)
	}
	ref := referrals()[referred]
	if ref == nil || ref["status"] != "pending" || ref["code"] != code || ref["referrer_organization_id"] != b.org.ID {
		t.Fatalf("the referral: %v", ref)
	}

	// Its subscription, then its first paid invoice (the provider's first try fails: retried).
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	end := t0.Add(30 * 24 * time.Hour).UTC()
	deliver(stripetest.Subscription{EventID: "evt_ref_sub", Type: "customer.subscription.created", Customer: cus, ID: "sub_ref",
		Status: "active", LookupKey: "pro", Product: "prod_pro", Created: t0, PeriodEnd: end}.JSON(), billing.OutcomeApplied)
	if ref := referrals()[referred]; ref["referred_subscription_id"] != "sub_ref" || ref["status"] != "pending" {
		t.Fatalf("after the subscription: %v", ref)
	}
	front.mu.Lock()
	front.failNext = 1
	front.mu.Unlock()
	paid := stripetest.Invoice{EventID: "evt_ref_paid", Type: "invoice.paid", Customer: cus, ID: "in_ref_1", Subscription: "sub_ref", Created: t0.Add(time.Minute)}.JSON()
	deliver(paid, billing.OutcomeUnchanged) // the billing fields were active already
	b.svc.Referrals().PayRewards(ctx)       // one of this pass and the commit's own fails, once
	if _, err := b.svc.Referrals().PayRewards(ctx); err != nil {
		t.Fatalf("the retried reward: %v", err)
	}
	ref = referrals()[referred]
	if ref["status"] != "rewarded" || ref["reward_discount_id"] == "" || ref["rewarded_at"] == nil {
		t.Fatalf("after the first paid invoice: %v", ref)
	}
	var rec *store.Referral
	b.db.View(func(tx *store.Tx) (err error) { rec, err = store.Referrals.Get(tx, ref["id"].(string)); return err })
	if rec.RewardAttempts < 1 || rec.RewardError != "" || rec.RewardDue {
		t.Fatalf("the reward's record: attempts %d, error %q, due %v (want the failed try counted)", rec.RewardAttempts, rec.RewardError, rec.RewardDue)
	}
	if n := front.made(); n != 1 {
		t.Fatalf("%d coupons made at the provider, want 1", n)
	}
	// A replay and a second invoice reward nothing again.
	deliver(paid, billing.OutcomeDuplicate)
	deliver(stripetest.Invoice{EventID: "evt_ref_paid2", Type: "invoice.paid", Customer: cus, ID: "in_ref_2", Subscription: "sub_ref", Created: t0.Add(2 * time.Minute)}.JSON(), billing.OutcomeUnchanged)
	if n, err := b.svc.Referrals().PayRewards(ctx); n != 0 || err != nil {
		t.Fatalf("PayRewards after a replay = %d, %v", n, err)
	}
	if again := referrals()[referred]; again["reward_discount_id"] != ref["reward_discount_id"] || again["rewarded_at"] != ref["rewarded_at"] || front.made() != 1 {
		t.Fatalf("rewarded twice: %v, %d coupons", again, front.made())
	}
	evs := 0
	b.db.View(func(tx *store.Tx) error {
		all, err := store.Events.All(tx, func(e *store.Event) bool { return e.Type == "referral.rewarded" && e.OrganizationID == b.org.ID })
		evs = len(all)
		return err
	})
	if evs != 1 {
		t.Fatalf("%d referral.rewarded events, want 1", evs)
	}

	// A self-referral: the referrer's owner, +tagged.
	self, _, res := signup("owner+again@appliance.local", code)
	if res.json["referral_code_status"] != "void" || !strings.HasPrefix(fmt.Sprint(res.json["referral"].(map[string]any)["void_reason"]), "self_referral") {
		t.Fatalf("self-referral: %s", res.body)
	}
	// An unknown code: the sign-up happens, the code is reported invalid, nothing is recorded.
	before := b.counts()
	_, _, res = signup("bob@elsewhere.example", "NOSUCHCODE")
	if res.json["referral_code_status"] != "invalid" || res.json["referral"] != nil {
		t.Fatalf("unknown code: %s", res.body)
	}
	if after := b.counts(); after[4] != before[4] {
		t.Fatalf("an unknown code recorded a referral")
	}

	// Cancelled within the first period: void, and its paid invoice after rewards nothing.
	cancelled, cus2, _ := signup("cara@startup.example", code)
	deliver(stripetest.Subscription{EventID: "evt_c_sub", Type: "customer.subscription.created", Customer: cus2, ID: "sub_c",
		Status: "active", LookupKey: "pro", Product: "prod_pro", Created: t0, PeriodEnd: end}.JSON(), billing.OutcomeApplied)
	deliver(stripetest.Subscription{EventID: "evt_c_del", Type: "customer.subscription.deleted", Customer: cus2, ID: "sub_c",
		Status: "canceled", LookupKey: "pro", Product: "prod_pro", Created: t0.Add(time.Hour), PeriodEnd: end}.JSON(), billing.OutcomeApplied)
	deliver(stripetest.Invoice{EventID: "evt_c_paid", Type: "invoice.paid", Customer: cus2, ID: "in_c", Subscription: "sub_c", Created: t0.Add(2 * time.Hour)}.JSON(), billing.OutcomeApplied)
	// Refunded within the first period: void.
	refunded, cus3, _ := signup("dan@startup.example", code)
	deliver(stripetest.Subscription{EventID: "evt_r_sub", Type: "customer.subscription.created", Customer: cus3, ID: "sub_r",
		Status: "active", LookupKey: "pro", Product: "prod_pro", Created: t0, PeriodEnd: end}.JSON(), billing.OutcomeApplied)
	deliver(stripetest.Event("evt_r_refund", "charge.refunded", t0.Add(time.Hour), map[string]any{"id": "ch_r", "object": "charge", "customer": cus3,
		"amount_refunded": 2900, "refunded": true}), billing.OutcomeUnchanged)
	if n, err := b.svc.Referrals().PayRewards(ctx); n != 0 || err != nil {
		t.Fatalf("PayRewards for void referrals = %d, %v", n, err)
	}
	all := referrals()
	for org, want := range map[string]string{referred: "rewarded", self: "void", cancelled: "void", refunded: "void"} {
		if all[org]["status"] != want {
			t.Errorf("referral of %s: %v, want %s", org, all[org], want)
		}
	}
	if len(all) != 4 || !strings.HasPrefix(fmt.Sprint(all[cancelled]["void_reason"]), "cancelled") || !strings.HasPrefix(fmt.Sprint(all[refunded]["void_reason"]), "refunded") ||
		all[cancelled]["reward_discount_id"] != "" || front.made() != 1 {
		t.Fatalf("referrals: %v; %d coupons", all, front.made())
	}
	voided := 0
	b.db.View(func(tx *store.Tx) error {
		all, err := store.Events.All(tx, func(e *store.Event) bool { return e.Type == "referral.voided" && e.OrganizationID == b.org.ID })
		voided = len(all)
		return err
	})
	if voided != 3 {
		t.Fatalf("%d referral.voided events, want 3", voided)
	}
	// Another organization reads none of this organization's referrals.
	other := b.signup(map[string]any{"email": "eve@other.example", "password": "a long enough password", "organization_name": "Other"})
	tok := other.json["session"].(map[string]any)["token"].(string)
	if r := b.do("GET", "/v1/organizations/"+b.org.ID+"/referrals", tok, nil); r.status != http.StatusForbidden && r.status != http.StatusNotFound {
		t.Fatalf("another organization reads the referrals: %d %s", r.status, r.body)
	}
}

// TestReferralCodeBillingOff: without a billing provider the code is made, and setting its discount is a
// clear 409 that changes nothing.
func TestReferralCodeBillingOff(t *testing.T) {
	b := setup(t)
	path := "/v1/organizations/" + b.org.ID + "/referral-code"
	if r := b.do("POST", path, b.adminKey, nil); r.status != http.StatusOK {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	r := b.do("PATCH", path, b.adminKey, map[string]any{"discount_id": "co_x"})
	if r.status != http.StatusConflict || !strings.Contains(fmt.Sprint(r.json["error"]), "billing is not configured") {
		t.Fatalf("PATCH without billing: %d %s", r.status, r.body)
	}
	if r := b.do("GET", path, b.adminKey, nil); r.json["referral_code"].(map[string]any)["discount_id"] != "" {
		t.Fatalf("a refused PATCH changed the code: %s", r.body)
	}
}
