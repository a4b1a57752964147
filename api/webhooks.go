package api

import (
	"encoding/json"
	"time"
)

// EventType is the name of a kind of event (job.completed, alert.triggered …): what an endpoint's
// event_types filter takes. Its values are the event table's (appliance/eventlog's Types, the one list):
// the OpenAPI document gives them as the EventType schema's enum, and an unknown name is a 400.
type EventType string

// WebhookEndpoint is the API resource of an endpoint (never its secret).
type WebhookEndpoint struct {
	ID             string      `json:"id"`
	OrganizationID string      `json:"organization_id"`
	Description    string      `json:"description"`
	URL            string      `json:"url" schema:"format=uri,pattern=^https?://,example=https://example.com/hooks"`
	EventTypes     []EventType `json:"event_types" doc:"the event types delivered; empty: all"`
	IsActive       bool        `json:"is_active"`
	Health         string      `json:"health" enum:"WebhookHealth" doc:"failing after 3 failed attempts in a row; disabled when not active"`
	CreatedAt      time.Time   `json:"created_at"`
	UpdatedAt      time.Time   `json:"updated_at"`
}

// WebhookEndpointList is the list response.
type WebhookEndpointList struct {
	WebhookEndpoints []WebhookEndpoint `json:"webhook_endpoints"`
}

// WebhookEndpointResult is the patch response.
type WebhookEndpointResult struct {
	WebhookEndpoint WebhookEndpoint `json:"webhook_endpoint"`
}

// WebhookEndpointWithSecret is the create and rotate-secret response: the secret is shown once.
type WebhookEndpointWithSecret struct {
	WebhookEndpoint WebhookEndpoint `json:"webhook_endpoint"`
	PlaintextSecret string          `json:"plaintext_secret" doc:"whsec_<base64>: verify deliveries with it (Standard Webhooks); shown once"`
}

// CreateWebhookEndpointRequest is the body of POST /v1/organizations/{orgID}/webhook-endpoints.
type CreateWebhookEndpointRequest struct {
	URL         string      `json:"url" api:"required" schema:"format=uri,pattern=^https?://,maxLength=2048,example=https://example.com/hooks" doc:"absolute http(s) URL the outbound policy allows"`
	Description string      `json:"description" schema:"maxLength=500"`
	EventTypes  []EventType `json:"event_types,omitempty" doc:"event types to deliver (see the event table); empty or absent: all"`
	IsActive    *bool       `json:"is_active,omitempty" doc:"default true"`
}

// PatchWebhookEndpointRequest changes the fields it names.
type PatchWebhookEndpointRequest struct {
	URL         *string      `json:"url,omitempty" schema:"format=uri,pattern=^https?://,maxLength=2048,example=https://example.com/hooks"`
	Description *string      `json:"description,omitempty" schema:"maxLength=500"`
	EventTypes  *[]EventType `json:"event_types,omitempty" doc:"replaces the list; empty: all"`
	IsActive    *bool        `json:"is_active,omitempty" doc:"false stops deliveries (pending ones fail); true re-enables and resets health"`
}

// WebhookAttempt is one recorded attempt of a delivery.
type WebhookAttempt struct {
	At             time.Time `json:"at"`
	ResponseStatus int       `json:"response_status" doc:"0 when no HTTP response came"`
	Error          string    `json:"error"`
	DurationMS     int64     `json:"duration_ms"`
}

// WebhookDelivery is the API resource of a delivery.
type WebhookDelivery struct {
	ID             string           `json:"id" doc:"also the webhook-id header, the same on every attempt"`
	EndpointID     string           `json:"endpoint_id"`
	OrganizationID string           `json:"organization_id"`
	EventType      string           `json:"event_type"`
	State          string           `json:"state" enum:"DeliveryState"`
	Attempts       int              `json:"attempts"`
	MaxAttempts    int              `json:"max_attempts"`
	ResponseStatus int              `json:"response_status" doc:"the last attempt's HTTP status; 0 when none came"`
	LastError      string           `json:"last_error"`
	Payload        json.RawMessage  `json:"payload" doc:"the body sent: {type, timestamp, data}"`
	AttemptHistory []WebhookAttempt `json:"attempt_history" doc:"every attempt, oldest first (the last 50)"`
	CreatedAt      time.Time        `json:"created_at"`
	DeliveredAt    *time.Time       `json:"delivered_at"`
	NextAttemptAt  *time.Time       `json:"next_attempt_at"`
	UpdatedAt      time.Time        `json:"updated_at"`
}

// WebhookDeliveryList is the deliveries response.
type WebhookDeliveryList struct {
	Deliveries []WebhookDelivery `json:"deliveries"`
}

// WebhookDeliveryResult is the test and redeliver response.
type WebhookDeliveryResult struct {
	Delivery WebhookDelivery `json:"delivery"`
}
