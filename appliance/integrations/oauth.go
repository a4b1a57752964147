package integrations

import (
	"context"
	"crypto/hmac"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/appliance/outbound"
	"github.com/theappliance/appliance/store"
)

// deploy_a's OAuth endpoints (Vercel's integrations: the installation page and the token exchange).
const (
	DeployAAuthURL  = "https://vercel.com/integrations/%s/new"
	DeployATokenURL = "https://api.vercel.com/v2/oauth/access_token"
)

// stateMAC is the purpose of the OAuth states' signatures.
const stateMAC = "integrations oauth state"

// errBadState is the one answer of a forged, expired, reused or foreign state.
var errBadState = apperr.Invalid("the OAuth state is invalid, expired or already used: start the connection again")

// oauthConfig is the provider's OAuth client (a 409 when the operator configured none).
func (s *Service) oauthConfig(name string) (*oauth2.Config, error) {
	app, ok := s.cfg.OAuth[name]
	if !ok || app.ClientID == "" {
		return nil, apperr.Conflict("OAuth for %s is not configured on this appliance (up --integrations-oauth)", name)
	}
	auth, token := app.AuthURL, app.TokenURL
	if name == provider.DeployA {
		if auth == "" && app.Slug != "" {
			auth = fmt.Sprintf(DeployAAuthURL, url.PathEscape(app.Slug))
		}
		if token == "" {
			token = DeployATokenURL
		}
	}
	if auth == "" || token == "" {
		return nil, apperr.Conflict("OAuth for %s is not configured on this appliance: its authorize and token URLs are missing", name)
	}
	return &oauth2.Config{ClientID: app.ClientID, ClientSecret: app.ClientSecret, Scopes: app.Scopes,
		Endpoint:    oauth2.Endpoint{AuthURL: auth, TokenURL: token, AuthStyle: oauth2.AuthStyleInParams},
		RedirectURL: strings.TrimRight(s.cfg.APIURL, "/") + "/v1/integrations/" + name + "/oauth/callback"}, nil
}

// stateSig binds a state's nonce to the provider, the project and the user.
func (s *Service) stateSig(name, projectID, userID, nonce string) string {
	return base64.RawURLEncoding.EncodeToString(s.box.MAC(stateMAC, []byte(name+"\n"+projectID+"\n"+userID+"\n"+nonce)))
}

// OAuthStart is GET /v1/integrations/{provider}/oauth/start?project_id=: the provider's authorize URL with
// a state that is signed, single-use, valid 10 minutes and bound to the provider, the project and the
// caller.
func (s *Service) OAuthStart(ctx context.Context, p *authz.Principal, name, projectID string) (*api.OAuthStartResponse, error) {
	if _, err := s.providerOf(name); err != nil {
		return nil, err
	}
	if projectID == "" {
		return nil, apperr.Invalid("project_id is required")
	}
	conf, err := s.oauthConfig(name)
	if err != nil {
		return nil, err
	}
	kind, user := p.Actor()
	nonce := ids.Secret(24)
	err = s.db.Update(func(tx *store.Tx) error {
		prj, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		now := s.now()
		if err := store.OAuthStates.Put(tx, &store.OAuthState{ID: ids.Hash(nonce), Provider: name, ProjectID: prj.ID, UserID: user,
			ActorKind: kind, ExpiresAt: now.Add(StateTTL)}); err != nil {
			return apperr.Internal(err, "store the OAuth state")
		}
		return s.host.Audit(tx, p, "integration.oauth_start", prj.OrganizationID, prj.ID, map[string]any{"provider": name})
	})
	if err != nil {
		return nil, err
	}
	state := nonce + "." + s.stateSig(name, projectID, user, nonce)
	return &api.OAuthStartResponse{AuthorizeURL: conf.AuthCodeURL(state)}, nil
}

// OAuthCallback is GET /v1/integrations/{provider}/oauth/callback?code=&state= (unauthenticated: the
// state is the credential). It spends the state, exchanges the code at the provider's token URL, stores
// the tokens sealed, records the installation on the organization where that applies, and returns where
// the browser goes: the dashboard's integrations page of the project.
func (s *Service) OAuthCallback(ctx context.Context, name, code, state string) (string, error) {
	prov, err := s.providerOf(name)
	if err != nil {
		return "", err
	}
	nonce, sig, ok := strings.Cut(state, ".")
	if !ok || nonce == "" || code == "" {
		return "", errBadState
	}
	var st *store.OAuthState
	err = s.db.Update(func(tx *store.Tx) error {
		rec, err := store.OAuthStates.Get(tx, ids.Hash(nonce))
		if err != nil {
			return errBadState
		}
		if rec.Provider != name || rec.UsedAt != nil || !s.now().Before(rec.ExpiresAt) ||
			!hmac.Equal([]byte(sig), []byte(s.stateSig(name, rec.ProjectID, rec.UserID, nonce))) {
			return errBadState
		}
		now := s.now()
		rec.UsedAt = &now // single use, spent before the exchange
		st = rec
		return store.OAuthStates.Put(tx, rec)
	})
	if err != nil {
		return "", err
	}
	conf, err := s.oauthConfig(name)
	if err != nil {
		return "", err
	}
	tok, err := conf.Exchange(context.WithValue(ctx, oauth2.HTTPClient, s.client), code)
	if err != nil {
		s.log.Warn("integration OAuth exchange failed", "provider", name, "project", st.ProjectID, "err", err)
		var re *oauth2.RetrieveError
		if errors.As(err, &re) {
			return "", apperr.Invalid("%s refused the authorization code: start the connection again", name)
		}
		return "", apperr.Invalid("%s: %s", name, outbound.Public(err))
	}
	extra := func(k string) string { v, _ := tok.Extra(k).(string); return v }
	var job bool
	err = s.db.Update(func(tx *store.Tx) error {
		job = false // a run again starts over
		prj, err := store.Projects.Get(tx, st.ProjectID)
		if err != nil {
			return apperr.NotFoundAs(err, "project %s not found", st.ProjectID)
		}
		// The callback acts for who started the flow (the state binds them): audited as that user or key.
		who := &authz.Principal{AuthSource: authz.SourceSession, UserID: st.UserID, OrganizationID: prj.OrganizationID}
		if st.ActorKind == authz.ActorAPIKey {
			who = &authz.Principal{AuthSource: authz.SourceAPIKey, APIKeyID: st.UserID, OrganizationID: prj.OrganizationID}
		}
		rec, err := find(tx, prj.ID, name)
		if err != nil {
			return apperr.Internal(err, "read integration")
		}
		now := s.now()
		if rec == nil {
			cfg, err := prov.ValidateConfig(nil)
			if err != nil {
				return apperr.Internal(err, "default config")
			}
			rec = &store.Integration{ID: ids.New("int"), OrganizationID: prj.OrganizationID, ProjectID: prj.ID, Provider: name,
				Config: cfg, CreatedAt: now}
		} else if rec.State == api.IntegrationDisconnecting {
			return apperr.Conflict("the %s integration is being disconnected", name)
		}
		old, err := s.open(rec)
		if err != nil {
			return apperr.Internal(err, "open credentials")
		}
		c := sealed{Credentials: old.Credentials, RefreshToken: tok.RefreshToken, Expiry: tok.Expiry}
		c.Token = tok.AccessToken
		if t := extra("team_id"); t != "" {
			c.TeamID = t
		}
		if rec.Credentials, err = s.seal(c); err != nil {
			return apperr.Internal(err, "seal credentials")
		}
		if !tok.Expiry.IsZero() {
			e := tok.Expiry.UTC()
			rec.TokenExpiry = &e
		}
		rec.State, rec.LastError, rec.UpdatedAt = api.IntegrationPending, "", now
		if c.ExternalID != "" { // connected before: the new token is pushed with at once
			if _, err := s.enqueue(tx, rec, JobSync, rec.ID, syncPayload{IntegrationID: rec.ID}); err != nil {
				return err
			}
			job = true
		}
		if err := store.Integrations.Put(tx, rec); err != nil {
			return apperr.Internal(err, "store integration")
		}
		if err := s.recordInstallation(tx, prj.OrganizationID, name, extra); err != nil {
			return err
		}
		return s.host.Audit(tx, who, "integration.oauth_connect", prj.OrganizationID, prj.ID, map[string]any{"provider": name, "integration_id": rec.ID})
	})
	if err != nil {
		return "", err
	}
	if job {
		s.host.Notify()
	}
	return strings.TrimRight(s.cfg.APIURL, "/") + "/projects/" + url.PathEscape(st.ProjectID) + "/integrations?connected=" + url.QueryEscape(name), nil
}

// recordInstallation keeps the provider's installation on the organization: deploy_a's installation
// (Vercel's installation_id, else its configuration id) and edge_c's account.
func (s *Service) recordInstallation(tx *store.Tx, orgID, name string, extra func(string) string) error {
	var set func(*store.Organization) bool
	switch name {
	case provider.DeployA:
		id := extra("installation_id")
		if id == "" {
			id = extra("configuration_id")
		}
		set = func(o *store.Organization) bool { o.DeployAInstallationID = id; return id != "" }
	case provider.EdgeC:
		id := extra("account_id")
		set = func(o *store.Organization) bool { o.EdgeCAccountID = id; return id != "" }
	default:
		return nil
	}
	org, err := store.Organizations.Get(tx, orgID)
	if err != nil {
		return apperr.Internal(err, "read organization")
	}
	if !set(org) {
		return nil
	}
	org.UpdatedAt = s.now()
	if err := store.Organizations.Put(tx, org); err != nil {
		return apperr.Internal(err, "store organization")
	}
	return nil
}

// fresh refreshes an OAuth access token that expires within a minute (and stores the new one sealed).
func (s *Service) fresh(ctx context.Context, rec *store.Integration, c sealed) (sealed, error) {
	if c.RefreshToken == "" || c.Expiry.IsZero() || time.Until(c.Expiry) > time.Minute {
		return c, nil
	}
	conf, err := s.oauthConfig(rec.Provider)
	if err != nil {
		return c, err
	}
	// Only the refresh token: oauth2's token source returns a token it deems valid (more than 10 seconds
	// left) as it is, which would not refresh one expiring within our minute.
	old := &oauth2.Token{RefreshToken: c.RefreshToken}
	tok, err := conf.TokenSource(context.WithValue(ctx, oauth2.HTTPClient, s.client), old).Token()
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) {
			return c, provider.ErrCredentials
		}
		return c, err
	}
	c.Token, c.Expiry = tok.AccessToken, tok.Expiry
	if tok.RefreshToken != "" {
		c.RefreshToken = tok.RefreshToken
	}
	b, err := s.seal(c)
	if err != nil {
		return c, err
	}
	err = s.db.Update(func(tx *store.Tx) error {
		cur, err := store.Integrations.Get(tx, rec.ID)
		if err != nil {
			return err
		}
		e := tok.Expiry.UTC()
		cur.Credentials, cur.TokenExpiry = b, &e
		return store.Integrations.Put(tx, cur)
	})
	return c, err
}
