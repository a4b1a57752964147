package httpapi

import (
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/theappliance/appliance/httpapi/connlimit"
)

// The API's connection settings.
const (
	// ReadHeaderTimeout bounds a request's headers (and the TLS handshake).
	ReadHeaderTimeout = 10 * time.Second
	// IdleTimeout closes keep-alive connections idle this long (sooner when the connection cap needs
	// their slots: see connlimit).
	IdleTimeout = 2 * time.Minute
	// DefaultMaxConnections and DefaultMaxConnectionsPerAddress are up's defaults of the API's caps.
	DefaultMaxConnections           = 1000
	DefaultMaxConnectionsPerAddress = 100
)

// HTTPServer is the API's http.Server serving h, and ln within lim (serve the returned listener): idle
// keep-alive connections — HTTP/2 ones between streams too — never lock new clients out; at lim.Max the
// oldest idle one is closed for a new client, and one client address holds at most lim.PerAddr.
// Headers arrive in bounded time; a request's body and answer get per-route deadlines (none for the
// streaming routes).
func HTTPServer(h http.Handler, ln net.Listener, lim connlimit.Limits, log *slog.Logger) (*http.Server, *connlimit.Listener) {
	cl := connlimit.New(ln, lim)
	srv := &http.Server{Handler: h, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn), ConnState: cl.ConnState,
		ReadHeaderTimeout: ReadHeaderTimeout, IdleTimeout: IdleTimeout, MaxHeaderBytes: ServerMaxHeaderBytes}
	return srv, cl
}

// HSTSValue is the Strict-Transport-Security a public domain's answers carry: a year, this name only
// (the domain's other names may be served by others).
const HSTSValue = "max-age=31536000"

// HSTS sends Strict-Transport-Security on the answers (the API's and the dashboard's) to requests made
// over TLS to the public domain (up --acme-domain), whose certificate a browser trusts; not to other
// names (localhost, an IP address), which the appliance's own CA certifies.
func HSTS(domain string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if r.TLS != nil && (strings.EqualFold(host, domain) || strings.EqualFold(r.TLS.ServerName, domain)) {
			w.Header().Set("Strict-Transport-Security", HSTSValue)
		}
		next.ServeHTTP(w, r)
	})
}
