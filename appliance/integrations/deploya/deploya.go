// Package deploya is the deploy_a provider: a Vercel-style hosting platform (docs/api-decisions.md,
// "Integrations"). It speaks Vercel's REST API: a project's environment variables per target
// (production, preview with an optional git branch, development), created with
// POST /v10/projects/{idOrName}/env?upsert=true, listed with GET /v9/projects/{idOrName}/env and deleted
// with DELETE /v9/projects/{idOrName}/env/{id}, scoped to a team by the teamId query parameter; its
// webhooks are signed with x-vercel-signature, the hex HMAC-SHA1 of the raw body under the integration's
// secret. It keeps no state and dials nothing itself: every call goes through provider.Env.HTTP.
package deploya

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/theappliance/appliance/appliance/integrations/provider"
)

// DefaultBaseURL is Vercel's API.
const DefaultBaseURL = "https://api.vercel.com"

// The targets of a Vercel environment variable.
const (
	TargetProduction  = "production"
	TargetPreview     = "preview"
	TargetDevelopment = "development"
)

// SignatureHeader carries the webhook's signature.
const SignatureHeader = "x-vercel-signature"

// Config is deploy_a's integration config (the PUT body's config), normalized by ValidateConfig.
type Config struct {
	// Targets receive the production settings (default production and preview; a branch's preview
	// variables are always target preview with that git branch).
	Targets []string `json:"targets"`
	// Variables names the environment variables pushed.
	Variables Variables `json:"variables"`
	// PreviewMode is the branches' previews' mode: clone (default: the project's data) or empty.
	PreviewMode string `json:"preview_mode"`
	// PreviewDatabases: a deployment of a non-production branch gets a preview database (default true).
	PreviewDatabases *bool `json:"preview_databases"`
	// DeletePreviewsOnClose: a closed branch deletes its preview (default true).
	DeletePreviewsOnClose *bool `json:"delete_previews_on_close"`
}

// Variables are the names of the environment variables pushed (the same object as the other platforms').
type Variables struct {
	Pooled string `json:"pooled"` // the pooled connection string (default DATABASE_URL)
	Direct string `json:"direct"` // the direct connection string (default DIRECT_URL)
	// CA receives the appliance CA's PEM (absent: DATABASE_CA_CERT, as Vercel's functions have no file
	// of it; "": none).
	CA *string `json:"ca"`
}

// Provider is deploy_a.
type Provider struct{}

var _ provider.Platform = Provider{}

// New returns deploy_a.
func New() provider.Platform { return Provider{} }

func (Provider) Name() string           { return provider.DeployA }
func (Provider) DefaultBaseURL() string { return DefaultBaseURL }

// ValidateConfig checks a config and fills in its defaults.
func (Provider) ValidateConfig(raw json.RawMessage) (json.RawMessage, error) {
	c, err := parseConfig(raw)
	if err != nil {
		return nil, err
	}
	return json.Marshal(c)
}

func parseConfig(raw json.RawMessage) (Config, error) {
	var c Config
	if len(bytes.TrimSpace(raw)) > 0 && string(bytes.TrimSpace(raw)) != "null" {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return c, fmt.Errorf("config: %w", err)
		}
	}
	if len(c.Targets) == 0 {
		c.Targets = []string{TargetProduction, TargetPreview}
	}
	for _, t := range c.Targets {
		if t != TargetProduction && t != TargetPreview && t != TargetDevelopment {
			return c, fmt.Errorf("config: targets: %q is not one of production, preview, development", t)
		}
	}
	slices.Sort(c.Targets)
	c.Targets = slices.Compact(c.Targets)
	v := &c.Variables
	if v.Pooled == "" {
		v.Pooled = "DATABASE_URL"
	}
	if v.Direct == "" {
		v.Direct = "DIRECT_URL"
	}
	if v.CA == nil {
		ca := "DATABASE_CA_CERT"
		v.CA = &ca
	}
	switch c.PreviewMode {
	case "":
		c.PreviewMode = "clone"
	case "clone", "empty":
	default:
		return c, fmt.Errorf("config: preview_mode: %q is not clone or empty", c.PreviewMode)
	}
	for field, name := range map[string]string{"variables.pooled": v.Pooled, "variables.direct": v.Direct, "variables.ca": *v.CA} {
		if name != "" && !provider.EnvName(name) {
			return c, fmt.Errorf("config: %s: %q is not an environment variable name (letters, digits, _)", field, name)
		}
	}
	if ca := *v.CA; v.Pooled == v.Direct || (ca != "" && (ca == v.Pooled || ca == v.Direct)) {
		return c, errors.New("config: the variable names must differ")
	}
	yes := true
	if c.PreviewDatabases == nil {
		c.PreviewDatabases = &yes
	}
	if c.DeletePreviewsOnClose == nil {
		c.DeletePreviewsOnClose = &yes
	}
	return c, nil
}

// vars are the names Push sets.
func (c Config) vars() []string {
	out := []string{c.Variables.Pooled, c.Variables.Direct}
	if c.Variables.CA != nil && *c.Variables.CA != "" {
		out = append(out, *c.Variables.CA)
	}
	return out
}

// call makes one API call; a 401/403 is provider.ErrCredentials.
func call(ctx context.Context, env provider.Env, method, path string, q url.Values, body, out any) error {
	base, err := provider.BaseURL(env, DefaultBaseURL)
	if err != nil {
		return fmt.Errorf("deploy_a: %w", err)
	}
	if q == nil {
		q = url.Values{}
	}
	if env.Credentials.TeamID != "" {
		q.Set("teamId", env.Credentials.TeamID)
	}
	u := base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("deploy_a: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+env.Credentials.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	client := env.HTTP
	if client == nil {
		return errors.New("deploy_a: no outbound client")
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("deploy_a %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return provider.ErrCredentials
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("deploy_a %s %s: %w", method, path, errNotFound)
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("deploy_a %s %s: status %d", method, path, resp.StatusCode)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("deploy_a %s %s: read the answer: %w", method, path, err)
		}
	}
	return nil
}

var errNotFound = errors.New("not found")

func projectPath(env provider.Env, version, rest string) (string, error) {
	id := env.Credentials.ExternalID
	if id == "" {
		return "", errors.New("deploy_a: no project id (deploy_a_project_id)")
	}
	return "/" + version + "/projects/" + url.PathEscape(id) + rest, nil
}

// Check reads the project with the token (GET /v9/projects/{idOrName}).
func (Provider) Check(ctx context.Context, env provider.Env) error {
	p, err := projectPath(env, "v9", "")
	if err != nil {
		return err
	}
	err = call(ctx, env, http.MethodGet, p, nil, nil, nil)
	if errors.Is(err, errNotFound) {
		return fmt.Errorf("deploy_a: the project %q does not exist for this token", env.Credentials.ExternalID)
	}
	return err
}

// envVar is one of Vercel's environment variables.
type envVar struct {
	ID        string   `json:"id,omitempty"`
	Key       string   `json:"key"`
	Value     string   `json:"value,omitempty"`
	Type      string   `json:"type,omitempty"`
	Target    []string `json:"target"`
	GitBranch string   `json:"gitBranch,omitempty"`
	Comment   string   `json:"comment,omitempty"`
}

// Push upserts the variables for the target: production's to the config's targets, a branch's to
// target preview with gitBranch.
func (Provider) Push(ctx context.Context, env provider.Env, target provider.Target, s provider.Settings) ([]string, error) {
	c, err := parseConfig(env.Config)
	if err != nil {
		return nil, err
	}
	p, err := projectPath(env, "v10", "/env")
	if err != nil {
		return nil, err
	}
	targets := c.Targets
	if target.Branch != "" {
		targets = []string{TargetPreview}
	}
	var body []envVar
	var pushed []string
	for _, k := range c.vars() {
		v, ok := s.Vars[k]
		if !ok {
			continue
		}
		body = append(body, envVar{Key: k, Value: v, Type: "encrypted", Target: targets, GitBranch: target.Branch,
			Comment: "set by the appliance's integration"})
		pushed = append(pushed, k)
	}
	if len(body) == 0 {
		return nil, errors.New("deploy_a: no variable to push")
	}
	if err := call(ctx, env, http.MethodPost, p, url.Values{"upsert": {"true"}}, body, nil); err != nil {
		return nil, err
	}
	return pushed, nil
}

// Remove deletes the variables Push set for the target (those of the config's names whose git branch is
// the target's); what is gone already is not an error.
func (Provider) Remove(ctx context.Context, env provider.Env, target provider.Target) error {
	c, err := parseConfig(env.Config)
	if err != nil {
		return err
	}
	p, err := projectPath(env, "v9", "/env")
	if err != nil {
		return err
	}
	var list struct {
		Envs []envVar `json:"envs"`
	}
	q := url.Values{}
	if target.Branch != "" {
		q.Set("gitBranch", target.Branch)
	}
	if err := call(ctx, env, http.MethodGet, p, q, nil, &list); err != nil {
		if errors.Is(err, errNotFound) {
			return nil
		}
		return err
	}
	names := c.vars()
	for _, e := range list.Envs {
		if !slices.Contains(names, e.Key) || e.GitBranch != target.Branch || e.ID == "" {
			continue
		}
		if err := call(ctx, env, http.MethodDelete, p+"/"+url.PathEscape(e.ID), nil, nil, nil); err != nil && !errors.Is(err, errNotFound) {
			return err
		}
	}
	return nil
}

// VerifyWebhook checks x-vercel-signature (hex HMAC-SHA1 of the body) and returns the event's id.
func (Provider) VerifyWebhook(env provider.Env, h http.Header, body []byte, _ time.Time) (string, error) {
	secret := env.Credentials.WebhookSecret
	got, err := hex.DecodeString(strings.TrimSpace(h.Get(SignatureHeader)))
	if secret == "" || err != nil || len(got) == 0 {
		return "", provider.ErrBadSignature
	}
	if !hmac.Equal(got, Sign([]byte(secret), body)) {
		return "", provider.ErrBadSignature
	}
	var ev struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID == "" {
		return "", fmt.Errorf("%w: the event has no id", provider.ErrBadSignature)
	}
	return ev.ID, nil
}

// Sign is the signature Vercel sends: HMAC-SHA1 of the body (hex-encode it for the header).
func Sign(secret, body []byte) []byte {
	m := hmac.New(sha1.New, secret)
	m.Write(body)
	return m.Sum(nil)
}

// Event is the part of a Vercel webhook event deploy_a reads.
type Event struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Payload struct {
		Target     *string `json:"target"`
		Deployment struct {
			ID   string `json:"id"`
			Meta struct {
				GithubCommitRef    string `json:"githubCommitRef"`
				GitlabCommitRef    string `json:"gitlabCommitRef"`
				BitbucketCommitRef string `json:"bitbucketCommitRef"`
			} `json:"meta"`
		} `json:"deployment"`
	} `json:"payload"`
}

// DeployEvent reads deployment.created and deployment.succeeded: the branch is the commit ref of the git
// provider, production when the target is production. Vercel sends no branch-deleted event: Closed is
// never set by deploy_a (docs/api-decisions.md).
func (Provider) DeployEvent(body []byte) (provider.DeployEvent, error) {
	var ev Event
	if err := json.Unmarshal(body, &ev); err != nil {
		return provider.DeployEvent{}, fmt.Errorf("deploy_a: read the event: %w", err)
	}
	if ev.Type != "deployment.created" && ev.Type != "deployment.succeeded" {
		return provider.DeployEvent{}, provider.ErrIgnored
	}
	m := ev.Payload.Deployment.Meta
	branch := m.GithubCommitRef
	if branch == "" {
		branch = m.GitlabCommitRef
	}
	if branch == "" {
		branch = m.BitbucketCommitRef
	}
	prod := ev.Payload.Target != nil && *ev.Payload.Target == TargetProduction
	if branch == "" && !prod {
		return provider.DeployEvent{}, provider.ErrIgnored // a deployment without git (the CLI's): no branch to name
	}
	return provider.DeployEvent{ID: ev.ID, Branch: branch, Production: prod}, nil
}
