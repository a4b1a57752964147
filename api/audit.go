package api

import (
	"encoding/json"
	"time"
)

// AuditEventList is the list response.
type AuditEventList struct {
	AuditEvents []*AuditEvent `json:"audit_events"`
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
