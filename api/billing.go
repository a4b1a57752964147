package api

// BillingWebhookResponse answers a billing provider's webhook delivery (POST
// /v1/billing/{provider}/webhook): the event was received, and what it did (see docs/api-decisions.md,
// "Billing").
type BillingWebhookResponse struct {
	Received bool   `json:"received"`
	EventID  string `json:"event_id"`
	Outcome  string `json:"outcome" enum:"BillingEventOutcome"`
}

// The outcomes of a received billing event.
const (
	BillingOutcomeApplied           = "applied"            // the organization's billing fields changed
	BillingOutcomeUnchanged         = "unchanged"          // the event said what the fields already say
	BillingOutcomeIgnored           = "ignored"            // a type the appliance does not act on
	BillingOutcomeUnknownCustomer   = "unknown_customer"   // no organization has the event's customer
	BillingOutcomeStale             = "stale"              // older than the event the fields were last set from
	BillingOutcomeOtherSubscription = "other_subscription" // about a subscription the organization is not on
	BillingOutcomeDuplicate         = "duplicate"          // the event id was received before: nothing applied again
)
