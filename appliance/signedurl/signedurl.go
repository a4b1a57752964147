// Package signedurl makes and checks the appliance's signed URLs: they let a client without credentials
// fetch or send one thing until a time. The appliance serves <APIURL><path>/<id>?expires=<unix>&sig=<hex>,
// sig being HMAC-SHA256 of "<id> NUL <expires>" under a key derived from the secret key for purpose, so one
// purpose's signature never opens another's. The exports' downloads and the imports' uploads use it.
package signedurl

import (
	"crypto/hmac"
	"encoding/hex"
	"net/url"
	"strconv"
	"time"

	"github.com/theappliance/appliance/appliance/apperr"
)

// MACer derives a purpose's key from the secret key and MACs data with it (the root's SecretBox).
type MACer interface {
	MAC(purpose string, data []byte) []byte
}

// Signer makes and checks the signed URLs under one base URL.
type Signer struct {
	base string
	box  MACer
	now  func() time.Time
}

// New returns a signer of URLs under baseURL (the API's), with the box's keys and the clock.
func New(baseURL string, box MACer, clock func() time.Time) *Signer {
	return &Signer{base: baseURL, box: box, now: clock}
}

// URL is the URL of the resource id under path, valid until expires.
func (s *Signer) URL(purpose, path, id string, expires time.Time) string {
	q := url.Values{"expires": {strconv.FormatInt(expires.Unix(), 10)},
		"sig": {hex.EncodeToString(s.signature(purpose, id, expires.Unix()))}}
	return s.base + path + "/" + url.PathEscape(id) + "?" + q.Encode()
}

func (s *Signer) signature(purpose, id string, expires int64) []byte {
	return s.box.MAC(purpose, []byte(id+"\x00"+strconv.FormatInt(expires, 10)))
}

// Check checks a signed URL's expires and sig for id (constant-time): a bad signature or an expired URL
// is Forbidden, saying what (what: "download", "upload").
func (s *Signer) Check(purpose, what, id, expires, sig string) error {
	exp, err := strconv.ParseInt(expires, 10, 64)
	if err != nil {
		return apperr.Forbidden("invalid %s signature", what)
	}
	got, err := hex.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.signature(purpose, id, exp)) {
		return apperr.Forbidden("invalid %s signature", what)
	}
	if s.now().Unix() >= exp {
		return apperr.Forbidden("%s URL expired", what)
	}
	return nil
}
