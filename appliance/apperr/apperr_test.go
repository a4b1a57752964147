package apperr

import (
	"errors"
	"fmt"
	"testing"

	"github.com/theappliance/appliance/store"
)

func TestKinds(t *testing.T) {
	cause := errors.New("disk on fire")
	for _, c := range []struct {
		err  error
		kind Kind
		msg  string
	}{
		{Invalid("bad %s", "x"), KindInvalid, "bad x"},
		{Forbidden("no %d", 1), KindForbidden, "no 1"},
		{NotFound("gone"), KindNotFound, "gone"},
		{Conflict("busy"), KindConflict, "busy"},
		{Unauthenticated("who"), KindUnauthenticated, "who"},
		{Gone("late"), KindGone, "late"},
		{Unavailable("off: 100%"), KindUnavailable, "off: 100%"},
		{Internal(cause, "write %s", "it"), KindInternal, "write it: disk on fire"},
		{fmt.Errorf("wrapped: %w", Conflict("busy")), KindConflict, "wrapped: busy"},
		{cause, KindInternal, "disk on fire"},
	} {
		if got := KindOf(c.err); got != c.kind {
			t.Errorf("KindOf(%v) = %d, want %d", c.err, got, c.kind)
		}
		if c.err.Error() != c.msg {
			t.Errorf("message %q, want %q", c.err.Error(), c.msg)
		}
	}
	var e *Error
	if !errors.As(Internal(cause, "x"), &e) || e.Msg != "x" || !errors.Is(e, cause) {
		t.Fatalf("Internal keeps its public message apart from its cause: %+v", e)
	}
}

func TestNotFoundAs(t *testing.T) {
	if err := NotFoundAs(fmt.Errorf("get: %w", store.ErrNotFound), "project %s not found", "p"); KindOf(err) != KindNotFound || err.Error() != "project p not found" {
		t.Errorf("not found: %v", err)
	}
	cause := errors.New("bolt closed")
	if err := NotFoundAs(cause, "project %s not found", "p"); KindOf(err) != KindInternal || !errors.Is(err, cause) {
		t.Errorf("another failure: %v", err)
	}
}

// TestOrNotFound: a record of another kind (no error) is a 404 through NotFoundAs; an error stays itself.
func TestOrNotFound(t *testing.T) {
	if err := NotFoundAs(OrNotFound(nil), "preview database %s not found", "prv"); KindOf(err) != KindNotFound {
		t.Errorf("another kind: %v", err)
	}
	cause := errors.New("bolt closed")
	if err := OrNotFound(cause); err != cause {
		t.Errorf("an error: %v", err)
	}
}
