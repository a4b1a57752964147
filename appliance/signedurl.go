package appliance

import "time"

// Signed URLs (appliance/signedurl) let a client without credentials fetch or send one thing until a time:
// the exports' downloads (appliance/exports) and the imports' uploads (imports.go) share s.urls.

// signedURL is the URL of the resource id under path, valid until expires.
func (s *Service) signedURL(purpose, path, id string, expires time.Time) string {
	return s.urls.URL(purpose, path, id, expires)
}

// checkSignedURL checks a signed URL's expires and sig for id (signedurl.Signer.Check).
func (s *Service) checkSignedURL(purpose, what, id, expires, sig string) error {
	return s.urls.Check(purpose, what, id, expires, sig)
}
