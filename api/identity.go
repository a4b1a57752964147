package api

import "time"

// SessionRequest signs a user in with the built-in identity provider.
type SessionRequest struct {
	Email          string `json:"email" api:"required" schema:"example=owner@appliance.local"`
	Password       string `json:"password" api:"required"`
	OrganizationID string `json:"organization_id"` // the organization to act in; default: the first membership
	// Cookie asks for the session as an HttpOnly cookie instead of a token in the body (the dashboard).
	Cookie bool `json:"cookie" doc:"true: the session is set as an HttpOnly, Secure, SameSite=Strict cookie and token is empty; the cookie authenticates only requests that also send the header X-Appliance-CSRF: 1"`
}

// SessionResult carries the session token (returned once).
type SessionResult struct {
	Token          string    `json:"token"`
	UserID         string    `json:"user_id"`
	OrganizationID string    `json:"organization_id"`
	Role           string    `json:"role"`
	ExpiresAt      time.Time `json:"expires_at"`
}

// Principal is the authenticated caller as GET /v1/me shows it.
type Principal struct {
	AuthSource          string   `json:"auth_source"`
	IDPOrganizationID   string   `json:"idp_organization_id"`
	IDPOrganizationRole string   `json:"idp_organization_role"`
	IDPOrganizationSlug string   `json:"idp_organization_slug"`
	OrganizationID      string   `json:"organization_id"`
	UserID              string   `json:"user_id"`
	IsAdmin             bool     `json:"is_admin"`
	Scopes              []string `json:"scopes"`
	ProjectID           string   `json:"project_id"` // set for project-scoped keys
	APIKeyID            string   `json:"api_key_id"` // set when authenticated by API key
}
