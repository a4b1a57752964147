package identity

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/mail"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/store"
)

// SessionTTL is how long an identity-provider session lasts.
const SessionTTL = 12 * time.Hour

const sessionPrefix = "ses"

// dummyHash makes a sign-in for an unknown email cost as much as a wrong password.
var dummyHash, _ = bcrypt.GenerateFromPassword([]byte("not a password"), bcrypt.DefaultCost)

// CreateSession checks the password and issues a session token accepted as a bearer token. The password
// is checked outside the write transaction: bcrypt takes tens of milliseconds, and holding the store's
// single writer that long on every sign-in attempt would stall every other write.
func (s *Service) CreateSession(ctx context.Context, req *api.SessionRequest) (*api.SessionResult, error) {
	email := strings.ToLower(strings.TrimSpace(req.Email))
	if wait := s.signIns.attempt(email, s.now()); wait > 0 {
		return nil, &apperr.Error{Kind: apperr.KindTooMany, RetryAfter: wait, Msg: "too many failed sign-ins for this account: retry after the number of seconds in Retry-After"}
	}
	var u *store.User
	err := s.db.View(func(tx *store.Tx) error {
		var err error
		u, err = store.Users.First(tx, store.UsersByEmail, email)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		bcrypt.CompareHashAndPassword(dummyHash, []byte(req.Password))
		return nil, apperr.Unauthenticated("invalid email or password")
	}
	if err != nil {
		return nil, apperr.Internal(err, "read user")
	}
	if bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(req.Password)) != nil {
		return nil, apperr.Unauthenticated("invalid email or password")
	}
	orgID, role := "", ""
	for _, m := range u.Memberships {
		if req.OrganizationID == "" || subtle.ConstantTimeCompare([]byte(m.OrganizationID), []byte(req.OrganizationID)) == 1 {
			orgID, role = m.OrganizationID, m.Role
			break
		}
	}
	if req.OrganizationID != "" && orgID == "" {
		return nil, apperr.Forbidden("user is not a member of organization %s", req.OrganizationID)
	}
	if orgID == "" && !u.IsAdmin {
		// A user of no organization signs in only to answer an invitation: the session is one of no
		// organization, which reads /v1/me and answers its invitations and nothing else (authz.Principal.Unaffiliated).
		invited, err := s.hasPendingInvitation(u.ID)
		if err != nil {
			return nil, err
		}
		if !invited {
			return nil, apperr.Forbidden("user belongs to no organization")
		}
	}
	if u.IsAdmin && req.OrganizationID == "" {
		orgID, role = "", ""
	}
	token := newSessionToken()
	var out *api.SessionResult
	err = s.db.Update(func(tx *store.Tx) error {
		// The user may have changed since the password was checked: it must still exist with that password.
		cur, err := store.Users.Get(tx, u.ID)
		if err != nil || cur.PasswordHash != u.PasswordHash {
			return apperr.Unauthenticated("invalid email or password")
		}
		if orgID != "" && !u.IsAdmin {
			if org, err := store.Organizations.Get(tx, orgID); err == nil && org.SuspendedAt != nil {
				return Suspended(org)
			}
		}
		out, err = s.newSession(tx, token, u.ID, orgID, role)
		return err
	})
	if err == nil {
		s.signIns.succeeded(email)
	}
	return out, err
}

func newSessionToken() string { return sessionPrefix + "_" + ids.Secret(32) }

// newSession stores a session of the user in orgID with token, audited, in tx.
func (s *Service) newSession(tx *store.Tx, token, userID, orgID, role string) (*api.SessionResult, error) {
	now := s.now()
	sess := &store.Session{ID: ids.New("ses"), TokenHash: ids.Hash(token), UserID: userID,
		OrganizationID: orgID, CreatedAt: now, ExpiresAt: now.Add(SessionTTL)}
	if err := store.Sessions.Put(tx, sess); err != nil {
		return nil, apperr.Internal(err, "store session")
	}
	p := &authz.Principal{AuthSource: authz.SourceSession, UserID: userID}
	if err := s.host.Audit(tx, p, "session.create", sess.OrganizationID, "", nil); err != nil {
		return nil, apperr.Internal(err, "audit")
	}
	return &api.SessionResult{Token: token, UserID: userID, OrganizationID: sess.OrganizationID, Role: role, ExpiresAt: sess.ExpiresAt}, nil
}

// SignIn starts a session of a user just made (a sign-up) in their organization, in tx: the same session
// and audit event as a sign-in's.
func (s *Service) SignIn(tx *store.Tx, u *store.User, orgID, role string) (*api.SessionResult, error) {
	return s.newSession(tx, newSessionToken(), u.ID, orgID, role)
}

// hasPendingInvitation reports whether the user holds an invitation that has not expired.
func (s *Service) hasPendingInvitation(userID string) (bool, error) {
	var found bool
	err := s.db.View(func(tx *store.Tx) error {
		invs, err := store.Invitations.Lookup(tx, store.InvitationsByUser, userID, store.Query{})
		if err != nil {
			return apperr.Internal(err, "list invitations")
		}
		now := s.now()
		found = slices.ContainsFunc(invs, func(inv *store.Invitation) bool { return now.Before(inv.ExpiresAt) })
		return nil
	})
	return found, err
}

// Sign-in backoff per account: the first SignInFreeAttempts attempts in a row are free; from then on
// each attempt makes the account wait 1 s, 2 s, 4 s … (at most SignInMaxBackoff) before the next, the
// right password included. A success clears the count, and so does an hour without attempts.
const (
	SignInFreeAttempts = 5
	SignInMaxBackoff   = 15 * time.Minute
	signInForget       = time.Hour
)

// signInBackoff counts sign-in attempts per email (known or not, so it tells nothing about which exist).
// An attempt is counted when it starts, so attempts sent at once cannot pass the count together.
type signInBackoff struct {
	mu       sync.Mutex
	accounts map[string]*signInCount
}

type signInCount struct {
	attempts    int
	last, until time.Time
}

// attempt counts an attempt for email at now, or, while the account must wait, counts nothing and
// returns how long is left.
func (b *signInBackoff) attempt(email string, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.accounts == nil {
		b.accounts = map[string]*signInCount{}
	}
	if len(b.accounts) > 10000 {
		for k, c := range b.accounts {
			if now.Sub(c.last) > signInForget && !now.Before(c.until) {
				delete(b.accounts, k)
			}
		}
	}
	c := b.accounts[email]
	if c == nil || (now.Sub(c.last) > signInForget && !now.Before(c.until)) {
		c = &signInCount{}
		b.accounts[email] = c
	}
	if now.Before(c.until) {
		return c.until.Sub(now)
	}
	c.attempts++
	c.last = now
	if n := c.attempts - SignInFreeAttempts; n >= 0 {
		c.until = now.Add(min(time.Second<<min(n, 20), SignInMaxBackoff))
	}
	return 0
}

// succeeded clears email's count.
func (b *signInBackoff) succeeded(email string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.accounts, email)
}

// CreateUser adds a user of the built-in identity provider (used by bootstrap and the admin CLI).
func (s *Service) CreateUser(tx *store.Tx, email, name, password string, isAdmin bool, memberships ...store.Membership) (*store.User, error) {
	addr, err := mail.ParseAddress(email)
	if err != nil || addr.Address != email {
		return nil, apperr.Invalid("email %q is not a valid address", email)
	}
	email = strings.ToLower(email)
	if len(password) < 12 || len(password) > 72 {
		return nil, apperr.Invalid("password must be 12 to 72 bytes")
	}
	if _, err := store.Users.First(tx, store.UsersByEmail, email); err == nil {
		return nil, apperr.Conflict("a user with email %s exists", email)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), s.passwordCost())
	if err != nil {
		return nil, apperr.Internal(err, "hash password")
	}
	now := s.now()
	u := &store.User{ID: ids.New("usr"), Email: email, Name: name, PasswordHash: string(hash), IsAdmin: isAdmin,
		Memberships: memberships, CreatedAt: now, UpdatedAt: now}
	if u.Memberships == nil {
		u.Memberships = []store.Membership{}
	}
	if err := store.Users.Put(tx, u); err != nil {
		return nil, apperr.Internal(err, "store user")
	}
	return u, nil
}

// Authenticate resolves a bearer token (API key or session token) to a principal and records key use.
func (s *Service) Authenticate(ctx context.Context, token string) (*authz.Principal, error) {
	if token == "" {
		return nil, apperr.Unauthenticated("missing credentials: send Authorization: Bearer <token> or X-API-Key")
	}
	hash := ids.Hash(token)
	now := s.now()
	// Session tokens are "ses_" and base32 (no underscore), so they never contain "_live_": a key whose
	// configured prefix happens to be "ses" is still recognised as a key.
	if strings.HasPrefix(token, sessionPrefix+"_") && !strings.Contains(token, "_live_") {
		var p *authz.Principal
		err := s.db.View(func(tx *store.Tx) error {
			sess, err := store.Sessions.First(tx, store.SessionsByHash, hash)
			if err != nil || sess.RevokedAt != nil || !now.Before(sess.ExpiresAt) {
				return apperr.Unauthenticated("invalid or expired session")
			}
			u, err := store.Users.Get(tx, sess.UserID)
			if err != nil {
				return apperr.Unauthenticated("invalid or expired session")
			}
			p = authz.NewSession(u.ID, sess.ID, u.IsAdmin)
			if u.IsAdmin && sess.OrganizationID == "" {
				p.Scopes = scopeStrings(api.AllScopes)
				return nil
			}
			if sess.OrganizationID == "" { // signed in to answer an invitation: no organization, no scopes
				return nil
			}
			for _, m := range u.Memberships {
				if m.OrganizationID != sess.OrganizationID {
					continue
				}
				org, err := store.Organizations.Get(tx, m.OrganizationID)
				if err != nil {
					return apperr.Unauthenticated("session organization no longer exists")
				}
				if org.SuspendedAt != nil && !u.IsAdmin { // a platform operator still reaches it
					return Suspended(org)
				}
				p.OrganizationID, p.IDPOrganizationID, p.IDPOrganizationSlug = org.ID, org.ID, org.Slug
				p.IDPOrganizationRole = m.Role
				p.Scopes = scopeStrings(authz.RoleScopes(m.Role))
				if u.IsAdmin {
					p.Scopes = scopeStrings(api.AllScopes)
				}
				return nil
			}
			return apperr.Unauthenticated("user is no longer a member of the session's organization")
		})
		return p, err
	}
	if !strings.Contains(token, "_live_") {
		return nil, apperr.Unauthenticated("invalid API key")
	}
	auth, err := s.apiKeyByHash(hash)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apperr.Unauthenticated("invalid API key")
	}
	if err != nil {
		return nil, apperr.Internal(err, "read key")
	}
	k := auth.key
	if k.RevokedAt != nil {
		return nil, apperr.Unauthenticated("API key has been revoked")
	}
	if k.ExpiresAt != nil && !now.Before(*k.ExpiresAt) {
		return nil, apperr.Unauthenticated("API key has expired")
	}
	// last_used_at is kept to the minute, so a busy key takes the store's writer (and an fsync) at most
	// once a minute rather than on every call.
	if k.LastUsedAt == nil || now.Sub(*k.LastUsedAt) >= time.Minute {
		err := s.db.Update(func(tx *store.Tx) error {
			cur, err := store.APIKeys.Get(tx, k.ID)
			if err != nil {
				return apperr.Unauthenticated("invalid API key")
			}
			if cur.RevokedAt != nil { // revoked since it was read
				return apperr.Unauthenticated("API key has been revoked")
			}
			cur.LastUsedAt = ptr(now)
			if err := store.APIKeys.Put(tx, cur); err != nil {
				return apperr.Internal(err, "record key use")
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if auth.err != nil {
		return nil, auth.err
	}
	p := auth.principal
	p.Scopes = slices.Clone(p.Scopes)
	return &p, nil
}

// Suspended is the refusal of a suspended organization's credentials (403), with the operator's reason.
func Suspended(org *store.Organization) error {
	return apperr.Forbidden("organization suspended: %s", org.SuspendedReason)
}

// keyAuth is what an API key's record says (the decoded key) and what its creator may do now (the
// principal actAsCreator made, or why it acts for nobody).
type keyAuth struct {
	key       *store.APIKey
	principal authz.Principal
	err       error
}

// apiKeyByHash reads the key filed under hash and its creator's rights, from the cache when no write to the
// tables they come from committed since (authVersion), and whether its organization refuses it
// (keyOrg); the caller checks revocation and expiry against its clock on every request. Only the
// key's hash is a cache key: no token is kept.
func (s *Service) apiKeyByHash(hash string) (keyAuth, error) {
	a, err := s.keyByHash(hash)
	if err != nil || a.err != nil {
		return a, err
	}
	// A suspended organization's keys are refused, a platform operator's included: the key is the
	// organization's. The organization is read again whenever an organization changed, so a suspension
	// takes effect at the next request.
	o, err := s.keyOrg(a.key.OrganizationID)
	if err != nil {
		return keyAuth{}, err
	}
	a.err = o.err
	return a, nil
}

// orgAuth is why an organization's keys are refused (nil: they are not).
type orgAuth struct{ err error }

// keyOrg says why the organization's keys are refused now (nil: they are not): it no longer exists or it
// is suspended. From the cache when no organization changed since it was read.
func (s *Service) keyOrg(orgID string) (orgAuth, error) {
	version := store.Organizations.Version(s.db)
	if o, ok := s.orgCache.Get(orgID, version); ok {
		return o, nil
	}
	var o orgAuth
	err := s.db.View(func(tx *store.Tx) error {
		switch org, err := store.Organizations.Get(tx, orgID); {
		case errors.Is(err, store.ErrNotFound):
			o.err = apperr.Unauthenticated("API key's organization no longer exists")
		case err != nil:
			o.err = apperr.Internal(err, "read the key's organization")
		default:
			o = orgAuthOf(org)
		}
		return nil
	})
	if err != nil {
		return orgAuth{}, err
	}
	if o.err == nil || apperr.KindOf(o.err) != apperr.KindInternal { // a failed read is not cached
		s.orgCache.Put(orgID, version, o)
	}
	return o, nil
}

// orgAuthOf is why the organization's keys are refused (nil: they are not).
func orgAuthOf(org *store.Organization) orgAuth {
	if org.SuspendedAt != nil {
		return orgAuth{err: Suspended(org)}
	}
	return orgAuth{}
}

// noteOrg, in an Update that wrote org, caches once it commits what the organization's keys may do, at
// the organizations' version of the commit: the next request of one of its keys does not read the
// organization again (a read of etcd's leader on a cluster) unless another organization changed since.
func (s *Service) noteOrg(tx *store.Tx, org *store.Organization) {
	o := orgAuthOf(org)
	tx.OnCommit(func() {
		if v := store.Organizations.CommitVersion(tx); v != 0 {
			s.orgCache.Put(org.ID, v, o)
		}
	})
}

// keyByHash is the key filed under hash and its creator's rights (apiKeyByHash without the organization).
func (s *Service) keyByHash(hash string) (keyAuth, error) {
	version := s.authVersion()
	if a, ok := s.keyCache.Get(hash, version); ok {
		return a, nil
	}
	var a keyAuth
	err := s.db.View(func(tx *store.Tx) error {
		k, err := store.APIKeys.First(tx, store.APIKeysByHash, hash)
		if err != nil {
			return err
		}
		a.key = k
		a.principal = authz.Principal{AuthSource: authz.SourceAPIKey, OrganizationID: k.OrganizationID, UserID: k.CreatedByUserID,
			ProjectID: k.ProjectID, APIKeyID: k.ID}
		a.err = s.actAsCreator(tx, &a.principal, k)
		return nil
	})
	if err != nil {
		return keyAuth{}, err
	}
	if a.err == nil || apperr.KindOf(a.err) != apperr.KindInternal { // a failed read is not cached
		s.keyCache.Put(hash, version, a)
	}
	return a, nil
}

// actAsCreator limits a key to what the person who created it may do now: its scopes are those it was
// given that the creator's current organization role still grants, and it carries that role (admin-only
// actions check it as they check a session's). A key whose creator left the organization, or that names
// no creator, acts for nobody and is refused. So no key, however minted (API, CLI login, a key minting a
// key), ever does more than its creator, and demoting or removing a person demotes or disables their keys.
func (s *Service) actAsCreator(tx *store.Tx, p *authz.Principal, k *store.APIKey) error {
	u, err := store.Users.Get(tx, k.CreatedByUserID)
	if errors.Is(err, store.ErrNotFound) {
		return apperr.Unauthenticated("API key's creator no longer exists")
	}
	if err != nil {
		return apperr.Internal(err, "read key creator")
	}
	if u.IsAdmin { // a platform administrator's key: the administrator's rights in the key's organization
		p.IDPOrganizationRole = authz.RoleOwner
	} else if p.IDPOrganizationRole = u.Role(k.OrganizationID); p.IDPOrganizationRole == "" {
		return apperr.Unauthenticated("API key's creator is no longer a member of its organization")
	}
	granted := authz.RoleScopes(p.IDPOrganizationRole)
	p.Scopes = []string{}
	for _, sc := range k.Scopes {
		if slices.Contains(granted, api.Scope(sc)) {
			p.Scopes = append(p.Scopes, sc)
		}
	}
	return nil
}

// SweepSessions deletes, in tx, the sessions that expired more than retention before now (the root's
// Sweep) and returns how many.
func (s *Service) SweepSessions(tx *store.Tx, now time.Time, retention time.Duration) (int, error) {
	sessions, err := store.Sessions.All(tx, func(x *store.Session) bool { return now.Sub(x.ExpiresAt) > retention })
	if err != nil {
		return 0, err
	}
	deleted := 0
	for _, x := range sessions {
		deleted++
		if err := store.Sessions.Delete(tx, x.ID); err != nil {
			return deleted, err
		}
	}
	return deleted, nil
}
