package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// connSplit is where a client's first connection and SELECT 1 spend their time, as the client sees it:
//
//	parse  pgx.ParseConfig of the URL (it reads the CA file named by sslrootcert)
//	tcp    the dial
//	tls    from the dial to the handshake's end: the SSLRequest (the postmaster forks the backend on
//	       accept), then TLS 1.3 (the handshake runs on the first write of the startup message)
//	start  from the handshake to ReadyForQuery: the backend reads the startup message, the SCRAM exchange
//	       (the client stretches the password: 4096 iterations), the rest of the backend's start
//	query  SELECT 1 (pgx's extended protocol: two round trips)
type connSplit struct{ parse, tcp, tls, start, query time.Duration }

var connParts = []string{"parse", "tcp", "tls", "start", "query"}

func (c connSplit) parts() []time.Duration {
	return []time.Duration{c.parse, c.tcp, c.tls, c.start, c.query}
}

// selectOneSplit is selectOne on url, timed by connSplit.
func selectOneSplit(ctx context.Context, url string) (connSplit, error) {
	var c connSplit
	t0 := time.Now()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return c, err
	}
	tParsed := time.Now()
	var tDial, tTLS, tReady time.Time
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		tDial = time.Now()
		return conn, err
	}
	if cfg.TLSConfig != nil {
		tc := cfg.TLSConfig.Clone()
		verify := tc.VerifyConnection
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			tTLS = time.Now()
			if verify != nil {
				return verify(cs)
			}
			return nil
		}
		cfg.TLSConfig = tc
	}
	cfg.ValidateConnect = func(context.Context, *pgconn.PgConn) error { tReady = time.Now(); return nil }
	if err := selectOne(ctx, cfg); err != nil {
		return c, err
	}
	if tTLS.IsZero() { // no TLS
		tTLS = tDial
	}
	return connSplit{parse: tParsed.Sub(t0), tcp: tDial.Sub(tParsed), tls: tTLS.Sub(tDial), start: tReady.Sub(tTLS),
		query: time.Since(tReady)}, nil
}

// connSplitP50 is the median of each part over splits, one line.
func connSplitP50(splits []connSplit) string {
	out := make([]string, len(connParts))
	for i, name := range connParts {
		ds := make([]time.Duration, len(splits))
		for j, s := range splits {
			ds[j] = s.parts()[i]
		}
		slices.Sort(ds)
		out[i] = fmt.Sprintf("%s %.1f", name, ms(percentile(ds, 50)))
	}
	return strings.Join(out, ", ")
}
