// Package certs keeps the appliance's local certificate authority and issues server certificates from it.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// CA is the local certificate authority stored in a directory (ca.crt, ca.key mode 0600).
type CA struct {
	Dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// CertPath is the CA certificate clients should trust.
func (ca *CA) CertPath() string { return filepath.Join(ca.Dir, "ca.crt") }

// LoadOrCreateCA opens the CA in dir, creating it on first use.
func LoadOrCreateCA(dir string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca := &CA{Dir: dir}
	keyPath := filepath.Join(dir, "ca.key")
	certPEM, err := os.ReadFile(ca.CertPath())
	if errors.Is(err, os.ErrNotExist) {
		return ca, ca.create(keyPath)
	}
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("read CA key: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	ca.cert, err = x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	k, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("CA key is not ECDSA")
	}
	ca.key = k
	return ca, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

func (ca *CA) create(keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "appliance local CA", Organization: []string{"appliance"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	ca.cert, _ = x509.ParseCertificate(der)
	ca.key = key
	if err := writePEM(keyPath, "EC PRIVATE KEY", mustMarshalKey(key), 0o600); err != nil {
		return err
	}
	return writePEM(ca.CertPath(), "CERTIFICATE", der, 0o644)
}

func mustMarshalKey(k *ecdsa.PrivateKey) []byte {
	b, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		panic(err)
	}
	return b
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// InstanceTLS is what a server this CA vouches for needs: a certificate for hosts with its key (Issue),
// and the CA's own certificate, which the server hands to clients as the root to trust.
func (ca *CA) InstanceTLS(hosts ...string) (certPEM, keyPEM, caPEM []byte, err error) {
	if certPEM, keyPEM, err = ca.Issue(hosts...); err != nil {
		return nil, nil, nil, fmt.Errorf("issue a certificate: %w", err)
	}
	if caPEM, err = os.ReadFile(ca.CertPath()); err != nil {
		return nil, nil, nil, fmt.Errorf("read the CA certificate: %w", err)
	}
	return certPEM, keyPEM, caPEM, nil
}

// Issue makes a server certificate for hosts (DNS names or IPs), valid for a year.
func (ca *CA) Issue(hosts ...string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	certPEM, err = ca.sign(hosts, &key.PublicKey, 365*24*time.Hour)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: mustMarshalKey(key)}), nil
}

// SignCSR issues a server certificate for the names of a certificate request (its DNS names and IP
// addresses) and its key, valid for lifetime: the PEM chain, leaf first, then the CA.
func (ca *CA) SignCSR(csr *x509.CertificateRequest, lifetime time.Duration) ([]byte, error) {
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("certificate request: %w", err)
	}
	hosts := slices.Clone(csr.DNSNames)
	for _, ip := range csr.IPAddresses {
		hosts = append(hosts, ip.String())
	}
	if len(hosts) == 0 {
		return nil, errors.New("certificate request names no host")
	}
	return ca.sign(hosts, csr.PublicKey, lifetime)
}

// sign makes the certificate of pub for hosts (a server's).
func (ca *CA) sign(hosts []string, pub any, lifetime time.Duration) ([]byte, error) {
	return ca.signUsage(hosts, pub, lifetime, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth})
}

// signUsage makes the certificate of pub for hosts, for the uses named.
func (ca *CA) signUsage(hosts []string, pub any, lifetime time.Duration, usage []x509.ExtKeyUsage) ([]byte, error) {
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
	}
	if lifetime < 24*time.Hour { // short lives (tests of renewal) start now, so their renewal window is theirs
		tmpl.NotBefore = now.Add(-time.Second)
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		return nil, err
	}
	out := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})...), nil
}

// ServerTLS returns a TLS config serving a certificate for hosts.
func (ca *CA) ServerTLS(hosts ...string) (*tls.Config, error) {
	c, k, err := ca.Issue(hosts...)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// Pool is a cert pool holding the CA (for clients and tests).
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// IssuePeer makes a certificate for hosts good for both ends of mutual TLS (server and client
// authentication), valid for a year: a cluster node's, with which its etcd member serves its clients and
// peers and dials its peers.
func (ca *CA) IssuePeer(hosts ...string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	certPEM, err = ca.signUsage(hosts, &key.PublicKey, 365*24*time.Hour, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
	if err != nil {
		return nil, nil, err
	}
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: mustMarshalKey(key)}), nil
}

// Fingerprint is the SHA-256 of the CA certificate (DER), in hex: what a join token carries so that a
// joining node trusts the CA the existing node's TLS presents and no other.
func (ca *CA) Fingerprint() string {
	sum := sha256.Sum256(ca.cert.Raw)
	return hex.EncodeToString(sum[:])
}

// RevocationList is a certificate revocation list (DER) of the certificates of these serial numbers,
// signed by the CA: what etcd's listeners check a client's or peer's certificate against (their
// CRLFile). It is good for ten years: it is replaced, not renewed, as the list changes.
func (ca *CA) RevocationList(serials []*big.Int) ([]byte, error) {
	now := time.Now()
	list := &x509.RevocationList{Number: big.NewInt(now.UnixNano()), ThisUpdate: now.Add(-time.Hour), NextUpdate: now.AddDate(10, 0, 0)}
	for _, s := range serials {
		list.RevokedCertificateEntries = append(list.RevokedCertificateEntries, x509.RevocationListEntry{SerialNumber: s, RevocationTime: now})
	}
	return x509.CreateRevocationList(rand.Reader, list, ca.cert, ca.key)
}
