package api

import "time"

// OrganizationResponse wraps one organization.
type OrganizationResponse struct {
	Organization *Organization `json:"organization"`
}

// MeResponse is GET /v1/me.
type MeResponse struct {
	Organization *Organization `json:"organization" api:"nullable" doc:"null for a platform admin acting in no organization"`
	Principal    *Principal    `json:"principal"`
	User         *MeUser       `json:"user" api:"nullable" doc:"the person signed in (a session) or who the API key belongs to; null when there is none"`
}

// MeUser is who a caller is, as a person reads it.
type MeUser struct {
	ID    string `json:"id"`
	Email string `json:"email"`
	Name  string `json:"name" doc:"may be empty"`
}

// PatchOrganizationRequest holds the organization fields a customer may change; absent fields stay.
type PatchOrganizationRequest struct {
	Name         *string `json:"name,omitempty" schema:"minLength=1,maxLength=100" doc:"1 to 100 characters"`
	Slug         *string `json:"slug,omitempty" schema:"minLength=3,maxLength=40,pattern=^[a-z0-9][a-z0-9-]*[a-z0-9]$" doc:"lowercase letters, digits and dashes, 3 to 40 characters, unique"`
	BillingEmail *string `json:"billing_email,omitempty" doc:"an email address, or empty to clear"`
	BillingName  *string `json:"billing_name,omitempty" schema:"maxLength=200" doc:"up to 200 characters"`
}

// Organization is the API resource: exactly the fields of the stored record (appliance converts one to the
// other; the compiler keeps them equal).
type Organization struct {
	ID                    string     `json:"id"`
	Name                  string     `json:"name"`
	Slug                  string     `json:"slug"`
	BillingCustomerID     string     `json:"billing_customer_id"`
	BillingEmail          string     `json:"billing_email"`
	BillingName           string     `json:"billing_name"`
	BillingPlan           string     `json:"billing_plan"`
	BillingProductID      string     `json:"billing_product_id"`
	BillingProvider       string     `json:"billing_provider"`
	BillingStatus         string     `json:"billing_status"`
	BillingSubscriptionID string     `json:"billing_subscription_id"`
	BillingPeriodEnd      *time.Time `json:"billing_period_end"`
	IDPOrganizationID     string     `json:"idp_organization_id"`
	IDPOrganizationSlug   string     `json:"idp_organization_slug"`
	DeployAInstallationID string     `json:"deploy_a_installation_id"`
	EdgeCAccountID        string     `json:"edge_c_account_id"`
	SuspendedReason       string     `json:"suspended_reason"`
	SuspendedAt           *time.Time `json:"suspended_at"`
	CreatedAt             time.Time  `json:"created_at"`
	UpdatedAt             time.Time  `json:"updated_at"`
}
