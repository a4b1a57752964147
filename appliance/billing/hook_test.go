package billing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/billing"
	"github.com/theappliance/appliance/appliance/billing/stripetest"
	"github.com/theappliance/appliance/store"
)

// hookRecorder is a Hook that records what it is handed (once the transaction commits: it may be run
// again), and fails when told to.
type hookRecorder struct {
	got  []*billing.Event
	orgs []string
	fail error
}

func (h *hookRecorder) BillingEvent(tx *store.Tx, orgID string, ev *billing.Event) error {
	if h.fail != nil {
		return h.fail
	}
	tx.OnCommit(func() { h.got, h.orgs = append(h.got, ev), append(h.orgs, orgID) })
	return nil
}

// TestHook: every verified, new event of an organization's customer reaches the Hook once, in the
// transaction that records it (a replay does not; an unknown customer's does not); charge.refunded is read
// (a Refund, no billing field changed); a failing Hook rolls the event back, so the provider's redelivery
// is applied.
func TestHook(t *testing.T) {
	f := setup(t, false)
	p, err := billing.NewStripe(billing.StripeConfig{SecretKey: "sk_test_123", WebhookSecret: whsec, URL: stripetest.Start(t).URL})
	if err != nil {
		t.Fatal(err)
	}
	h := &hookRecorder{}
	f.svc = billing.New(billing.Deps{DB: f.db, Provider: p, Host: auditHost{}, Hook: h})
	ctx := context.Background()
	if _, err := f.svc.EnsureCustomers(ctx); err != nil {
		t.Fatal(err)
	}
	cus := f.org(f.orgs[0]).BillingCustomerID
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	refund := stripetest.Event("evt_h_1", "charge.refunded", t0, map[string]any{"id": "ch_1", "object": "charge", "customer": cus, "amount_refunded": 500, "refunded": true})
	f.mustReceive(refund, billing.OutcomeUnchanged)
	f.mustReceive(refund, billing.OutcomeDuplicate)
	f.mustReceive(stripetest.Event("evt_h_2", "charge.refunded", t0, map[string]any{"id": "ch_2", "object": "charge", "customer": "cus_unknown"}), billing.OutcomeUnknownCustomer)
	if len(h.got) != 1 || h.orgs[0] != f.orgs[0] || h.got[0].Refund == nil || h.got[0].Refund.ChargeID != "ch_1" || h.got[0].Refund.AmountRefunded != 500 || h.got[0].CustomerID != cus {
		t.Fatalf("the hook got %+v for %v", h.got, h.orgs)
	}
	if o := f.org(f.orgs[0]); o.BillingStatus != "" {
		t.Fatalf("a refund changed the billing fields: %+v", o)
	}

	h.fail = errors.New("hook down")
	paid := stripetest.Invoice{EventID: "evt_h_3", Type: "invoice.paid", Customer: cus, ID: "in_3", Subscription: "sub_3", Created: t0.Add(time.Minute)}.JSON()
	if _, err := f.receive(paid, stripetest.Sign(paid, whsec)); apperr.KindOf(err) != apperr.KindInternal {
		t.Fatalf("a failing hook: %v, want a 500 (the provider delivers again)", err)
	}
	f.db.View(func(tx *store.Tx) error {
		if _, err := store.BillingEvents.Get(tx, "evt_h_3"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the event a failing hook rolled back was recorded: %v", err)
		}
		return nil
	})
	if o := f.org(f.orgs[0]); o.BillingStatus != "" {
		t.Fatalf("a rolled-back event changed the billing fields: %+v", o)
	}
	h.fail = nil
	f.mustReceive(paid, billing.OutcomeApplied)
	if len(h.got) != 2 || h.got[1].Invoice == nil || !h.got[1].Invoice.Paid || h.got[1].Invoice.SubscriptionID != "sub_3" {
		t.Fatalf("the redelivered event: %+v", h.got)
	}
}
