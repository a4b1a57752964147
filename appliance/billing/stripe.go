package billing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"
)

// StripeName is the Stripe provider's name (up --billing-provider stripe, the webhook route's segment, the
// organizations' billing_provider).
const StripeName = "stripe"

// StripeConfig is what the Stripe provider needs: the secret API key, the webhook endpoint's signing
// secret, and where Stripe's API is.
type StripeConfig struct {
	SecretKey     string // sk_live_... or sk_test_... (up --stripe-secret-key-file)
	WebhookSecret string // whsec_... (up --stripe-webhook-secret-file)
	// URL is the base URL of Stripe's API ("": https://api.stripe.com; tests: a stripe-mock).
	URL string
	// HTTPClient makes the API requests (nil: stripe-go's default, 80 s timeout).
	HTTPClient *http.Client
}

// Stripe is the Provider backed by Stripe's API, through the official library stripe-go.
type Stripe struct {
	client        *stripe.Client
	webhookSecret string
}

var _ Provider = (*Stripe)(nil)

// NewStripe returns the Stripe provider; both secrets are required.
func NewStripe(c StripeConfig) (*Stripe, error) {
	if strings.TrimSpace(c.SecretKey) == "" {
		return nil, errors.New("stripe: no secret API key")
	}
	if strings.TrimSpace(c.WebhookSecret) == "" {
		return nil, errors.New("stripe: no webhook signing secret")
	}
	cfg := &stripe.BackendConfig{HTTPClient: c.HTTPClient, LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}}
	if c.URL != "" {
		cfg.URL = stripe.String(strings.TrimRight(c.URL, "/"))
	}
	return &Stripe{client: stripe.NewClient(c.SecretKey, stripe.WithBackends(stripe.NewBackendsWithConfig(cfg))),
		webhookSecret: c.WebhookSecret}, nil
}

// Name is "stripe".
func (s *Stripe) Name() string { return StripeName }

// EnsureCustomer creates the organization's Stripe customer (its name, billing e-mail, and its id in the
// metadata as organization_id). The idempotency key is the organization's id: a retry after a failure to
// record the answer, within Stripe's 24 hours of keys, gets the same customer.
func (s *Stripe) EnsureCustomer(ctx context.Context, c Customer) (string, error) {
	params := &stripe.CustomerCreateParams{Name: stripe.String(c.Name),
		Metadata: map[string]string{"organization_id": c.OrganizationID}}
	if c.Email != "" {
		params.Email = stripe.String(c.Email)
	}
	params.SetIdempotencyKey("appliance-customer-" + c.OrganizationID)
	cus, err := s.client.V1Customers.Create(ctx, params)
	if err != nil {
		return "", fmt.Errorf("stripe: create the customer of %s: %w", c.OrganizationID, err)
	}
	if cus.ID == "" {
		return "", fmt.Errorf("stripe: the customer of %s came back without an id", c.OrganizationID)
	}
	return cus.ID, nil
}

// VerifyEvent checks the Stripe-Signature header against the webhook secret (stripe-go's webhook package:
// the HMAC and a timestamp within 5 minutes), then reads the event; an event of another API version than
// stripe-go's is refused, as stripe-go does (the endpoint is made with its version).
func (s *Stripe) VerifyEvent(payload []byte, sigHeader string) (*Event, error) {
	if err := webhook.ValidatePayload(payload, sigHeader, s.webhookSecret); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSignature, err)
	}
	ev, err := webhook.ConstructEventWithOptions(payload, sigHeader, s.webhookSecret, webhook.ConstructEventOptions{})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPayload, err)
	}
	if ev.ID == "" || ev.Data == nil {
		return nil, fmt.Errorf("%w: an event without an id or data", ErrPayload)
	}
	out := &Event{ID: ev.ID, Type: string(ev.Type), Created: time.Unix(ev.Created, 0).UTC()}
	switch {
	case strings.HasPrefix(out.Type, "customer.subscription."):
		var sub stripe.Subscription
		if err := json.Unmarshal(ev.Data.Raw, &sub); err != nil {
			return nil, fmt.Errorf("%w: the subscription of %s: %w", ErrPayload, ev.ID, err)
		}
		if sub.Customer != nil {
			out.CustomerID = sub.Customer.ID
		}
		out.Subscription = subscriptionOf(&sub, ev.Type == stripe.EventTypeCustomerSubscriptionDeleted)
	case ev.Type == stripe.EventTypeInvoicePaid || ev.Type == stripe.EventTypeInvoicePaymentFailed:
		var inv stripe.Invoice
		if err := json.Unmarshal(ev.Data.Raw, &inv); err != nil {
			return nil, fmt.Errorf("%w: the invoice of %s: %w", ErrPayload, ev.ID, err)
		}
		if inv.Customer != nil {
			out.CustomerID = inv.Customer.ID
		}
		out.Invoice = &Invoice{ID: inv.ID, Paid: ev.Type == stripe.EventTypeInvoicePaid}
		if p := inv.Parent; p != nil && p.SubscriptionDetails != nil && p.SubscriptionDetails.Subscription != nil {
			out.Invoice.SubscriptionID = p.SubscriptionDetails.Subscription.ID
		}
	case ev.Type == stripe.EventTypeChargeRefunded:
		var ch stripe.Charge
		if err := json.Unmarshal(ev.Data.Raw, &ch); err != nil {
			return nil, fmt.Errorf("%w: the charge of %s: %w", ErrPayload, ev.ID, err)
		}
		if ch.Customer != nil {
			out.CustomerID = ch.Customer.ID
		}
		out.Refund = &Refund{ChargeID: ch.ID, AmountRefunded: ch.AmountRefunded}
	}
	return out, nil
}

// subscriptionOf is what the appliance keeps of a Stripe subscription: its status, its plan (see Plan), its
// product, and the end of its current period (the latest of its items', where the basil API versions keep
// it).
func subscriptionOf(sub *stripe.Subscription, deleted bool) *Subscription {
	out := &Subscription{ID: sub.ID, Status: string(sub.Status), Deleted: deleted}
	var end int64
	if sub.Items != nil {
		for i, it := range sub.Items.Data {
			if it == nil {
				continue
			}
			end = max(end, it.CurrentPeriodEnd)
			if i == 0 && it.Price != nil {
				out.Plan = planOf(it.Price)
				if it.Price.Product != nil {
					out.ProductID = it.Price.Product.ID
				}
			}
		}
	}
	if end > 0 {
		t := time.Unix(end, 0).UTC()
		out.PeriodEnd = &t
	}
	return out
}

// planOf names the plan of a subscription's (first) price: its lookup_key, else its metadata's "plan",
// else the price's id. Operators give their Stripe prices lookup keys named like the appliance's plans.
func planOf(p *stripe.Price) string {
	switch {
	case p.LookupKey != "":
		return p.LookupKey
	case p.Metadata["plan"] != "":
		return p.Metadata["plan"]
	}
	return p.ID
}
