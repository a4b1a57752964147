package certs_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/certs"
)

// serveTLS accepts TLS connections with cfg on ln (a new loopback listener when nil) and completes their
// handshakes, as the appliance's listeners do; it returns the address.
func serveTLS(t *testing.T, ln net.Listener, cfg *tls.Config) string {
	t.Helper()
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	tl := tls.NewListener(ln, cfg)
	t.Cleanup(func() { tl.Close() })
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.(*tls.Conn).Handshake()
				c.Read(make([]byte, 1))
			}()
		}
	}()
	return ln.Addr().String()
}

// leaf connects to addr as serverName ("" sends no SNI, as clients of an IP address do), verifying against
// roots, and returns the certificate served.
func leaf(t *testing.T, addr, serverName string, roots *x509.CertPool) (*x509.Certificate, error) {
	t.Helper()
	cfg := &tls.Config{RootCAs: roots, ServerName: serverName}
	if serverName == "" {
		host, _, _ := net.SplitHostPort(addr)
		cfg.ServerName = host // verified against the IP SAN; Go sends no SNI for an IP
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0], nil
}

func newCA(t *testing.T) *certs.CA {
	t.Helper()
	c, err := certs.LoadOrCreateCA(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestManagerServesCertificatesOfTheCA: the listeners' certificates come from the appliance's CA through
// certmagic, by name and by IP; a second manager on the same storage serves the stored ones.
func TestManagerServesCertificatesOfTheCA(t *testing.T) {
	t.Parallel()
	authority := newCA(t)
	storage := t.TempDir()
	m, err := certs.NewManager(t.Context(), certs.Options{StorageDir: storage, CA: authority, Names: []string{"localhost", "127.0.0.1", "db.example.test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	addr := serveTLS(t, nil, m.TLSConfig())
	serials := map[string]string{}
	for _, name := range []string{"localhost", "", "db.example.test"} {
		c, err := leaf(t, addr, name, authority.Pool())
		if err != nil {
			t.Fatalf("handshake as %q: %v", name, err)
		}
		if time.Until(c.NotAfter) < 80*24*time.Hour {
			t.Fatalf("%q: certificate expires %s", name, c.NotAfter)
		}
		serials[name] = c.SerialNumber.String()
	}
	if _, err := leaf(t, addr, "unmanaged.example.test", authority.Pool()); err == nil {
		t.Fatal("a name the manager does not manage got a certificate")
	}
	m.Stop()

	again, err := certs.NewManager(t.Context(), certs.Options{StorageDir: storage, CA: authority, Names: []string{"localhost", "127.0.0.1", "db.example.test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Stop()
	addr = serveTLS(t, nil, again.TLSConfig())
	if c, err := leaf(t, addr, "localhost", authority.Pool()); err != nil || c.SerialNumber.String() != serials["localhost"] {
		t.Fatalf("after a restart: %v, serial changed: %v", err, c != nil && c.SerialNumber.String() != serials["localhost"])
	}
}

// TestManagerRenewsWithoutRestart: a certificate near its end is renewed by certmagic's maintenance and
// the same listener serves the new one.
func TestManagerRenewsWithoutRestart(t *testing.T) {
	t.Parallel()
	authority := newCA(t)
	m, err := certs.NewManager(t.Context(), certs.Options{StorageDir: t.TempDir(), CA: authority, Names: []string{"localhost"},
		Lifetime: 6 * time.Second, RenewCheck: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	addr := serveTLS(t, nil, m.TLSConfig())
	first, err := leaf(t, addr, "localhost", authority.Pool())
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		c, err := leaf(t, addr, "localhost", authority.Pool())
		if err != nil {
			t.Fatalf("a handshake during renewal: %v", err)
		}
		if c.SerialNumber.Cmp(first.SerialNumber) != 0 {
			if !c.NotAfter.After(first.NotAfter) {
				t.Fatalf("renewed certificate ends %s, the first %s", c.NotAfter, first.NotAfter)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the certificate (ends %s) was not renewed", first.NotAfter)
		}
	}
}

// TestManagerObtainsFromACME: with a public domain, its certificate comes from a real ACME server
// (Pebble, in this process): account, order, the TLS-ALPN-01 challenge answered by the listener itself
// (Pebble resolves the domain through a DNS server of the test and connects to the listener), finalize,
// download. The local names keep their CA certificates beside it.
func TestManagerObtainsFromACME(t *testing.T) {
	const domain = "appliance.example.com"
	authority := newCA(t)

	// The listener first: Pebble's VA is told its port.
	pre, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	apiAddr := pre.Addr().String()
	_, apiPort, _ := net.SplitHostPort(apiAddr)
	tlsPort, _ := strconv.Atoi(apiPort)

	acme := appliancetest.StartACME(t, tlsPort)

	m, err := certs.NewManager(t.Context(), certs.Options{StorageDir: t.TempDir(), CA: authority, Names: []string{"localhost", "127.0.0.1", domain},
		ACME: &certs.ACMEOptions{Domain: domain, Email: "ops@example.com", CA: acme.DirectoryURL, Roots: acme.ServerRoots, TLSALPNAddr: apiAddr},
		Log:  nil})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	serveTLS(t, pre, m.TLSConfig())
	if err := m.StartACME(context.WithoutCancel(t.Context())); err != nil {
		t.Fatal(err)
	}
	pebbleRoots := acme.IssuedRoots
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		c, err := leaf(t, apiAddr, domain, pebbleRoots)
		if err == nil {
			if c.Subject.CommonName != domain && (len(c.DNSNames) == 0 || c.DNSNames[0] != domain) {
				t.Fatalf("ACME certificate for %v", c.DNSNames)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no certificate from the ACME server for %s: %v", domain, err)
		}
	}
	// The local names are still the appliance CA's.
	if _, err := leaf(t, apiAddr, "localhost", authority.Pool()); err != nil {
		t.Fatalf("localhost beside the ACME domain: %v", err)
	}
}

// TestInstanceTLS: the certificate is for the hosts asked, and the CA certificate that comes with it
// verifies it.
func TestInstanceTLS(t *testing.T) {
	ca, err := certs.LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, caPEM, err := ca.InstanceTLS("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("the CA certificate does not parse")
	}
	for _, host := range []string{"127.0.0.1", "localhost"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
}
