// Package edgec is the edge_c provider: a Cloudflare-style edge platform, driven through Cloudflare's
// documented API v4 (https://developers.cloudflare.com/api/).
//
// The integration is bound to one account (Credentials.ExternalID, the account id) with an API token
// (Credentials.Token, a bearer token). The connection reaches the edge one of two ways (the config's
// mode):
//   - hyperdrive (default): a Hyperdrive configuration (/accounts/{account_id}/hyperdrive/configs) whose
//     origin is the direct connection (host, port, database, user, password, scheme), named after the
//     target; a Worker binds it by its id. Hyperdrive dials the origin from Cloudflare's network: the
//     host must be publicly reachable, and an address that cannot be (loopback, private, link-local,
//     localhost) is refused here with a clear error. Hyperdrive verifies the server as the connection
//     strings do (sslmode verify-full) against the appliance's CA (Settings.CACert), uploaded once to the
//     account as an mTLS CA certificate (/accounts/{account_id}/mtls_certificates) named
//     "<name>-ca-<hash of the CA>" and found again by that name; the configuration's mtls names it. A
//     certificate of that name no configuration uses any more (a CA replaced, the last target removed)
//     is deleted.
//   - worker_secret: the variables (DATABASE_URL, DIRECT_URL…) as secrets of one Worker script
//     (/accounts/{account_id}/workers/scripts/{script_name}/secrets). A script's secrets are the
//     script's, not a branch's: a branch target is refused.
//
// Answers are Cloudflare's envelope {success, errors: [{code, message}], result}; 401, 403 and the
// authentication error code 10000 are provider.ErrCredentials. Cloudflare sends no webhooks.
package edgec

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/theappliance/appliance/appliance/integrations/provider"
)

// DefaultBaseURL is Cloudflare's API v4.
const DefaultBaseURL = "https://api.cloudflare.com/client/v4"

// The modes.
const (
	ModeHyperdrive   = "hyperdrive"
	ModeWorkerSecret = "worker_secret"
)

// Config is edge_c's integration config.
type Config struct {
	// Mode is hyperdrive (default) or worker_secret.
	Mode string `json:"mode"`
	// Name is the Hyperdrive configurations' name prefix (default "appliance"): production's is
	// "<name>-production", a branch's "<name>-preview-<branch>" (lower case, [a-z0-9-], shortened with a
	// hash when long).
	Name string `json:"name"`
	// Script is the Worker script whose secrets worker_secret sets (required there).
	Script string `json:"script"`
	// Variables names the secrets worker_secret sets.
	Variables Variables `json:"variables"`
}

// Variables are the secrets' names.
type Variables = provider.Variables

var (
	configName = regexp.MustCompile(`^[a-z0-9]([a-z0-9_-]{0,30}[a-z0-9])?$`)
	scriptName = regexp.MustCompile(`^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$`)
)

// ParseConfig reads a stored (or PUT) config and fills in its defaults; a bad one is an error naming
// the field.
func ParseConfig(raw json.RawMessage) (Config, error) {
	var c Config
	if t := bytes.TrimSpace(raw); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return Config{}, fmt.Errorf("edge_c config: %w", err)
		}
		if dec.More() {
			return Config{}, errors.New("edge_c config: trailing data after the object")
		}
	}
	switch c.Mode {
	case "":
		c.Mode = ModeHyperdrive
	case ModeHyperdrive, ModeWorkerSecret:
	default:
		return Config{}, fmt.Errorf("edge_c config: mode: %q is not hyperdrive or worker_secret", c.Mode)
	}
	if c.Name == "" {
		c.Name = "appliance"
	}
	if !configName.MatchString(c.Name) {
		return Config{}, fmt.Errorf("edge_c config: name: %q is not a name (1 to 32 of a-z, 0-9, - and _, starting and ending with a letter or digit)", c.Name)
	}
	switch {
	case c.Mode == ModeWorkerSecret && c.Script == "":
		return Config{}, errors.New("edge_c config: script: required with mode worker_secret")
	case c.Script != "" && !scriptName.MatchString(c.Script):
		return Config{}, fmt.Errorf("edge_c config: script: %q is not a Worker script name (a-z, 0-9, - and _, at most 63)", c.Script)
	}
	if err := c.Variables.Check("edge_c config"); err != nil {
		return Config{}, err
	}
	return c, nil
}

// HyperdriveName is the Hyperdrive configuration's name for a target.
func (c Config) HyperdriveName(t provider.Target) string {
	if t.Branch == "" {
		return c.Name + "-production"
	}
	return c.Name + "-preview-" + slug(t.Branch, 63-len(c.Name)-len("-preview-"))
}

// slug lowers a branch to [a-z0-9-], at most max long (a hash of the branch replacing the end when
// shortened or changed, so two branches never share a name).
func slug(branch string, max int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(branch) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	s := strings.Trim(b.String(), "-")
	if s == branch && len(s) <= max {
		return s
	}
	sum := sha256.Sum256([]byte(branch))
	h := hex.EncodeToString(sum[:4])
	if len(s) > max-len(h)-1 {
		s = strings.TrimRight(s[:max-len(h)-1], "-")
	}
	if s == "" {
		return h
	}
	return s + "-" + h
}

// Provider is edge_c.
type Provider struct{}

var _ provider.Platform = Provider{}

// New returns edge_c.
func New() provider.Platform { return Provider{} }

// Name is edge_c.
func (Provider) Name() string { return provider.EdgeC }

// DefaultBaseURL is Cloudflare's API v4.
func (Provider) DefaultBaseURL() string { return DefaultBaseURL }

// ValidateConfig checks and normalizes a config.
func (Provider) ValidateConfig(raw json.RawMessage) (json.RawMessage, error) {
	c, err := ParseConfig(raw)
	if err != nil {
		return nil, err
	}
	return json.Marshal(c)
}

// VerifyWebhook: Cloudflare sends no webhooks for these resources.
func (Provider) VerifyWebhook(provider.Env, http.Header, []byte, time.Time) (string, error) {
	return "", provider.ErrNoWebhooks
}

// DeployEvent: there are none.
func (Provider) DeployEvent([]byte) (provider.DeployEvent, error) {
	return provider.DeployEvent{}, provider.ErrIgnored
}

// Check verifies the token (a user's token at /user/tokens/verify, else an account-owned one at
// /accounts/{account_id}/tokens/verify; it must be active), then reads what the mode writes in the
// account: its Hyperdrive configurations, or the script's secrets.
func (Provider) Check(ctx context.Context, env provider.Env) error {
	cfg, err := ParseConfig(env.Config)
	if err != nil {
		return err
	}
	c, err := newClient(env)
	if err != nil {
		return err
	}
	var tok struct {
		Status string `json:"status"`
	}
	if _, err := c.call(ctx, "verify token", http.MethodGet, "/user/tokens/verify", nil, &tok, http.StatusOK); err != nil {
		if !errors.Is(err, provider.ErrCredentials) {
			return err
		}
		if _, err := c.call(ctx, "verify account token", http.MethodGet, c.acct("tokens", "verify"), nil, &tok, http.StatusOK); err != nil {
			return err
		}
	}
	if tok.Status != "active" {
		return fmt.Errorf("edge_c: the token is %s, not active: %w", strconv.Quote(tok.Status), provider.ErrCredentials)
	}
	if cfg.Mode == ModeWorkerSecret {
		status, err := c.call(ctx, "list secrets", http.MethodGet, c.acct("workers", "scripts", cfg.Script, "secrets"), nil, nil, http.StatusOK, http.StatusNotFound)
		if err != nil {
			return err
		}
		if status == http.StatusNotFound {
			return fmt.Errorf("edge_c: the worker script %q is not in the account", cfg.Script)
		}
		return nil
	}
	if _, err = c.listConfigs(ctx); err != nil {
		return err
	}
	// Push uploads the CA: a token without "SSL and Certificates" is refused now, not at the push.
	_, err = c.listCerts(ctx)
	return err
}

// Push sets the target's connection: a Hyperdrive configuration created or updated from s.Direct, or
// the variables as the script's secrets.
func (Provider) Push(ctx context.Context, env provider.Env, t provider.Target, s provider.Settings) ([]string, error) {
	cfg, err := ParseConfig(env.Config)
	if err != nil {
		return nil, err
	}
	c, err := newClient(env)
	if err != nil {
		return nil, err
	}
	if cfg.Mode == ModeWorkerSecret {
		if t.Branch != "" {
			return nil, provider.Unusable("edge_c: a worker script's secrets have no per-branch values: worker_secret pushes production only")
		}
		keys := make([]string, 0, len(s.Vars))
		for k, v := range s.Vars {
			if v == "" {
				continue
			}
			if !provider.EnvName(k) {
				return nil, fmt.Errorf("edge_c: %q is not a variable name", k)
			}
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var pushed []string
		for _, k := range keys {
			body := map[string]string{"name": k, "text": s.Vars[k], "type": "secret_text"}
			if _, err := c.call(ctx, "put secret "+k, http.MethodPut, c.acct("workers", "scripts", cfg.Script, "secrets"), body, nil, http.StatusOK, http.StatusCreated); err != nil {
				return pushed, err
			}
			pushed = append(pushed, k)
		}
		return pushed, nil
	}

	o, err := originOf(s.Direct)
	if err != nil {
		return nil, err
	}
	caName, err := cfg.caName(s.CACert)
	if err != nil {
		return nil, err
	}
	caID, err := c.ensureCA(ctx, caName, s.CACert)
	if err != nil {
		return nil, err
	}
	name := cfg.HyperdriveName(t)
	existing, err := c.findConfig(ctx, name)
	if err != nil {
		return nil, err
	}
	body := hyperdrive{Name: name, Origin: o, MTLS: &mtls{CACertificateID: caID, SSLMode: "verify-full"}}
	if existing == nil {
		_, err = c.call(ctx, "create hyperdrive config", http.MethodPost, c.acct("hyperdrive", "configs"), body, nil, http.StatusOK, http.StatusCreated)
	} else {
		_, err = c.call(ctx, "update hyperdrive config", http.MethodPut, c.acct("hyperdrive", "configs", existing.ID), body, nil, http.StatusOK)
	}
	if err != nil {
		return nil, err
	}
	// A CA this one replaced goes once no configuration names it (best effort: the push is done; another
	// push or the last remove sweeps again).
	_ = c.sweepCAs(ctx, cfg, caName)
	return []string{name}, nil
}

// Remove deletes the target's Hyperdrive configuration (found by name), then the CA certificates it
// uploaded that no configuration names any more (after the last target's: all of them); or the config's
// secrets from the script (production's only: they are the script's).
func (Provider) Remove(ctx context.Context, env provider.Env, t provider.Target) error {
	cfg, err := ParseConfig(env.Config)
	if err != nil {
		return err
	}
	c, err := newClient(env)
	if err != nil {
		return err
	}
	if cfg.Mode == ModeWorkerSecret {
		if t.Branch != "" {
			return nil // a branch never had secrets of its own
		}
		for _, k := range cfg.Variables.Names() {
			if _, err := c.call(ctx, "delete secret "+k, http.MethodDelete, c.acct("workers", "scripts", cfg.Script, "secrets", k), nil, nil, http.StatusOK, http.StatusNoContent, http.StatusNotFound); err != nil {
				return err
			}
		}
		return nil
	}
	existing, err := c.findConfig(ctx, cfg.HyperdriveName(t))
	if err != nil {
		return err
	}
	if existing != nil {
		if _, err := c.call(ctx, "delete hyperdrive config", http.MethodDelete, c.acct("hyperdrive", "configs", existing.ID), nil, nil, http.StatusOK, http.StatusNoContent, http.StatusNotFound); err != nil {
			return err
		}
	}
	return c.sweepCAs(ctx, cfg, "")
}

// origin is a Hyperdrive configuration's origin.
type origin struct {
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Database string `json:"database"`
	User     string `json:"user"`
	Password string `json:"password,omitempty"`
	Scheme   string `json:"scheme"`
}

// mtls is a Hyperdrive configuration's TLS to its origin: the mode and the CA certificate (an uploaded
// mTLS certificate's id) the server's certificate must chain to.
type mtls struct {
	CACertificateID string `json:"ca_certificate_id,omitempty"`
	SSLMode         string `json:"sslmode,omitempty"`
}

// hyperdrive is a Hyperdrive configuration.
type hyperdrive struct {
	ID     string `json:"id,omitempty"`
	Name   string `json:"name"`
	Origin origin `json:"origin"`
	MTLS   *mtls  `json:"mtls,omitempty"`
}

// mtlsCert is an mTLS certificate of the account, as listed (the PEM is not read back).
type mtlsCert struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	CA   bool   `json:"ca"`
}

// caName is the name of the CA certificate edge_c uploads for the config: "<name>-ca-" and 16 hex digits
// of the SHA-256 of the certificates' DER, so a replaced CA gets a certificate of its own. A PEM that
// holds no certificate is an error.
func (c Config) caName(caPEM string) (string, error) {
	h := sha256.New()
	n := 0
	for rest := []byte(caPEM); ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return "", fmt.Errorf("edge_c: the appliance's CA certificate: %w", err)
		}
		h.Write(b.Bytes)
		n++
	}
	if n == 0 {
		return "", errors.New("edge_c: no CA certificate to verify the server with (hyperdrive connects with sslmode verify-full)")
	}
	return c.Name + "-ca-" + hex.EncodeToString(h.Sum(nil)[:8]), nil
}

// isCAName: a name caName gives for the config.
func (c Config) isCAName(name string) bool {
	h, ok := strings.CutPrefix(name, c.Name+"-ca-")
	if !ok || len(h) != 16 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil && strings.ToLower(h) == h
}

// originOf splits a postgres:// connection string into Hyperdrive's origin fields; its host must be
// one Cloudflare's network can reach.
func originOf(direct string) (origin, error) {
	if direct == "" {
		return origin{}, errors.New("edge_c: no direct connection string to push")
	}
	u, err := url.Parse(direct)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return origin{}, errors.New("edge_c: the direct connection string is not a postgres:// url")
	}
	o := origin{Host: u.Hostname(), Port: 5432, Database: strings.TrimPrefix(u.Path, "/"), User: u.User.Username(), Scheme: u.Scheme}
	o.Password, _ = u.User.Password()
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return origin{}, errors.New("edge_c: the direct connection string's port is not a port")
		}
		o.Port = n
	}
	if o.Host == "" || o.Database == "" || o.User == "" || o.Password == "" {
		return origin{}, errors.New("edge_c: the direct connection string lacks a host, database, user or password")
	}
	if !publicHost(o.Host) {
		return origin{}, provider.Unusable("edge_c: hyperdrive connects from Cloudflare's network and cannot reach %s: give the appliance a public host name for its connection strings, or use mode worker_secret", o.Host)
	}
	return o, nil
}

// publicHost: a name other than localhost, or an address of the public internet.
func publicHost(h string) bool {
	if strings.EqualFold(h, "localhost") || strings.HasSuffix(strings.ToLower(h), ".localhost") {
		return false
	}
	a, err := netip.ParseAddr(h)
	if err != nil {
		return net.ParseIP(h) == nil // a name
	}
	a = a.Unmap()
	return !(a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsUnspecified() || a.IsMulticast() ||
		netip.MustParsePrefix("100.64.0.0/10").Contains(a))
}

// client is one call's API client.
type client struct {
	http    *http.Client
	base    string
	token   string
	account string
}

func newClient(env provider.Env) (*client, error) {
	if env.HTTP == nil {
		return nil, errors.New("edge_c: no http client")
	}
	if env.Credentials.Token == "" {
		return nil, fmt.Errorf("edge_c: no api token: %w", provider.ErrCredentials)
	}
	if env.Credentials.ExternalID == "" {
		return nil, fmt.Errorf("edge_c: no account id (external_id): %w", provider.ErrCredentials)
	}
	base, err := provider.BaseURL(env, DefaultBaseURL)
	if err != nil {
		return nil, fmt.Errorf("edge_c: %w", err)
	}
	return &client{http: env.HTTP, base: base, token: env.Credentials.Token, account: env.Credentials.ExternalID}, nil
}

// acct is a path under the account, each segment escaped.
func (c *client) acct(rest ...string) string {
	p := "/accounts/" + url.PathEscape(c.account)
	for _, r := range rest {
		p += "/" + url.PathEscape(r)
	}
	return p
}

func (c *client) listConfigs(ctx context.Context) ([]hyperdrive, error) {
	var list []hyperdrive
	if _, err := c.call(ctx, "list hyperdrive configs", http.MethodGet, c.acct("hyperdrive", "configs"), nil, &list, http.StatusOK); err != nil {
		return nil, err
	}
	return list, nil
}

func (c *client) listCerts(ctx context.Context) ([]mtlsCert, error) {
	var list []mtlsCert
	if _, err := c.call(ctx, "list mtls certificates", http.MethodGet, c.acct("mtls_certificates"), nil, &list, http.StatusOK); err != nil {
		return nil, err
	}
	return list, nil
}

// ensureCA is the id of the account's CA certificate named name, uploaded (ca: true) when there is none.
func (c *client) ensureCA(ctx context.Context, name, caPEM string) (string, error) {
	list, err := c.listCerts(ctx)
	if err != nil {
		return "", err
	}
	for _, m := range list {
		if m.Name == name && m.CA && m.ID != "" {
			return m.ID, nil
		}
	}
	var up mtlsCert
	body := map[string]any{"ca": true, "certificates": caPEM, "name": name}
	if _, err := c.call(ctx, "upload ca certificate", http.MethodPost, c.acct("mtls_certificates"), body, &up, http.StatusOK, http.StatusCreated); err != nil {
		return "", err
	}
	if up.ID == "" {
		return "", errors.New("edge_c: upload ca certificate: the answer has no id")
	}
	return up.ID, nil
}

// sweepCAs deletes the CA certificates edge_c uploaded for the config (named by caName) but keep that no
// Hyperdrive configuration of the account names; Cloudflare refuses to delete one in use anyway.
func (c *client) sweepCAs(ctx context.Context, cfg Config, keep string) error {
	certs, err := c.listCerts(ctx)
	if err != nil {
		return err
	}
	var ours []mtlsCert
	for _, m := range certs {
		if m.Name != keep && m.CA && m.ID != "" && cfg.isCAName(m.Name) {
			ours = append(ours, m)
		}
	}
	if len(ours) == 0 {
		return nil
	}
	configs, err := c.listConfigs(ctx)
	if err != nil {
		return err
	}
	for _, m := range ours {
		if slices.ContainsFunc(configs, func(h hyperdrive) bool { return h.MTLS != nil && h.MTLS.CACertificateID == m.ID }) {
			continue
		}
		if _, err := c.call(ctx, "delete ca certificate", http.MethodDelete, c.acct("mtls_certificates", m.ID), nil, nil, http.StatusOK, http.StatusNoContent, http.StatusNotFound); err != nil {
			return err
		}
	}
	return nil
}

func (c *client) findConfig(ctx context.Context, name string) (*hyperdrive, error) {
	list, err := c.listConfigs(ctx)
	if err != nil {
		return nil, err
	}
	for i := range list {
		if list[i].Name == name {
			if list[i].ID == "" {
				return nil, fmt.Errorf("edge_c: hyperdrive config %s has no id", name)
			}
			return &list[i], nil
		}
	}
	return nil, nil
}

// envelope is Cloudflare's answer.
type envelope struct {
	Success bool `json:"success"`
	Errors  []struct {
		Code int `json:"code"`
	} `json:"errors"`
	Result json.RawMessage `json:"result"`
}

// codeAuth is Cloudflare's "Authentication error".
const codeAuth = 10000

const maxBody = 4 << 20

// call makes one request and reads the envelope's result into out. An answer whose status is not in ok,
// or a 2xx that is not a success, is an error naming the operation, the status and Cloudflare's first
// error code, nothing else; 401, 403 and code 10000 are provider.ErrCredentials.
func (c *client) call(ctx context.Context, op, method, path string, in, out any, ok ...int) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("edge_c: %s: %w", op, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return 0, fmt.Errorf("edge_c: %s: %w", op, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("edge_c: %s: %w", op, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, fmt.Errorf("edge_c: %s: reading the answer: %w", op, err)
	}
	var env envelope
	_ = json.Unmarshal(raw, &env)
	code := 0
	if len(env.Errors) > 0 {
		code = env.Errors[0].Code
	}
	auth := slices.ContainsFunc(env.Errors, func(e struct {
		Code int `json:"code"`
	}) bool {
		return e.Code == codeAuth
	})
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden || auth {
		return resp.StatusCode, fmt.Errorf("edge_c: %s: status %d%s: %w", op, resp.StatusCode, codeText(code), provider.ErrCredentials)
	}
	if !slices.Contains(ok, resp.StatusCode) {
		return resp.StatusCode, fmt.Errorf("edge_c: %s: status %d%s", op, resp.StatusCode, codeText(code))
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if !env.Success && len(bytes.TrimSpace(raw)) > 0 {
			return resp.StatusCode, fmt.Errorf("edge_c: %s: status %d, not a success%s", op, resp.StatusCode, codeText(code))
		}
		if out != nil && len(env.Result) > 0 && !bytes.Equal(env.Result, []byte("null")) {
			if err := json.Unmarshal(env.Result, out); err != nil {
				return resp.StatusCode, fmt.Errorf("edge_c: %s: the answer is not the documented json", op)
			}
		}
	}
	return resp.StatusCode, nil
}

func codeText(code int) string {
	if code == 0 {
		return ""
	}
	return fmt.Sprintf(" (code %d)", code)
}
