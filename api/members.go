package api

import "time"

// Member is a person of an organization: a user of the built-in identity provider and their role.
type Member struct {
	UserID    string    `json:"user_id"`
	Email     string    `json:"email"`
	Name      string    `json:"name"`
	Role      string    `json:"role" enum:"Role"`
	CreatedAt time.Time `json:"created_at" doc:"when the user was created"`
}

// MemberList is the list response.
type MemberList struct {
	Members []Member `json:"members"`
}

// MemberResponse wraps one member.
type MemberResponse struct {
	Member Member `json:"member"`
}

// AddMemberRequest is the body of POST /v1/organizations/{orgID}/members.
type AddMemberRequest struct {
	Email    string `json:"email" api:"required" schema:"example=dana@example.com" doc:"the person's email; an existing user is added, otherwise a user is created"`
	Name     string `json:"name" schema:"maxLength=100" doc:"display name of a new user (up to 100 characters)"`
	Role     string `json:"role" api:"required" enum:"Role" doc:"owner, admin or member (only owners may add owners)"`
	Password string `json:"password" schema:"minLength=12,maxLength=72" doc:"initial password of a new user (at least 12 characters); absent: one is generated and returned once"`
}

// AddedMember carries a generated initial password, returned once, or the invitation sent to an existing
// user.
type AddedMember struct {
	Member          Member      `json:"member" doc:"the person added; for an invited existing user only email and role (user_id and name stay empty until they accept)"`
	InitialPassword string      `json:"initial_password" doc:"the generated password of a newly created user, shown once; empty when the user existed or a password was given"`
	Invitation      *Invitation `json:"invitation" api:"nullable" doc:"null when a new user was created and added; the invitation when the email is an existing user's, who joins by accepting it signed in"`
}

// Invitation asks an existing user to join an organization; they accept it signed in. Neither side's view
// names the invited user beyond the email the organization typed.
type Invitation struct {
	ID               string    `json:"id"`
	OrganizationID   string    `json:"organization_id"`
	OrganizationName string    `json:"organization_name"`
	Email            string    `json:"email"`
	Role             string    `json:"role" enum:"Role"`
	CreatedAt        time.Time `json:"created_at"`
	ExpiresAt        time.Time `json:"expires_at"`
}

// InvitationList is the list response.
type InvitationList struct {
	Invitations []Invitation `json:"invitations"`
}

// InvitationDone answers a revoke or a decline.
type InvitationDone struct {
	Deleted bool `json:"deleted"`
}

// SetMemberRoleRequest is the body of PATCH /v1/organizations/{orgID}/members/{userID}.
type SetMemberRoleRequest struct {
	Role string `json:"role" api:"required" enum:"Role" doc:"owner, admin or member"`
}

// RemovedMember is the remove response.
type RemovedMember struct {
	Removed        bool     `json:"removed"`
	RevokedAPIKeys []string `json:"revoked_api_key_ids" doc:"the keys the removed person had created in this organization, revoked with the membership"`
}

// ChangePasswordRequest is the body of POST /v1/auth/password.
type ChangePasswordRequest struct {
	CurrentPassword string `json:"current_password" api:"required"`
	NewPassword     string `json:"new_password" api:"required" schema:"minLength=12,maxLength=72" doc:"12 to 72 bytes"`
}

// PasswordChanged is the password change response.
type PasswordChanged struct {
	Changed         bool `json:"changed"`
	SessionsRevoked int  `json:"sessions_revoked" doc:"the user's other sessions, which the change signs out"`
}

// SignedOut is the sign-out response.
type SignedOut struct {
	SignedOut bool `json:"signed_out"`
}
