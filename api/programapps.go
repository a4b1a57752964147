package api

import "time"

// Programs: program applications (the spec's Program application resource and POST
// /v1/program-applications), the platform operators' review of them, and the narrow service tokens the
// public website submits them with (see docs/api-decisions.md, "Program applications and service tokens").

// ScopeProgramApplicationsCreate is the one scope of a service token: it submits program applications and
// nothing else. It is no API key's scope (not in AllScopes): keys and sessions never carry it.
const ScopeProgramApplicationsCreate Scope = "program_applications:create"

// ServiceTokenPrefix starts every service token's plaintext: svc_ and 32 base32 characters. It never
// contains "_live_" (an API key's mark) and is not a session's ses_, so no credential is taken for another.
const ServiceTokenPrefix = "svc_"

// Program application statuses: received on submission, then one decision of an operator.
const (
	ProgramApplicationReceived = "received"
	ProgramApplicationApproved = "approved"
	ProgramApplicationRejected = "rejected"
)

// Programs an application may name.
const (
	ProgramStartup = "startup"
	ProgramPartner = "partner"
)

// ProgramApplication is the spec's Program application resource.
type ProgramApplication struct {
	ID              string     `json:"id"`
	Program         string     `json:"program" enum:"Program"`
	Status          string     `json:"status" enum:"ProgramApplicationStatus"`
	CompanyName     string     `json:"company_name"`
	CompanyWebsite  string     `json:"company_website"`
	ContactName     string     `json:"contact_name"`
	Email           string     `json:"email"`
	Locale          string     `json:"locale"`
	ReferralSource  string     `json:"referral_source"`
	Segment         string     `json:"segment"`
	UseCase         string     `json:"use_case"`
	TeamSize        int        `json:"team_size"`
	OperatorNote    string     `json:"operator_note"`
	DiscountID      string     `json:"discount_id" doc:"the billing provider's coupon made on approval"`
	DiscountCode    string     `json:"discount_code" doc:"the promotion code the applicant redeems at checkout"`
	DecidedByUserID string     `json:"decided_by_user_id"`
	ServiceTokenID  string     `json:"service_token_id" doc:"the service token it was submitted with"`
	CreatedAt       time.Time  `json:"created_at"`
	DecidedAt       *time.Time `json:"decided_at" api:"nullable"`
	UpdatedAt       time.Time  `json:"updated_at"`
}

// CreateProgramApplicationRequest is POST /v1/program-applications.
type CreateProgramApplicationRequest struct {
	CompanyName    string `json:"company_name" api:"required" schema:"minLength=1,maxLength=200" doc:"1 to 200 characters"`
	ContactName    string `json:"contact_name" api:"required" schema:"minLength=1,maxLength=200" doc:"1 to 200 characters"`
	Email          string `json:"email" api:"required" schema:"minLength=3,maxLength=254" doc:"one address (RFC 5322, as net/mail parses it), at most 254 characters"`
	Segment        string `json:"segment" api:"required" schema:"minLength=1,maxLength=100" doc:"1 to 100 characters"`
	UseCase        string `json:"use_case" api:"required" schema:"minLength=1,maxLength=2000" doc:"1 to 2000 characters"`
	Program        string `json:"program" api:"required" enum:"Program"`
	TeamSize       int    `json:"team_size" api:"required" schema:"minimum=1,maximum=1000000" doc:"at least 1"`
	CompanyWebsite string `json:"company_website,omitempty" schema:"maxLength=300" doc:"an http or https URL, at most 300 characters"`
	Locale         string `json:"locale,omitempty" schema:"maxLength=35" doc:"a BCP 47 language tag such as en or pt-BR, at most 35 characters"`
	ReferralSource string `json:"referral_source,omitempty" schema:"maxLength=200" doc:"how the applicant heard of the program, at most 200 characters"`
}

// ProgramApplicationResponse is {program_application}.
type ProgramApplicationResponse struct {
	ProgramApplication *ProgramApplication `json:"program_application"`
}

// ProgramApplicationList is GET /v1/program-applications.
type ProgramApplicationList struct {
	ProgramApplications []*ProgramApplication `json:"program_applications"`
}

// ApproveProgramApplicationRequest is POST /v1/program-applications/{applicationID}/approve: the discount
// made at the billing provider (a coupon and its promotion code).
type ApproveProgramApplicationRequest struct {
	PercentOff     float64 `json:"percent_off" api:"required" schema:"exclusiveMinimum=0,maximum=100" doc:"above 0, at most 100"`
	DurationMonths int     `json:"duration_months,omitempty" schema:"minimum=0,maximum=36" doc:"0 (default): the first invoice only; otherwise that many months"`
	Code           string  `json:"code,omitempty" schema:"maxLength=40,pattern=^[A-Za-z0-9_-]*$" doc:"the promotion code the applicant types (letters, digits, - and _, at most 40); default: made up by the provider"`
	OperatorNote   string  `json:"operator_note,omitempty" schema:"maxLength=2000" doc:"at most 2000 characters"`
}

// RejectProgramApplicationRequest is POST /v1/program-applications/{applicationID}/reject.
type RejectProgramApplicationRequest struct {
	OperatorNote string `json:"operator_note,omitempty" schema:"maxLength=2000" doc:"why, at most 2000 characters"`
}

// ServiceToken is a narrow token of the public website (its plaintext is shown once, at creation).
type ServiceToken struct {
	ID              string     `json:"id"`
	Name            string     `json:"name"`
	TokenPrefix     string     `json:"token_prefix" doc:"the plaintext's first 8 characters, to recognise it"`
	Scopes          []string   `json:"scopes" doc:"always [program_applications:create]"`
	CreatedByUserID string     `json:"created_by_user_id"`
	IsActive        bool       `json:"is_active"`
	CreatedAt       time.Time  `json:"created_at"`
	LastUsedAt      *time.Time `json:"last_used_at" api:"nullable"`
	RevokedAt       *time.Time `json:"revoked_at" api:"nullable"`
}

// CreateServiceTokenRequest is POST /v1/service-tokens.
type CreateServiceTokenRequest struct {
	Name string `json:"name" api:"required" schema:"minLength=1,maxLength=100" doc:"1 to 100 characters, e.g. the website it is for"`
}

// CreatedServiceToken is the answer to POST /v1/service-tokens.
type CreatedServiceToken struct {
	ServiceToken   *ServiceToken `json:"service_token"`
	PlaintextToken string        `json:"plaintext_token" doc:"svc_ and 32 characters; shown once, only its SHA-256 is kept"`
}

// ServiceTokenResponse is {service_token}.
type ServiceTokenResponse struct {
	ServiceToken *ServiceToken `json:"service_token"`
}

// ServiceTokenList is GET /v1/service-tokens.
type ServiceTokenList struct {
	ServiceTokens []*ServiceToken `json:"service_tokens"`
}
