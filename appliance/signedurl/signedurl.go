// Package signedurl makes and checks the appliance's signed URLs: they let a client without credentials
// fetch or send one thing until a time. The appliance serves <APIURL><path>/<id>?expires=<unix>&sig=<hex>,
// sig being HMAC-SHA256 of "<id> NUL <expires>" under a key derived from the secret key for purpose, so one
// purpose's signature never opens another's. The exports' downloads and the imports' uploads use it, each as
// a Resource: its URLs, and the check that opens its record (Open).
package signedurl

import (
	"crypto/hmac"
	"encoding/hex"
	"net/url"
	"strconv"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/store"
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

// Resource is a kind of record a signed URL opens (an export's download, an upload's PUT): the purpose its
// signatures are made under, where its URLs are served, and its table. One kind's signature never opens
// another's, and a signature opens only the record of its id, until its expires.
type Resource[T any] struct {
	Signer  *Signer
	DB      *store.DB
	Purpose string          // the key's purpose ("export-download")
	Path    string          // the URLs are <APIURL><Path>/<id>
	Action  string          // what a URL does, in its errors: "download", "upload"
	Noun    string          // what it opens, in its errors: "export", "upload"
	Refused string          // what a record it does not open is, in its errors: "not downloadable"
	Table   *store.Table[T] // the records
	Project func(*T) string // a record's project
}

// URL is the signed URL of the record id, valid until expires.
func (r *Resource[T]) URL(id string, expires time.Time) string {
	return r.Signer.URL(r.Purpose, r.Path, id, expires)
}

// Open checks a signed URL of the record id (its expires and sig: Check) and reads the record and its
// project. A record or project that cannot be read (deleted meanwhile), or a project being deleted, is
// Forbidden as a bad signature is: the signature is the only credential, and the holder learns nothing
// else. What the record's state allows is the caller's to check.
func (r *Resource[T]) Open(id, expires, sig string) (*T, *store.Project, error) {
	if err := r.Signer.Check(r.Purpose, r.Action, id, expires, sig); err != nil {
		return nil, nil, err
	}
	var rec *T
	var prj *store.Project
	if err := r.DB.View(func(tx *store.Tx) (err error) {
		if rec, err = r.Table.Get(tx, id); err != nil {
			return err
		}
		prj, err = store.Projects.Get(tx, r.Project(rec))
		return err
	}); err != nil {
		return nil, nil, apperr.Forbidden("%s %s is %s", r.Noun, id, r.Refused)
	}
	if prj.State == api.ProjectDeleting || prj.State == api.ProjectDeleted {
		return nil, nil, apperr.Forbidden("%s %s is %s: project %s is %s", r.Noun, id, r.Refused, prj.ID, prj.State)
	}
	return rec, prj, nil
}
