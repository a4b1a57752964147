package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Manager gives the appliance's TLS listeners (the API and the key-value fronts) their certificates through
// certmagic: issued by the appliance's own CA for the local names, and by an ACME CA for a public domain
// when the operator names one. Certificates and keys live in certmagic's storage in the data directory;
// certmagic renews each in the background before it expires, and the listeners serve the renewed one
// from the next handshake on, without a restart.
type Manager struct {
	cache  *certmagic.Cache
	local  *certmagic.Config
	acme   *certmagic.Config // nil without a public domain
	domain string
	names  []string
	stop   sync.Once
}

// Options configure a Manager.
type Options struct {
	StorageDir string // certmagic's storage (certificates, keys, ACME account)
	CA         *CA
	// Names are served with certificates of the appliance's CA: localhost, the loopback addresses, the
	// public host (when it is not the ACME domain).
	Names []string
	// Lifetime of the CA's certificates (0: 90 days); certmagic renews them when a third is left.
	Lifetime time.Duration
	// RenewCheck is how often certificates are checked for renewal (0: certmagic's default, 10 minutes).
	RenewCheck time.Duration
	ACME       *ACMEOptions // nil: no public domain
	Log        *slog.Logger // nil: discarded
}

// ACMEOptions name a public domain and the ACME CA that certifies it.
type ACMEOptions struct {
	Domain string
	Email  string
	CA     string // the directory URL (default: Let's Encrypt's production directory)
	// Roots are trusted for the ACME server's own HTTPS, for a private ACME CA (nil: the system's roots).
	Roots *x509.CertPool
	// TLSALPNAddr is where the ACME CA connects for the TLS-ALPN-01 challenge: the API's listener (which
	// answers it through TLSConfig). The CA always connects to port 443 of the domain, so the API must be
	// reachable there (listening on it, or forwarded).
	TLSALPNAddr string
}

// DefaultLifetime is the lifetime of the CA's certificates.
const DefaultLifetime = 90 * 24 * time.Hour

// caIssuer is a certmagic.Issuer backed by the appliance's CA.
type caIssuer struct {
	ca       *CA
	lifetime time.Duration
}

func (i *caIssuer) Issue(ctx context.Context, csr *x509.CertificateRequest) (*certmagic.IssuedCertificate, error) {
	chain, err := i.ca.SignCSR(csr, i.lifetime)
	if err != nil {
		return nil, err
	}
	return &certmagic.IssuedCertificate{Certificate: chain}, nil
}

// IssuerKey names the issuer in certmagic's storage: the CA's key identifier, so a new CA means new
// certificates.
func (i *caIssuer) IssuerKey() string { return fmt.Sprintf("appliance-ca-%x", i.ca.cert.SubjectKeyId) }

// NewManager obtains (or loads from storage) the certificates of the local names now; the ACME domain's
// is obtained by StartACME once the API listens.
func NewManager(ctx context.Context, o Options) (*Manager, error) {
	if o.CA == nil || o.StorageDir == "" || len(o.Names) == 0 {
		return nil, errors.New("certificate manager: CA, storage directory and names are required")
	}
	lifetime := o.Lifetime
	if lifetime <= 0 {
		lifetime = DefaultLifetime
	}
	logger := zap.NewNop()
	if o.Log != nil {
		logger = zap.New(&slogCore{log: o.Log, level: zapcore.InfoLevel})
	}
	m := &Manager{}
	storage := &certmagic.FileStorage{Path: o.StorageDir}
	m.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(c certmagic.Certificate) (*certmagic.Config, error) {
			if m.acme != nil && slices.Contains(c.Names, m.domain) {
				return m.acme, nil
			}
			return m.local, nil
		},
		RenewCheckInterval: o.RenewCheck,
		Logger:             logger,
	})
	m.local = certmagic.New(m.cache, certmagic.Config{Storage: storage, Logger: logger,
		Issuers: []certmagic.Issuer{&caIssuer{ca: o.CA, lifetime: lifetime}}})
	if a := o.ACME; a != nil {
		if a.Domain == "" || !certmagic.SubjectQualifiesForPublicCert(a.Domain) {
			return nil, fmt.Errorf("--acme-domain %q is not a public domain name an ACME CA can certify", a.Domain)
		}
		m.domain = a.Domain
		m.acme = certmagic.New(m.cache, certmagic.Config{Storage: storage, Logger: logger})
		issuer := certmagic.ACMEIssuer{CA: a.CA, Email: a.Email, Agreed: true, TrustedRoots: a.Roots,
			DisableHTTPChallenge: true, Logger: logger}
		if issuer.CA == "" {
			issuer.CA = certmagic.LetsEncryptProductionCA
		}
		if a.TLSALPNAddr != "" {
			host, port, err := net.SplitHostPort(a.TLSALPNAddr)
			if err != nil {
				return nil, fmt.Errorf("ACME TLS-ALPN address: %w", err)
			}
			issuer.ListenHost = host
			if issuer.AltTLSALPNPort, err = strconv.Atoi(port); err != nil {
				return nil, fmt.Errorf("ACME TLS-ALPN address: %w", err)
			}
		}
		m.acme.Issuers = []certmagic.Issuer{certmagic.NewACMEIssuer(m.acme, issuer)}
	}
	for _, n := range o.Names {
		if n != m.domain && !slices.Contains(m.names, n) {
			m.names = append(m.names, n)
		}
	}
	if err := m.local.ManageSync(ctx, m.names); err != nil {
		m.cache.Stop()
		return nil, fmt.Errorf("certificates of %v from the appliance's CA: %w", m.names, err)
	}
	return m, nil
}

// StartACME has the public domain's certificate obtained (or loaded) and kept renewed, in the background:
// the API must already answer TLS handshakes with TLSConfig (the CA's TLS-ALPN-01 challenge arrives there).
// Until it is obtained, handshakes for the domain fail; the local names are served meanwhile.
func (m *Manager) StartACME(ctx context.Context) error {
	if m.acme == nil {
		return nil
	}
	return m.acme.ManageAsync(ctx, []string{m.domain})
}

// TLSConfig is a listener's configuration: every managed certificate, picked by the client's server name
// (by the address it connected to when it sends none), and the ACME TLS-ALPN-01 challenge.
func (m *Manager) TLSConfig() *tls.Config {
	c := m.local
	if m.acme != nil {
		c = m.acme
	}
	t := c.TLSConfig()
	t.MinVersion = tls.VersionTLS12
	return t
}

// Stop ends certmagic's maintenance (renewals). Idempotent.
func (m *Manager) Stop() { m.stop.Do(m.cache.Stop) }

// chatter are certmagic's info messages of its own housekeeping, logged at debug level.
var chatter = map[string]bool{"acquiring lock": true, "lock acquired": true, "releasing lock": true,
	"started background certificate maintenance": true, "stopped background certificate maintenance": true}

// slogCore sends certmagic's zap logs (obtaining, renewing, errors) to the appliance's log.
type slogCore struct {
	log    *slog.Logger
	level  zapcore.Level
	fields []zapcore.Field
}

func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= c.level }

func (c *slogCore) With(f []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, level: c.level, fields: append(slices.Clip(c.fields), f...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range append(slices.Clip(c.fields), fields...) {
		f.AddTo(enc)
	}
	args := []any{"component", "certificates"}
	for k, v := range enc.Fields {
		args = append(args, k, v)
	}
	level := slog.LevelInfo
	switch {
	case e.Level >= zapcore.ErrorLevel:
		level = slog.LevelError
	case e.Level == zapcore.WarnLevel:
		level = slog.LevelWarn
	case e.Level <= zapcore.DebugLevel || chatter[e.Message]:
		level = slog.LevelDebug
	}
	c.log.Log(context.Background(), level, e.Message, args...)
	return nil
}

func (c *slogCore) Sync() error { return nil }
