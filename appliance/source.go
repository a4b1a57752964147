package appliance

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// SourceURL is a validated connection URL of a database to import from: postgres:// or postgresql://,
// a TCP host, a user with a password and a database, and only the query parameters in sourceParams.
// It is a secret (it holds the password): stored encrypted, never logged or echoed.
type SourceURL struct {
	raw string
	u   *url.URL
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
		return nil, Invalid("source_url is required")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, Invalid("source_url must be a postgres:// or postgresql:// URL")
	}
	host := u.Hostname()
	switch {
	case host == "" || strings.HasPrefix(host, "/") || strings.Contains(u.Host, ","):
		return nil, Invalid("source_url must name one TCP host (no socket paths, no host lists)")
	case u.User == nil || u.User.Username() == "":
		return nil, Invalid("source_url must name a user")
	case !hasPassword(u):
		return nil, Invalid("source_url must include the user's password")
	case strings.Trim(u.Path, "/") == "" || strings.Contains(strings.Trim(u.Path, "/"), "/"):
		return nil, Invalid("source_url must name one database, e.g. postgres://user:password@host:5432/dbname")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, Invalid("source_url has an invalid port")
		}
	}
	for k, v := range u.Query() {
		if !slices.Contains(sourceParams, k) {
			return nil, Invalid("source_url parameter %q is not accepted (allowed: %s)", k, strings.Join(sourceParams, ", "))
		}
		if k == "sslmode" && !slices.Contains(sourceSSLModes, v[0]) {
			return nil, Invalid("source_url sslmode must be one of %s", strings.Join(sourceSSLModes, ", "))
		}
		if k == "sslrootcert" && v[0] != "system" {
			return nil, Invalid("source_url sslrootcert may only be \"system\" (the machine's CA certificates)")
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

// Conninfo is the URL as a libpq connection string for CREATE SUBSCRIPTION and pg_dump, with
// connect_timeout set when the URL has none and sslrootcert=system made the CA bundle's path.
func (s *SourceURL) Conninfo() string {
	u := *s.u
	q := u.Query()
	if q.Get("connect_timeout") == "" {
		q.Set("connect_timeout", "10")
	}
	if q.Get("sslrootcert") == "system" {
		q.Set("sslrootcert", systemCABundle)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Connect opens a connection to the source. Only what the URL says is used: the password of the
// appliance's environment or passfile never is.
func (s *SourceURL) Connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(s.Conninfo())
	if err != nil {
		return nil, Invalid("source_url: %s", strings.ReplaceAll(err.Error(), s.raw, s.Redacted()))
	}
	pw, _ := s.u.User.Password()
	cfg.Password = pw
	cfg.RuntimeParams["application_name"] = "appliance-import"
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return pgx.ConnectConfig(ctx, cfg)
}

// connUsesTLS says whether the connection is encrypted.
func connUsesTLS(conn *pgx.Conn) bool {
	_, ok := conn.PgConn().Conn().(*tls.Conn)
	return ok
}

// redactErr removes the source URL's password from an error's text.
func (s *SourceURL) redactErr(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if pw, ok := s.u.User.Password(); ok && pw != "" {
		msg = strings.ReplaceAll(msg, pw, "xxxxx")
	}
	return fmt.Errorf("%s", msg)
}
