package httpapi

import (
	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
)

// stripeWebhook hands a Stripe webhook delivery (the raw body and its signature) to the billing area.
func (s *Server) stripeWebhook(r *Request) (*api.BillingWebhookResponse, error) {
	return s.svc.Billing().Receive(r.Context(), appliance.BillingStripe, r.Body, r.Header.Get("Stripe-Signature"))
}
