// Package identity is the identity area: the built-in identity provider's users, sign-in (with its
// per-account backoff) and sessions, the authentication of every request (API key or session token → the
// caller's authz.Principal), the organizations' members and invitations, the CLI's device login, the API
// keys (no key does more than its creator), and the organizations' profiles.
//
// It reaches the rest of the domain only through Host (declared here, given by the root's areaHost), the
// kernel packages (apperr, authz, ids), the wire types (api) and the records (store). It never imports
// `appliance`.
package identity

import (
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/store"
)

// Host is what the area takes from the rest of the domain: the records and rules every area shares, which
// the root package keeps (appliance/areas.go gives them).
type Host interface {
	// Audit writes an audit event of the caller in tx.
	Audit(tx *store.Tx, p *authz.Principal, action, orgID, projectID string, metadata any) error
	// CheckDisplayText applies the rules of every display field (names, descriptions).
	CheckDisplayText(field, v string, min, max int) error
	// RecordKeyRevocation appends a revoked API key's hash to the revocation record (synced, inside the
	// transaction that revokes it): the record is the root's, one for every kind of credential.
	RecordKeyRevocation(hash string) error
	// RecordSessionRevocation appends a revoked session's token hash to the revocation record.
	RecordSessionRevocation(hash string) error
}

// Box seals and opens the key a CLI login keeps for its device until the device polls (the root's
// SecretBox).
type Box interface {
	Seal(plaintext []byte) []byte
	Open(sealed []byte) ([]byte, error)
}

// Config is the deployment the area needs to know.
type Config struct {
	KeyPrefix string // API keys look like <KeyPrefix>_live_<random>
	// PasswordCost is the bcrypt cost of stored password hashes (0: bcrypt.DefaultCost). Tests lower it.
	PasswordCost int
}

// Deps are the area's collaborators; New takes them all.
type Deps struct {
	DB    *store.DB
	Box   Box
	Clock func() time.Time // UTC
	Host  Host
}

// Service is the identity area.
type Service struct {
	cfg  Config
	db   *store.DB
	box  Box
	now  func() time.Time
	host Host
	// signIns is the per-account sign-in backoff (identity.go).
	signIns signInBackoff
	// keyCache holds API keys' principals by key hash (identity.go).
	keyCache store.Cache[keyAuth]
	// orgCache holds, by organization, why its keys are refused (suspended, deleted) or that they are not.
	orgCache store.Cache[orgAuth]
}

// New returns the area built with its collaborators.
func New(cfg Config, deps Deps) *Service {
	return &Service{cfg: cfg, db: deps.DB, box: deps.Box, now: deps.Clock, host: deps.Host}
}

func (s *Service) passwordCost() int {
	if s.cfg.PasswordCost == 0 {
		return bcrypt.DefaultCost
	}
	return s.cfg.PasswordCost
}

// authVersion sums the versions of the tables an API key's principal is read from (the key, its creator's
// user record with the memberships and roles): it changes whenever one of them does. The key's
// organization is checked apart (orgCache, by the organizations' version): a change of an organization's
// name does not make every key's principal be read again.
func (s *Service) authVersion() uint64 {
	return store.APIKeys.Version(s.db) + store.Users.Version(s.db)
}

func scopeStrings(s []api.Scope) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = string(v)
	}
	return out
}

// The records and values the API shows field for field.

func wireOrganization(o *store.Organization) *api.Organization { return (*api.Organization)(o) }

// wirePrincipal is the caller as GET /v1/me shows it (the session it came with stays out).
func wirePrincipal(p *authz.Principal) *api.Principal {
	return &api.Principal{AuthSource: p.AuthSource, IDPOrganizationID: p.IDPOrganizationID, IDPOrganizationRole: p.IDPOrganizationRole,
		IDPOrganizationSlug: p.IDPOrganizationSlug, OrganizationID: p.OrganizationID, UserID: p.UserID, IsAdmin: p.IsAdmin,
		Scopes: p.Scopes, ProjectID: p.ProjectID, APIKeyID: p.APIKeyID}
}

func ptr[T any](v T) *T { return &v }
