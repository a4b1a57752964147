package identity

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/store"
)

func (s *Service) apiKeyView(k *store.APIKey) api.APIKey {
	active := k.RevokedAt == nil && (k.ExpiresAt == nil || s.now().Before(*k.ExpiresAt))
	return api.APIKey{ID: k.ID, Name: k.Name, KeyPrefix: k.KeyPrefix, OrganizationID: k.OrganizationID,
		ProjectID: k.ProjectID, CreatedByUserID: k.CreatedByUserID, DeviceName: k.DeviceName, Source: k.Source,
		IsActive: active, Scopes: k.Scopes, CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt,
		LastUsedAt: k.LastUsedAt, RevokedAt: k.RevokedAt}
}

// ListAPIKeys lists an organization's keys, newest first.
func (s *Service) ListAPIKeys(ctx context.Context, p *authz.Principal, orgID string) (*api.APIKeyList, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	out := &api.APIKeyList{APIKeys: []api.APIKey{}}
	err := s.db.View(func(tx *store.Tx) error {
		if _, err := store.Organizations.Get(tx, orgID); err != nil {
			return apperr.NotFoundAs(err, "organization %s not found", orgID)
		}
		keys, err := store.APIKeys.Lookup(tx, store.APIKeysByOrg, orgID, store.Query{Newest: true})
		if err != nil {
			return apperr.Internal(err, "list keys")
		}
		for _, k := range keys {
			out.APIKeys = append(out.APIKeys, s.apiKeyView(k))
		}
		return nil
	})
	return out, err
}

// keySpec is everything needed to mint a key, from the API or from a CLI login.
type keySpec struct {
	orgID, projectID, name, deviceName, source, createdBy string
	scopes                                                []string
	expiresAt                                             *time.Time
}

// validateScopes checks names, removes duplicates and applies the project-key rule.
func validateScopes(scopes []string, projectScoped bool) ([]string, error) {
	if len(scopes) == 0 {
		return nil, apperr.Invalid("scopes must name at least one scope")
	}
	out := []string{}
	for _, sc := range scopes {
		if !slices.Contains(api.AllScopes, api.Scope(sc)) {
			return nil, apperr.Invalid("unknown scope %q", sc)
		}
		if projectScoped && authz.IsOrganizationScope(api.Scope(sc)) {
			return nil, apperr.Invalid("scope %s manages the organization and cannot be given to a project-scoped key", sc)
		}
		if !slices.Contains(out, sc) {
			out = append(out, sc)
		}
	}
	return out, nil
}

// mintKey stores a new key inside tx and returns its record and plaintext.
func (s *Service) mintKey(tx *store.Tx, spec keySpec) (*store.APIKey, string, error) {
	secret := ids.Secret(30)
	plain := s.cfg.KeyPrefix + "_live_" + secret
	k := &store.APIKey{ID: ids.New("key"), Name: spec.name, KeyPrefix: s.cfg.KeyPrefix + "_live_" + secret[:6],
		KeyHash: ids.Hash(plain), OrganizationID: spec.orgID, ProjectID: spec.projectID,
		CreatedByUserID: spec.createdBy, DeviceName: spec.deviceName, Source: spec.source, Scopes: spec.scopes,
		CreatedAt: s.now(), ExpiresAt: spec.expiresAt}
	if err := store.APIKeys.Put(tx, k); err != nil {
		return nil, "", apperr.Internal(err, "store key")
	}
	return k, plain, nil
}

// CreateAPIKey mints a key for the organization; the plaintext is in the result only.
func (s *Service) CreateAPIKey(ctx context.Context, p *authz.Principal, orgID string, req *api.CreateAPIKeyRequest) (*api.CreatedAPIKey, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	if err := p.RequireAdminRole("creating an API key"); err != nil {
		return nil, err
	}
	name := strings.TrimSpace(req.Name)
	if err := s.host.CheckDisplayText("name", name, 1, 100); err != nil {
		return nil, err
	}
	scopes, err := validateScopes(req.Scopes, req.ProjectID != "")
	if err != nil {
		return nil, err
	}
	if req.ExpiresIn < 0 || req.ExpiresIn > 3650 {
		return nil, apperr.Invalid("expires_in_days must be between 1 and 3650 (or 0 for no expiry)")
	}
	if p.ProjectID != "" {
		return nil, apperr.Forbidden("a project-scoped key cannot create API keys")
	}
	// A caller cannot hand out more than it holds.
	for _, sc := range scopes {
		if !p.Has(api.Scope(sc)) {
			return nil, apperr.Forbidden("cannot grant scope %s, which this credential does not hold", sc)
		}
	}
	spec := keySpec{orgID: orgID, projectID: req.ProjectID, name: name, source: p.AuthSource, createdBy: p.UserID, scopes: scopes}
	if req.ExpiresIn > 0 {
		spec.expiresAt = ptr(s.now().Add(time.Duration(req.ExpiresIn) * 24 * time.Hour))
	}
	var out *api.CreatedAPIKey
	err = s.db.Update(func(tx *store.Tx) error {
		if _, err := store.Organizations.Get(tx, orgID); err != nil {
			return apperr.NotFoundAs(err, "organization %s not found", orgID)
		}
		if req.ProjectID != "" {
			prj, err := store.Projects.Get(tx, req.ProjectID)
			// A preview database is stored as a project but is not one: a key is bound to a project only.
			if err != nil || prj.OrganizationID != orgID || prj.DeletedAt != nil || prj.PreviewOf != "" {
				return apperr.Invalid("project_id %s is not a project of this organization", req.ProjectID)
			}
		}
		k, plain, err := s.mintKey(tx, spec)
		if err != nil {
			return err
		}
		if err := s.host.Audit(tx, p, "api_key.create", orgID, req.ProjectID, map[string]any{"api_key_id": k.ID, "scopes": k.Scopes}); err != nil {
			return apperr.Internal(err, "audit")
		}
		out = &api.CreatedAPIKey{APIKey: s.apiKeyView(k), PlaintextAPIKey: plain}
		return nil
	})
	return out, err
}

// RevokeAPIKey revokes a key at once; revoking a revoked key answers revoked=false.
func (s *Service) RevokeAPIKey(ctx context.Context, p *authz.Principal, orgID, keyID string) (*api.Revoked, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	if err := p.RequireAdminRole("revoking an API key"); err != nil {
		return nil, err
	}
	out := &api.Revoked{}
	err := s.db.Update(func(tx *store.Tx) error {
		k, err := store.APIKeys.Get(tx, keyID)
		if errors.Is(err, store.ErrNotFound) || (err == nil && k.OrganizationID != orgID) {
			return apperr.NotFound("API key %s not found", keyID)
		}
		if err != nil {
			return apperr.Internal(err, "read key")
		}
		if k.RevokedAt != nil {
			return nil
		}
		k.RevokedAt = ptr(s.now())
		if err := store.APIKeys.Put(tx, k); err != nil {
			return apperr.Internal(err, "revoke key")
		}
		if err := s.host.RecordKeyRevocation(k.KeyHash); err != nil {
			return err
		}
		out.Revoked = true
		return s.host.Audit(tx, p, "api_key.revoke", orgID, k.ProjectID, map[string]any{"api_key_id": k.ID})
	})
	return out, err
}

// BootstrapOwner makes, in tx, the first start's owner of the organization orgID (a user with email and a
// generated password) and its admin key, with every scope (the root's EnsureBootstrap, which makes the
// organization, calls it); it returns the user, the password and the key's plaintext.
func (s *Service) BootstrapOwner(tx *store.Tx, orgID, email string) (*store.User, string, string, error) {
	password := ids.Secret(15)
	u, err := s.CreateUser(tx, email, "Owner", password, false,
		store.Membership{OrganizationID: orgID, Role: authz.RoleOwner})
	if err != nil {
		return nil, "", "", err
	}
	_, plain, err := s.mintKey(tx, keySpec{orgID: orgID, name: "bootstrap admin key", source: "bootstrap",
		createdBy: u.ID, scopes: scopeStrings(api.AllScopes)})
	if err != nil {
		return nil, "", "", err
	}
	return u, password, plain, nil
}
