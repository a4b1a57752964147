package appliance

import (
	"crypto/hmac"
	"encoding/hex"
	"net/url"
	"strconv"
	"time"
)

// Signed URLs let a client without credentials fetch or send one thing until a time: the appliance serves
// <APIURL><path>/<id>?expires=<unix>&sig=<hex>, sig being HMAC-SHA256 of "<id> NUL <expires>" under a key
// derived from the secret key for purpose, so one purpose's signature never opens another's.

// signedURL is the URL of the resource id under path, valid until expires.
func (s *Service) signedURL(purpose, path, id string, expires time.Time) string {
	q := url.Values{"expires": {strconv.FormatInt(expires.Unix(), 10)},
		"sig": {hex.EncodeToString(s.urlSignature(purpose, id, expires.Unix()))}}
	return s.cfg.APIURL + path + "/" + url.PathEscape(id) + "?" + q.Encode()
}

func (s *Service) urlSignature(purpose, id string, expires int64) []byte {
	return s.box.MAC(purpose, []byte(id+"\x00"+strconv.FormatInt(expires, 10)))
}

// checkSignedURL checks a signed URL's expires and sig for id (constant-time): a bad signature or an
// expired URL is Forbidden, saying what (what: "download", "upload").
func (s *Service) checkSignedURL(purpose, what, id, expires, sig string) error {
	exp, err := strconv.ParseInt(expires, 10, 64)
	if err != nil {
		return Forbidden("invalid %s signature", what)
	}
	got, err := hex.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.urlSignature(purpose, id, exp)) {
		return Forbidden("invalid %s signature", what)
	}
	if s.now().Unix() >= exp {
		return Forbidden("%s URL expired", what)
	}
	return nil
}
