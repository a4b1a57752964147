package appliance_test

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"testing"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/httpapi"
	"github.com/theappliance/appliance/httpapi/connlimit"
)

// serveTLS serves h as up serves the API (httpapi.HTTPServer over TLS: HTTP/2 and HTTP/1.1) on a loopback
// port with a certificate of e's CA, until the test ends; it returns the base URL.
func serveTLS(t *testing.T, e *appliancetest.Env, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, cl := httpapi.HTTPServer(h, ln, connlimit.Limits{}, slog.New(slog.DiscardHandler))
	if srv.TLSConfig, err = e.CA.ServerTLS("127.0.0.1", "localhost"); err != nil {
		t.Fatal(err)
	}
	go srv.ServeTLS(cl, "", "")
	t.Cleanup(func() { srv.Close() })
	return "https://" + ln.Addr().String()
}

// tlsClient trusts e's CA and speaks HTTP/2 (h2) or HTTP/1.1 only.
func tlsClient(t *testing.T, e *appliancetest.Env, h2 bool) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.CA.Pool(), ServerName: "localhost"}, ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// checkProto fails the test when resp did not come over the protocol tlsClient(h2) asked for.
func checkProto(t *testing.T, resp *http.Response, h2 bool) {
	t.Helper()
	if want := map[bool]int{true: 2, false: 1}[h2]; resp.ProtoMajor != want {
		t.Fatalf("served over %s, want HTTP/%d", resp.Proto, want)
	}
}
