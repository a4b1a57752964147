// Package programapps is the programs area's applications half: startup and partner program applications
// submitted by the public website with a narrow service token (Submit), the service tokens themselves
// (minted, listed and revoked by platform operators; Authenticate, which the router calls for a token
// that starts with svc_), and the operators' review (List, Get, Approve with a discount made at the
// billing provider, Reject). Each change is audited and appends an event (program_application.received,
// .approved, .rejected) under the platform organization, whose webhook endpoints deliver it: the
// operator's own systems send the mail.
//
// (The package appliance/programs is another thing: the binaries the appliance runs.)
//
// It reaches the rest of the domain only through Host (declared here, given by the root's areaHost), the
// billing area's discounts (Discounts), the kernel packages (apperr, authz, ids), the wire types (api) and
// the records (store). It never imports `appliance`.
package programapps

import (
	"context"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/billing"
	"github.com/theappliance/appliance/appliance/keyrate"
	"github.com/theappliance/appliance/store"
)

// Events the area appends (appliance/eventlog's table names them).
const (
	EventReceived = "program_application.received"
	EventApproved = "program_application.approved"
	EventRejected = "program_application.rejected"
)

// DuplicateWindow is how long an e-mail address's application holds off another from the same address
// (a 409 naming the first).
const DuplicateWindow = 24 * time.Hour

// Host is what the area takes from the rest of the domain (appliance/areas.go gives it).
type Host interface {
	// Audit writes an audit event of the caller in tx.
	Audit(tx *store.Tx, p *authz.Principal, action, orgID, projectID string, metadata any) error
	// AppendEvent appends an event to the log in tx (its webhook deliveries are queued there).
	AppendEvent(tx *store.Tx, typ, orgID, projectID string, data any) error
	// CheckDisplayText applies the rules of every one-line display field (names).
	CheckDisplayText(field, v string, min, max int) error
	// PlatformOrganization is the organization the platform's own events and audit events go to (the
	// one made at the first start, the operator's); "" when it is gone.
	PlatformOrganization(tx *store.Tx) string
}

// Discounts are the billing area's discounts (billing.Service): the one way a reward is made.
type Discounts interface {
	CreateDiscount(ctx context.Context, d billing.DiscountSpec) (*billing.Discount, error)
}

// Rate is the per-service-token bucket of submissions: one every Every, Burst at most at once.
type Rate struct {
	Every time.Duration
	Burst int
}

// DefaultRate is a service token's submissions: 20 at once, then one a minute.
var DefaultRate = Rate{Every: time.Minute, Burst: 20}

// Deps are the area's collaborators; New takes them all.
type Deps struct {
	DB        *store.DB
	Clock     func() time.Time // UTC
	Host      Host
	Discounts Discounts
	Rate      Rate // zero: DefaultRate
}

// Service is the program applications area.
type Service struct {
	db        *store.DB
	now       func() time.Time
	host      Host
	discounts Discounts
	rate      *keyrate.Limiter
}

// New returns the area built with its collaborators.
func New(deps Deps) *Service {
	r := deps.Rate
	if r.Every <= 0 || r.Burst <= 0 {
		r = DefaultRate
	}
	return &Service{db: deps.DB, now: deps.Clock, host: deps.Host, discounts: deps.Discounts, rate: keyrate.New(r.Every, r.Burst)}
}

func wireApplication(a *store.ProgramApplication) *api.ProgramApplication {
	return &api.ProgramApplication{ID: a.ID, Program: a.Program, Status: a.Status, CompanyName: a.CompanyName,
		CompanyWebsite: a.CompanyWebsite, ContactName: a.ContactName, Email: a.Email, Locale: a.Locale,
		ReferralSource: a.ReferralSource, Segment: a.Segment, UseCase: a.UseCase, TeamSize: a.TeamSize,
		OperatorNote: a.OperatorNote, DiscountID: a.DiscountID, DiscountCode: a.DiscountCode,
		DecidedByUserID: a.DecidedByUserID, ServiceTokenID: a.ServiceTokenID, CreatedAt: a.CreatedAt,
		DecidedAt: a.DecidedAt, UpdatedAt: a.UpdatedAt}
}

func wireToken(t *store.ServiceToken) *api.ServiceToken {
	return &api.ServiceToken{ID: t.ID, Name: t.Name, TokenPrefix: t.TokenPrefix,
		Scopes: []string{string(api.ScopeProgramApplicationsCreate)}, CreatedByUserID: t.CreatedByUserID,
		IsActive: t.RevokedAt == nil, CreatedAt: t.CreatedAt, LastUsedAt: t.LastUsedAt, RevokedAt: t.RevokedAt}
}

func ptr[T any](v T) *T { return &v }
