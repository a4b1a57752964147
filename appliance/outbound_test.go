package appliance_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/outbound"
)

func preflightDetail(t *testing.T, e *appliancetest.Env, p *appliance.Principal, projectID, url string) string {
	t.Helper()
	res, err := e.Svc.Migrate().Preflight(t.Context(), p, projectID, &appliance.PreflightRequest{SourceURL: url})
	if err != nil {
		t.Fatalf("preflight %s: %v", url, err)
	}
	if res.Preflight.OK || len(res.Preflight.Checks) != 1 {
		t.Fatalf("preflight %s: %+v", url, res.Preflight)
	}
	return res.Preflight.Checks[0].Detail
}

// TestPreflightOutboundPolicy: import preflight connects only where the outbound policy allows, and its
// errors say "refused by the outbound policy" or "could not connect", never what answered. Before, it
// reached other projects' servers, the API and metadata addresses, and leaked an HTTP reply's first bytes.
func TestPreflightOutboundPolicy(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t) // the tests' policy: the defaults plus --outbound-allow 127.0.0.0/8
	prj := provision(t, e, p, "importer", "development")
	other := provision(t, e, p, "neighbour", "development")
	http := httpListener(t, e)

	for name, c := range map[string]struct{ url, want string }{
		"another project's server":  {fmt.Sprintf("postgres://x:y@127.0.0.1:%d/%s", other.DirectPort, other.DatabaseName), "refused by the outbound policy"},
		"another project's pooler":  {fmt.Sprintf("postgres://x:y@localhost:%d/%s", other.PooledPort, other.DatabaseName), "refused by the outbound policy"},
		"the metadata service":      {"postgres://x:y@169.254.169.254:80/latest", "refused by the outbound policy"},
		"an HTTP server (allowed)":  {fmt.Sprintf("postgres://x:y@127.0.0.1:%d/db?sslmode=disable", http), "could not connect"},
		"an HTTP server, TLS first": {fmt.Sprintf("postgres://x:y@127.0.0.1:%d/db?sslmode=require", http), "could not connect"},
	} {
		d := preflightDetail(t, e, p, prj.ID, c.url)
		if !strings.HasSuffix(d, ": "+c.want) || strings.Contains(d, "HTTP") || strings.Contains(d, "tls") || strings.Contains(d, "EOF") {
			t.Errorf("%s: %q, want it to end with %q and say nothing else", name, d, c.want)
		}
	}
	// Each project has its own rate of preflights.
	limited := false
	for i := 0; i < 12 && !limited; i++ {
		_, err := e.Svc.Migrate().Preflight(t.Context(), p, prj.ID, &appliance.PreflightRequest{SourceURL: "postgres://x:y@169.254.169.254:80/db"})
		if limited = appliance.KindOf(err) == appliance.KindTooMany; limited {
			wantRetryAfter(t, err, 6*time.Second) // the bucket refills one preflight every 6 s
		}
	}
	if !limited {
		t.Error("no preflight was rate limited")
	}
	if _, err := e.Svc.Migrate().Preflight(t.Context(), p, other.ID, &appliance.PreflightRequest{SourceURL: "postgres://x:y@169.254.169.254:80/db"}); err != nil {
		t.Errorf("another project's preflight is limited too: %v", err)
	}
}

// TestPreflightLoopbackRefusedByDefault: without the operator's allow, a source on loopback is refused.
func TestPreflightLoopbackRefusedByDefault(t *testing.T) {
	t.Parallel()
	e := appliancetest.New(t, appliancetest.Options{Instances: true, Outbound: &outbound.Policy{}})
	p, err := e.Svc.Identity().Authenticate(t.Context(), e.Bootstrap.APIKey)
	if err != nil {
		t.Fatal(err)
	}
	prj := provision(t, e, p, "strict", "development")
	src := e.StartSource(t, "logical")
	if d := preflightDetail(t, e, p, prj.ID, src.URL("postgres")); !strings.HasSuffix(d, ": refused by the outbound policy") {
		t.Fatalf("loopback source: %q", d)
	}
}

// httpListener answers every connection with an HTTP error and returns its port (outside the Env's
// instance range, which the policy refuses as the appliance's own).
func httpListener(t *testing.T, e *appliancetest.Env) int {
	t.Helper()
	ln := e.Listen(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}
