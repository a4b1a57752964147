package identity

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"slices"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/store"
)

// CLILoginTTL is how long a device login waits for authorization.
const CLILoginTTL = 10 * time.Minute

// CLI login states.
const (
	CLILoginPending    = "pending"
	CLILoginAuthorized = "authorized" // the key is minted and waits for the poll
	CLILoginCompleted  = "completed"  // the poll has taken the key
	CLILoginRefused    = "refused"    // a signed-in user refused it: it can no longer be authorized
	CLILoginExpired    = "expired"
)

// userCodeAlphabet are the letters of a login's user code: consonants only (RFC 8628 §6.1), so no word
// and no 0/O, 1/I confusion; 8 of them are 20^8 ≈ 2.6e10 codes.
const userCodeAlphabet = "BCDFGHJKLMNPQRSTVWXZ"

// newUserCode returns a code like BCDF-GHJK that the CLI prints and the approval page shows, so the
// approving user can see that the login is the one their terminal started.
func newUserCode() string {
	b := make([]byte, 8)
	rand.Read(b)
	out := make([]byte, 0, 9)
	for i, c := range b {
		if i == 4 {
			out = append(out, '-')
		}
		out = append(out, userCodeAlphabet[int(c)%len(userCodeAlphabet)]) // 256 % 20 = 16: a negligible bias
	}
	return string(out)
}

// StartCLILogin opens a device login; the poll token is returned once.
func (s *Service) StartCLILogin(ctx context.Context, req *api.CLILoginStartRequest) (*api.CLILoginStart, error) {
	dev := strings.TrimSpace(req.DeviceName)
	if err := s.host.CheckDisplayText("device_name", dev, 0, 100); err != nil {
		return nil, err
	}
	if err := s.host.CheckDisplayText("key_name", req.KeyName, 0, 100); err != nil {
		return nil, err
	}
	if req.KeyExpiresInDays < 0 || req.KeyExpiresInDays > 3650 {
		return nil, apperr.Invalid("key_expires_in_days must be between 1 and 3650")
	}
	scopes := []string{}
	if len(req.Scopes) > 0 {
		var err error
		if scopes, err = validateScopes(req.Scopes, false); err != nil {
			return nil, err
		}
	}
	days := req.KeyExpiresInDays
	if days == 0 {
		days = 90
	}
	keyName := strings.TrimSpace(req.KeyName)
	if keyName == "" {
		keyName = "CLI"
		if dev != "" {
			keyName = "CLI on " + dev
		}
	}
	poll := "clp_" + ids.Secret(24)
	now := s.now()
	l := &store.CLILogin{ID: ids.New("cli"), PollTokenHash: ids.Hash(poll), State: CLILoginPending, UserCode: newUserCode(), DeviceName: dev,
		KeyName: keyName, KeyTTLSeconds: days * 86400, Scopes: scopes, Source: "cli", CreatedAt: now,
		ExpiresAt: now.Add(CLILoginTTL)}
	err := s.db.Update(func(tx *store.Tx) error {
		if err := store.CLILogins.Put(tx, l); err != nil {
			return apperr.Internal(err, "store login")
		}
		return s.host.Audit(tx, nil, "cli_login.start", "", "", map[string]any{"session_id": l.ID, "device_name": dev})
	})
	if err != nil {
		return nil, err
	}
	return &api.CLILoginStart{SessionID: l.ID, PollToken: poll, State: l.State, ExpiresAt: l.ExpiresAt, UserCode: l.UserCode}, nil
}

// expire moves a pending login past its deadline to expired (in memory; callers store it).
func (s *Service) expire(l *store.CLILogin) bool {
	if (l.State == CLILoginPending || l.State == CLILoginAuthorized) && !s.now().Before(l.ExpiresAt) {
		l.State = CLILoginExpired
		l.SealedAPIKey = nil
		return true
	}
	return false
}

// expireLogin is expire for a login read in a write transaction (the caller stores l when it reports
// true): the key minted for a login that expires before the device collected it is revoked, since nobody
// can ever hold it.
func (s *Service) expireLogin(tx *store.Tx, l *store.CLILogin) (bool, error) {
	authorized := l.State == CLILoginAuthorized
	if !s.expire(l) {
		return false, nil
	}
	if !authorized || l.APIKeyID == "" {
		return true, nil
	}
	k, err := store.APIKeys.Get(tx, l.APIKeyID)
	if err != nil || k.RevokedAt != nil {
		return true, nil
	}
	k.RevokedAt = ptr(s.now())
	if err := store.APIKeys.Put(tx, k); err != nil {
		return false, apperr.Internal(err, "revoke uncollected key")
	}
	if err := s.host.RecordKeyRevocation(k.KeyHash); err != nil {
		return false, err
	}
	sys := &authz.Principal{AuthSource: authz.ActorSystem}
	if err := s.host.Audit(tx, sys, "api_key.revoke", k.OrganizationID, k.ProjectID,
		map[string]any{"api_key_id": k.ID, "reason": "the CLI login expired before the device collected its key", "session_id": l.ID}); err != nil {
		return false, apperr.Internal(err, "audit")
	}
	return true, nil
}

// PollCLILogin reports the login's state; the first poll after authorization carries the plaintext key,
// which is then erased.
func (s *Service) PollCLILogin(ctx context.Context, sessionID, pollToken string) (*api.CLILoginResult, error) {
	var out *api.CLILoginResult
	err := s.db.Update(func(tx *store.Tx) error {
		l, err := store.CLILogins.Get(tx, sessionID)
		if err != nil || subtle.ConstantTimeCompare([]byte(l.PollTokenHash), []byte(ids.Hash(pollToken))) != 1 {
			return apperr.NotFound("login session %s not found (or wrong poll_token)", sessionID)
		}
		changed, err := s.expireLogin(tx, l)
		if err != nil {
			return err
		}
		out = &api.CLILoginResult{SessionID: l.ID, State: l.State, ExpiresAt: l.ExpiresAt, AuthorizedAt: l.AuthorizedAt}
		if l.State == CLILoginAuthorized && l.SealedAPIKey != nil {
			plain, err := s.box.Open(l.SealedAPIKey)
			if err != nil {
				return apperr.Internal(err, "open minted key")
			}
			out.PlaintextAPIKey = string(plain)
			l.SealedAPIKey = nil
			l.State = CLILoginCompleted
			out.State = l.State
			changed = true
			// The credential leaves the appliance: recorded, with the device (holder of the poll token) as actor.
			if err := s.host.Audit(tx, nil, "cli_login.complete", l.OrganizationID, "", map[string]any{"session_id": l.ID, "api_key_id": l.APIKeyID}); err != nil {
				return apperr.Internal(err, "audit")
			}
		}
		if l.OrganizationID != "" {
			if org, err := store.Organizations.Get(tx, l.OrganizationID); err == nil {
				out.OrganizationID, out.OrganizationName, out.OrganizationSlug = org.ID, org.Name, org.Slug
			}
		}
		if changed {
			if err := store.CLILogins.Put(tx, l); err != nil {
				return apperr.Internal(err, "store login")
			}
		}
		return nil
	})
	return out, err
}

// CLILoginDetailsFor shows a pending login to a signed-in user.
func (s *Service) CLILoginDetailsFor(ctx context.Context, p *authz.Principal, sessionID string) (*api.CLILoginDetails, error) {
	var out *api.CLILoginDetails
	err := s.db.View(func(tx *store.Tx) error {
		l, err := store.CLILogins.Get(tx, sessionID)
		if err != nil {
			return apperr.NotFoundAs(err, "login session %s not found", sessionID)
		}
		// Once authorized, a login belongs to its organization: others do not see it.
		if l.OrganizationID != "" && l.OrganizationID != p.OrganizationID && !p.IsAdmin {
			return apperr.NotFound("login session %s not found", sessionID)
		}
		s.expire(l)
		out = &api.CLILoginDetails{SessionID: l.ID, State: l.State, ExpiresAt: l.ExpiresAt, DeviceName: l.DeviceName,
			KeyName: l.KeyName, Scopes: s.cliScopes(p, l), Source: l.Source, UserCode: l.UserCode}
		if l.KeyExpiresAt != nil {
			out.KeyExpiresAt = l.KeyExpiresAt
		} else if l.KeyTTLSeconds > 0 {
			out.KeyExpiresAt = ptr(s.now().Add(time.Duration(l.KeyTTLSeconds) * time.Second))
		}
		return nil
	})
	return out, err
}

// cliScopes are the scopes the key will carry: those requested (or all) that the approver holds.
func (s *Service) cliScopes(p *authz.Principal, l *store.CLILogin) []string {
	out := []string{}
	for _, sc := range scopeStrings(api.AllScopes) {
		if p.Has(api.Scope(sc)) && (len(l.Scopes) == 0 || slices.Contains(l.Scopes, sc)) {
			out = append(out, sc)
		}
	}
	return out
}

// AuthorizeCLILogin mints the device's key in the approver's organization. The plaintext goes to the
// polling device only; this result's plaintext_api_key is empty.
func (s *Service) AuthorizeCLILogin(ctx context.Context, p *authz.Principal, sessionID string) (*api.CLILoginResult, error) {
	if p.OrganizationID == "" {
		return nil, apperr.Forbidden("authorizing a CLI login needs a session acting in an organization")
	}
	var out *api.CLILoginResult
	expired := false
	err := s.db.Update(func(tx *store.Tx) error {
		out, expired = nil, false // a run again starts over
		l, err := store.CLILogins.Get(tx, sessionID)
		if err != nil {
			return apperr.NotFoundAs(err, "login session %s not found", sessionID)
		}
		if expiredNow, err := s.expireLogin(tx, l); err != nil {
			return err
		} else if expiredNow {
			if err := store.CLILogins.Put(tx, l); err != nil {
				return apperr.Internal(err, "store login")
			}
		}
		// Expired now or at an earlier poll: either way 410, and the expiry (if new) is committed.
		if l.State == CLILoginExpired {
			expired = true
			return nil
		}
		if l.State != CLILoginPending {
			return apperr.Conflict("login session %s is %s, not pending", l.ID, l.State)
		}
		scopes := s.cliScopes(p, l)
		if len(scopes) == 0 {
			return apperr.Forbidden("you hold none of the scopes this login requests")
		}
		now := s.now()
		spec := keySpec{orgID: p.OrganizationID, name: l.KeyName, deviceName: l.DeviceName, source: l.Source,
			createdBy: p.UserID, scopes: scopes}
		if l.KeyTTLSeconds > 0 {
			spec.expiresAt = ptr(now.Add(time.Duration(l.KeyTTLSeconds) * time.Second))
		}
		k, plain, err := s.mintKey(tx, spec)
		if err != nil {
			return err
		}
		l.State, l.AuthorizedAt, l.AuthorizedBy, l.OrganizationID = CLILoginAuthorized, ptr(now), p.UserID, p.OrganizationID
		l.APIKeyID, l.KeyExpiresAt, l.SealedAPIKey = k.ID, k.ExpiresAt, s.box.Seal([]byte(plain))
		if err := store.CLILogins.Put(tx, l); err != nil {
			return apperr.Internal(err, "store login")
		}
		return s.host.Audit(tx, p, "cli_login.authorize", p.OrganizationID, "", map[string]any{"session_id": l.ID, "api_key_id": k.ID})
	})
	if err != nil {
		return nil, err
	}
	if expired {
		return nil, apperr.Gone("login session %s has expired", sessionID)
	}
	err = s.db.View(func(tx *store.Tx) error {
		l, err := store.CLILogins.Get(tx, sessionID)
		if err != nil {
			return apperr.Internal(err, "read login")
		}
		out = &api.CLILoginResult{SessionID: l.ID, State: l.State, ExpiresAt: l.ExpiresAt, AuthorizedAt: l.AuthorizedAt,
			OrganizationID: l.OrganizationID}
		if org, err := store.Organizations.Get(tx, l.OrganizationID); err == nil {
			out.OrganizationName, out.OrganizationSlug = org.Name, org.Slug
		}
		return nil
	})
	return out, err
}

// RefuseCLILogin refuses a pending login: it can no longer be authorized, and the device's next poll
// reads state refused. Refusing a refused login again answers it as it is; an authorized or completed
// one is a conflict (its key exists: revoke the key instead), an expired one is gone.
func (s *Service) RefuseCLILogin(ctx context.Context, p *authz.Principal, sessionID string) (*api.CLILoginResult, error) {
	var out *api.CLILoginResult
	expired := false
	err := s.db.Update(func(tx *store.Tx) error {
		out, expired = nil, false // a run again starts over
		l, err := store.CLILogins.Get(tx, sessionID)
		if err != nil {
			return apperr.NotFoundAs(err, "login session %s not found", sessionID)
		}
		if l.OrganizationID != "" && l.OrganizationID != p.OrganizationID && !p.IsAdmin {
			return apperr.NotFound("login session %s not found", sessionID)
		}
		expiredNow, err := s.expireLogin(tx, l)
		if err != nil {
			return err
		}
		switch {
		case l.State == CLILoginExpired:
			expired = true
			if !expiredNow {
				return nil
			}
		case l.State == CLILoginRefused:
		case l.State != CLILoginPending:
			return apperr.Conflict("login session %s is %s, not pending: revoke its API key instead", l.ID, l.State)
		default:
			l.State, l.RefusedAt, l.RefusedBy = CLILoginRefused, ptr(s.now()), p.UserID
			if err := s.host.Audit(tx, p, "cli_login.refuse", p.OrganizationID, "", map[string]any{"session_id": l.ID, "device_name": l.DeviceName}); err != nil {
				return apperr.Internal(err, "audit")
			}
		}
		if err := store.CLILogins.Put(tx, l); err != nil {
			return apperr.Internal(err, "store login")
		}
		out = &api.CLILoginResult{SessionID: l.ID, State: l.State, ExpiresAt: l.ExpiresAt}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if expired {
		return nil, apperr.Gone("login session %s has expired", sessionID)
	}
	return out, nil
}

// SweepLogins expires, in tx, the CLI logins past their deadline (revoking keys nobody collected) and
// deletes those whose deadline is more than retention before now (the root's Sweep); it returns how many
// it expired and deleted.
func (s *Service) SweepLogins(tx *store.Tx, now time.Time, retention time.Duration) (expired, deleted int, err error) {
	logins, err := store.CLILogins.All(tx, nil)
	if err != nil {
		return 0, 0, err
	}
	for _, l := range logins {
		changed, err := s.expireLogin(tx, l)
		if err != nil {
			return expired, deleted, err
		}
		switch {
		case now.Sub(l.ExpiresAt) > retention:
			deleted++
			if err := store.CLILogins.Delete(tx, l.ID); err != nil {
				return expired, deleted, err
			}
		case changed:
			expired++
			if err := store.CLILogins.Put(tx, l); err != nil {
				return expired, deleted, err
			}
		}
	}
	return expired, deleted, nil
}
