package programapps

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

// IsServiceToken reports whether a presented credential is a service token by its form: svc_ and
// base32, never an API key's _live_.
func IsServiceToken(tok string) bool {
	return strings.HasPrefix(tok, api.ServiceTokenPrefix) && !strings.Contains(tok, "_live_")
}

// CreateServiceToken mints a service token; its plaintext is in the answer once, only its hash is kept.
func (s *Service) CreateServiceToken(ctx context.Context, p *authz.Principal, req *api.CreateServiceTokenRequest) (*api.CreatedServiceToken, error) {
	if err := p.RequireOperator("minting service tokens"); err != nil {
		return nil, err
	}
	name := strings.TrimSpace(req.Name)
	if err := s.host.CheckDisplayText("name", name, 1, 100); err != nil {
		return nil, err
	}
	plain := api.ServiceTokenPrefix + ids.Secret(20)
	now := s.now()
	t := &store.ServiceToken{ID: ids.New("svt"), Name: name, TokenHash: ids.Hash(plain), TokenPrefix: plain[:8],
		CreatedByUserID: p.UserID, CreatedAt: now}
	err := s.db.Update(func(tx *store.Tx) error {
		if err := store.ServiceTokens.Put(tx, t); err != nil {
			return apperr.Internal(err, "store service token")
		}
		return s.audit(tx, p, "service_token.create", map[string]any{"service_token_id": t.ID, "name": name})
	})
	if err != nil {
		return nil, err
	}
	return &api.CreatedServiceToken{ServiceToken: wireToken(t), PlaintextToken: plain}, nil
}

// ListServiceTokens lists every service token, newest first (revoked ones too).
func (s *Service) ListServiceTokens(ctx context.Context, p *authz.Principal) (*api.ServiceTokenList, error) {
	if err := p.RequireOperator("listing service tokens"); err != nil {
		return nil, err
	}
	out := &api.ServiceTokenList{ServiceTokens: []*api.ServiceToken{}}
	err := s.db.View(func(tx *store.Tx) error {
		all, err := store.ServiceTokens.All(tx, nil)
		if err != nil {
			return apperr.Internal(err, "list service tokens")
		}
		slices.SortFunc(all, func(a, b *store.ServiceToken) int { return b.CreatedAt.Compare(a.CreatedAt) })
		for _, t := range all {
			out.ServiceTokens = append(out.ServiceTokens, wireToken(t))
		}
		return nil
	})
	return out, err
}

// RevokeServiceToken revokes a service token: from the commit on it authenticates no more.
func (s *Service) RevokeServiceToken(ctx context.Context, p *authz.Principal, id string) (*api.ServiceTokenResponse, error) {
	if err := p.RequireOperator("revoking service tokens"); err != nil {
		return nil, err
	}
	var out *api.ServiceTokenResponse
	err := s.db.Update(func(tx *store.Tx) error {
		t, err := store.ServiceTokens.Get(tx, id)
		if err != nil {
			return apperr.NotFoundAs(err, "service token %s not found", id)
		}
		if t.RevokedAt != nil {
			return apperr.Conflict("service token %s is revoked already (at %s)", id, t.RevokedAt.Format(time.RFC3339))
		}
		t.RevokedAt = ptr(s.now())
		if err := store.ServiceTokens.Put(tx, t); err != nil {
			return apperr.Internal(err, "store service token")
		}
		out = &api.ServiceTokenResponse{ServiceToken: wireToken(t)}
		return s.audit(tx, p, "service_token.revoke", map[string]any{"service_token_id": t.ID, "name": t.Name})
	})
	return out, err
}

// Authenticate resolves a service token to its caller (authz.ServiceToken): a token unknown or revoked is
// a 401. Its last use is kept to the minute.
func (s *Service) Authenticate(ctx context.Context, tok string) (*authz.Principal, error) {
	if !IsServiceToken(tok) {
		return nil, apperr.Unauthenticated("invalid service token")
	}
	hash := ids.Hash(tok)
	var t *store.ServiceToken
	err := s.db.View(func(tx *store.Tx) error {
		var err error
		t, err = store.ServiceTokens.First(tx, store.ServiceTokensByHash, hash)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, apperr.Unauthenticated("invalid service token")
	}
	if err != nil {
		return nil, apperr.Internal(err, "read service token")
	}
	if t.RevokedAt != nil {
		return nil, apperr.Unauthenticated("service token has been revoked")
	}
	if now := s.now(); t.LastUsedAt == nil || now.Sub(*t.LastUsedAt) >= time.Minute {
		err := s.db.Update(func(tx *store.Tx) error {
			cur, err := store.ServiceTokens.Get(tx, t.ID)
			if err != nil {
				return apperr.Unauthenticated("invalid service token")
			}
			if cur.RevokedAt != nil {
				return apperr.Unauthenticated("service token has been revoked")
			}
			cur.LastUsedAt = ptr(now)
			return store.ServiceTokens.Put(tx, cur)
		})
		if err != nil {
			return nil, err
		}
	}
	return authz.ServiceToken(t.ID), nil
}

// audit writes an audit event under the platform organization.
func (s *Service) audit(tx *store.Tx, p *authz.Principal, action string, meta map[string]any) error {
	if err := s.host.Audit(tx, p, action, s.host.PlatformOrganization(tx), "", meta); err != nil {
		return apperr.Internal(err, "audit")
	}
	return nil
}
