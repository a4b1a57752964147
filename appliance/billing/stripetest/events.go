package stripetest

import (
	"encoding/json"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"
)

// Subscription is a customer.subscription.* event (Type) of one subscription with one item, whose price has
// the lookup key and product given.
type Subscription struct {
	EventID, Type, Customer, ID, Status, LookupKey, Product string
	Created, PeriodEnd                                      time.Time
}

// JSON is the event as Stripe sends it (stripe-go's API version, the subscription unexpanded).
func (s Subscription) JSON() []byte {
	item := map[string]any{"id": "si_" + s.ID, "object": "subscription_item", "current_period_end": s.PeriodEnd.Unix(),
		"price": map[string]any{"id": "price_" + s.LookupKey, "object": "price", "lookup_key": s.LookupKey, "product": s.Product}}
	sub := map[string]any{"id": s.ID, "object": "subscription", "customer": s.Customer, "status": s.Status,
		"items": map[string]any{"object": "list", "data": []any{item}}}
	return event(s.EventID, s.Type, s.Created, sub)
}

// Invoice is an invoice.paid or invoice.payment_failed event (Type) of an invoice of a subscription.
type Invoice struct {
	EventID, Type, Customer, ID, Subscription string
	Created                                   time.Time
}

// JSON is the event as Stripe sends it.
func (i Invoice) JSON() []byte {
	inv := map[string]any{"id": i.ID, "object": "invoice", "customer": i.Customer,
		"parent": map[string]any{"type": "subscription_details", "subscription_details": map[string]any{"subscription": i.Subscription}}}
	return event(i.EventID, i.Type, i.Created, inv)
}

// Event is an event of another type, whose object is obj.
func Event(id, typ string, created time.Time, obj map[string]any) []byte {
	return event(id, typ, created, obj)
}

func event(id, typ string, created time.Time, obj map[string]any) []byte {
	b, err := json.Marshal(map[string]any{"id": id, "object": "event", "api_version": stripe.APIVersion, "created": created.Unix(),
		"type": typ, "livemode": false, "pending_webhooks": 1, "data": map[string]any{"object": obj}})
	if err != nil {
		panic(err)
	}
	return b
}

// Sign is the Stripe-Signature header of payload under the webhook secret, now (stripe-go's test helper).
func Sign(payload []byte, secret string) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret}).Header
}

// SignAt is Sign at another time (a signature too old to be taken).
func SignAt(payload []byte, secret string, at time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: at}).Header
}
