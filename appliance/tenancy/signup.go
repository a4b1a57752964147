package tenancy

import (
	"context"
	"errors"
	"net/mail"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/store"
)

// Sign-up: who may make their own organization (up --signup): closed (the default: organizations are
// made by operators), invite (with a sign-up invite an operator minted: a link to the dashboard's sign-up
// page carrying a secret token, single use, expiring) or open (anyone). A sign-up makes the user, their
// organization with them as its owner, and their session, in one transaction, audited; a referral code
// that comes with it is recorded as a referral (appliance/referrals), an unknown one reported invalid
// without stopping the sign-up.

// Sign-up invites' lifetime.
const (
	InviteTTLDefault = 7 * 24 * time.Hour
	InviteTTLMax     = 30 * 24 * time.Hour
	invitePrefix     = "sgi"
)

// signupMode holds up --signup (closed until set).
type signupMode struct{ v atomic.Value }

func (m *signupMode) get() string {
	if v, ok := m.v.Load().(string); ok && v != "" {
		return v
	}
	return api.SignupModeClosed
}

// SetSignupMode sets who may sign up: closed, invite or open (up --signup).
func (s *Service) SetSignupMode(mode string) error {
	if mode == "" {
		mode = api.SignupModeClosed
	}
	if !slices.Contains(api.SignupModes, mode) {
		return apperr.Invalid("sign-up mode %q is not one of %s", mode, strings.Join(api.SignupModes, ", "))
	}
	s.signup.v.Store(mode)
	return nil
}

// SignupSettings is the public GET /v1/signup: the mode, which the sign-in page reads to offer sign-up.
func (s *Service) SignupSettings(ctx context.Context) (*api.SignupSettings, error) {
	return &api.SignupSettings{Mode: s.signup.get()}, nil
}

// SignUp makes a user, a new organization they own and their session. Closed: 403. Invite: the token must
// be a pending invite's (and the e-mail the invite's, when it names one); it is used up in the same
// transaction. The user's password follows every user's rules; an e-mail that has a user is a 409 (that
// person signs in; an operator adds them to a new organization). Bad input changes nothing.
func (s *Service) SignUp(ctx context.Context, req *api.SignupRequest) (*api.SignupResult, error) {
	mode := s.signup.get()
	if mode == api.SignupModeClosed {
		return nil, apperr.Forbidden("sign-up is closed on this appliance: ask its operator for an account (organizations are made by operators; up --signup invite or open allows sign-up)")
	}
	email := strings.ToLower(strings.TrimSpace(req.Email))
	if addr, err := mail.ParseAddress(email); err != nil || addr.Address != email {
		return nil, apperr.Invalid("email %q is not a valid address", req.Email)
	}
	if len(req.Password) < 12 || len(req.Password) > 72 {
		return nil, apperr.Invalid("password must be 12 to 72 bytes")
	}
	name, slug, _, err := s.orgName(req.OrganizationName, "")
	if err != nil {
		if e := (*apperr.Error)(nil); errors.As(err, &e) && strings.HasPrefix(e.Msg, "name") {
			e.Msg = "organization_" + e.Msg
		}
		return nil, err
	}
	token := strings.TrimSpace(req.InviteToken)
	if mode == api.SignupModeInvite && token == "" {
		return nil, apperr.Forbidden("sign-up on this appliance needs an invite: open the sign-up link an operator or an organization owner sent you")
	}
	code := strings.TrimSpace(req.ReferralCode)
	if len(code) > 64 {
		return nil, apperr.Invalid("referral_code has at most 64 characters")
	}
	out := &api.SignupResult{Email: email, ReferralCodeStatus: api.ReferralCodeNone}
	err = s.db.Update(func(tx *store.Tx) error {
		var inv *store.SignupInvite
		if token != "" {
			var err error
			if inv, err = s.usableInvite(tx, token, email); err != nil {
				return err
			}
		}
		if _, err := store.Users.First(tx, store.UsersByEmail, email); err == nil {
			return apperr.Conflict("a user with email %s exists: sign in instead", email)
		} else if !errors.Is(err, store.ErrNotFound) {
			return apperr.Internal(err, "read users")
		}
		org, err := s.newOrganization(tx, name, slug, false)
		if err != nil {
			return err
		}
		u, err := s.host.CreateUser(tx, email, "", req.Password, false, store.Membership{OrganizationID: org.ID, Role: authz.RoleOwner})
		if err != nil {
			return err
		}
		out.UserID, out.Organization = u.ID, wireOrganization(org)
		p := &authz.Principal{AuthSource: authz.SourceSession, UserID: u.ID}
		meta := map[string]any{"name": org.Name, "slug": org.Slug, "owner_user_id": u.ID, "signup_mode": mode}
		if inv != nil {
			now := s.now()
			inv.UsedAt, inv.UsedByUserID, inv.OrganizationID = &now, u.ID, org.ID
			if err := store.SignupInvites.Put(tx, inv); err != nil {
				return apperr.Internal(err, "use the invite")
			}
			meta["signup_invite_id"] = inv.ID
		}
		if code != "" {
			ref, err := s.host.ReferralAtSignup(tx, code, org.ID, u)
			if err != nil {
				return err
			}
			switch {
			case ref == nil:
				out.ReferralCodeStatus = api.ReferralCodeInvalid
			case ref.Status == api.ReferralVoid:
				out.ReferralCodeStatus, out.Referral = api.ReferralCodeVoid, ref
			default:
				out.ReferralCodeStatus, out.Referral = api.ReferralCodeApplied, ref
			}
			meta["referral_code"], meta["referral_code_status"] = code, out.ReferralCodeStatus
		}
		if err := s.host.Audit(tx, p, "organization.signup", org.ID, "", meta); err != nil {
			return apperr.Internal(err, "audit")
		}
		out.Session, err = s.host.SignIn(tx, u, org.ID, authz.RoleOwner)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.host.OrganizationCreated(ctx, out.Organization.ID)
	return out, nil
}

// usableInvite is the pending invite of token that email may use (403 otherwise, saying why).
func (s *Service) usableInvite(tx *store.Tx, token, email string) (*store.SignupInvite, error) {
	inv, err := store.SignupInvites.First(tx, store.SignupInvitesByHash, ids.Hash(token))
	if errors.Is(err, store.ErrNotFound) {
		return nil, apperr.Forbidden("the sign-up invite is not valid: ask whoever sent it for a new link")
	}
	if err != nil {
		return nil, apperr.Internal(err, "read the invite")
	}
	switch inviteState(inv, s.now()) {
	case api.SignupInviteUsed:
		return nil, apperr.Forbidden("the sign-up invite was used already: each invite makes one organization")
	case api.SignupInviteRevoked:
		return nil, apperr.Forbidden("the sign-up invite was revoked")
	case api.SignupInviteExpired:
		return nil, apperr.Forbidden("the sign-up invite expired at %s: ask whoever sent it for a new link", inv.ExpiresAt.Format(time.RFC3339))
	}
	if inv.Email != "" && inv.Email != email {
		return nil, apperr.Forbidden("this sign-up invite is for another e-mail address")
	}
	return inv, nil
}

func inviteState(inv *store.SignupInvite, now time.Time) string {
	switch {
	case inv.UsedAt != nil:
		return api.SignupInviteUsed
	case inv.RevokedAt != nil:
		return api.SignupInviteRevoked
	case !now.Before(inv.ExpiresAt):
		return api.SignupInviteExpired
	}
	return api.SignupInvitePending
}

func wireInvite(inv *store.SignupInvite, now time.Time) *api.SignupInvite {
	return &api.SignupInvite{ID: inv.ID, Email: inv.Email, Note: inv.Note, State: inviteState(inv, now), CreatedByUserID: inv.CreatedByUserID,
		InvitedByOrganizationID: inv.InvitedByOrganizationID, CreatedAt: inv.CreatedAt, ExpiresAt: inv.ExpiresAt, UsedAt: inv.UsedAt, UsedByUserID: inv.UsedByUserID,
		OrganizationID: inv.OrganizationID, RevokedAt: inv.RevokedAt}
}

// CreateSignupInvite mints a sign-up invite (platform operators): its token and link are returned once.
func (s *Service) CreateSignupInvite(ctx context.Context, p *authz.Principal, req *api.CreateSignupInviteRequest) (*api.CreatedSignupInvite, error) {
	if err := p.RequireOperator("managing sign-up invites"); err != nil {
		return nil, err
	}
	return s.createInvite(p, "", req)
}

// CreateOrgSignupInvite mints a sign-up invite on behalf of organization orgID (its owners; operators too):
// the invite admits one person, whose sign-up makes a new organization of their own.
func (s *Service) CreateOrgSignupInvite(ctx context.Context, p *authz.Principal, orgID string, req *api.CreateSignupInviteRequest) (*api.CreatedSignupInvite, error) {
	if err := s.checkOrgInvites(p, orgID); err != nil {
		return nil, err
	}
	return s.createInvite(p, orgID, req)
}

// checkOrgInvites refuses a caller who may not manage organization orgID's sign-up invites: another
// organization's (404), or not an owner (403); 404 when the organization does not exist.
func (s *Service) checkOrgInvites(p *authz.Principal, orgID string) error {
	if err := p.CheckOrganization(orgID); err != nil {
		return err
	}
	if err := p.RequireOwnerRole("managing the organization's sign-up invites"); err != nil {
		return err
	}
	return s.db.View(func(tx *store.Tx) error {
		if _, err := store.Organizations.Get(tx, orgID); err != nil {
			return apperr.NotFoundAs(err, "organization %s not found", orgID)
		}
		return nil
	})
}

// createInvite mints an invite, on behalf of organization orgID ("": an operator's).
func (s *Service) createInvite(p *authz.Principal, orgID string, req *api.CreateSignupInviteRequest) (*api.CreatedSignupInvite, error) {
	email := strings.ToLower(strings.TrimSpace(req.Email))
	if email != "" {
		if addr, err := mail.ParseAddress(email); err != nil || addr.Address != email {
			return nil, apperr.Invalid("email %q is not a valid address", req.Email)
		}
	}
	note := strings.TrimSpace(req.Note)
	if note != "" {
		if err := s.host.CheckDisplayText("note", note, 1, 200); err != nil {
			return nil, err
		}
	}
	ttl := InviteTTLDefault
	if req.ExpiresInHours != 0 {
		if req.ExpiresInHours < 1 || time.Duration(req.ExpiresInHours)*time.Hour > InviteTTLMax {
			return nil, apperr.Invalid("expires_in_hours must be 1 to %d", int(InviteTTLMax/time.Hour))
		}
		ttl = time.Duration(req.ExpiresInHours) * time.Hour
	}
	token := invitePrefix + "_" + ids.Secret(24)
	now := s.now()
	inv := &store.SignupInvite{ID: ids.New("sgi"), TokenHash: ids.Hash(token), Email: email, Note: note, CreatedByUserID: p.UserID,
		InvitedByOrganizationID: orgID, CreatedAt: now, ExpiresAt: now.Add(ttl)}
	err := s.db.Update(func(tx *store.Tx) error {
		if err := store.SignupInvites.Put(tx, inv); err != nil {
			return apperr.Internal(err, "store the invite")
		}
		if err := s.host.Audit(tx, p, "signup_invite.create", orgID, "", map[string]any{"signup_invite_id": inv.ID, "email": email, "expires_at": inv.ExpiresAt}); err != nil {
			return apperr.Internal(err, "audit")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &api.CreatedSignupInvite{SignupInvite: wireInvite(inv, now), Token: token, URL: s.host.SignupURL() + "?invite=" + token}, nil
}

// ListSignupInvites lists the sign-up invites, newest first (platform operators).
func (s *Service) ListSignupInvites(ctx context.Context, p *authz.Principal) (*api.SignupInviteList, error) {
	if err := p.RequireOperator("managing sign-up invites"); err != nil {
		return nil, err
	}
	return s.listInvites("")
}

// ListOrgSignupInvites lists the sign-up invites minted on behalf of organization orgID, newest first (its
// owners; operators too).
func (s *Service) ListOrgSignupInvites(ctx context.Context, p *authz.Principal, orgID string) (*api.SignupInviteList, error) {
	if err := s.checkOrgInvites(p, orgID); err != nil {
		return nil, err
	}
	return s.listInvites(orgID)
}

// listInvites lists organization orgID's invites ("": every invite), newest first.
func (s *Service) listInvites(orgID string) (*api.SignupInviteList, error) {
	out := &api.SignupInviteList{SignupInvites: []*api.SignupInvite{}}
	err := s.db.View(func(tx *store.Tx) error {
		var invs []*store.SignupInvite
		var err error
		if orgID == "" {
			invs, err = store.SignupInvites.All(tx, nil)
		} else {
			invs, err = store.SignupInvites.Lookup(tx, store.SignupInvitesByOrg, orgID, store.Query{})
		}
		if err != nil {
			return apperr.Internal(err, "list invites")
		}
		slices.SortFunc(invs, func(a, b *store.SignupInvite) int { return b.CreatedAt.Compare(a.CreatedAt) })
		now := s.now()
		for _, inv := range invs {
			out.SignupInvites = append(out.SignupInvites, wireInvite(inv, now))
		}
		return nil
	})
	return out, err
}

// RevokeSignupInvite revokes a pending sign-up invite (platform operators; 409 when used or revoked).
func (s *Service) RevokeSignupInvite(ctx context.Context, p *authz.Principal, id string) (*api.SignupInviteResponse, error) {
	if err := p.RequireOperator("managing sign-up invites"); err != nil {
		return nil, err
	}
	return s.revokeInvite(p, "", id)
}

// RevokeOrgSignupInvite revokes a pending sign-up invite minted on behalf of organization orgID (its
// owners; operators too; 404 for another organization's or an operator's invite, 409 when used or
// revoked).
func (s *Service) RevokeOrgSignupInvite(ctx context.Context, p *authz.Principal, orgID, id string) (*api.SignupInviteResponse, error) {
	if err := s.checkOrgInvites(p, orgID); err != nil {
		return nil, err
	}
	return s.revokeInvite(p, orgID, id)
}

// revokeInvite revokes invite id, which must be organization orgID's ("": any invite).
func (s *Service) revokeInvite(p *authz.Principal, orgID, id string) (*api.SignupInviteResponse, error) {
	var out *api.SignupInviteResponse
	err := s.db.Update(func(tx *store.Tx) error {
		inv, err := store.SignupInvites.Get(tx, id)
		if err == nil && orgID != "" && inv.InvitedByOrganizationID != orgID {
			err = store.ErrNotFound
		}
		if err != nil {
			return apperr.NotFoundAs(err, "sign-up invite %s not found", id)
		}
		now := s.now()
		if st := inviteState(inv, now); st == api.SignupInviteUsed || st == api.SignupInviteRevoked {
			return apperr.Conflict("sign-up invite %s is %s already", id, st)
		}
		inv.RevokedAt = &now
		if err := store.SignupInvites.Put(tx, inv); err != nil {
			return apperr.Internal(err, "store the invite")
		}
		if err := s.host.Audit(tx, p, "signup_invite.revoke", inv.InvitedByOrganizationID, "", map[string]any{"signup_invite_id": id}); err != nil {
			return apperr.Internal(err, "audit")
		}
		out = &api.SignupInviteResponse{SignupInvite: wireInvite(inv, now)}
		return nil
	})
	return out, err
}
