package httpapi

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/billing"
	"github.com/theappliance/appliance/appliance/billing/stripetest"
	"github.com/theappliance/appliance/store"
)

const testWebhookSecret = "whsec_httpapi_test"

// TestStripeWebhook: with billing on (stripe-go against a real stripe-mock), the organization gets a Stripe
// customer, and Stripe's signed webhook deliveries over HTTP set its billing_* fields, which GET
// /v1/organizations/{id} shows; a bad signature is 400 and changes nothing; a replay is 200 and applies
// nothing twice; an unknown customer is 200 and ignored.
func TestStripeWebhook(t *testing.T) {
	b := setup(t, setupOpts{limits: RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}, billing: stripeProvider(t)})
	if n, err := b.svc.Billing().EnsureCustomers(context.Background()); err != nil || n != 1 {
		t.Fatalf("EnsureCustomers = %d, %v; want the bootstrap organization's", n, err)
	}
	orgPath := "/v1/organizations/" + b.org.ID
	org := func() map[string]any {
		t.Helper()
		r := b.do("GET", orgPath, b.adminKey, nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET organization: %d %s", r.status, r.body)
		}
		return r.json["organization"].(map[string]any)
	}
	o := org()
	cus, _ := o["billing_customer_id"].(string)
	if len(cus) < 5 || cus[:4] != "cus_" || o["billing_provider"] != "stripe" {
		t.Fatalf("the organization's customer: %v", o)
	}
	deliver := func(payload []byte, sig string) *response {
		t.Helper()
		return b.call(t, "POST", "/v1/billing/stripe/webhook", http.Header{"Stripe-Signature": {sig}}, string(payload))
	}
	updates := func() int {
		n := 0
		for _, e := range b.auditEvents() {
			if e.Action == "organization.billing_update" {
				n++
			}
		}
		return n
	}

	end := time.Now().Add(30 * 24 * time.Hour).Truncate(time.Second).UTC()
	sub := stripetest.Subscription{EventID: "evt_http_1", Type: "customer.subscription.created", Customer: cus, ID: "sub_http",
		Status: "active", LookupKey: "pro", Product: "prod_pro", Created: time.Now().Add(-time.Minute), PeriodEnd: end}.JSON()

	// A bad signature: 400 with a JSON error, nothing changed.
	r := deliver(sub, stripetest.Sign(sub, "whsec_not_ours"))
	if r.status != http.StatusBadRequest || r.json["error"] == nil {
		t.Fatalf("bad signature: %d %s", r.status, r.body)
	}
	if o := org(); o["billing_status"] != "" || o["billing_plan"] != "none" || o["billing_period_end"] != nil {
		t.Fatalf("a bad signature changed the organization: %v", o)
	}

	r = deliver(sub, stripetest.Sign(sub, testWebhookSecret))
	if r.status != http.StatusOK || r.json["outcome"] != api.BillingOutcomeApplied || r.json["event_id"] != "evt_http_1" {
		t.Fatalf("subscription created: %d %s", r.status, r.body)
	}
	o = org()
	if o["billing_status"] != "active" || o["billing_plan"] != "pro" || o["billing_subscription_id"] != "sub_http" ||
		o["billing_product_id"] != "prod_pro" || o["billing_period_end"] != end.Format(time.RFC3339) {
		t.Fatalf("after customer.subscription.created: %v", o)
	}
	applied := updates()

	// The replay (a new signature of the same event, as Stripe's retries): 200, applied once.
	r = deliver(sub, stripetest.Sign(sub, testWebhookSecret))
	if r.status != http.StatusOK || r.json["outcome"] != api.BillingOutcomeDuplicate {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	if n := updates(); n != applied {
		t.Errorf("the replay was applied again: %d billing updates audited, want %d", n, applied)
	}

	failed := stripetest.Invoice{EventID: "evt_http_2", Type: "invoice.payment_failed", Customer: cus, ID: "in_http", Subscription: "sub_http",
		Created: time.Now()}.JSON()
	if r := deliver(failed, stripetest.Sign(failed, testWebhookSecret)); r.status != http.StatusOK || r.json["outcome"] != api.BillingOutcomeApplied {
		t.Fatalf("invoice.payment_failed: %d %s", r.status, r.body)
	}
	if o := org(); o["billing_status"] != "past_due" || o["billing_plan"] != "pro" {
		t.Fatalf("after invoice.payment_failed: %v", o)
	}

	// A customer no organization has: acknowledged (Stripe stops retrying), ignored.
	stranger := stripetest.Subscription{EventID: "evt_http_3", Type: "customer.subscription.updated", Customer: "cus_nobody", ID: "sub_x",
		Status: "canceled", LookupKey: "pro", Created: time.Now(), PeriodEnd: end}.JSON()
	if r := deliver(stranger, stripetest.Sign(stranger, testWebhookSecret)); r.status != http.StatusOK || r.json["outcome"] != api.BillingOutcomeUnknownCustomer {
		t.Fatalf("unknown customer: %d %s", r.status, r.body)
	}
	if o := org(); o["billing_status"] != "past_due" {
		t.Fatalf("another customer's event changed the organization: %v", o)
	}

	// The updates' audit events name the billing provider.
	for _, e := range b.auditEvents() {
		if e.Action == "organization.billing_update" && (e.ActorKind != api.ActorBillingProvider || e.ActorID != "stripe") {
			t.Errorf("audit actor %s/%s", e.ActorKind, e.ActorID)
		}
	}
}

// TestStripeWebhookBillingOff: without a billing provider the route is 404 and the organization's billing
// fields stay empty.
func TestStripeWebhookBillingOff(t *testing.T) {
	b := setup(t)
	payload := stripetest.Invoice{EventID: "evt_off", Type: "invoice.paid", Customer: "cus_x", ID: "in_x", Subscription: "sub_x", Created: time.Now()}.JSON()
	r := b.call(t, "POST", "/v1/billing/stripe/webhook", http.Header{"Stripe-Signature": {stripetest.Sign(payload, testWebhookSecret)}}, string(payload))
	if r.status != http.StatusNotFound || r.json["error"] == nil {
		t.Fatalf("webhook with billing off: %d %s", r.status, r.body)
	}
	o := b.do("GET", "/v1/organizations/"+b.org.ID, b.adminKey, nil).json["organization"].(map[string]any)
	for _, f := range []string{"billing_customer_id", "billing_provider", "billing_status", "billing_subscription_id", "billing_product_id"} {
		if o[f] != "" {
			t.Errorf("%s = %v with billing off", f, o[f])
		}
	}
}

// stripeProvider is Stripe's provider against a new stripe-mock, with testWebhookSecret.
func stripeProvider(t testing.TB) appliance.BillingProvider {
	t.Helper()
	p, err := billing.NewStripe(billing.StripeConfig{SecretKey: "sk_test_fixture", WebhookSecret: testWebhookSecret, URL: stripetest.Start(t).URL})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// stripeWebhook makes the webhook route's fixture when the bundle has billing on: the organization's Stripe
// customer, and a subscription event of it signed at each call.
func (f *fixtures) stripeWebhook() {
	b := f.b
	if !b.svc.Billing().Enabled() {
		return
	}
	if _, err := b.svc.Billing().EnsureCustomers(context.Background()); err != nil {
		b.t.Fatal(err)
	}
	var cus string
	if err := b.db.View(func(tx *store.Tx) error {
		o, err := store.Organizations.Get(tx, b.org.ID)
		cus = o.BillingCustomerID
		return err
	}); err != nil {
		b.t.Fatal(err)
	}
	route := "POST /v1/billing/stripe/webhook"
	payload := stripetest.Subscription{EventID: "evt_fixture", Type: "customer.subscription.created", Customer: cus, ID: "sub_fixture",
		Status: "active", LookupKey: "pro", Product: "prod_pro", Created: time.Now(), PeriodEnd: time.Now().Add(30 * 24 * time.Hour)}.JSON()
	f.bodies[route] = string(payload)
	if f.signed == nil {
		f.signed = map[string]func() http.Header{}
	}
	f.signed[route] = func() http.Header {
		return http.Header{"Stripe-Signature": {stripetest.Sign(payload, testWebhookSecret)}}
	}
}
