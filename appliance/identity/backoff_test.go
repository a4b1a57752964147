package identity

import (
	"testing"
	"time"
)

// TestSignInBackoff: the first SignInFreeAttempts attempts pass; then each attempt makes the account wait
// 1 s, 2 s, 4 s … up to SignInMaxBackoff, counting nothing while it waits; a success clears the count, and
// so does an hour without attempts; accounts are counted apart.
func TestSignInBackoff(t *testing.T) {
	var b signInBackoff
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range SignInFreeAttempts - 1 {
		if wait := b.attempt("a@example.com", now); wait != 0 {
			t.Fatalf("free attempt %d waits %s", i+1, wait)
		}
	}
	// The last free attempt passes and makes the next one wait 1 s.
	if wait := b.attempt("a@example.com", now); wait != 0 {
		t.Fatalf("last free attempt waits %s", wait)
	}
	if wait := b.attempt("a@example.com", now); wait != time.Second {
		t.Fatalf("after the free attempts: wait %s, want 1s", wait)
	}
	if wait := b.attempt("b@example.com", now); wait != 0 {
		t.Fatalf("another account waits %s", wait)
	}
	for want := 2 * time.Second; want <= 8*time.Second; want *= 2 {
		now = now.Add(want / 2) // the previous wait is over
		if wait := b.attempt("a@example.com", now); wait != 0 {
			t.Fatalf("attempt after the wait waits %s", wait)
		}
		if wait := b.attempt("a@example.com", now); wait != want {
			t.Fatalf("wait %s, want %s", wait, want)
		}
	}
	for range 30 {
		now = now.Add(SignInMaxBackoff)
		b.attempt("a@example.com", now)
	}
	if wait := b.attempt("a@example.com", now); wait != SignInMaxBackoff {
		t.Fatalf("wait %s, want the cap %s", wait, SignInMaxBackoff)
	}
	b.succeeded("a@example.com")
	if wait := b.attempt("a@example.com", now); wait != 0 {
		t.Fatalf("after a success: wait %s", wait)
	}

	for range SignInFreeAttempts + 1 {
		b.attempt("c@example.com", now)
	}
	now = now.Add(time.Hour + time.Minute)
	if wait := b.attempt("c@example.com", now); wait != 0 {
		t.Fatalf("after an hour without attempts: wait %s", wait)
	}
}
