package certs

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"strings"
)

// ReadCA returns the PEM of ref (a path or inline PEM) and its (first) certificate, checking that it holds
// one.
func ReadCA(ref string) ([]byte, *x509.Certificate, error) {
	var b []byte
	if strings.Contains(ref, "-----BEGIN") {
		b = []byte(ref)
	} else {
		var err error
		if b, err = os.ReadFile(ref); err != nil {
			return nil, nil, fmt.Errorf("read CA certificate: %w", err)
		}
	}
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return nil, nil, fmt.Errorf("CA certificate %s holds no PEM certificate", CAName(ref))
		}
		if blk.Type == "CERTIFICATE" {
			cert, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, nil, fmt.Errorf("CA certificate %s: %w", CAName(ref), err)
			}
			return b, cert, nil
		}
	}
}

// CAName is how errors name a CA reference: its path, or "(inline PEM)".
func CAName(ref string) string {
	if strings.Contains(ref, "-----BEGIN") {
		return "(inline PEM)"
	}
	return ref
}
