// Package apperr is the domain's typed failure: a kind the API layer maps to an HTTP status, a public
// message (safe to send) and a private cause (logged only). Every area of the domain (the root package
// `appliance` and the area packages beside it) answers with these; `appliance` re-exports them.
package apperr

import (
	"errors"
	"fmt"
	"time"

	"github.com/theappliance/appliance/store"
)

// Kind classifies a failure for the API layer, which maps each kind to an HTTP status.
type Kind int

const (
	KindInternal            Kind = iota // 500; the message is not shown to the caller
	KindInvalid                         // 400
	KindUnauthenticated                 // 401
	KindForbidden                       // 403
	KindNotFound                        // 404
	KindConflict                        // 409
	KindGone                            // 410: expired or already used
	KindUnavailable                     // 503
	KindTooLarge                        // 413: a request body over the limit
	KindTooMany                         // 429: a per-resource rate or a cap reached
	KindHeadersTooLarge                 // 431: request headers over the limit
	KindInsufficientStorage             // 507: the appliance is short of disk space (appliance/storageguard)
	KindUnsupportedMedia                // 415: a request body of another media type than the endpoint reads
)

// Error is a failure with a public message (safe to send) and a private cause (logged only).
type Error struct {
	Kind  Kind
	Msg   string
	Cause error
	// Fields are public details sent beside the message (a SQL error's sqlstate and position).
	Fields map[string]any
	// RetryAfter, on a 429, is when trying again can succeed (sent as Retry-After).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return e.Msg + ": " + e.Cause.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Cause }

func newErr(k Kind, format string, args ...any) *Error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// Invalid is a 400 for bad input.
func Invalid(format string, args ...any) error { return newErr(KindInvalid, format, args...) }

// Forbidden is a 403.
func Forbidden(format string, args ...any) error { return newErr(KindForbidden, format, args...) }

// NotFound is a 404.
func NotFound(format string, args ...any) error { return newErr(KindNotFound, format, args...) }

// Conflict is a 409.
func Conflict(format string, args ...any) error { return newErr(KindConflict, format, args...) }

// Unauthenticated is a 401.
func Unauthenticated(format string, args ...any) error {
	return newErr(KindUnauthenticated, format, args...)
}

// Gone is a 410.
func Gone(format string, args ...any) error { return newErr(KindGone, format, args...) }

// Unavailable is a 503 whose message is msg as it is (a program missing, a server that does not answer).
func Unavailable(msg string) error { return &Error{Kind: KindUnavailable, Msg: msg} }

// Internal wraps an unexpected failure; the caller sees only "internal error".
func Internal(cause error, format string, args ...any) error {
	return &Error{Kind: KindInternal, Msg: fmt.Sprintf(format, args...), Cause: cause}
}

// NotFoundAs turns store.ErrNotFound into a 404 with the message, and anything else into an internal error.
func NotFoundAs(err error, format string, args ...any) error {
	if errors.Is(err, store.ErrNotFound) {
		return NotFound(format, args...)
	}
	return Internal(err, "read metadata")
}

// OrNotFound is err, or store.ErrNotFound when err is nil (a record was found, but of another kind).
func OrNotFound(err error) error {
	if err == nil {
		return store.ErrNotFound
	}
	return err
}

// KindOf returns the kind of err (KindInternal for errors not made here).
func KindOf(err error) Kind {
	if errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrNewerLayout) { // a cluster without quorum, or upgraded by a later version: whatever wrapped it
		return KindUnavailable
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindInternal
}
