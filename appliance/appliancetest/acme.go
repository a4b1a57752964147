package appliancetest

import (
	"crypto/x509"
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/letsencrypt/pebble/v2/ca"
	"github.com/letsencrypt/pebble/v2/db"
	"github.com/letsencrypt/pebble/v2/va"
	"github.com/letsencrypt/pebble/v2/wfe"
	"github.com/miekg/dns"
)

// ACMEServer is a real ACME server for tests: Pebble (github.com/letsencrypt/pebble/v2) in this process,
// with a DNS server that resolves every name to 127.0.0.1 for its validation authority.
type ACMEServer struct {
	DirectoryURL    string         // the ACME directory
	ServerRoots     *x509.CertPool // trust for the directory's own HTTPS
	ServerRootsFile string         // the same as a PEM file
	IssuedRoots     *x509.CertPool // the root the certificates it issues chain to
}

// StartACME starts Pebble; its validation authority connects to 127.0.0.1:tlsPort for TLS-ALPN-01 (where
// the appliance's listener is). Pebble's random validation delays and bad-nonce injection are off.
// It sets environment variables, so the calling test cannot be parallel.
func StartACME(t testing.TB, tlsPort int) *ACMEServer {
	t.Helper()
	t.Setenv("PEBBLE_VA_NOSLEEP", "1")
	t.Setenv("PEBBLE_WFE_NONCEREJECT", "0")
	dnsLn, err := net.Listen("tcp", "127.0.0.1:0") // Pebble's VA asks over TCP
	if err != nil {
		t.Fatal(err)
	}
	dnsSrv := &dns.Server{Listener: dnsLn, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		for _, q := range r.Question {
			if q.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
					A: net.ParseIP("127.0.0.1")})
			}
		}
		w.WriteMsg(m)
	})}
	go dnsSrv.ActivateAndServe()
	t.Cleanup(func() { dnsSrv.Shutdown() })

	logger := log.New(io.Discard, "", 0)
	store := db.NewMemoryStore()
	authority := ca.New(logger, store, "", "ecdsa", 0, 1, map[string]ca.Profile{"default": {Description: "default"}})
	validator := va.New(logger, 0, tlsPort, false, dnsLn.Addr().String(), store)
	front := wfe.New(logger, store, validator, authority, []string{"pebble.letsencrypt.org"}, false, false, 0, 0)
	srv := httptest.NewTLSServer(front.Handler())
	t.Cleanup(srv.Close)
	a := &ACMEServer{DirectoryURL: srv.URL + "/dir", ServerRoots: x509.NewCertPool(), IssuedRoots: x509.NewCertPool(),
		ServerRootsFile: filepath.Join(t.TempDir(), "acme-server-root.pem")}
	a.ServerRoots.AddCert(srv.Certificate())
	a.IssuedRoots.AddCert(authority.GetRootCert(0).Cert)
	if err := os.WriteFile(a.ServerRootsFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return a
}
