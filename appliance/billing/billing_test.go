package billing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/billing"
	"github.com/theappliance/appliance/appliance/billing/stripetest"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/testtools"
	"github.com/theappliance/appliance/store"
)

// TestMain builds stripe-mock once for the machine (testtools).
func TestMain(m *testing.M) { testtools.Main(m, testtools.StripeMock) }

const whsec = "whsec_test_secret"

// auditHost is the service's Host: audit events written to the store as the root writes them.
type auditHost struct{}

func (auditHost) Audit(tx *store.Tx, p *authz.Principal, action, orgID, projectID string, metadata any) error {
	kind, id := p.Actor()
	md, err := json.Marshal(metadata)
	if err != nil {
		return err
	}
	return store.AuditEvents.Put(tx, &store.AuditEvent{ID: ids.New("aud"), Action: action, ActorKind: kind, ActorID: id,
		OrganizationID: orgID, ProjectID: projectID, Metadata: md, CreatedAt: time.Now()})
}

type fixture struct {
	t    *testing.T
	db   *store.DB
	svc  *billing.Service
	orgs []string
}

// setup is a store with two organizations and the billing service with Stripe's provider against a
// running stripe-mock (nil provider: billing off).
func setup(t *testing.T, on bool) *fixture {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.RerunUpdates(os.Getenv(store.RerunUpdatesEnv) == "1")
	f := &fixture{t: t, db: db}
	err = db.Update(func(tx *store.Tx) error {
		f.orgs = nil // a run again starts over
		for i, name := range []string{"Acme", "Globex"} {
			o := &store.Organization{ID: ids.New("org"), Name: name, Slug: strings.ToLower(name), BillingPlan: "none",
				CreatedAt: time.Now(), UpdatedAt: time.Now()}
			if i == 0 {
				o.BillingEmail = "billing@acme.example"
			}
			if err := store.Organizations.Put(tx, o); err != nil {
				return err
			}
			f.orgs = append(f.orgs, o.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var p billing.Provider
	if on {
		mock := stripetest.Start(t)
		if p, err = billing.NewStripe(billing.StripeConfig{SecretKey: "sk_test_123", WebhookSecret: whsec, URL: mock.URL}); err != nil {
			t.Fatal(err)
		}
	}
	f.svc = billing.New(billing.Deps{DB: db, Provider: p, Host: auditHost{}})
	return f
}

func (f *fixture) org(id string) *store.Organization {
	f.t.Helper()
	var o *store.Organization
	if err := f.db.View(func(tx *store.Tx) (err error) { o, err = store.Organizations.Get(tx, id); return err }); err != nil {
		f.t.Fatal(err)
	}
	return o
}

func (f *fixture) audits(action string) []*store.AuditEvent {
	f.t.Helper()
	var out []*store.AuditEvent
	if err := f.db.View(func(tx *store.Tx) (err error) {
		out, err = store.AuditEvents.All(tx, func(a *store.AuditEvent) bool { return a.Action == action })
		return err
	}); err != nil {
		f.t.Fatal(err)
	}
	return out
}

// receive hands a signed delivery to the service.
func (f *fixture) receive(payload []byte, sig string) (*api.BillingWebhookResponse, error) {
	return f.svc.Receive(context.Background(), billing.StripeName, bytes.NewReader(payload), sig)
}

func (f *fixture) mustReceive(payload []byte, want string) {
	f.t.Helper()
	res, err := f.receive(payload, stripetest.Sign(payload, whsec))
	if err != nil {
		f.t.Fatalf("receive: %v", err)
	}
	if !res.Received || res.Outcome != want {
		f.t.Fatalf("receive: %+v, want outcome %s", res, want)
	}
}

// TestCustomersAtStripeMock: every organization gets a Stripe customer (stripe-go against stripe-mock), its
// id stored with the provider and audited; a second pass makes none (stripe-mock makes a new id for every
// customer it creates, so an unchanged id is one not created again).
func TestCustomersAtStripeMock(t *testing.T) {
	f := setup(t, true)
	ctx := context.Background()
	n, err := f.svc.EnsureCustomers(ctx)
	if err != nil || n != 2 {
		t.Fatalf("EnsureCustomers = %d, %v; want 2 made", n, err)
	}
	a, b := f.org(f.orgs[0]), f.org(f.orgs[1])
	for _, o := range []*store.Organization{a, b} {
		if !strings.HasPrefix(o.BillingCustomerID, "cus_") || o.BillingProvider != "stripe" {
			t.Errorf("%s: billing_customer_id %q, billing_provider %q", o.Name, o.BillingCustomerID, o.BillingProvider)
		}
		if o.BillingStatus != "" || o.BillingPlan != "none" || o.BillingPeriodEnd != nil {
			t.Errorf("%s: a customer alone changed the subscription's fields: %+v", o.Name, o)
		}
	}
	if a.BillingCustomerID == b.BillingCustomerID {
		t.Errorf("two organizations share customer %s", a.BillingCustomerID)
	}
	if n, err := f.svc.EnsureCustomers(ctx); err != nil || n != 0 {
		t.Errorf("second EnsureCustomers = %d, %v; want none made", n, err)
	}
	if id, err := f.svc.EnsureCustomer(ctx, f.orgs[0]); err != nil || id != a.BillingCustomerID {
		t.Errorf("EnsureCustomer again = %q, %v; want the stored %s", id, err, a.BillingCustomerID)
	}
	if got := f.org(f.orgs[0]).BillingCustomerID; got != a.BillingCustomerID {
		t.Errorf("customer id changed to %s", got)
	}
	audits := f.audits("organization.billing_customer")
	if len(audits) != 2 {
		t.Fatalf("%d organization.billing_customer audit events, want 2", len(audits))
	}
	for _, e := range audits {
		if e.ActorKind != api.ActorBillingProvider || e.ActorID != "stripe" {
			t.Errorf("audit actor %s/%s, want billing_provider/stripe", e.ActorKind, e.ActorID)
		}
	}
	if _, err := f.svc.EnsureCustomer(ctx, "org_absent"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("EnsureCustomer of an absent organization: %v", err)
	}
}

// TestBillingOff: without a provider the webhook is 404, no customer is made, nothing changes.
func TestBillingOff(t *testing.T) {
	f := setup(t, false)
	if n, err := f.svc.EnsureCustomers(context.Background()); n != 0 || err != nil {
		t.Fatalf("EnsureCustomers with billing off = %d, %v", n, err)
	}
	payload := stripetest.Event("evt_off", "invoice.paid", time.Now(), map[string]any{"id": "in_1", "object": "invoice"})
	_, err := f.receive(payload, stripetest.Sign(payload, whsec))
	if apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("webhook with billing off: %v, want not found", err)
	}
	if o := f.org(f.orgs[0]); o.BillingCustomerID != "" || o.BillingProvider != "" || o.BillingStatus != "" {
		t.Errorf("billing fields changed with billing off: %+v", o)
	}
}

// TestWebhookEvents: the events' effects on the billing fields, in order, with the rules: a replay, an
// older event, another subscription's invoice, an unknown customer or type change nothing; a bad
// signature, a too old one or an unreadable body is 400 and records nothing.
func TestWebhookEvents(t *testing.T) {
	f := setup(t, true)
	ctx := context.Background()
	if _, err := f.svc.EnsureCustomers(ctx); err != nil {
		t.Fatal(err)
	}
	cus := f.org(f.orgs[0]).BillingCustomerID
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	end := t0.Add(30 * 24 * time.Hour).UTC()

	created := stripetest.Subscription{EventID: "evt_1", Type: "customer.subscription.created", Customer: cus, ID: "sub_1",
		Status: "active", LookupKey: "pro", Product: "prod_pro", Created: t0, PeriodEnd: end}.JSON()
	f.mustReceive(created, billing.OutcomeApplied)
	o := f.org(f.orgs[0])
	if o.BillingStatus != "active" || o.BillingPlan != "pro" || o.BillingSubscriptionID != "sub_1" || o.BillingProductID != "prod_pro" ||
		o.BillingPeriodEnd == nil || !o.BillingPeriodEnd.Equal(end) {
		t.Fatalf("after customer.subscription.created: %+v", o)
	}
	if other := f.org(f.orgs[1]); other.BillingStatus != "" || other.BillingPlan != "none" {
		t.Errorf("the other organization changed: %+v", other)
	}
	updates := len(f.audits("organization.billing_update"))

	// The same event again (Stripe retries until it sees a 2xx): answered, not applied twice.
	f.mustReceive(created, billing.OutcomeDuplicate)
	if n := len(f.audits("organization.billing_update")); n != updates {
		t.Errorf("a replay was audited again: %d updates, want %d", n, updates)
	}

	// A payment fails, then an older update arrives late: the older one changes nothing.
	f.mustReceive(stripetest.Invoice{EventID: "evt_2", Type: "invoice.payment_failed", Customer: cus, ID: "in_2", Subscription: "sub_1",
		Created: t0.Add(2 * time.Minute)}.JSON(), billing.OutcomeApplied)
	if o := f.org(f.orgs[0]); o.BillingStatus != "past_due" || o.BillingPlan != "pro" {
		t.Fatalf("after invoice.payment_failed: %+v", o)
	}
	f.mustReceive(stripetest.Subscription{EventID: "evt_3", Type: "customer.subscription.updated", Customer: cus, ID: "sub_1",
		Status: "active", LookupKey: "scale", Product: "prod_scale", Created: t0.Add(time.Minute), PeriodEnd: end}.JSON(), billing.OutcomeStale)
	if o := f.org(f.orgs[0]); o.BillingStatus != "past_due" || o.BillingPlan != "pro" {
		t.Fatalf("a stale event changed the fields: %+v", o)
	}

	// An invoice of another subscription is not this organization's status; the paid one is.
	f.mustReceive(stripetest.Invoice{EventID: "evt_4", Type: "invoice.paid", Customer: cus, ID: "in_4", Subscription: "sub_other",
		Created: t0.Add(3 * time.Minute)}.JSON(), billing.OutcomeOtherSubscription)
	f.mustReceive(stripetest.Invoice{EventID: "evt_5", Type: "invoice.paid", Customer: cus, ID: "in_5", Subscription: "sub_1",
		Created: t0.Add(4 * time.Minute)}.JSON(), billing.OutcomeApplied)
	if o := f.org(f.orgs[0]); o.BillingStatus != "active" {
		t.Fatalf("after invoice.paid: %+v", o)
	}

	// An upgrade, then the end of the subscription.
	end2 := end.Add(24 * time.Hour)
	f.mustReceive(stripetest.Subscription{EventID: "evt_6", Type: "customer.subscription.updated", Customer: cus, ID: "sub_1",
		Status: "active", LookupKey: "scale", Product: "prod_scale", Created: t0.Add(5 * time.Minute), PeriodEnd: end2}.JSON(), billing.OutcomeApplied)
	if o := f.org(f.orgs[0]); o.BillingPlan != "scale" || o.BillingProductID != "prod_scale" || !o.BillingPeriodEnd.Equal(end2) {
		t.Fatalf("after the upgrade: %+v", o)
	}
	f.mustReceive(stripetest.Subscription{EventID: "evt_7", Type: "customer.subscription.deleted", Customer: cus, ID: "sub_1",
		Status: "canceled", LookupKey: "scale", Product: "prod_scale", Created: t0.Add(6 * time.Minute), PeriodEnd: end2}.JSON(), billing.OutcomeApplied)
	if o := f.org(f.orgs[0]); o.BillingStatus != "canceled" || o.BillingPlan != "none" {
		t.Fatalf("after customer.subscription.deleted: %+v", o)
	}

	// Types the appliance does not act on, and customers it does not have: 200, ignored.
	f.mustReceive(stripetest.Event("evt_8", "customer.created", t0.Add(7*time.Minute), map[string]any{"id": cus, "object": "customer"}), billing.OutcomeIgnored)
	f.mustReceive(stripetest.Subscription{EventID: "evt_9", Type: "customer.subscription.created", Customer: "cus_unknown", ID: "sub_9",
		Status: "active", LookupKey: "pro", Created: t0.Add(8 * time.Minute), PeriodEnd: end}.JSON(), billing.OutcomeUnknownCustomer)

	// Refused deliveries: 400, nothing recorded (a correct delivery of the same event is applied after).
	before := f.org(f.orgs[0])
	revive := stripetest.Subscription{EventID: "evt_10", Type: "customer.subscription.created", Customer: cus, ID: "sub_10",
		Status: "trialing", LookupKey: "pro", Product: "prod_pro", Created: t0.Add(9 * time.Minute), PeriodEnd: end}.JSON()
	for name, sig := range map[string]string{
		"wrong secret": stripetest.Sign(revive, "whsec_other"),
		"no header":    "",
		"garbage":      "t=1,v1=zz",
		"too old":      stripetest.SignAt(revive, whsec, time.Now().Add(-time.Hour)),
	} {
		_, err := f.receive(revive, sig)
		if apperr.KindOf(err) != apperr.KindInvalid || !errors.Is(err, billing.ErrSignature) {
			t.Errorf("%s: %v, want 400 for the signature", name, err)
		}
	}
	tampered := bytes.Replace(revive, []byte(`"trialing"`), []byte(`"active"`), 1)
	if _, err := f.receive(tampered, stripetest.Sign(revive, whsec)); apperr.KindOf(err) != apperr.KindInvalid {
		t.Errorf("a body changed after signing: %v, want 400", err)
	}
	notJSON := []byte("{not json")
	if _, err := f.receive(notJSON, stripetest.Sign(notJSON, whsec)); apperr.KindOf(err) != apperr.KindInvalid || !errors.Is(err, billing.ErrPayload) {
		t.Errorf("a signed body that is not an event: %v, want 400", err)
	}
	big := bytes.Repeat([]byte(" "), billing.MaxPayload+1)
	if _, err := f.receive(big, stripetest.Sign(big, whsec)); apperr.KindOf(err) != apperr.KindTooLarge {
		t.Errorf("a body over the limit: %v, want 413", err)
	}
	if after := f.org(f.orgs[0]); after.BillingStatus != before.BillingStatus || after.BillingSubscriptionID != before.BillingSubscriptionID {
		t.Errorf("a refused delivery changed the organization: %+v", after)
	}
	f.db.View(func(tx *store.Tx) error {
		if _, err := store.BillingEvents.Get(tx, "evt_10"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a refused delivery's event id was recorded: %v", err)
		}
		return nil
	})
	f.mustReceive(revive, billing.OutcomeApplied)
	if o := f.org(f.orgs[0]); o.BillingStatus != "trialing" || o.BillingSubscriptionID != "sub_10" {
		t.Fatalf("the new subscription: %+v", o)
	}

	// The audit events of the updates carry the provider as the actor and the changed fields.
	ups := f.audits("organization.billing_update")
	if len(ups) != 6 {
		t.Errorf("%d organization.billing_update audit events, want 6 (the applied events)", len(ups))
	}
	for _, e := range ups {
		if e.ActorKind != api.ActorBillingProvider || e.ActorID != "stripe" || e.OrganizationID != f.orgs[0] || !bytes.Contains(e.Metadata, []byte(`"event_id"`)) {
			t.Errorf("audit event %+v", e)
		}
	}
}

// TestSweepEvents: received event ids are kept EventRetention, then swept.
func TestSweepEvents(t *testing.T) {
	f := setup(t, true)
	now := time.Now()
	f.db.Update(func(tx *store.Tx) error {
		store.BillingEvents.Put(tx, &store.BillingEvent{ID: "evt_old", ReceivedAt: now.Add(-billing.EventRetention - time.Hour)})
		return store.BillingEvents.Put(tx, &store.BillingEvent{ID: "evt_new", ReceivedAt: now.Add(-time.Hour)})
	})
	if n, err := f.svc.SweepEvents(context.Background()); err != nil || n != 1 {
		t.Fatalf("SweepEvents = %d, %v; want 1", n, err)
	}
	f.db.View(func(tx *store.Tx) error {
		if _, err := store.BillingEvents.Get(tx, "evt_new"); err != nil {
			t.Errorf("the recent event was swept: %v", err)
		}
		return nil
	})
}
