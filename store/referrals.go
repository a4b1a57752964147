package store

import "time"

// SignupInvite is an operator's or an organization owner's invitation to sign up (up --signup invite): a
// link carrying a secret token, of which only the hash is kept; used once, before it expires, unless
// revoked (appliance/tenancy).
type SignupInvite struct {
	ID              string `json:"id"`
	TokenHash       string `json:"token_hash"`
	Email           string `json:"email"` // "": anyone with the link; otherwise only this address
	Note            string `json:"note"`
	CreatedByUserID string `json:"created_by_user_id"`
	// InvitedByOrganizationID: the organization whose owner minted it ("": an operator's). Its sign-up
	// still makes a new organization.
	InvitedByOrganizationID string     `json:"invited_by_organization_id"`
	CreatedAt               time.Time  `json:"created_at"`
	ExpiresAt               time.Time  `json:"expires_at"`
	UsedAt                  *time.Time `json:"used_at"`
	UsedByUserID            string     `json:"used_by_user_id"`
	OrganizationID          string     `json:"organization_id"` // the organization its sign-up made
	RevokedAt               *time.Time `json:"revoked_at"`
}

// ReferralCode is an organization's referral code (one per organization), by its code (appliance/referrals).
type ReferralCode struct {
	Code           string    `json:"code"`
	OrganizationID string    `json:"organization_id"`
	DiscountID     string    `json:"discount_id"`
	Locale         string    `json:"locale"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// Referral is an organization that signed up with another's referral code (appliance/referrals): pending
// until the referred organization's first paid invoice rewards the referrer, or void.
type Referral struct {
	ID                     string     `json:"id"`
	Code                   string     `json:"code"`
	ReferrerOrganizationID string     `json:"referrer_organization_id"`
	ReferredOrganizationID string     `json:"referred_organization_id"`
	ReferredUserID         string     `json:"referred_user_id"`
	ReferredSubscriptionID string     `json:"referred_subscription_id"`
	FirstPeriodEnd         *time.Time `json:"first_period_end"` // the end of the referred subscription's first period
	Status                 string     `json:"status"`           // pending, rewarded, void
	VoidReason             string     `json:"void_reason"`
	// RewardDue: the first paid invoice arrived; the reward is made at the provider after the commit
	// (and retried until it is), then status is rewarded.
	RewardDue        bool       `json:"reward_due"`
	RewardInvoiceID  string     `json:"reward_invoice_id"`
	RewardAttempts   int        `json:"reward_attempts"`
	RewardError      string     `json:"reward_error"`
	RewardDiscountID string     `json:"reward_discount_id"`
	RewardCode       string     `json:"reward_code"`
	RewardedAt       *time.Time `json:"rewarded_at"`
	CreatedAt        time.Time  `json:"created_at"`
	UpdatedAt        time.Time  `json:"updated_at"`
}

// The sign-up and referral tables.
var (
	SignupInvites       = newTable("signup_invites", func(r *SignupInvite) string { return r.ID })
	SignupInvitesByHash = SignupInvites.index("hash", func(r *SignupInvite) []string { return []string{r.TokenHash} })
	// SignupInvitesByOrg files the invites an organization's owners minted (operators' are not filed).
	SignupInvitesByOrg = SignupInvites.index("org", func(r *SignupInvite) []string {
		if r.InvitedByOrganizationID == "" {
			return nil
		}
		return []string{r.InvitedByOrganizationID}
	})

	ReferralCodes      = newTable("referral_codes", func(r *ReferralCode) string { return r.Code })
	ReferralCodesByOrg = ReferralCodes.index("org", func(r *ReferralCode) []string { return []string{r.OrganizationID} })

	Referrals           = newTable("referrals", func(r *Referral) string { return r.ID })
	ReferralsByReferrer = Referrals.index("referrer", func(r *Referral) []string { return []string{r.ReferrerOrganizationID} })
	ReferralsByReferred = Referrals.index("referred", func(r *Referral) []string { return []string{r.ReferredOrganizationID} })
	// ReferralsRewardDue files the referrals whose reward waits for the provider.
	ReferralsRewardDue = Referrals.index("reward_due", func(r *Referral) []string {
		if r.RewardDue && r.Status == "pending" {
			return []string{"due"}
		}
		return nil
	})
)
