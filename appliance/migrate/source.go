package migrate

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/outbound"
)

// SourceURL is a validated connection URL of a database to import from: postgres:// or postgresql://,
// a TCP host, a user with a password and a database, and only the query parameters in sourceParams.
// It is a secret (it holds the password): stored encrypted, never logged or echoed.
type SourceURL struct {
	raw  string
	u    *url.URL
	pol  *outbound.Policy
	addr netip.Addr // the address the outbound policy checked: every connection goes there
}

// ParseSource checks a source URL and puts it under the appliance's outbound policy.
func (s *Service) ParseSource(raw string) (*SourceURL, error) {
	src, err := ParseSourceURL(raw)
	if err != nil {
		return nil, err
	}
	src.pol = s.policy
	return src, nil
}

// port is the URL's port (5432 when it names none).
func (s *SourceURL) port() int {
	if p, err := strconv.Atoi(s.u.Port()); err == nil {
		return p
	}
	return 5432
}

// Pin resolves the host through the outbound policy once: the connections of the appliance (pgx) and of
// the programs it runs for the source (pg_dump, the subscription's worker) all go to that address.
func (s *SourceURL) Pin(ctx context.Context) error {
	if s.addr.IsValid() {
		return nil
	}
	if s.pol == nil {
		return fmt.Errorf("%w: no outbound policy", outbound.ErrRefused)
	}
	addrs, err := s.pol.Resolve(ctx, s.Host(), s.port())
	if err != nil {
		return err
	}
	s.addr = addrs[0]
	return nil
}

// ConnectErr is what a tenant learns of a failed connection to the source: refused by the policy, or
// could not connect; never what answered (a closed port, TLS, another service, a wrong password).
func (s *SourceURL) ConnectErr(err error) error {
	return fmt.Errorf("cannot connect to %s: %s", s.Redacted(), outbound.Public(err))
}

// sourceParams are the query parameters a source URL may carry. Others (sslkey, sslcert, passfile,
// service, host lists ...) would make the appliance's processes read local files or environment.
// sslrootcert may only be "system": the machine's CA bundle (for sslmode=verify-full against a hosted
// provider's public certificate).
var sourceParams = []string{"sslmode", "sslrootcert", "connect_timeout", "application_name"}

// systemCABundle is what sslrootcert=system means (libpq 15 has no "system" of its own).
const systemCABundle = "/etc/ssl/certs/ca-certificates.crt"

var sourceSSLModes = []string{"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}

// ParseSourceURL checks a source URL; errors are Invalid and never contain the password.
func ParseSourceURL(raw string) (*SourceURL, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, apperr.Invalid("source_url is required")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, apperr.Invalid("source_url must be a postgres:// or postgresql:// URL")
	}
	host := u.Hostname()
	switch {
	case host == "" || strings.HasPrefix(host, "/") || strings.Contains(u.Host, ","):
		return nil, apperr.Invalid("source_url must name one TCP host (no socket paths, no host lists)")
	case u.User == nil || u.User.Username() == "":
		return nil, apperr.Invalid("source_url must name a user")
	case !hasPassword(u):
		return nil, apperr.Invalid("source_url must include the user's password")
	case strings.Trim(u.Path, "/") == "" || strings.Contains(strings.Trim(u.Path, "/"), "/"):
		return nil, apperr.Invalid("source_url must name one database, e.g. postgres://user:password@host:5432/dbname")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, apperr.Invalid("source_url has an invalid port")
		}
	}
	for k, v := range u.Query() {
		if !slices.Contains(sourceParams, k) {
			return nil, apperr.Invalid("source_url parameter %q is not accepted (allowed: %s)", k, strings.Join(sourceParams, ", "))
		}
		if k == "sslmode" && !slices.Contains(sourceSSLModes, v[0]) {
			return nil, apperr.Invalid("source_url sslmode must be one of %s", strings.Join(sourceSSLModes, ", "))
		}
		if k == "sslrootcert" && v[0] != "system" {
			return nil, apperr.Invalid("source_url sslrootcert may only be \"system\" (the machine's CA certificates)")
		}
	}
	return &SourceURL{raw: raw, u: u}, nil
}

func hasPassword(u *url.URL) bool {
	pw, ok := u.User.Password()
	return ok && pw != ""
}

// String is the URL with its password.
func (s *SourceURL) String() string { return s.raw }

// Redacted is the URL with the password masked, for records and output.
func (s *SourceURL) Redacted() string { return s.u.Redacted() }

// Host is the source's host name.
func (s *SourceURL) Host() string { return s.u.Hostname() }

// Database is the source database's name.
func (s *SourceURL) Database() string { return strings.Trim(s.u.Path, "/") }

// User is the user the URL logs in as.
func (s *SourceURL) User() string { return s.u.User.Username() }

// Password is the password the URL logs in with (for PGPASSWORD).
func (s *SourceURL) Password() string {
	pw, _ := s.u.User.Password()
	return pw
}

// ConninfoWithoutPassword is Conninfo without the password (for command lines, which other local users
// can read; the password goes in PGPASSWORD).
func (s *SourceURL) ConninfoWithoutPassword() string {
	u, _ := url.Parse(s.Conninfo())
	u.User = url.User(s.u.User.Username())
	return u.String()
}

// Conninfo is the URL as a libpq connection string for CREATE SUBSCRIPTION and pg_dump, with
// connect_timeout set when the URL has none and sslrootcert=system made the CA bundle's path.
func (s *SourceURL) Conninfo() string { return s.conninfo(true) }

// conninfo is Conninfo; withHostaddr adds the checked address for libpq (pgx pins it another way, and
// would send hostaddr to the server as a setting).
func (s *SourceURL) conninfo(withHostaddr bool) string {
	u := *s.u
	q := u.Query()
	if q.Get("connect_timeout") == "" {
		q.Set("connect_timeout", "10")
	}
	if q.Get("sslrootcert") == "system" {
		q.Set("sslrootcert", systemCABundle)
	}
	if withHostaddr && s.addr.IsValid() { // the host stays for TLS verification; the address is the one the policy checked
		q.Set("hostaddr", s.addr.String())
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Connect opens a connection to the source. Only what the URL says is used: the password of the
// appliance's environment or passfile never is.
func (s *SourceURL) Connect(ctx context.Context) (*pgx.Conn, error) {
	if err := s.Pin(ctx); err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(s.conninfo(false))
	if err != nil {
		return nil, apperr.Invalid("source_url: %s", s.RedactErr(err))
	}
	pw, _ := s.u.User.Password()
	cfg.Password = pw
	cfg.RuntimeParams["application_name"] = "appliance-import"
	// Through the policy, to the checked address only (a fallback configuration included).
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return s.pol.DialContext(ctx, network, netip.AddrPortFrom(s.addr, uint16(s.port())).String())
	}
	cfg.DialFunc = dial
	cfg.LookupFunc = func(context.Context, string) ([]string, error) { return []string{s.addr.String()}, nil }
	for _, fb := range cfg.Fallbacks {
		fb.Host = s.addr.String()
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return pgx.ConnectConfig(ctx, cfg)
}

// connUsesTLS says whether the connection is encrypted.
func connUsesTLS(conn *pgx.Conn) bool {
	_, ok := conn.PgConn().Conn().(*tls.Conn)
	return ok
}

// RedactErr removes the source URL's password from an error's text where it stands as the password:
// in the URL or conninfo, or as password=…; the same characters elsewhere (a database named like the
// password) are left alone.
func (s *SourceURL) RedactErr(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, full := range []string{s.raw, s.Conninfo()} {
		if cu, perr := url.Parse(full); perr == nil {
			msg = strings.ReplaceAll(msg, full, cu.Redacted())
		}
	}
	if pw, ok := s.u.User.Password(); ok && pw != "" {
		msg = strings.ReplaceAll(msg, ":"+url.PathEscape(pw)+"@", ":xxxxx@")
		msg = strings.ReplaceAll(msg, ":"+pw+"@", ":xxxxx@")
		msg = strings.ReplaceAll(msg, "password="+pw, "password=xxxxx")
		msg = strings.ReplaceAll(msg, "password='"+strings.ReplaceAll(pw, "'", "\\'")+"'", "password=xxxxx")
	}
	return fmt.Errorf("%s", msg)
}
