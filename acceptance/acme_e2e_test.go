package acceptance

import (
	"crypto/tls"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/postgres"
)

// TestUpACMEDomain: `up --acme-domain` obtains the domain's certificate from a real ACME server (Pebble,
// run by the test, validating with TLS-ALPN-01 against the API listener) and serves it on the API and
// on the key-value RESP front, beside the local CA's certificate for localhost.
func TestUpACMEDomain(t *testing.T) {
	bin := e2eBuild(t)
	dataDir := appliancetest.TraversableTempDir(t)
	t.Cleanup(func() { e2eKillUnder(t, dataDir) })
	const domain = "appliance.example.com"
	apiPort, kvPort := freePort(t), freePort(t)
	acme := appliancetest.StartACME(t, apiPort)
	p := e2eStartWith(t, bin, dataDir, nil, []string{"--listen", "127.0.0.1:" + strconv.Itoa(apiPort),
		"--kv-listen", "127.0.0.1:" + strconv.Itoa(kvPort), "--acme-domain", domain, "--acme-email", "ops@example.com",
		"--acme-ca", acme.DirectoryURL, "--acme-ca-root", acme.ServerRootsFile})
	for _, port := range []int{apiPort, kvPort} {
		addr := "127.0.0.1:" + strconv.Itoa(port)
		e2eEventually(t, time.Minute, "the ACME certificate on "+addr, func() (bool, string) {
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: acme.IssuedRoots, ServerName: domain})
			if err != nil {
				return false, err.Error()
			}
			c.Close()
			return true, ""
		})
	}
	// localhost is still served by the appliance's CA (the e2e client verifies with it).
	p.do(t, "", "GET", "/healthz", nil, 200, nil)

	// The public domain's answers, the API's and the dashboard's, carry HSTS; localhost's do not (a
	// browser would otherwise pin HTTPS on a name every other local service shares).
	public := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: acme.IssuedRoots, ServerName: domain}}}
	for _, path := range []string{"/healthz", "/v1/openapi.json", "/"} {
		req, _ := http.NewRequest("GET", "https://127.0.0.1:"+strconv.Itoa(apiPort)+path, nil)
		req.Host = domain
		resp, err := public.Do(req)
		if err != nil {
			t.Fatalf("GET https://%s%s: %v", domain, path, err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Strict-Transport-Security"); got != "max-age=31536000" {
			t.Errorf("GET https://%s%s: %d, Strict-Transport-Security %q, want max-age=31536000", domain, path, resp.StatusCode, got)
		}
	}
	resp, err := p.client.Get(p.api + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Strict-Transport-Security"); got != "" {
		t.Errorf("localhost answers with Strict-Transport-Security %q", got)
	}
}

// freePort is a TCP port free on 127.0.0.1 now.
func freePort(t *testing.T) int {
	t.Helper()
	port, err := postgres.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}
