package appliance

import (
	"errors"
	"fmt"
	"time"
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
	KindInsufficientStorage             // 507: the appliance is short of disk space (disk.go)
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

// Internal wraps an unexpected failure; the caller sees only "internal error".
func Internal(cause error, format string, args ...any) error {
	return &Error{Kind: KindInternal, Msg: fmt.Sprintf(format, args...), Cause: cause}
}

// KindOf returns the kind of err (KindInternal for errors not made here).
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindInternal
}
