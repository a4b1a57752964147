// Package billing is the organizations' billing provider (Stripe, through stripe-go): a customer at the
// provider for every organization (EnsureCustomer, EnsureCustomers), and the provider's webhook events
// (Receive: verified by signature, deduplicated by event id, applied to the organization's billing_*
// fields and audited with the provider as the actor). Nothing here changes a plan: the provider's
// subscriptions say what an organization pays for, and the appliance records it. Without a provider the
// service is off: Receive answers 404 and the billing fields stay as they are.
package billing

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/store"
)

// Provider is a billing provider the appliance keeps its organizations' customers at.
type Provider interface {
	// Name is the provider's name ("stripe"): the organizations' billing_provider, the webhook route's.
	Name() string
	// EnsureCustomer creates the organization's customer and returns its id; a retry for the same
	// organization gets the same customer (an idempotency key).
	EnsureCustomer(ctx context.Context, c Customer) (string, error)
	// VerifyEvent checks a webhook delivery's signature header over its payload and reads the event: an
	// error wraps ErrSignature (not signed by the provider, or too old) or ErrPayload (unreadable).
	VerifyEvent(payload []byte, sigHeader string) (*Event, error)
}

// Customer is what the provider's customer is made from.
type Customer struct{ OrganizationID, Name, Email string }

// The failures of VerifyEvent.
var (
	ErrSignature = errors.New("the webhook signature does not verify")
	ErrPayload   = errors.New("the webhook event cannot be read")
)

// Event is a verified webhook event in the provider's neutral terms: a subscription's change, an
// invoice's payment or failure, a refund, or another type (all nil), which is acknowledged and ignored.
type Event struct {
	ID, Type     string
	Created      time.Time
	CustomerID   string
	Subscription *Subscription
	Invoice      *Invoice
	Refund       *Refund
}

// Refund is a charge of the customer refunded (charge.refunded): it changes no billing field; the Hook
// learns of it (a referral is void when its referred subscription is refunded within its first period).
type Refund struct {
	ChargeID       string
	AmountRefunded int64
}

// Hook learns of every verified, new event of an organization's customer, in the transaction that
// records it (appliance/referrals: a referred organization's subscription, first paid invoice,
// cancellation or refund). It must not call the provider there: work the event makes due is recorded in
// tx and done after the commit. An error rolls the event back (the provider delivers it again).
type Hook interface {
	BillingEvent(tx *store.Tx, orgID string, ev *Event) error
}

// Subscription is a subscription as an event carries it.
type Subscription struct {
	ID, Status, Plan, ProductID string
	PeriodEnd                   *time.Time
	Deleted                     bool // the subscription ended (customer.subscription.deleted)
}

// Invoice is an invoice's payment (Paid) or failed payment, for a subscription or not.
type Invoice struct {
	ID, SubscriptionID string
	Paid               bool
}

// The outcomes of a received event (the webhook's answer, and the record kept for deduplication): api's.
const (
	OutcomeApplied           = api.BillingOutcomeApplied
	OutcomeUnchanged         = api.BillingOutcomeUnchanged
	OutcomeIgnored           = api.BillingOutcomeIgnored
	OutcomeUnknownCustomer   = api.BillingOutcomeUnknownCustomer
	OutcomeStale             = api.BillingOutcomeStale
	OutcomeOtherSubscription = api.BillingOutcomeOtherSubscription
	OutcomeDuplicate         = api.BillingOutcomeDuplicate
)

// Status values the invoices set (the subscription events set the subscription's own status).
const (
	StatusActive  = "active"   // invoice.paid
	StatusPastDue = "past_due" // invoice.payment_failed
	// PlanNone is billing_plan without a subscription (and after customer.subscription.deleted).
	PlanNone = "none"
)

// MaxPayload is the largest webhook body read (Stripe's events are a few KiB; larger is 413).
const MaxPayload = 1 << 20

// EventRetention is how long received event ids are kept for deduplication: Stripe retries a delivery
// for up to three days.
const EventRetention = 30 * 24 * time.Hour

// Host is what the service needs of the rest of the domain.
type Host interface {
	Audit(tx *store.Tx, p *authz.Principal, action, orgID, projectID string, metadata any) error
}

// Deps are the service's collaborators.
type Deps struct {
	DB       *store.DB
	Provider Provider // nil: billing is off
	Host     Host
	Log      *slog.Logger
	Clock    func() time.Time
	Hook     Hook // nil: none
}

// Service keeps the organizations' billing at the provider.
type Service struct {
	db       *store.DB
	provider Provider
	host     Host
	log      *slog.Logger
	now      func() time.Time
	hook     Hook
}

// New returns the service (off without a provider).
func New(d Deps) *Service {
	clock := d.Clock
	if clock == nil {
		clock = time.Now
	}
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{db: d.DB, provider: d.Provider, host: d.Host, log: log, now: func() time.Time { return clock().UTC() }, hook: d.Hook}
}

// Enabled reports whether a provider is configured.
func (s *Service) Enabled() bool { return s.provider != nil }

// EnsureCustomer gives the organization a customer at the provider unless it has one, and returns its id
// ("" when billing is off). The id is stored with billing_provider, audited.
func (s *Service) EnsureCustomer(ctx context.Context, orgID string) (string, error) {
	if s.provider == nil {
		return "", nil
	}
	var c Customer
	var have string
	err := s.db.View(func(tx *store.Tx) error {
		org, err := store.Organizations.Get(tx, orgID)
		if err != nil {
			return err
		}
		have = org.BillingCustomerID
		c = Customer{OrganizationID: org.ID, Name: org.Name, Email: org.BillingEmail}
		if org.BillingName != "" {
			c.Name = org.BillingName
		}
		return nil
	})
	if err != nil || have != "" {
		return have, err
	}
	id, err := s.provider.EnsureCustomer(ctx, c)
	if err != nil {
		return "", err
	}
	err = s.db.Update(func(tx *store.Tx) error {
		org, err := store.Organizations.Get(tx, orgID)
		if err != nil {
			return err
		}
		if org.BillingCustomerID != "" { // made meanwhile (the same customer: the idempotency key)
			id = org.BillingCustomerID
			return nil
		}
		org.BillingCustomerID, org.BillingProvider, org.UpdatedAt = id, s.provider.Name(), s.now()
		if err := store.Organizations.Put(tx, org); err != nil {
			return err
		}
		return s.host.Audit(tx, authz.BillingProvider(s.provider.Name()), "organization.billing_customer", org.ID, "",
			map[string]any{"billing_provider": org.BillingProvider, "billing_customer_id": id})
	})
	if err != nil {
		return "", fmt.Errorf("record the billing customer of %s: %w", orgID, err)
	}
	return id, nil
}

// EnsureCustomers gives every organization without one a customer (at start, and periodically for those
// the provider could not be reached for); it returns how many it made, and the organizations' failures.
func (s *Service) EnsureCustomers(ctx context.Context) (int, error) {
	if s.provider == nil {
		return 0, nil
	}
	var todo []string
	err := s.db.View(func(tx *store.Tx) error {
		orgs, err := store.Organizations.All(tx, func(o *store.Organization) bool { return o.BillingCustomerID == "" })
		for _, o := range orgs {
			todo = append(todo, o.ID)
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	made := 0
	var errs []error
	for _, id := range todo {
		if _, err := s.EnsureCustomer(ctx, id); err != nil {
			errs = append(errs, err)
			continue
		}
		made++
	}
	return made, errors.Join(errs...)
}

// Receive takes a webhook delivery of the named provider: the body (at most MaxPayload) and its signature
// header. Without that provider configured it is 404; a bad signature or an unreadable event is 400 and
// changes nothing; an event id received before is 200 with outcome duplicate and applies nothing again;
// otherwise the event is applied (or ignored, with its reason as the outcome) and its id recorded, in one
// transaction.
func (s *Service) Receive(ctx context.Context, provider string, body io.Reader, sigHeader string) (*api.BillingWebhookResponse, error) {
	if s.provider == nil || s.provider.Name() != provider {
		return nil, apperr.NotFound("billing provider %s is not configured on this appliance (up --billing-provider)", provider)
	}
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, io.LimitReader(body, MaxPayload+1)); err != nil {
		return nil, apperr.Invalid("read the webhook body: %v", err)
	}
	if buf.Len() > MaxPayload {
		return nil, &apperr.Error{Kind: apperr.KindTooLarge, Msg: fmt.Sprintf("a webhook body may have at most %d bytes", MaxPayload)}
	}
	ev, err := s.provider.VerifyEvent(buf.Bytes(), sigHeader)
	switch {
	case errors.Is(err, ErrSignature):
		return nil, &apperr.Error{Kind: apperr.KindInvalid, Msg: "the webhook signature does not verify (header Stripe-Signature, the endpoint's signing secret)", Cause: err}
	case err != nil:
		return nil, &apperr.Error{Kind: apperr.KindInvalid, Msg: "the webhook event cannot be read", Cause: err}
	}
	out := &api.BillingWebhookResponse{Received: true, EventID: ev.ID}
	err = s.db.Update(func(tx *store.Tx) error {
		if _, err := store.BillingEvents.Get(tx, ev.ID); err == nil {
			out.Outcome = OutcomeDuplicate
			return nil
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		rec := &store.BillingEvent{ID: ev.ID, Provider: s.provider.Name(), Type: ev.Type, CreatedAt: ev.Created, ReceivedAt: s.now()}
		outcome, orgID, err := s.apply(tx, ev)
		if err != nil {
			return err
		}
		rec.Outcome, rec.OrganizationID = outcome, orgID
		out.Outcome = outcome
		return store.BillingEvents.Put(tx, rec)
	})
	if err != nil {
		return nil, apperr.Internal(err, "record the billing event")
	}
	lvl := slog.LevelInfo
	if out.Outcome == OutcomeUnknownCustomer {
		lvl = slog.LevelWarn
	}
	s.log.Log(ctx, lvl, "billing event", "provider", provider, "event_id", ev.ID, "type", ev.Type, "customer", ev.CustomerID, "outcome", out.Outcome)
	return out, nil
}

// apply changes the billing fields of the event's organization, in tx, and says how it went.
func (s *Service) apply(tx *store.Tx, ev *Event) (outcome, orgID string, err error) {
	if ev.Subscription == nil && ev.Invoice == nil && ev.Refund == nil {
		return OutcomeIgnored, "", nil
	}
	if ev.CustomerID == "" {
		return OutcomeUnknownCustomer, "", nil
	}
	org, err := store.Organizations.First(tx, store.OrganizationsByBillingCustomer, ev.CustomerID)
	if errors.Is(err, store.ErrNotFound) {
		return OutcomeUnknownCustomer, "", nil
	} else if err != nil {
		return "", "", err
	}
	if s.hook != nil {
		if err := s.hook.BillingEvent(tx, org.ID, ev); err != nil {
			return "", "", err
		}
	}
	if ev.Refund != nil { // no billing field to change
		return OutcomeUnchanged, org.ID, nil
	}
	if st, err := store.BillingStates.Get(tx, org.ID); err == nil && ev.Created.Before(st.EventAt) {
		return OutcomeStale, org.ID, nil
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return "", "", err
	}
	next := *org
	switch sub, inv := ev.Subscription, ev.Invoice; {
	case sub != nil && sub.Deleted:
		if org.BillingSubscriptionID != "" && org.BillingSubscriptionID != sub.ID {
			return OutcomeOtherSubscription, org.ID, nil
		}
		next.BillingStatus, next.BillingPlan, next.BillingSubscriptionID, next.BillingProductID = sub.Status, PlanNone, sub.ID, sub.ProductID
		next.BillingPeriodEnd = sub.PeriodEnd
	case sub != nil:
		if org.BillingSubscriptionID != "" && org.BillingSubscriptionID != sub.ID && ended(sub.Status) {
			return OutcomeOtherSubscription, org.ID, nil // an old subscription's change does not replace the current one
		}
		next.BillingStatus, next.BillingPlan, next.BillingSubscriptionID, next.BillingProductID = sub.Status, sub.Plan, sub.ID, sub.ProductID
		next.BillingPeriodEnd = sub.PeriodEnd
	default:
		if inv.SubscriptionID == "" || (org.BillingSubscriptionID != "" && org.BillingSubscriptionID != inv.SubscriptionID) {
			return OutcomeOtherSubscription, org.ID, nil
		}
		next.BillingSubscriptionID = inv.SubscriptionID
		next.BillingStatus = StatusPastDue
		if inv.Paid {
			next.BillingStatus = StatusActive
		}
	}
	if err := store.BillingStates.Put(tx, &store.BillingState{OrganizationID: org.ID, EventID: ev.ID, EventAt: ev.Created}); err != nil {
		return "", "", err
	}
	changed := changes(org, &next)
	if len(changed) == 0 {
		return OutcomeUnchanged, org.ID, nil
	}
	next.UpdatedAt = s.now()
	if err := store.Organizations.Put(tx, &next); err != nil {
		return "", "", err
	}
	changed["event_id"], changed["event_type"] = ev.ID, ev.Type
	if err := s.host.Audit(tx, authz.BillingProvider(s.provider.Name()), "organization.billing_update", org.ID, "", changed); err != nil {
		return "", "", err
	}
	return OutcomeApplied, org.ID, nil
}

// ended reports whether a subscription status is final (Stripe's canceled, incomplete_expired).
func ended(status string) bool { return status == "canceled" || status == "incomplete_expired" }

// changes are the billing fields that differ between a and b, with b's values.
func changes(a, b *store.Organization) map[string]any {
	out := map[string]any{}
	for _, f := range []struct {
		name string
		x, y string
	}{
		{"billing_status", a.BillingStatus, b.BillingStatus},
		{"billing_plan", a.BillingPlan, b.BillingPlan},
		{"billing_subscription_id", a.BillingSubscriptionID, b.BillingSubscriptionID},
		{"billing_product_id", a.BillingProductID, b.BillingProductID},
	} {
		if f.x != f.y {
			out[f.name] = f.y
		}
	}
	if !sameTime(a.BillingPeriodEnd, b.BillingPeriodEnd) {
		out["billing_period_end"] = b.BillingPeriodEnd
	}
	return out
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

// SweepEvents deletes the received events older than EventRetention and returns how many.
func (s *Service) SweepEvents(ctx context.Context) (int, error) {
	cutoff := s.now().Add(-EventRetention)
	n := 0
	err := s.db.Update(func(tx *store.Tx) error {
		n = 0 // a run again starts over
		old, err := store.BillingEvents.All(tx, func(e *store.BillingEvent) bool { return e.ReceivedAt.Before(cutoff) })
		if err != nil {
			return err
		}
		for _, e := range old {
			if err := store.BillingEvents.Delete(tx, e.ID); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}
