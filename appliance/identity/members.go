package identity

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/store"
)

// InvitationTTL is how long an invitation may be accepted.
const InvitationTTL = 7 * 24 * time.Hour

var roles = []string{authz.RoleOwner, authz.RoleAdmin, authz.RoleMember}

func checkRole(role string) error {
	if !slices.Contains(roles, role) {
		return apperr.Invalid("role must be one of owner, admin, member")
	}
	return nil
}

func memberView(u *store.User, orgID string) api.Member {
	return api.Member{UserID: u.ID, Email: u.Email, Name: u.Name, Role: u.Role(orgID), CreatedAt: u.CreatedAt}
}

// members returns the organization's members, oldest user first.
func members(tx *store.Tx, orgID string) ([]*store.User, error) {
	return store.Users.All(tx, func(u *store.User) bool { return u.Role(orgID) != "" })
}

// ListMembers lists the people of an organization.
func (s *Service) ListMembers(ctx context.Context, p *authz.Principal, orgID string) (*api.MemberList, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	out := &api.MemberList{Members: []api.Member{}}
	err := s.db.View(func(tx *store.Tx) error {
		if _, err := store.Organizations.Get(tx, orgID); err != nil {
			return apperr.NotFoundAs(err, "organization %s not found", orgID)
		}
		us, err := members(tx, orgID)
		if err != nil {
			return apperr.Internal(err, "list members")
		}
		for _, u := range us {
			out.Members = append(out.Members, memberView(u, orgID))
		}
		return nil
	})
	return out, err
}

// checkRoleChange applies the rules every change of membership obeys: the admin role to change anything,
// the owner role to give or take the owner role, and an organization never left without an owner.
func checkRoleChange(tx *store.Tx, p *authz.Principal, orgID, userID, from, to string) error {
	if err := p.RequireAdminRole("managing organization members"); err != nil {
		return err
	}
	if (from == authz.RoleOwner || to == authz.RoleOwner) && from != to && !p.IsAdmin && p.IDPOrganizationRole != authz.RoleOwner {
		return apperr.Forbidden("only an owner may give or take the owner role")
	}
	if from == authz.RoleOwner && to != authz.RoleOwner {
		us, err := members(tx, orgID)
		if err != nil {
			return apperr.Internal(err, "list members")
		}
		owners := 0
		for _, u := range us {
			if u.ID != userID && u.Role(orgID) == authz.RoleOwner {
				owners++
			}
		}
		if owners == 0 {
			return apperr.Conflict("the organization's last owner cannot be demoted or removed: make someone else owner first")
		}
	}
	return nil
}

// AddMember adds a person to the organization with a role, creating their user when the email is new.
func (s *Service) AddMember(ctx context.Context, p *authz.Principal, orgID string, req *api.AddMemberRequest) (*api.AddedMember, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	if err := checkRole(req.Role); err != nil {
		return nil, err
	}
	name := strings.TrimSpace(req.Name)
	if err := s.host.CheckDisplayText("name", name, 0, 100); err != nil {
		return nil, err
	}
	email := strings.ToLower(strings.TrimSpace(req.Email))
	password, generated := req.Password, ""
	if password == "" {
		password = ids.Secret(15)
		generated = password
	}
	var out *api.AddedMember
	err := s.db.Update(func(tx *store.Tx) error {
		if _, err := store.Organizations.Get(tx, orgID); err != nil {
			return apperr.NotFoundAs(err, "organization %s not found", orgID)
		}
		u, err := store.Users.First(tx, store.UsersByEmail, email)
		switch {
		case errors.Is(err, store.ErrNotFound):
			if err := checkRoleChange(tx, p, orgID, "", "", req.Role); err != nil {
				return err
			}
			if u, err = s.CreateUser(tx, email, name, password, false, store.Membership{OrganizationID: orgID, Role: req.Role}); err != nil {
				return err
			}
			out = &api.AddedMember{Member: memberView(u, orgID), InitialPassword: generated}
		case err != nil:
			return apperr.Internal(err, "read user")
		default:
			// An existing user joins only by accepting: they are invited, and until then the
			// organization learns neither their ID nor their name (they may be another tenant's).
			if u.Role(orgID) != "" {
				return apperr.Conflict("%s is already a member of this organization", email)
			}
			if req.Password != "" {
				return apperr.Invalid("%s already has a user: leave password out (people change their own)", email)
			}
			if err := checkRoleChange(tx, p, orgID, "", "", req.Role); err != nil {
				return err
			}
			now := s.now()
			pending, err := store.Invitations.Lookup(tx, store.InvitationsByUser, u.ID, store.Query{})
			if err != nil {
				return apperr.Internal(err, "list invitations")
			}
			for _, x := range pending {
				if x.OrganizationID == orgID && now.Before(x.ExpiresAt) {
					return apperr.Conflict("%s is already invited to this organization", email)
				}
			}
			inv := &store.Invitation{ID: ids.New("inv"), OrganizationID: orgID, UserID: u.ID, Email: email, Role: req.Role,
				InvitedByUserID: p.UserID, CreatedAt: now, ExpiresAt: now.Add(InvitationTTL)}
			if err := store.Invitations.Put(tx, inv); err != nil {
				return apperr.Internal(err, "store invitation")
			}
			view, err := invitationView(tx, inv)
			if err != nil {
				return err
			}
			out = &api.AddedMember{Member: api.Member{Email: email, Role: req.Role, CreatedAt: now}, Invitation: view}
			return s.host.Audit(tx, p, "member.invite", orgID, "", map[string]any{"invitation_id": inv.ID, "email": email, "role": req.Role})
		}
		return s.host.Audit(tx, p, "member.add", orgID, "", map[string]any{"user_id": out.Member.UserID, "email": email, "role": req.Role})
	})
	return out, err
}

func invitationView(tx *store.Tx, inv *store.Invitation) (*api.Invitation, error) {
	org, err := store.Organizations.Get(tx, inv.OrganizationID)
	if err != nil {
		return nil, apperr.Internal(err, "read organization")
	}
	return &api.Invitation{ID: inv.ID, OrganizationID: inv.OrganizationID, OrganizationName: org.Name, Email: inv.Email,
		Role: inv.Role, CreatedAt: inv.CreatedAt, ExpiresAt: inv.ExpiresAt}, nil
}

// invitations returns the live invitations of an index key (an organization or a user), oldest first.
func (s *Service) invitations(tx *store.Tx, ix *store.Index[store.Invitation], key string) (*api.InvitationList, error) {
	all, err := store.Invitations.Lookup(tx, ix, key, store.Query{})
	if err != nil {
		return nil, apperr.Internal(err, "list invitations")
	}
	out := &api.InvitationList{Invitations: []api.Invitation{}}
	now := s.now()
	for _, inv := range all {
		if !now.Before(inv.ExpiresAt) {
			continue
		}
		v, err := invitationView(tx, inv)
		if err != nil {
			return nil, err
		}
		out.Invitations = append(out.Invitations, *v)
	}
	return out, nil
}

// ListInvitations lists the organization's pending invitations.
func (s *Service) ListInvitations(ctx context.Context, p *authz.Principal, orgID string) (*api.InvitationList, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	var out *api.InvitationList
	err := s.db.View(func(tx *store.Tx) (err error) {
		if _, err := store.Organizations.Get(tx, orgID); err != nil {
			return apperr.NotFoundAs(err, "organization %s not found", orgID)
		}
		out, err = s.invitations(tx, store.InvitationsByOrg, orgID)
		return err
	})
	return out, err
}

// RevokeInvitation withdraws a pending invitation of the organization (the admin role).
func (s *Service) RevokeInvitation(ctx context.Context, p *authz.Principal, orgID, invitationID string) (*api.InvitationDone, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	if err := p.RequireAdminRole("managing organization members"); err != nil {
		return nil, err
	}
	err := s.db.Update(func(tx *store.Tx) error {
		inv, err := store.Invitations.Get(tx, invitationID)
		if errors.Is(err, store.ErrNotFound) || (err == nil && inv.OrganizationID != orgID) {
			return apperr.NotFound("invitation %s not found", invitationID)
		}
		if err != nil {
			return apperr.Internal(err, "read invitation")
		}
		if err := store.Invitations.Delete(tx, inv.ID); err != nil {
			return apperr.Internal(err, "delete invitation")
		}
		return s.host.Audit(tx, p, "member.invite_revoke", orgID, "", map[string]any{"invitation_id": inv.ID, "email": inv.Email})
	})
	if err != nil {
		return nil, err
	}
	return &api.InvitationDone{Deleted: true}, nil
}

// MyInvitations lists the signed-in user's pending invitations.
func (s *Service) MyInvitations(ctx context.Context, p *authz.Principal) (*api.InvitationList, error) {
	if !p.IsSession() {
		return nil, apperr.Forbidden("invitations are seen by their user, signed in")
	}
	var out *api.InvitationList
	err := s.db.View(func(tx *store.Tx) (err error) {
		out, err = s.invitations(tx, store.InvitationsByUser, p.UserID)
		return err
	})
	return out, err
}

// myInvitation reads a live invitation of the signed-in user (404 for anyone else's, 410 when expired).
func (s *Service) myInvitation(tx *store.Tx, p *authz.Principal, invitationID string) (*store.Invitation, error) {
	if !p.IsSession() {
		return nil, apperr.Forbidden("an invitation is answered by its user, signed in")
	}
	inv, err := store.Invitations.Get(tx, invitationID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && inv.UserID != p.UserID) {
		return nil, apperr.NotFound("invitation %s not found", invitationID)
	}
	if err != nil {
		return nil, apperr.Internal(err, "read invitation")
	}
	if !s.now().Before(inv.ExpiresAt) {
		return nil, apperr.Gone("invitation %s expired at %s: ask for a new one", inv.ID, inv.ExpiresAt.Format(time.RFC3339))
	}
	return inv, nil
}

// AcceptInvitation makes the signed-in user a member of the inviting organization with the invited role.
func (s *Service) AcceptInvitation(ctx context.Context, p *authz.Principal, invitationID string) (*api.MemberResponse, error) {
	var out *api.MemberResponse
	err := s.db.Update(func(tx *store.Tx) error {
		inv, err := s.myInvitation(tx, p, invitationID)
		if err != nil {
			return err
		}
		u, err := store.Users.Get(tx, p.UserID)
		if err != nil {
			return apperr.Internal(err, "read user")
		}
		if u.Role(inv.OrganizationID) == "" {
			u.Memberships = append(u.Memberships, store.Membership{OrganizationID: inv.OrganizationID, Role: inv.Role})
			u.UpdatedAt = s.now()
			if err := store.Users.Put(tx, u); err != nil {
				return apperr.Internal(err, "store user")
			}
		}
		if err := store.Invitations.Delete(tx, inv.ID); err != nil {
			return apperr.Internal(err, "delete invitation")
		}
		// A session of no organization (its user signed in only to answer) moves into the organization it
		// joined, so the person goes on working without signing in again.
		if p.Unaffiliated() {
			sess, err := store.Sessions.Get(tx, p.SessionID())
			if err != nil {
				return apperr.Internal(err, "read session")
			}
			sess.OrganizationID = inv.OrganizationID
			if err := store.Sessions.Put(tx, sess); err != nil {
				return apperr.Internal(err, "store session")
			}
		}
		out = &api.MemberResponse{Member: memberView(u, inv.OrganizationID)}
		return s.host.Audit(tx, p, "member.join", inv.OrganizationID, "", map[string]any{"invitation_id": inv.ID, "user_id": u.ID, "role": u.Role(inv.OrganizationID)})
	})
	return out, err
}

// DeclineInvitation deletes an invitation of the signed-in user; the organization learns only that it was
// declined.
func (s *Service) DeclineInvitation(ctx context.Context, p *authz.Principal, invitationID string) (*api.InvitationDone, error) {
	err := s.db.Update(func(tx *store.Tx) error {
		inv, err := s.myInvitation(tx, p, invitationID)
		if err != nil && apperr.KindOf(err) != apperr.KindGone {
			return err
		}
		if inv == nil { // expired: gone either way
			if inv, err = store.Invitations.Get(tx, invitationID); err != nil {
				return apperr.Internal(err, "read invitation")
			}
		}
		if err := store.Invitations.Delete(tx, inv.ID); err != nil {
			return apperr.Internal(err, "delete invitation")
		}
		// The organization's trail names no actor: the decliner stays unknown to it. The decliner's own
		// event belongs to no organization's trail.
		if err := s.host.Audit(tx, p, "member.invite_decline", "", "", map[string]any{"invitation_id": inv.ID, "organization_id": inv.OrganizationID}); err != nil {
			return apperr.Internal(err, "audit")
		}
		return s.host.Audit(tx, &authz.Principal{}, "member.invite_decline", inv.OrganizationID, "", map[string]any{"invitation_id": inv.ID})
	})
	if err != nil {
		return nil, err
	}
	return &api.InvitationDone{Deleted: true}, nil
}

// memberOf reads a member of the organization (404 for anyone else).
func memberOf(tx *store.Tx, orgID, userID string) (*store.User, error) {
	u, err := store.Users.Get(tx, userID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && u.Role(orgID) == "") {
		return nil, apperr.NotFound("member %s not found", userID)
	}
	if err != nil {
		return nil, apperr.Internal(err, "read user")
	}
	return u, nil
}

// SetMemberRole changes a member's role. Their sessions and keys act with the new role from the next
// request on.
func (s *Service) SetMemberRole(ctx context.Context, p *authz.Principal, orgID, userID string, req *api.SetMemberRoleRequest) (*api.MemberResponse, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	if err := checkRole(req.Role); err != nil {
		return nil, err
	}
	var out *api.MemberResponse
	err := s.db.Update(func(tx *store.Tx) error {
		u, err := memberOf(tx, orgID, userID)
		if err != nil {
			return err
		}
		from := u.Role(orgID)
		if err := checkRoleChange(tx, p, orgID, u.ID, from, req.Role); err != nil {
			return err
		}
		if from != req.Role {
			for i := range u.Memberships {
				if u.Memberships[i].OrganizationID == orgID {
					u.Memberships[i].Role = req.Role
				}
			}
			u.UpdatedAt = s.now()
			if err := store.Users.Put(tx, u); err != nil {
				return apperr.Internal(err, "store user")
			}
			if err := s.host.Audit(tx, p, "member.set_role", orgID, "", map[string]any{"user_id": u.ID, "from": from, "role": req.Role}); err != nil {
				return apperr.Internal(err, "audit")
			}
		}
		out = &api.MemberResponse{Member: memberView(u, orgID)}
		return nil
	})
	return out, err
}

// RemoveMember takes a person out of the organization: their sessions in it end and the API keys they
// created in it are revoked (they would be refused anyway; revoking shows it in the key list).
func (s *Service) RemoveMember(ctx context.Context, p *authz.Principal, orgID, userID string) (*api.RemovedMember, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	var out *api.RemovedMember
	err := s.db.Update(func(tx *store.Tx) error {
		out = &api.RemovedMember{RevokedAPIKeys: []string{}} // a run again starts over
		u, err := memberOf(tx, orgID, userID)
		if err != nil {
			return err
		}
		if err := checkRoleChange(tx, p, orgID, u.ID, u.Role(orgID), ""); err != nil {
			return err
		}
		now := s.now()
		u.Memberships = slices.DeleteFunc(u.Memberships, func(m store.Membership) bool { return m.OrganizationID == orgID })
		u.UpdatedAt = now
		if err := store.Users.Put(tx, u); err != nil {
			return apperr.Internal(err, "store user")
		}
		if _, err := s.revokeSessions(tx, u.ID, func(x *store.Session) bool { return x.OrganizationID == orgID }); err != nil {
			return err
		}
		keys, err := store.APIKeys.Lookup(tx, store.APIKeysByOrg, orgID, store.Query{})
		if err != nil {
			return apperr.Internal(err, "list keys")
		}
		for _, k := range keys {
			if k.CreatedByUserID != u.ID || k.RevokedAt != nil {
				continue
			}
			k.RevokedAt = ptr(now)
			if err := store.APIKeys.Put(tx, k); err != nil {
				return apperr.Internal(err, "revoke key")
			}
			if err := s.host.RecordKeyRevocation(k.KeyHash); err != nil {
				return err
			}
			out.RevokedAPIKeys = append(out.RevokedAPIKeys, k.ID)
		}
		out.Removed = true
		return s.host.Audit(tx, p, "member.remove", orgID, "", map[string]any{"user_id": u.ID, "revoked_api_key_ids": out.RevokedAPIKeys})
	})
	return out, err
}

// SignOut ends the calling session.
func (s *Service) SignOut(ctx context.Context, p *authz.Principal) (*api.SignedOut, error) {
	if !p.IsSession() {
		return nil, apperr.Forbidden("signing out needs a signed-in session")
	}
	err := s.db.Update(func(tx *store.Tx) error {
		if _, err := s.revokeSessions(tx, p.UserID, func(x *store.Session) bool { return x.ID == p.SessionID() }); err != nil {
			return err
		}
		return s.host.Audit(tx, p, "session.revoke", p.OrganizationID, "", nil)
	})
	if err != nil {
		return nil, err
	}
	return &api.SignedOut{SignedOut: true}, nil
}

// revokeSessions ends the user's live sessions that match keep (nil: all) and returns how many.
func (s *Service) revokeSessions(tx *store.Tx, userID string, match func(*store.Session) bool) (int, error) {
	now := s.now()
	live, err := store.Sessions.All(tx, func(x *store.Session) bool {
		return x.UserID == userID && x.RevokedAt == nil && now.Before(x.ExpiresAt) && (match == nil || match(x))
	})
	if err != nil {
		return 0, apperr.Internal(err, "list sessions")
	}
	for _, x := range live {
		x.RevokedAt = ptr(now)
		if err := store.Sessions.Put(tx, x); err != nil {
			return 0, apperr.Internal(err, "revoke session")
		}
		if err := s.host.RecordSessionRevocation(x.TokenHash); err != nil {
			return 0, err
		}
	}
	return len(live), nil
}

// ChangePassword changes the signed-in user's password after checking the current one, and signs out
// the user's other sessions.
func (s *Service) ChangePassword(ctx context.Context, p *authz.Principal, req *api.ChangePasswordRequest) (*api.PasswordChanged, error) {
	if !p.IsSession() {
		return nil, apperr.Forbidden("changing a password needs a signed-in session")
	}
	if len(req.NewPassword) < 12 || len(req.NewPassword) > 72 {
		return nil, apperr.Invalid("new_password must be 12 to 72 bytes")
	}
	var u *store.User
	if err := s.db.View(func(tx *store.Tx) error {
		var err error
		u, err = store.Users.Get(tx, p.UserID)
		return err
	}); err != nil {
		return nil, apperr.Unauthenticated("invalid or expired session")
	}
	if bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(req.CurrentPassword)) != nil {
		return nil, apperr.Forbidden("current_password is wrong")
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(req.NewPassword), s.passwordCost())
	if err != nil {
		return nil, apperr.Internal(err, "hash password")
	}
	out := &api.PasswordChanged{Changed: true}
	err = s.db.Update(func(tx *store.Tx) error {
		cur, err := store.Users.Get(tx, u.ID)
		if err != nil || cur.PasswordHash != u.PasswordHash {
			return apperr.Conflict("the password changed meanwhile: sign in again")
		}
		cur.PasswordHash, cur.UpdatedAt = string(hash), s.now()
		if err := store.Users.Put(tx, cur); err != nil {
			return apperr.Internal(err, "store user")
		}
		if out.SessionsRevoked, err = s.revokeSessions(tx, u.ID, func(x *store.Session) bool { return x.ID != p.SessionID() }); err != nil {
			return err
		}
		return s.host.Audit(tx, p, "user.password_change", p.OrganizationID, "", map[string]any{"user_id": u.ID, "sessions_revoked": out.SessionsRevoked})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
