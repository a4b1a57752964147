package api

import "time"

// EphemeralDatabase is the API resource.
type EphemeralDatabase struct {
	ProjectID       string    `json:"project_id"`
	Name            string    `json:"name"`
	PostgresVersion string    `json:"postgres_version" doc:"empty until provisioned"`
	Region          string    `json:"region"`
	State           string    `json:"state" enum:"ProjectState" doc:"the project's state: active once it accepts connections"`
	CreatedAt       time.Time `json:"created_at"`
	ExpiresAt       time.Time `json:"expires_at" doc:"when it is destroyed unless claimed (72 hours after creation)"`
}

// CreateEphemeralRequest is the body of POST /v1/ephemeral-databases; every field is optional.
type CreateEphemeralRequest struct {
	Name   string `json:"name" schema:"maxLength=63" doc:"1 to 63 characters; default: a generated name"`
	Region string `json:"region" doc:"the appliance's region (the only one it has); default: it"`
}

// EphemeralCreated is the create response: the claim token is shown once.
type EphemeralCreated struct {
	ClaimToken        string             `json:"claim_token" doc:"eph_…: the only credential of the database until it is claimed; shown once"`
	ClaimURL          string             `json:"claim_url" schema:"format=uri,pattern=^https?://,example=https://appliance.example.com/claim/prj_123#token=eph_abc" doc:"the dashboard page that claims it into an organization (the token is in the URL's fragment, which browsers never send)"`
	EphemeralDatabase *EphemeralDatabase `json:"ephemeral_database"`
}

// EphemeralResponse is the GET response.
type EphemeralResponse struct {
	Connections       *Connections       `json:"connections" api:"nullable" doc:"null until the database is active"`
	EphemeralDatabase *EphemeralDatabase `json:"ephemeral_database"`
}

// ClaimRequest is the body of POST /v1/ephemeral-databases/{projectID}/claim.
type ClaimRequest struct {
	ClaimToken string `json:"claim_token" api:"required" doc:"the eph_ token returned at creation"`
}

// ClaimResponse is the claim response.
type ClaimResponse struct {
	Project ClaimedProjectView `json:"project"`
}

// ClaimedProjectView is the project with always_on, as the spec shows it on the claim response.
type ClaimedProjectView struct {
	Project
	AlwaysOn bool `json:"always_on" doc:"true: a claimed database is a normal project, kept until deleted"`
}
