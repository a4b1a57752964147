package store

import (
	"encoding/json"
	"time"
)

// Integration is a project's connection to one provider (appliance/integrations): its config, its
// credentials sealed with the service's box (never returned; has_credentials only), its state and what it
// pushed. One per project and provider (IntegrationsByProvider's key).
type Integration struct {
	ID             string          `json:"id"`
	OrganizationID string          `json:"organization_id"`
	ProjectID      string          `json:"project_id"`
	Provider       string          `json:"provider"`
	ExternalID     string          `json:"external_id"`
	State          string          `json:"state"` // pending, active, error, disconnecting
	Config         json.RawMessage `json:"config"`
	// Credentials are the sealed JSON of provider.Credentials (nil: none stored).
	Credentials []byte `json:"credentials"`
	// OAuth: the token's refresh token and expiry are inside Credentials; TokenExpiry is kept here to
	// know when to refresh without opening them.
	TokenExpiry *time.Time `json:"token_expiry"`
	LastError   string     `json:"last_error"`
	LastSyncAt  *time.Time `json:"last_sync_at"`
	// Pushed are the names the provider set for production (variable names).
	Pushed []string `json:"pushed"`
	// Previews are the preview databases made for git branches: branch → preview project id.
	Previews map[string]string `json:"previews"`
	// BranchErrors are the branches whose preview database could not be made: branch → why (cleared by
	// the branch's next success). The integration stays as it was: production's settings are unaffected.
	BranchErrors map[string]string `json:"branch_errors,omitempty"`
	CreatedAt    time.Time         `json:"created_at"`
	UpdatedAt    time.Time         `json:"updated_at"`
}

// IntegrationEvent is an inbound webhook event already received (deduplication by the provider's event
// id), kept a week.
type IntegrationEvent struct {
	ID         string    `json:"id"` // provider/projectID/eventID
	ProjectID  string    `json:"project_id"`
	ReceivedAt time.Time `json:"received_at"`
}

// OAuthState is an OAuth start's state, by its nonce's hash: single use, 10 minutes.
type OAuthState struct {
	ID        string     `json:"id"`
	Provider  string     `json:"provider"`
	ProjectID string     `json:"project_id"`
	UserID    string     `json:"user_id"`    // the actor's id: a user, or an API key
	ActorKind string     `json:"actor_kind"` // user or api_key
	ExpiresAt time.Time  `json:"expires_at"`
	UsedAt    *time.Time `json:"used_at"`
}

// The integrations' tables.
var (
	Integrations          = newTable("integrations", func(r *Integration) string { return r.ID })
	IntegrationsByProject = Integrations.index("project", func(r *Integration) []string { return []string{r.ProjectID} })
	// IntegrationsByProvider files each integration under project/provider (one per pair).
	IntegrationsByProvider = Integrations.index("provider", func(r *Integration) []string { return []string{r.ProjectID + "/" + r.Provider} })

	IntegrationEvents = newTable("integration_events", func(r *IntegrationEvent) string { return r.ID })
	OAuthStates       = newTable("oauth_states", func(r *OAuthState) string { return r.ID })
)
