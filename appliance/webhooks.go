package appliance

import (
	"github.com/theappliance/appliance/appliance/eventlog"
	"github.com/theappliance/appliance/appliance/outbound"
	"github.com/theappliance/appliance/appliance/webhook"
)

// The webhooks area lives in appliance/webhook (its endpoints, the deliveries queued for each event, the
// delivery worker and the recorder of its attempts, the status page's row); the service holds it, built in
// New.

// WebhookOptions tune deliveries (Config.Webhooks); DefaultWebhookOptions are what the appliance runs with
// (tests shorten the schedule).
type WebhookOptions = webhook.Options

// DefaultWebhookOptions: Svix's schedule and its rule of disabling an endpoint after 5 days of failures.
var DefaultWebhookOptions = webhook.DefaultOptions

// Webhooks is the webhooks area: httpapi's webhook routes call its methods, up starts and stops its
// delivery worker and registers its status row.
func (s *Service) Webhooks() *webhook.Service { return s.hooks }

// newWebhooks builds the area with the service's collaborators (New).
func (s *Service) newWebhooks(cfg Config, deps Deps) *webhook.Service {
	opts := DefaultWebhookOptions
	if cfg.Webhooks != nil {
		opts = *cfg.Webhooks
	}
	return webhook.New(webhook.Config{Options: opts, EventTypes: eventlog.Names()},
		webhook.Deps{DB: deps.DB, Box: deps.Box, Log: deps.Log, Clock: s.now, Lane: deps.Lane, Policy: s.policy(), Host: areaHost{s}})
}

// policy is the outbound destination policy of tenant connections.
func (s *Service) policy() *outbound.Policy {
	if s.cfg.Outbound == nil {
		return &outbound.Policy{}
	}
	return s.cfg.Outbound
}

// EventTypeNames are the names of the event table (eventlog.Types, the one list): the values of
// api.EventType, which the OpenAPI document gives as its enum and the webhook endpoints' filter accepts.
func EventTypeNames() []string { return eventlog.Names() }
