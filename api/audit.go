package api

import (
	"encoding/json"
	"time"
)

// AuditEventList is the list response.
type AuditEventList struct {
	AuditEvents []*AuditEvent `json:"audit_events"`
	// NextBefore is the before= of the next page (older events that match), or "" when this page is the last.
	NextBefore string `json:"next_before"`
}

// AuditEvent is the API resource: exactly the fields of the stored record.
type AuditEvent struct {
	ID             string          `json:"id"`
	Action         string          `json:"action"`
	ActorID        string          `json:"actor_id"`
	ActorKind      string          `json:"actor_kind"`
	OrganizationID string          `json:"organization_id"`
	ProjectID      string          `json:"project_id"`
	Metadata       json.RawMessage `json:"metadata"`
	CreatedAt      time.Time       `json:"created_at"`
}
