package api

import "time"

// Referral codes and referrals (spec: Programs; docs/api-decisions.md, "Sign-up and referrals").

// Referral statuses.
const (
	ReferralPending  = "pending"
	ReferralRewarded = "rewarded"
	ReferralVoid     = "void"
)

// ReferralCode is an organization's referral code.
type ReferralCode struct {
	Code           string    `json:"code"`
	DiscountID     string    `json:"discount_id" doc:"the billing provider's discount (coupon) a referred organization redeems at checkout; empty until set"`
	Locale         string    `json:"locale"`
	OrganizationID string    `json:"organization_id"`
	SignupURL      string    `json:"signup_url" doc:"the dashboard's sign-up page with the code filled in (an addition)"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// CreateReferralCodeRequest is POST /v1/organizations/{orgID}/referral-code (an empty object is accepted).
type CreateReferralCodeRequest struct {
	Locale string `json:"locale" schema:"maxLength=35" doc:"a BCP 47 language tag for the referral's pages (optional; kept when the code exists)"`
}

// PatchReferralCodeRequest is PATCH /v1/organizations/{orgID}/referral-code.
type PatchReferralCodeRequest struct {
	DiscountID string `json:"discount_id" api:"required" doc:"a discount (coupon) id the billing provider knows (400 otherwise)"`
}

// ReferralCodeResponse is {referral_code}.
type ReferralCodeResponse struct {
	ReferralCode *ReferralCode `json:"referral_code"`
}

// CurrentReferralCode is GET /v1/organizations/{orgID}/referral-code (an addition): the code, null before
// the organization has one.
type CurrentReferralCode struct {
	ReferralCode *ReferralCode `json:"referral_code" api:"nullable" doc:"null until POST makes it"`
}

// Referral is an organization that signed up with a referral code.
type Referral struct {
	ID                     string     `json:"id"`
	Code                   string     `json:"code"`
	ReferredOrganizationID string     `json:"referred_organization_id"`
	ReferredSubscriptionID string     `json:"referred_subscription_id"`
	ReferrerOrganizationID string     `json:"referrer_organization_id"`
	RewardDiscountID       string     `json:"reward_discount_id" doc:"the discount made at the billing provider for the referrer, redeemable by its customer only"`
	RewardCode             string     `json:"reward_code" doc:"the promotion code of the reward (an addition)"`
	VoidReason             string     `json:"void_reason"`
	Status                 string     `json:"status" enum:"ReferralStatus"`
	CreatedAt              time.Time  `json:"created_at"`
	RewardedAt             *time.Time `json:"rewarded_at" api:"nullable"`
	UpdatedAt              time.Time  `json:"updated_at"`
}

// ReferralList is GET /v1/organizations/{orgID}/referrals.
type ReferralList struct {
	Referrals []*Referral `json:"referrals"`
}
