package api

import "time"

// Sign-up (an addition to the spec: docs/api-decisions.md, "Sign-up and referrals").

// Sign-up modes (up --signup).
const (
	SignupModeClosed = "closed"
	SignupModeInvite = "invite"
	SignupModeOpen   = "open"
)

// SignupModes are the values of up --signup.
var SignupModes = []string{SignupModeClosed, SignupModeInvite, SignupModeOpen}

// SignupSettings is GET /v1/signup: whether the sign-up page is offered.
type SignupSettings struct {
	Mode string `json:"mode" enum:"SignupMode" doc:"closed: nobody signs up (organizations are made by operators); invite: with an operator's sign-up invite; open: anyone"`
}

// SignupRequest is POST /v1/signup.
type SignupRequest struct {
	Email            string `json:"email" api:"required" schema:"example=founder@example.com"`
	Password         string `json:"password" api:"required" doc:"12 to 72 bytes, as every user's"`
	OrganizationName string `json:"organization_name" api:"required" schema:"minLength=1,maxLength=100" doc:"the new organization's name, 1 to 100 characters"`
	InviteToken      string `json:"invite_token" doc:"the token of a sign-up invite link (required when the mode is invite)"`
	ReferralCode     string `json:"referral_code" doc:"another organization's referral code; an unknown one does not stop the sign-up (referral_code_status says invalid)"`
	// Cookie asks for the session as an HttpOnly cookie instead of a token in the body (the dashboard).
	Cookie bool `json:"cookie" doc:"true: the session is set as the dashboard's HttpOnly cookie and session.token is empty"`
}

// Referral code outcomes of a sign-up.
const (
	ReferralCodeNone    = "none"    // no code given
	ReferralCodeApplied = "applied" // a referral was recorded, pending
	ReferralCodeInvalid = "invalid" // no such code: nothing recorded
	ReferralCodeVoid    = "void"    // recorded void (self-referral)
)

// SignupResult is the answer to POST /v1/signup: the user, their new organization and their session.
type SignupResult struct {
	UserID             string         `json:"user_id"`
	Email              string         `json:"email"`
	Organization       *Organization  `json:"organization"`
	Session            *SessionResult `json:"session"`
	ReferralCodeStatus string         `json:"referral_code_status" enum:"ReferralCodeStatus" doc:"none: no code given; applied: a pending referral was recorded; invalid: no such code (nothing recorded; the sign-up still happened); void: recorded void (void_reason says why)"`
	Referral           *Referral      `json:"referral" api:"nullable" doc:"the referral recorded, when referral_code_status is applied or void"`
}

// Sign-up invite states.
const (
	SignupInvitePending = "pending"
	SignupInviteUsed    = "used"
	SignupInviteExpired = "expired"
	SignupInviteRevoked = "revoked"
)

func init() {
	Enums["SignupMode"] = SignupModes
	Enums["ReferralCodeStatus"] = []string{ReferralCodeNone, ReferralCodeApplied, ReferralCodeInvalid, ReferralCodeVoid}
	Enums["SignupInviteState"] = []string{SignupInvitePending, SignupInviteUsed, SignupInviteExpired, SignupInviteRevoked}
	Enums["ReferralStatus"] = []string{ReferralPending, ReferralRewarded, ReferralVoid}
}

// SignupInvite is an operator's or an organization owner's invitation to sign up (its token is shown once,
// at creation).
type SignupInvite struct {
	ID                      string     `json:"id"`
	Email                   string     `json:"email" doc:"only this address may use it; empty: anyone holding the link"`
	Note                    string     `json:"note"`
	State                   string     `json:"state" enum:"SignupInviteState"`
	CreatedByUserID         string     `json:"created_by_user_id"`
	InvitedByOrganizationID string     `json:"invited_by_organization_id" doc:"the organization whose owner minted it; empty for a platform operator's (an addition)"`
	CreatedAt               time.Time  `json:"created_at"`
	ExpiresAt               time.Time  `json:"expires_at"`
	UsedAt                  *time.Time `json:"used_at" api:"nullable"`
	UsedByUserID            string     `json:"used_by_user_id"`
	OrganizationID          string     `json:"organization_id" doc:"the organization its sign-up made"`
	RevokedAt               *time.Time `json:"revoked_at" api:"nullable"`
}

// CreateSignupInviteRequest is POST /v1/signup-invites and POST /v1/organizations/{orgID}/signup-invites.
type CreateSignupInviteRequest struct {
	Email          string `json:"email" doc:"restrict the invite to this address (optional)"`
	Note           string `json:"note" schema:"maxLength=200" doc:"who it is for, at most 200 characters (optional)"`
	ExpiresInHours int    `json:"expires_in_hours" schema:"minimum=1,maximum=720" doc:"hours until it expires, 1 to 720; default 168 (a week)"`
}

// CreatedSignupInvite is the answer to POST /v1/signup-invites: the token and the link, shown once.
type CreatedSignupInvite struct {
	SignupInvite *SignupInvite `json:"signup_invite"`
	Token        string        `json:"token" doc:"the secret token, returned once (only its hash is kept)"`
	URL          string        `json:"url" doc:"the dashboard's sign-up page with the token: send this link"`
}

// SignupInviteList is GET /v1/signup-invites and GET /v1/organizations/{orgID}/signup-invites.
type SignupInviteList struct {
	SignupInvites []*SignupInvite `json:"signup_invites"`
}

// SignupInviteResponse is the answer to DELETE /v1/signup-invites/{inviteID}.
type SignupInviteResponse struct {
	SignupInvite *SignupInvite `json:"signup_invite"`
}
