// Package referrals is the referral half of the programs area: an organization's referral code (one per
// organization; its discount, checked at the billing provider), the referrals made when an organization
// signs up with a code (AtSignup: pending, or void for a self-referral), and their rewards: the billing
// provider's events of a referred organization reach the package through billing's Hook (BillingEvent, in
// the webhook's transaction): its subscription is recorded, its first paid invoice makes the referrer's
// reward due, a cancellation or a refund within its first period voids the referral. The reward is a
// discount at the provider only the referrer's customer may redeem (the spec's Overview point 10: every
// reward is a discount; no plan changes); it is made after the commit (PayRewards, kicked on commit and
// run periodically, retried until the provider answers), with the referral's id as its idempotency key.
//
// It reaches the rest of the domain only through Host (audit, the event log) and the billing service's
// discounts (Discounts), the kernel packages (apperr, authz, ids), the wire types (api) and the records
// (store). It never imports `appliance`.
package referrals

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/billing"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/store"
)

// Event types of the event log (appliance/eventlog's table names them).
const (
	EventRewarded = "referral.rewarded"
	EventVoided   = "referral.voided"
)

// Void reasons.
const (
	VoidSelfReferral = "self_referral: the referred organization's owner is a member of the referrer organization"
	VoidCancelled    = "cancelled: the referred subscription was cancelled within its first period"
	VoidRefunded     = "refunded: the referred organization's payment was refunded within its first period"
)

// The reward: a discount at the billing provider for the referrer's next invoice.
const (
	RewardPercentOff     = 20
	RewardDurationMonths = 0 // the next invoice only
)

// Host is what the area takes from the rest of the domain (appliance/areas.go gives it).
type Host interface {
	Audit(tx *store.Tx, p *authz.Principal, action, orgID, projectID string, metadata any) error
	AppendEvent(tx *store.Tx, typ, orgID, projectID string, data any) error
}

// Discounts is the billing service's discounts (appliance/billing's Service: a 409 with billing off).
type Discounts interface {
	CreateDiscount(ctx context.Context, d billing.DiscountSpec) (*billing.Discount, error)
	GetDiscount(ctx context.Context, id string) (*billing.Discount, error)
}

// Deps are the area's collaborators.
type Deps struct {
	DB        *store.DB
	Clock     func() time.Time // UTC
	Host      Host
	Discounts Discounts
	Log       *slog.Logger
	// SignupURL is the dashboard's sign-up page (the API's URL + /signup); a code's link adds ?ref=CODE.
	SignupURL string
}

// Service is the referrals area.
type Service struct {
	db        *store.DB
	now       func() time.Time
	host      Host
	discounts Discounts
	log       *slog.Logger
	signupURL string
	// paying serializes PayRewards (the commit's kick and the periodic pass).
	paying sync.Mutex
}

// New returns the area built with its collaborators.
func New(d Deps) *Service {
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{db: d.DB, now: d.Clock, host: d.Host, discounts: d.Discounts, log: log, signupURL: d.SignupURL}
}

// errNoCode is the cause of the 404 of an organization without a code.
var errNoCode = errors.New("no referral code")

var (
	codeRE   = regexp.MustCompile(`^[A-Z0-9]{4,32}$`)
	localeRE = regexp.MustCompile(`^[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*$`)
	// system is the actor of what the billing provider's events cause here (rewards, voids).
	system = &authz.Principal{AuthSource: authz.ActorSystem}
)

// NormalizeCode is a code as typed, in the form codes are kept (upper case, no spaces).
func NormalizeCode(code string) string { return strings.ToUpper(strings.TrimSpace(code)) }

// CreateCode gives the organization its referral code, or returns the one it has (the POST is
// idempotent: 200 both times; docs/api-decisions.md).
func (s *Service) CreateCode(ctx context.Context, p *authz.Principal, orgID string, req *api.CreateReferralCodeRequest) (*api.ReferralCodeResponse, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	if err := p.RequireAdminRole("creating the referral code"); err != nil {
		return nil, err
	}
	locale := strings.TrimSpace(req.Locale)
	if len(locale) > 35 || (locale != "" && !localeRE.MatchString(locale)) {
		return nil, apperr.Invalid("locale must be a BCP 47 language tag such as en or pt-BR")
	}
	var out *api.ReferralCodeResponse
	err := s.db.Update(func(tx *store.Tx) error {
		if _, err := store.Organizations.Get(tx, orgID); err != nil {
			return apperr.NotFoundAs(err, "organization %s not found", orgID)
		}
		if rc, err := store.ReferralCodes.First(tx, store.ReferralCodesByOrg, orgID); err == nil {
			out = &api.ReferralCodeResponse{ReferralCode: s.wireCode(rc)}
			return nil
		} else if !errors.Is(err, store.ErrNotFound) {
			return apperr.Internal(err, "read the referral code")
		}
		code := ""
		for range 10 {
			c := strings.ToUpper(ids.Secret(5)) // 8 characters of base32
			if _, err := store.ReferralCodes.Get(tx, c); errors.Is(err, store.ErrNotFound) {
				code = c
				break
			}
		}
		if code == "" {
			return apperr.Internal(errors.New("no free referral code after 10 tries"), "make a referral code")
		}
		now := s.now()
		rc := &store.ReferralCode{Code: code, OrganizationID: orgID, Locale: locale, CreatedAt: now, UpdatedAt: now}
		if err := store.ReferralCodes.Put(tx, rc); err != nil {
			return apperr.Internal(err, "store the referral code")
		}
		if err := s.host.Audit(tx, p, "referral_code.create", orgID, "", map[string]any{"code": code}); err != nil {
			return apperr.Internal(err, "audit")
		}
		out = &api.ReferralCodeResponse{ReferralCode: s.wireCode(rc)}
		return nil
	})
	return out, err
}

// PatchCode sets the code's discount_id after the billing provider confirmed it exists (400 when it does
// not, 409 with billing off; nothing changes then).
func (s *Service) PatchCode(ctx context.Context, p *authz.Principal, orgID string, req *api.PatchReferralCodeRequest) (*api.ReferralCodeResponse, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	if err := p.RequireAdminRole("changing the referral code"); err != nil {
		return nil, err
	}
	id := strings.TrimSpace(req.DiscountID)
	if id == "" || len(id) > 200 {
		return nil, apperr.Invalid("discount_id is required (a discount id of the billing provider, at most 200 characters)")
	}
	if err := s.db.View(func(tx *store.Tx) error { _, err := s.code(tx, orgID); return err }); err != nil {
		return nil, err
	}
	if _, err := s.discounts.GetDiscount(ctx, id); err != nil {
		return nil, err
	}
	var out *api.ReferralCodeResponse
	err := s.db.Update(func(tx *store.Tx) error {
		rc, err := s.code(tx, orgID)
		if err != nil {
			return err
		}
		before := rc.DiscountID
		rc.DiscountID, rc.UpdatedAt = id, s.now()
		if err := store.ReferralCodes.Put(tx, rc); err != nil {
			return apperr.Internal(err, "store the referral code")
		}
		if err := s.host.Audit(tx, p, "referral_code.update", orgID, "", map[string]any{"code": rc.Code, "discount_id": id, "previous_discount_id": before}); err != nil {
			return apperr.Internal(err, "audit")
		}
		out = &api.ReferralCodeResponse{ReferralCode: s.wireCode(rc)}
		return nil
	})
	return out, err
}

// GetCode returns the organization's code, null before it has one: an addition the dashboard reads.
func (s *Service) GetCode(ctx context.Context, p *authz.Principal, orgID string) (*api.CurrentReferralCode, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	out := &api.CurrentReferralCode{}
	err := s.db.View(func(tx *store.Tx) error {
		rc, err := s.code(tx, orgID)
		switch {
		case err == nil:
			out.ReferralCode = s.wireCode(rc)
		case apperr.KindOf(err) == apperr.KindNotFound && errors.Is(err, errNoCode):
			return nil
		}
		return err
	})
	return out, err
}

func (s *Service) code(tx *store.Tx, orgID string) (*store.ReferralCode, error) {
	if _, err := store.Organizations.Get(tx, orgID); err != nil {
		return nil, apperr.NotFoundAs(err, "organization %s not found", orgID)
	}
	rc, err := store.ReferralCodes.First(tx, store.ReferralCodesByOrg, orgID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, &apperr.Error{Kind: apperr.KindNotFound, Cause: errNoCode,
			Msg: fmt.Sprintf("organization %s has no referral code yet: POST /v1/organizations/%s/referral-code makes it", orgID, orgID)}
	}
	if err != nil {
		return nil, apperr.Internal(err, "read the referral code")
	}
	return rc, nil
}

// List returns the organization's referrals (as the referrer), newest first.
func (s *Service) List(ctx context.Context, p *authz.Principal, orgID string) (*api.ReferralList, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	out := &api.ReferralList{Referrals: []*api.Referral{}}
	err := s.db.View(func(tx *store.Tx) error {
		if _, err := store.Organizations.Get(tx, orgID); err != nil {
			return apperr.NotFoundAs(err, "organization %s not found", orgID)
		}
		refs, err := store.Referrals.Lookup(tx, store.ReferralsByReferrer, orgID, store.Query{})
		if err != nil {
			return apperr.Internal(err, "list referrals")
		}
		slices.SortFunc(refs, func(a, b *store.Referral) int { return b.CreatedAt.Compare(a.CreatedAt) })
		for _, r := range refs {
			out.Referrals = append(out.Referrals, Wire(r))
		}
		return nil
	})
	return out, err
}

// ListAll returns every referral, newest first, only those of status when it is set (platform operators).
func (s *Service) ListAll(ctx context.Context, p *authz.Principal, status string) (*api.ReferralList, error) {
	if err := p.RequireOperator("listing every referral"); err != nil {
		return nil, err
	}
	if status != "" && status != api.ReferralPending && status != api.ReferralRewarded && status != api.ReferralVoid {
		return nil, apperr.Invalid("status must be pending, rewarded or void")
	}
	out := &api.ReferralList{Referrals: []*api.Referral{}}
	err := s.db.View(func(tx *store.Tx) error {
		refs, err := store.Referrals.All(tx, func(r *store.Referral) bool { return status == "" || r.Status == status })
		if err != nil {
			return apperr.Internal(err, "list referrals")
		}
		slices.SortFunc(refs, func(a, b *store.Referral) int { return b.CreatedAt.Compare(a.CreatedAt) })
		for _, r := range refs {
			out.Referrals = append(out.Referrals, Wire(r))
		}
		return nil
	})
	return out, err
}

// AtSignup records the referral of an organization signing up with code, in the sign-up's transaction:
// nil when no organization has that code (the sign-up goes on; the caller reports the code invalid); void
// when the referred is the referrer (the sign-up's e-mail, its +tag aside, is a member's of the
// referrer organization); pending otherwise.
func (s *Service) AtSignup(tx *store.Tx, code, referredOrgID string, referred *store.User) (*api.Referral, error) {
	code = NormalizeCode(code)
	if !codeRE.MatchString(code) {
		return nil, nil
	}
	rc, err := store.ReferralCodes.Get(tx, code)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, apperr.Internal(err, "read the referral code")
	}
	if _, err := store.Organizations.Get(tx, rc.OrganizationID); errors.Is(err, store.ErrNotFound) {
		return nil, nil // the code of an organization deleted since: no referrer to reward
	} else if err != nil {
		return nil, apperr.Internal(err, "read the referrer organization")
	}
	now := s.now()
	ref := &store.Referral{ID: ids.New("ref"), Code: code, ReferrerOrganizationID: rc.OrganizationID, ReferredOrganizationID: referredOrgID,
		ReferredUserID: referred.ID, Status: api.ReferralPending, CreatedAt: now, UpdatedAt: now}
	self, err := s.selfReferral(tx, rc.OrganizationID, referredOrgID, referred)
	if err != nil {
		return nil, err
	}
	if self {
		ref.Status, ref.VoidReason = api.ReferralVoid, VoidSelfReferral
	}
	if err := store.Referrals.Put(tx, ref); err != nil {
		return nil, apperr.Internal(err, "store the referral")
	}
	p := &authz.Principal{AuthSource: authz.SourceSession, UserID: referred.ID}
	meta := map[string]any{"referral_id": ref.ID, "code": code, "referred_organization_id": referredOrgID, "status": ref.Status}
	if err := s.host.Audit(tx, p, "referral.create", rc.OrganizationID, "", meta); err != nil {
		return nil, apperr.Internal(err, "audit")
	}
	if self {
		if err := s.host.AppendEvent(tx, EventVoided, rc.OrganizationID, "", map[string]any{"referral": Wire(ref)}); err != nil {
			return nil, apperr.Internal(err, "append the event")
		}
	}
	return Wire(ref), nil
}

// selfReferral: the referred organization is the referrer, or the referred user (by id, or by e-mail with a
// +tag removed and case folded) is a member of the referrer organization.
func (s *Service) selfReferral(tx *store.Tx, referrerOrgID, referredOrgID string, referred *store.User) (bool, error) {
	if referrerOrgID == referredOrgID || referred.Role(referrerOrgID) != "" {
		return true, nil
	}
	members, err := store.Users.All(tx, func(u *store.User) bool { return u.Role(referrerOrgID) != "" })
	if err != nil {
		return false, apperr.Internal(err, "list the referrer's members")
	}
	want := baseEmail(referred.Email)
	return slices.ContainsFunc(members, func(u *store.User) bool { return baseEmail(u.Email) == want }), nil
}

// baseEmail is an address with its local part's +tag removed, lower case: alice+2@x and Alice@x are one.
func baseEmail(email string) string {
	email = strings.ToLower(strings.TrimSpace(email))
	local, domain, ok := strings.Cut(email, "@")
	if !ok {
		return email
	}
	local, _, _ = strings.Cut(local, "+")
	return local + "@" + domain
}

// BillingEvent is billing's Hook: a referred organization's events move its pending referral, in the
// webhook's transaction. The provider is not called here: a reward that becomes due is made after the
// commit (PayRewards).
func (s *Service) BillingEvent(tx *store.Tx, orgID string, ev *billing.Event) error {
	refs, err := store.Referrals.Lookup(tx, store.ReferralsByReferred, orgID, store.Query{})
	if err != nil {
		return fmt.Errorf("referrals of %s: %w", orgID, err)
	}
	for _, ref := range refs {
		if ref.Status != api.ReferralPending {
			continue
		}
		before := *ref
		voided := ""
		inFirstPeriod := ref.FirstPeriodEnd == nil || !ev.Created.After(*ref.FirstPeriodEnd)
		switch sub, inv := ev.Subscription, ev.Invoice; {
		case sub != nil && sub.Deleted:
			if ref.ReferredSubscriptionID != "" && ref.ReferredSubscriptionID != sub.ID {
				continue
			}
			if inFirstPeriod {
				voided = VoidCancelled
			}
		case sub != nil:
			if ref.ReferredSubscriptionID == "" {
				ref.ReferredSubscriptionID = sub.ID
			}
			if ref.ReferredSubscriptionID == sub.ID && ref.FirstPeriodEnd == nil && sub.PeriodEnd != nil {
				ref.FirstPeriodEnd = sub.PeriodEnd
			}
		case inv != nil && inv.Paid:
			if inv.SubscriptionID == "" || (ref.ReferredSubscriptionID != "" && ref.ReferredSubscriptionID != inv.SubscriptionID) || ref.RewardDue {
				continue
			}
			ref.ReferredSubscriptionID = inv.SubscriptionID
			ref.RewardDue, ref.RewardInvoiceID = true, inv.ID
			tx.OnCommit(s.Kick)
		case ev.Refund != nil:
			if inFirstPeriod {
				voided = VoidRefunded
			}
		}
		if voided != "" {
			ref.Status, ref.VoidReason, ref.RewardDue = api.ReferralVoid, voided, false
		}
		if *ref == before {
			continue
		}
		ref.UpdatedAt = s.now()
		if err := store.Referrals.Put(tx, ref); err != nil {
			return fmt.Errorf("store referral %s: %w", ref.ID, err)
		}
		if voided != "" {
			meta := map[string]any{"referral_id": ref.ID, "void_reason": voided, "event_id": ev.ID, "event_type": ev.Type}
			if err := s.host.Audit(tx, system, "referral.void", ref.ReferrerOrganizationID, "", meta); err != nil {
				return err
			}
			if err := s.host.AppendEvent(tx, EventVoided, ref.ReferrerOrganizationID, "", map[string]any{"referral": Wire(ref)}); err != nil {
				return err
			}
		}
	}
	return nil
}

// Kick runs PayRewards in the background (after a commit that made a reward due).
func (s *Service) Kick() {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if n, err := s.PayRewards(ctx); err != nil {
			s.log.Warn("referral rewards: retried later", "rewarded", n, "err", err)
		}
	}()
}

// PayRewards makes the rewards that are due at the billing provider (a discount only the referrer's
// customer may redeem, once; the referral's id is the idempotency key, so a retry after a failure to record
// the answer gets the same discount) and records them: status rewarded, reward_discount_id, rewarded_at,
// audited, event referral.rewarded. A failure is kept on the referral (reward_attempts, reward_error) and
// retried at the next pass. It returns how many it rewarded.
func (s *Service) PayRewards(ctx context.Context) (int, error) {
	s.paying.Lock()
	defer s.paying.Unlock()
	var due []*store.Referral
	if err := s.db.View(func(tx *store.Tx) (err error) {
		due, err = store.Referrals.Lookup(tx, store.ReferralsRewardDue, "due", store.Query{})
		return err
	}); err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, ref := range due {
		if err := s.reward(ctx, ref); err != nil {
			errs = append(errs, fmt.Errorf("referral %s: %w", ref.ID, err))
			if rerr := s.recordFailure(ref.ID, err); rerr != nil {
				errs = append(errs, rerr)
			}
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

func (s *Service) reward(ctx context.Context, ref *store.Referral) error {
	var customer string
	if err := s.db.View(func(tx *store.Tx) error {
		org, err := store.Organizations.Get(tx, ref.ReferrerOrganizationID)
		if err != nil {
			return fmt.Errorf("the referrer organization %s: %w", ref.ReferrerOrganizationID, err)
		}
		customer = org.BillingCustomerID
		return nil
	}); err != nil {
		return err
	}
	if customer == "" {
		return fmt.Errorf("the referrer organization %s has no customer at the billing provider yet", ref.ReferrerOrganizationID)
	}
	d, err := s.discounts.CreateDiscount(ctx, billing.DiscountSpec{Name: "Referral reward", PercentOff: RewardPercentOff,
		DurationMonths: RewardDurationMonths, CustomerID: customer, MaxRedemptions: 1, IdempotencyKey: "appliance-referral-" + ref.ID,
		Metadata: map[string]string{"referral_id": ref.ID, "organization_id": ref.ReferrerOrganizationID, "referred_organization_id": ref.ReferredOrganizationID}})
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *store.Tx) error {
		cur, err := store.Referrals.Get(tx, ref.ID)
		if err != nil {
			return err
		}
		if cur.Status != api.ReferralPending || !cur.RewardDue {
			// Voided (or rewarded) meanwhile: the discount made stays unrecorded; the same key gets it back.
			tx.OnCommit(func() {
				s.log.Warn("referral reward made for a referral no longer due", "referral_id", ref.ID, "status", cur.Status, "discount_id", d.ID)
			})
			return nil
		}
		now := s.now()
		cur.Status, cur.RewardDue, cur.RewardDiscountID, cur.RewardCode, cur.RewardedAt, cur.RewardError, cur.UpdatedAt =
			api.ReferralRewarded, false, d.ID, d.Code, &now, "", now
		if err := store.Referrals.Put(tx, cur); err != nil {
			return err
		}
		meta := map[string]any{"referral_id": cur.ID, "reward_discount_id": d.ID, "referred_organization_id": cur.ReferredOrganizationID}
		if err := s.host.Audit(tx, system, "referral.reward", cur.ReferrerOrganizationID, "", meta); err != nil {
			return err
		}
		return s.host.AppendEvent(tx, EventRewarded, cur.ReferrerOrganizationID, "", map[string]any{"referral": Wire(cur)})
	})
}

func (s *Service) recordFailure(id string, cause error) error {
	return s.db.Update(func(tx *store.Tx) error {
		cur, err := store.Referrals.Get(tx, id)
		if err != nil {
			return err
		}
		cur.RewardAttempts++
		cur.RewardError = cause.Error()
		if len(cur.RewardError) > 500 {
			cur.RewardError = cur.RewardError[:500]
		}
		return store.Referrals.Put(tx, cur)
	})
}

// Wire is a referral as the API shows it.
func Wire(r *store.Referral) *api.Referral {
	return &api.Referral{ID: r.ID, Code: r.Code, ReferredOrganizationID: r.ReferredOrganizationID, ReferredSubscriptionID: r.ReferredSubscriptionID,
		ReferrerOrganizationID: r.ReferrerOrganizationID, RewardDiscountID: r.RewardDiscountID, RewardCode: r.RewardCode, VoidReason: r.VoidReason,
		Status: r.Status, CreatedAt: r.CreatedAt, RewardedAt: r.RewardedAt, UpdatedAt: r.UpdatedAt}
}

func (s *Service) wireCode(rc *store.ReferralCode) *api.ReferralCode {
	out := &api.ReferralCode{Code: rc.Code, DiscountID: rc.DiscountID, Locale: rc.Locale, OrganizationID: rc.OrganizationID,
		CreatedAt: rc.CreatedAt, UpdatedAt: rc.UpdatedAt}
	if s.signupURL != "" {
		out.SignupURL = s.signupURL + "?ref=" + url.QueryEscape(rc.Code)
	}
	return out
}
