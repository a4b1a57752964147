package api

import "time"

// The platform operators' organization management (an addition to the spec: platform-admin routes; see
// docs/api-decisions.md, "Operators and organizations").

// CreateOrganizationRequest is POST /v1/organizations.
type CreateOrganizationRequest struct {
	Name       string `json:"name" api:"required" schema:"minLength=1,maxLength=100" doc:"1 to 100 characters"`
	Slug       string `json:"slug,omitempty" schema:"minLength=3,maxLength=40,pattern=^[a-z0-9][a-z0-9-]*[a-z0-9]$" doc:"lowercase letters, digits and dashes, 3 to 40 characters, unique; default: made from the name"`
	OwnerEmail string `json:"owner_email,omitempty" doc:"the organization's first owner: an existing user joins as owner; a new email creates a user whose generated password is returned once"`
}

// CreatedOrganization is the answer to POST /v1/organizations.
type CreatedOrganization struct {
	Organization *Organization `json:"organization"`
	Owner        *Member       `json:"owner" api:"nullable" doc:"the owner named by owner_email; null when none was"`
	// InitialPassword is the generated password of a new owner user, shown once.
	InitialPassword string `json:"initial_password" doc:"the generated password of a newly created owner, shown once; empty otherwise"`
}

// OrganizationSummary is an organization as the operators' list shows it.
type OrganizationSummary struct {
	Organization
	ProjectCount int               `json:"project_count" doc:"projects not deleted (previews and claimed ephemeral databases included)"`
	MemberCount  int               `json:"member_count"`
	Quota        OrganizationQuota `json:"quota" doc:"what it may hold: its own quota, else the default (PATCH /v1/organizations/{orgID}/quota)"`
}

// OrganizationList is GET /v1/organizations.
type OrganizationList struct {
	Organizations []OrganizationSummary `json:"organizations"`
}

// SuspendOrganizationRequest is POST /v1/organizations/{orgID}/suspend.
type SuspendOrganizationRequest struct {
	Reason string `json:"reason" api:"required" schema:"minLength=1,maxLength=500" doc:"why, 1 to 500 characters: the organization's callers read it in every refusal"`
}

// OrganizationJobs is the answer to suspend and resume: the organization and the job that stops or starts
// each of its projects' servers.
type OrganizationJobs struct {
	Organization *Organization `json:"organization"`
	Jobs         []*Job        `json:"jobs" doc:"one project.stop (suspend) or project.start (resume) job per project with a server"`
}

// DeletedOrganization is the answer to DELETE /v1/organizations/{orgID}.
type DeletedOrganization struct {
	Deleted        bool     `json:"deleted"`
	RevokedAPIKeys []string `json:"revoked_api_keys" doc:"the organization's API keys, revoked"`
	RemovedMembers int      `json:"removed_members" doc:"people whose membership ended (their users stay)"`
}

// AddOperatorRequest makes a user a platform operator (the local admin socket of up, and `up --operator-email`).
type AddOperatorRequest struct {
	Email string `json:"email"`
	Name  string `json:"name"`
}

// AddedOperator is the operator made.
type AddedOperator struct {
	UserID    string    `json:"user_id"`
	Email     string    `json:"email"`
	Created   bool      `json:"created" doc:"true: a new user; false: an existing user became an operator"`
	Password  string    `json:"password" doc:"a new user's generated password, shown once"`
	CreatedAt time.Time `json:"created_at"`
}
