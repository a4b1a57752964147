package cmd

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/certs"
)

// The client commands (login, whoami, api-keys, ...) talk to a running appliance over its HTTP API. Where
// they connect and with which credential comes, in order, from the global flags, the environment and the
// CLI config file written by `appliance login`.

// clientOpts are the global client flags, shared by every client command of one command tree.
type clientOpts struct {
	api    string // --api / APPLIANCE_API_URL
	apiKey string // --api-key / APPLIANCE_API_KEY
	caCert string // --ca-cert / APPLIANCE_CA_CERT
}

// clientCommands are the constructors of the client commands. A file adding a client command registers it
// with a package-level `var _ = registerClientCommand(newXCmd)` (package variables are initialized before
// any init function runs, so the order of files does not matter).
var clientCommands []func(*clientOpts) *cobra.Command

func registerClientCommand(newCmd func(*clientOpts) *cobra.Command) bool {
	clientCommands = append(clientCommands, newCmd)
	return true
}

func init() { addClientCommands(root) }

// addClientCommands registers the global client flags and the client commands on a root command.
// Tests build fresh trees with it so that commands can run concurrently.
func addClientCommands(r *cobra.Command) {
	o := &clientOpts{}
	pf := r.PersistentFlags()
	pf.StringVar(&o.api, "api", "", "base URL of the appliance API, e.g. https://127.0.0.1:7443 (APPLIANCE_API_URL; default: the CLI config)")
	pf.StringVar(&o.apiKey, "api-key", "", "API key to authenticate with (APPLIANCE_API_KEY; default: the key saved by appliance login)")
	pf.StringVar(&o.caCert, "ca-cert", "", "PEM file of a CA to trust for the API's TLS certificate (APPLIANCE_CA_CERT; default: the CA saved at login, then the system roots)")
	for _, newCmd := range clientCommands {
		r.AddCommand(newCmd(o))
	}
}

// groupCmd is a command that only groups its subcommands (run alone, it prints its help).
func groupCmd(use string, aliases []string, short string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Aliases: aliases, Short: short, Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() }}
	cmd.AddCommand(subs...)
	return cmd
}

// registerClientGroup registers a client command that groups the commands newSubs build.
func registerClientGroup(use string, aliases []string, short string, newSubs ...func(*clientOpts) *cobra.Command) bool {
	return registerClientCommand(func(o *clientOpts) *cobra.Command {
		cmd := groupCmd(use, aliases, short)
		for _, newSub := range newSubs {
			cmd.AddCommand(newSub(o))
		}
		return cmd
	})
}

// ---- CLI config -------------------------------------------------------------------------------------

// cliConfig is the CLI config file (mode 0600 in a 0700 directory).
type cliConfig struct {
	APIURL string `json:"api_url,omitempty"`
	APIKey string `json:"api_key,omitempty"`
	// CACert is the path of a PEM file (login copies the CA next to the config) or inline PEM.
	CACert string `json:"ca_cert,omitempty"`
	// PendingLogin is a device login started with --no-wait, finished by `appliance login --resume`.
	PendingLogin *pendingLogin `json:"pending_login,omitempty"`
}

type pendingLogin struct {
	APIURL    string    `json:"api_url"`
	CACert    string    `json:"ca_cert,omitempty"`
	SessionID string    `json:"session_id"`
	PollToken string    `json:"poll_token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// configPath is APPLIANCE_CONFIG, else <user config dir>/appliance/config.json.
func configPath() (string, error) {
	if p := os.Getenv("APPLIANCE_CONFIG"); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("locate the CLI config (set APPLIANCE_CONFIG): %w", err)
	}
	return filepath.Join(dir, "appliance", "config.json"), nil
}

// loadConfig reads the CLI config; a missing file is an empty config.
func loadConfig() (*cliConfig, error) {
	path, err := configPath()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &cliConfig{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read CLI config: %w", err)
	}
	cfg := &cliConfig{}
	if err := json.Unmarshal(b, cfg); err != nil {
		return nil, fmt.Errorf("CLI config %s is not valid JSON: %w", path, err)
	}
	return cfg, nil
}

// saveConfig writes the CLI config atomically with mode 0600 (its directory 0700).
func saveConfig(cfg *cliConfig) error {
	path, err := configPath()
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return writePrivateFile(path, append(b, '\n'))
}

// writePrivateFile writes data to path through a temporary file, mode 0600, creating the directory 0700.
func writePrivateFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create config directory: %w", err)
	}
	err := replaceFile(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// replaceFile puts at path what write writes, through a temporary file beside it (mode 0600, as
// os.CreateTemp makes it) renamed over path once written and synced: path is never seen half written.
func replaceFile(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.part")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	err = write(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	return err
}

// saveCA copies the PEM named by ref (a path or inline PEM) next to the CLI config so the config does not
// depend on the server's data directory, and returns the copy's path. An empty ref stays empty.
func saveCA(ref string) (string, error) {
	if ref == "" {
		return "", nil
	}
	pemBytes, _, err := certs.ReadCA(ref)
	if err != nil {
		return "", err
	}
	path, err := configPath()
	if err != nil {
		return "", err
	}
	dst := filepath.Join(filepath.Dir(path), "ca.crt")
	if abs, err := filepath.Abs(ref); err == nil && abs == dst {
		return dst, nil
	}
	if err := writePrivateFile(dst, pemBytes); err != nil {
		return "", err
	}
	return dst, nil
}

// ---- connection settings ------------------------------------------------------------------------------

// conn is where and how a command connects, resolved from flags, environment and config.
type conn struct {
	apiURL string
	key    string // the API key; empty when none is known
	caCert string // path or inline PEM; empty: system roots
	cfg    *cliConfig
	source string // where apiURL came from (appliance status prints it)
	// local is the local appliance whose bootstrap.json was refused (login is the command to run), when
	// nothing else named an API.
	local *localAppliance
}

// resolve applies the precedence flag > environment > config. The config's key and CA are used only for
// the API URL they were saved for, so that pointing --api elsewhere never sends the saved key there. With
// none of them, the local appliance's credentials (findLocalAppliance), said so on notes (nil: silently).
func (o *clientOpts) resolve(notes io.Writer) (*conn, error) {
	cfg, err := loadConfig()
	if err != nil {
		return nil, err
	}
	c := &conn{cfg: cfg}
	raw := firstNonEmpty(o.api, os.Getenv("APPLIANCE_API_URL"))
	switch {
	case raw != "":
		if c.apiURL, err = normalizeAPIURL(raw); err != nil {
			return nil, err
		}
		c.source = "--api"
		if o.api == "" {
			c.source = "APPLIANCE_API_URL"
		}
	case cfg.APIURL != "":
		c.apiURL = cfg.APIURL
		c.source = "the CLI config"
		if p, err := configPath(); err == nil {
			c.source += " (" + p + ")"
		}
	case o.apiKey == "" && os.Getenv("APPLIANCE_API_KEY") == "":
		if l := findLocalAppliance(); l != nil && l.boot != nil {
			l.use(c, notes)
			c.caCert = firstNonEmpty(o.caCert, os.Getenv("APPLIANCE_CA_CERT"), c.caCert)
			return c, nil
		} else if l != nil {
			c.local = l
		}
	}
	sameAPI := c.apiURL != "" && cfg.APIURL != "" && sameURL(c.apiURL, cfg.APIURL)
	c.key = firstNonEmpty(o.apiKey, os.Getenv("APPLIANCE_API_KEY"))
	if c.key == "" && sameAPI {
		c.key = cfg.APIKey
	}
	c.caCert = firstNonEmpty(o.caCert, os.Getenv("APPLIANCE_CA_CERT"))
	if c.caCert == "" && sameAPI {
		c.caCert = cfg.CACert
	}
	return c, nil
}

// client returns an API client: with the API key (failing when there is none), or, anonymous, without
// credential (CLI login start and poll, sign-in, ephemeral databases).
func (c *conn) client(anonymous bool) (*apiClient, error) {
	switch {
	case c.apiURL == "" && c.local != nil:
		return nil, fmt.Errorf("no API URL, and the local appliance's credentials in %s are not for you: %s. Log in to it with:\n  %s",
			c.local.path, c.local.refused, c.local.login)
	case c.apiURL == "":
		return nil, errors.New("no API URL: pass --api URL (or set APPLIANCE_API_URL), or run `appliance login --api URL` first (no appliance runs on this machine's data directory: start one with `appliance up`)")
	case anonymous:
		return newAPIClient(c.apiURL, "", c.caCert)
	case c.key == "":
		return nil, fmt.Errorf("not logged in to %s: run `appliance login --api %s`, or pass --api-key (or set APPLIANCE_API_KEY)", c.apiURL, c.apiURL)
	}
	return newAPIClient(c.apiURL, c.key, c.caCert)
}

// client resolves the connection and returns its client (see conn.client).
func (o *clientOpts) client(anonymous bool, notes io.Writer) (*apiClient, error) {
	cn, err := o.resolve(notes)
	if err != nil {
		return nil, err
	}
	return cn.client(anonymous)
}

func normalizeAPIURL(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return "", fmt.Errorf("--api %q is not an http(s) URL", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("--api %q must be a plain base URL (no credentials, query or fragment)", raw)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

func sameURL(a, b string) bool {
	return strings.EqualFold(strings.TrimRight(a, "/"), strings.TrimRight(b, "/"))
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// ---- API client --------------------------------------------------------------------------------------

// apiClient makes JSON requests to the appliance API.
type apiClient struct {
	base   string // no trailing slash
	token  string // bearer credential: an API key or a session token
	http   *http.Client
	header http.Header // sent with every request (e.g. an ephemeral database's claim token)
	caCert string      // the CA trusted besides the system roots (path or inline PEM; "": none)
}

// APIError is an error response of the API: {"error": "..."} and its status.
type APIError struct {
	Method, Path string
	Status       int
	Message      string
	RetryAfter   time.Duration // from Retry-After on 429 and 503
	// The details of a SQL error from the studio (empty otherwise).
	SQLState     string
	Position     int
	Detail, Hint string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.Status, http.StatusText(e.Status), e.Message)
}

// apiStatus returns the HTTP status of an API error, or 0.
func apiStatus(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// newAPIClient returns a client for base trusting the system roots plus caCert (a path or inline PEM).
func newAPIClient(base, token, caCert string) (*apiClient, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if caCert != "" {
		pemBytes, _, err := certs.ReadCA(caCert)
		if err != nil {
			return nil, err
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pemBytes) {
			return nil, fmt.Errorf("CA certificate %s: no usable certificate", certs.CAName(caCert))
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	// The API never redirects: a 3xx is answered as an error and never followed, so no request (a DELETE
	// least of all) is ever re-sent to another resource.
	noRedirects := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &apiClient{base: base, token: token, caCert: caCert, http: &http.Client{Transport: tr, Timeout: 30 * time.Second, CheckRedirect: noRedirects}}, nil
}

// seg escapes one path segment. Dots are escaped too, so "." or ".." can never name a parent resource
// (the API refuses such a path with 400 rather than resolving it).
func seg(s string) string {
	return strings.ReplaceAll(url.PathEscape(s), ".", "%2E")
}

// withToken returns a copy of c sending another bearer credential.
func (c *apiClient) withToken(token string) *apiClient {
	cp := *c
	cp.token = token
	return &cp
}

// withHeader returns a copy of c sending one more header.
func (c *apiClient) withHeader(name, value string) *apiClient {
	cp := *c
	cp.header = c.header.Clone()
	if cp.header == nil {
		cp.header = http.Header{}
	}
	cp.header.Set(name, value)
	return &cp
}

// do sends a JSON request and decodes a JSON answer into out (when non-nil). An answer outside 2xx becomes
// an *APIError carrying the status and the API's message.
func (c *apiClient) do(ctx context.Context, method, path string, body, out any) error {
	raw, err := c.doRaw(ctx, method, path, body)
	if err != nil || out == nil {
		return err
	}
	return decode(method, path, raw, out)
}

// doRaw is do without decoding: it returns the body of a 2xx answer.
func (c *apiClient) doRaw(ctx context.Context, method, path string, body any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := c.request(ctx, method, path, "application/json", rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, redactPath(path), err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read response: %w", method, redactPath(path), err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return raw, nil
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return nil, &APIError{Method: method, Path: redactPath(path), Status: resp.StatusCode,
			Message: fmt.Sprintf("the server answered a redirect to %q, which the CLI never follows (the appliance's API does not redirect: is --api right?)", resp.Header.Get("Location"))}
	}
	return nil, apiError(method, path, resp, raw)
}

// request is a request to the API at path accepting accept, with the CLI's User-Agent, the client's
// credential and its headers.
func (c *apiClient) request(ctx context.Context, method, path, accept string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", "appliance-cli/"+Version)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	return req, nil
}

// apiError is the *APIError of a non-2xx answer whose body (at most its start) is raw.
func apiError(method, path string, resp *http.Response, raw []byte) *APIError {
	ae := &APIError{Method: method, Path: redactPath(path), Status: resp.StatusCode}
	var eb api.ErrorBody
	if json.Unmarshal(raw, &eb) == nil && eb.Error != "" {
		ae.Message, ae.SQLState, ae.Position, ae.Detail, ae.Hint = eb.Error, eb.SQLState, eb.Position, eb.Detail, eb.Hint
	} else {
		ae.Message = firstNonEmpty(strings.TrimSpace(string(raw)), "(no message)")
		if len(ae.Message) > 200 {
			ae.Message = ae.Message[:200] + "..."
		}
	}
	ae.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	return ae
}

// redactPath drops the query string from paths shown in errors (the poll token travels there).
func redactPath(path string) string {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		return path[:i]
	}
	return path
}

// parseRetryAfter reads delay-seconds or an HTTP date; 0 when absent or unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
