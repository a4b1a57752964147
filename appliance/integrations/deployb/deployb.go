// Package deployb is the deploy_b provider: a Netlify-style hosting platform, driven through Netlify's
// documented public API (https://open-api.netlify.com, the netlify/open-api repository's swagger.yml).
//
// The integration is bound to one site (Credentials.ExternalID, the site's id) with a personal access
// token or OAuth token (Credentials.Token, sent as a bearer token). The connection settings are the
// site's environment variables, kept in Netlify's account-level environment variable API scoped to the
// site (`/accounts/{account_id}/env?site_id=…`); the account is the site's (GET /sites/{site_id}).
// Production sets the values of the deploy contexts the config names (default production); a branch's
// preview sets the value of context `branch` with the branch as its context_parameter, so the values of
// other contexts and other branches are left as they are.
//
// Inbound events are Netlify's deploy notifications (outgoing webhooks), signed with a JWS in the
// X-Webhook-Signature header (webhook.go). Netlify sends no branch-deleted notification, so DeployEvent
// never reports Closed.
package deployb

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/theappliance/appliance/appliance/integrations/provider"
)

// DefaultBaseURL is Netlify's API.
const DefaultBaseURL = "https://api.netlify.com/api/v1"

// The deploy contexts a config may name for production pushes (Netlify's envVarValue contexts, without
// `all`, which would override the others, and `branch`, which is the previews').
var Contexts = []string{"production", "deploy-preview", "branch-deploy", "dev"}

// Config is deploy_b's integration config.
type Config struct {
	// Contexts are the deploy contexts a production push sets (default ["production"]).
	Contexts []string `json:"contexts"`
	// Variables names the environment variables.
	Variables Variables `json:"variables"`
	// PreviewDatabases: a branch's deploy gets a preview database and its variables (default true).
	PreviewDatabases *bool `json:"preview_databases"`
	// PreviewMode is the branches' previews' mode: clone (default: the project's data) or empty.
	PreviewMode string `json:"preview_mode"`
	// No delete_previews_on_close: Netlify reports no branch closed (docs/api-decisions.md), so a
	// branch's preview goes by its TTL or a DELETE of the preview.
}

// Variables are the names of the environment variables pushed.
type Variables = provider.Variables

// ParseConfig reads a stored (or PUT) config and fills in its defaults; a bad one is an error naming
// the field.
func ParseConfig(raw json.RawMessage) (Config, error) {
	var c Config
	if len(bytes.TrimSpace(raw)) > 0 && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return Config{}, fmt.Errorf("deploy_b config: %w", err)
		}
		if dec.More() {
			return Config{}, errors.New("deploy_b config: trailing data after the object")
		}
	}
	if len(c.Contexts) == 0 {
		c.Contexts = []string{"production"}
	}
	var seen []string
	for i, ctx := range c.Contexts {
		if !slices.Contains(Contexts, ctx) {
			return Config{}, fmt.Errorf("deploy_b config: contexts[%d]: %q is not a deploy context (one of %s)", i, ctx, strings.Join(Contexts, ", "))
		}
		if !slices.Contains(seen, ctx) {
			seen = append(seen, ctx)
		}
	}
	c.Contexts = seen
	if c.PreviewDatabases == nil {
		yes := true
		c.PreviewDatabases = &yes
	}
	switch c.PreviewMode {
	case "":
		c.PreviewMode = "clone"
	case "clone", "empty":
	default:
		return Config{}, fmt.Errorf("deploy_b config: preview_mode: %q is not clone or empty", c.PreviewMode)
	}
	if err := c.Variables.Check("deploy_b config"); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Provider is deploy_b.
type Provider struct{}

var _ provider.Platform = Provider{}

// New returns deploy_b.
func New() provider.Platform { return Provider{} }

// Name is deploy_b.
func (Provider) Name() string { return provider.DeployB }

// DefaultBaseURL is Netlify's API.
func (Provider) DefaultBaseURL() string { return DefaultBaseURL }

// ValidateConfig checks and normalizes a config.
func (Provider) ValidateConfig(raw json.RawMessage) (json.RawMessage, error) {
	c, err := ParseConfig(raw)
	if err != nil {
		return nil, err
	}
	return json.Marshal(c)
}

// Check reads the site with the token: a refused token, or a site the token cannot see, is
// provider.ErrCredentials.
func (Provider) Check(ctx context.Context, env provider.Env) error {
	c, err := newClient(env)
	if err != nil {
		return err
	}
	if _, err := c.site(ctx); err != nil {
		return err
	}
	return nil
}

// envValue is Netlify's envVarValue.
type envValue struct {
	ID               string `json:"id,omitempty"`
	Value            string `json:"value"`
	Context          string `json:"context"`
	ContextParameter string `json:"context_parameter,omitempty"`
}

// envVar is Netlify's envVar.
type envVar struct {
	Key    string     `json:"key"`
	Values []envValue `json:"values"`
}

// slot is one value's place: a context and, for `branch`, the branch.
type slot struct{ context, param string }

func (s slot) of(v envValue) bool { return v.Context == s.context && v.ContextParameter == s.param }

func slots(cfg Config, t provider.Target) []slot {
	if t.Branch != "" {
		return []slot{{"branch", t.Branch}}
	}
	out := make([]slot, 0, len(cfg.Contexts))
	for _, c := range cfg.Contexts {
		out = append(out, slot{c, ""})
	}
	return out
}

// Push sets the target's values of every variable in s.Vars: a variable the site lacks is created with
// them; an existing one gets each value that differs set (setEnvVarValue), its other values kept.
func (Provider) Push(ctx context.Context, env provider.Env, t provider.Target, s provider.Settings) ([]string, error) {
	cfg, err := ParseConfig(env.Config)
	if err != nil {
		return nil, err
	}
	c, err := newClient(env)
	if err != nil {
		return nil, err
	}
	acct, err := c.account(ctx)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(s.Vars))
	for k, v := range s.Vars {
		if v == "" {
			continue
		}
		if !provider.EnvName(k) {
			return nil, fmt.Errorf("deploy_b: %q is not an environment variable name", k)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := slots(cfg, t)
	var pushed []string
	for _, k := range keys {
		val := s.Vars[k]
		cur, found, err := c.envVar(ctx, acct, k)
		if err != nil {
			return pushed, err
		}
		if !found {
			v := envVar{Key: k}
			for _, sl := range want {
				v.Values = append(v.Values, envValue{Value: val, Context: sl.context, ContextParameter: sl.param})
			}
			if _, err := c.call(ctx, "create variable "+k, http.MethodPost, c.envPath(acct), c.siteQuery(), []envVar{v}, nil, http.StatusCreated, http.StatusOK); err != nil {
				return pushed, err
			}
			pushed = append(pushed, k)
			continue
		}
		for _, sl := range want {
			i := slices.IndexFunc(cur.Values, sl.of)
			if i >= 0 && cur.Values[i].Value == val {
				continue
			}
			body := envValue{Value: val, Context: sl.context, ContextParameter: sl.param}
			if _, err := c.call(ctx, "set variable "+k, http.MethodPatch, c.envPath(acct, k), c.siteQuery(), body, nil, http.StatusCreated, http.StatusOK); err != nil {
				return pushed, err
			}
		}
		pushed = append(pushed, k)
	}
	return pushed, nil
}

// Remove deletes the target's values of the config's variables; a variable left with no value is
// deleted whole. What is already gone is not an error.
func (Provider) Remove(ctx context.Context, env provider.Env, t provider.Target) error {
	cfg, err := ParseConfig(env.Config)
	if err != nil {
		return err
	}
	c, err := newClient(env)
	if err != nil {
		return err
	}
	acct, err := c.account(ctx)
	if err != nil {
		return err
	}
	want := slots(cfg, t)
	for _, k := range cfg.Variables.Names() {
		cur, found, err := c.envVar(ctx, acct, k)
		if err != nil {
			return err
		}
		if !found {
			continue
		}
		var gone []envValue
		for _, v := range cur.Values {
			if slices.ContainsFunc(want, func(s slot) bool { return s.of(v) }) {
				gone = append(gone, v)
			}
		}
		if len(gone) == 0 {
			continue
		}
		if len(gone) == len(cur.Values) {
			if _, err := c.call(ctx, "delete variable "+k, http.MethodDelete, c.envPath(acct, k), c.siteQuery(), nil, nil, http.StatusNoContent, http.StatusOK, http.StatusNotFound); err != nil {
				return err
			}
			continue
		}
		for _, v := range gone {
			if v.ID == "" {
				return fmt.Errorf("deploy_b: variable %s: a value without an id", k)
			}
			if _, err := c.call(ctx, "delete a value of "+k, http.MethodDelete, c.envPath(acct, k, "value", v.ID), c.siteQuery(), nil, nil, http.StatusNoContent, http.StatusOK, http.StatusNotFound); err != nil {
				return err
			}
		}
	}
	return nil
}

// client is one call's API client.
type client struct {
	http   *http.Client
	base   string
	token  string
	siteID string
}

func newClient(env provider.Env) (*client, error) {
	if env.HTTP == nil {
		return nil, errors.New("deploy_b: no http client")
	}
	if env.Credentials.Token == "" {
		return nil, fmt.Errorf("deploy_b: no token: %w", provider.ErrCredentials)
	}
	if env.Credentials.ExternalID == "" {
		return nil, fmt.Errorf("deploy_b: no site id (external_id): %w", provider.ErrCredentials)
	}
	base, err := provider.BaseURL(env, DefaultBaseURL)
	if err != nil {
		return nil, fmt.Errorf("deploy_b: %w", err)
	}
	return &client{http: env.HTTP, base: base, token: env.Credentials.Token, siteID: env.Credentials.ExternalID}, nil
}

type siteInfo struct {
	ID          string `json:"id"`
	AccountID   string `json:"account_id"`
	AccountSlug string `json:"account_slug"`
}

func (c *client) site(ctx context.Context) (siteInfo, error) {
	var s siteInfo
	status, err := c.call(ctx, "read site", http.MethodGet, "/sites/"+url.PathEscape(c.siteID), nil, nil, &s, http.StatusOK, http.StatusNotFound)
	if err != nil {
		return siteInfo{}, err
	}
	if status == http.StatusNotFound {
		return siteInfo{}, fmt.Errorf("deploy_b: the site is not found or not visible to the token: %w", provider.ErrCredentials)
	}
	return s, nil
}

// account is the site's account, as the env API's path takes it (its id; the slug, which the API
// accepts too and the netlify CLI uses, when the id is missing).
func (c *client) account(ctx context.Context) (string, error) {
	s, err := c.site(ctx)
	if err != nil {
		return "", err
	}
	if s.AccountID != "" {
		return s.AccountID, nil
	}
	if s.AccountSlug != "" {
		return s.AccountSlug, nil
	}
	return "", errors.New("deploy_b: the site names no account")
}

func (c *client) envPath(acct string, rest ...string) string {
	p := "/accounts/" + url.PathEscape(acct) + "/env"
	for _, r := range rest {
		p += "/" + url.PathEscape(r)
	}
	return p
}

func (c *client) siteQuery() url.Values { return url.Values{"site_id": {c.siteID}} }

func (c *client) envVar(ctx context.Context, acct, key string) (envVar, bool, error) {
	var v envVar
	status, err := c.call(ctx, "read variable "+key, http.MethodGet, c.envPath(acct, key), c.siteQuery(), nil, &v, http.StatusOK, http.StatusNotFound)
	if err != nil || status == http.StatusNotFound {
		return envVar{}, false, err
	}
	return v, true, nil
}

// apiError is Netlify's error body.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

const maxBody = 4 << 20

// call makes one request; an answer whose status is not in ok is an error (401 and 403:
// provider.ErrCredentials) naming the operation, the status and Netlify's error code, nothing else.
func (c *client) call(ctx context.Context, op, method, path string, q url.Values, in, out any, ok ...int) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("deploy_b: %s: %w", op, err)
		}
		body = bytes.NewReader(b)
	}
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return 0, fmt.Errorf("deploy_b: %s: %w", op, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("deploy_b: %s: %w", op, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, fmt.Errorf("deploy_b: %s: reading the answer: %w", op, err)
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		return resp.StatusCode, fmt.Errorf("deploy_b: %s: status %d: %w", op, resp.StatusCode, provider.ErrCredentials)
	}
	if !slices.Contains(ok, resp.StatusCode) {
		var e apiError
		_ = json.Unmarshal(raw, &e)
		if e.Code != 0 {
			return resp.StatusCode, fmt.Errorf("deploy_b: %s: status %d (code %d)", op, resp.StatusCode, e.Code)
		}
		return resp.StatusCode, fmt.Errorf("deploy_b: %s: status %d", op, resp.StatusCode)
	}
	if out != nil && resp.StatusCode >= 200 && resp.StatusCode < 300 && len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("deploy_b: %s: the answer is not the documented json", op)
		}
	}
	return resp.StatusCode, nil
}
