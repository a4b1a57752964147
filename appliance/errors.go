package appliance

import (
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/store"
)

// The domain's typed failures live in appliance/apperr, where the area packages reach them without this
// package; these names keep the root's and httpapi's spelling.

// Kind classifies a failure for the API layer, which maps each kind to an HTTP status.
type Kind = apperr.Kind

const (
	KindInternal            = apperr.KindInternal
	KindInvalid             = apperr.KindInvalid
	KindUnauthenticated     = apperr.KindUnauthenticated
	KindForbidden           = apperr.KindForbidden
	KindNotFound            = apperr.KindNotFound
	KindConflict            = apperr.KindConflict
	KindGone                = apperr.KindGone
	KindUnavailable         = apperr.KindUnavailable
	KindTooLarge            = apperr.KindTooLarge
	KindTooMany             = apperr.KindTooMany
	KindHeadersTooLarge     = apperr.KindHeadersTooLarge
	KindInsufficientStorage = apperr.KindInsufficientStorage
	KindUnsupportedMedia    = apperr.KindUnsupportedMedia
)

// Error is a failure with a public message (safe to send) and a private cause (logged only).
type Error = apperr.Error

// Invalid is a 400 for bad input.
func Invalid(format string, args ...any) error { return apperr.Invalid(format, args...) }

// Forbidden is a 403.
func Forbidden(format string, args ...any) error { return apperr.Forbidden(format, args...) }

// NotFound is a 404.
func NotFound(format string, args ...any) error { return apperr.NotFound(format, args...) }

// Conflict is a 409.
func Conflict(format string, args ...any) error { return apperr.Conflict(format, args...) }

// Unauthenticated is a 401.
func Unauthenticated(format string, args ...any) error {
	return apperr.Unauthenticated(format, args...)
}

// Gone is a 410.
func Gone(format string, args ...any) error { return apperr.Gone(format, args...) }

// Internal wraps an unexpected failure; the caller sees only "internal error".
func Internal(cause error, format string, args ...any) error {
	return apperr.Internal(cause, format, args...)
}

// KindOf returns the kind of err (KindInternal for errors not made here).
func KindOf(err error) Kind { return apperr.KindOf(err) }

// ErrStoreUnavailable is wrapped by the errors of a metadata store that does not answer (a cluster
// without quorum): KindOf says KindUnavailable, and its message is public.
var ErrStoreUnavailable = store.ErrUnavailable

// ErrStoreNewerLayout is wrapped by the errors of a write to a metadata store a later version of the
// appliance upgraded (a cluster node left on an older version): KindOf says KindUnavailable, and its
// message is public.
var ErrStoreNewerLayout = store.ErrNewerLayout

// notFoundAs turns store.ErrNotFound into a 404 with msg, and anything else into an internal error.
func notFoundAs(err error, format string, args ...any) error {
	return apperr.NotFoundAs(err, format, args...)
}

// orNotFound is err, or store.ErrNotFound when err is nil (a record of another kind).
func orNotFound(err error) error { return apperr.OrNotFound(err) }
