package api

import "time"

// APIKey is the API resource of a key (never its hash).
type APIKey struct {
	ID              string     `json:"id"`
	Name            string     `json:"name"`
	KeyPrefix       string     `json:"key_prefix"`
	OrganizationID  string     `json:"organization_id"`
	ProjectID       string     `json:"project_id"`
	CreatedByUserID string     `json:"created_by_user_id"`
	DeviceName      string     `json:"device_name"`
	Source          string     `json:"source"`
	IsActive        bool       `json:"is_active"`
	Scopes          []string   `json:"scopes" enum:"Scope"`
	CreatedAt       time.Time  `json:"created_at"`
	ExpiresAt       *time.Time `json:"expires_at"`
	LastUsedAt      *time.Time `json:"last_used_at"`
	RevokedAt       *time.Time `json:"revoked_at"`
}

// APIKeyList is the list response.
type APIKeyList struct {
	APIKeys []APIKey `json:"api_keys"`
}

// CreateAPIKeyRequest is the body of POST /v1/organizations/{orgID}/api-keys.
type CreateAPIKeyRequest struct {
	Name      string   `json:"name" api:"required" schema:"minLength=1,maxLength=100,example=ci" doc:"display name, 1 to 100 characters"`
	Scopes    []string `json:"scopes,omitempty" api:"required" schema:"minItems=1" enum:"Scope" doc:"at least one of the ten scopes"`
	ProjectID string   `json:"project_id" doc:"restricts the key to one project; organization scopes are then refused"`
	ExpiresIn int64    `json:"expires_in_days" schema:"minimum=0,maximum=3650" doc:"days until the key expires, 1 to 3650; absent or 0: never"`
}

// CreatedAPIKey carries the plaintext key, returned once.
type CreatedAPIKey struct {
	APIKey          APIKey `json:"api_key"`
	PlaintextAPIKey string `json:"plaintext_api_key"`
}

// Revoked is the revoke response.
type Revoked struct {
	Revoked bool `json:"revoked"`
}

// Scope is a permission an API key carries.
type Scope string

// The ten scopes of the API.
const (
	ScopeProjectsRead       Scope = "projects:read"
	ScopeProjectsWrite      Scope = "projects:write"
	ScopeCredentialsRead    Scope = "credentials:read"
	ScopeBackupsRead        Scope = "backups:read"
	ScopeBackupsWrite       Scope = "backups:write"
	ScopeJobsRead           Scope = "jobs:read"
	ScopeOrganizationsRead  Scope = "organizations:read"
	ScopeOrganizationsWrite Scope = "organizations:write"
	ScopeAPIKeysRead        Scope = "api_keys:read"
	ScopeAPIKeysWrite       Scope = "api_keys:write"
)

// AllScopes lists every scope in a stable order.
var AllScopes = []Scope{
	ScopeProjectsRead, ScopeProjectsWrite, ScopeCredentialsRead, ScopeBackupsRead, ScopeBackupsWrite,
	ScopeJobsRead, ScopeOrganizationsRead, ScopeOrganizationsWrite, ScopeAPIKeysRead, ScopeAPIKeysWrite,
}
