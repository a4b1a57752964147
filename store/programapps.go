package store

import "time"

// ServiceToken is a narrow credential of the public website (appliance/programapps): it submits program
// applications and nothing else. Only the SHA-256 of its plaintext is kept.
type ServiceToken struct {
	ID              string     `json:"id"`
	Name            string     `json:"name"`
	TokenHash       string     `json:"token_hash"`
	TokenPrefix     string     `json:"token_prefix"`
	CreatedByUserID string     `json:"created_by_user_id"`
	CreatedAt       time.Time  `json:"created_at"`
	LastUsedAt      *time.Time `json:"last_used_at"`
	RevokedAt       *time.Time `json:"revoked_at"`
}

// ProgramApplication is a startup or partner program application, received from the public website and
// decided (approved with a discount at the billing provider, or rejected) by a platform operator.
type ProgramApplication struct {
	ID              string     `json:"id"`
	Program         string     `json:"program"`
	Status          string     `json:"status"`
	CompanyName     string     `json:"company_name"`
	CompanyWebsite  string     `json:"company_website"`
	ContactName     string     `json:"contact_name"`
	Email           string     `json:"email"` // lowercased: the duplicate check's key
	Locale          string     `json:"locale"`
	ReferralSource  string     `json:"referral_source"`
	Segment         string     `json:"segment"`
	UseCase         string     `json:"use_case"`
	TeamSize        int        `json:"team_size"`
	OperatorNote    string     `json:"operator_note"`
	DiscountID      string     `json:"discount_id"`
	DiscountCode    string     `json:"discount_code"`
	DecidedByUserID string     `json:"decided_by_user_id"`
	ServiceTokenID  string     `json:"service_token_id"`
	CreatedAt       time.Time  `json:"created_at"`
	DecidedAt       *time.Time `json:"decided_at"`
	UpdatedAt       time.Time  `json:"updated_at"`
}

// The programs' tables.
var (
	ServiceTokens       = newTable("service_tokens", func(r *ServiceToken) string { return r.ID })
	ServiceTokensByHash = ServiceTokens.index("hash", func(r *ServiceToken) []string { return []string{r.TokenHash} })

	ProgramApplications        = newTable("program_applications", func(r *ProgramApplication) string { return r.ID })
	ProgramApplicationsByEmail = ProgramApplications.index("email", func(r *ProgramApplication) []string { return []string{r.Email} })
)
