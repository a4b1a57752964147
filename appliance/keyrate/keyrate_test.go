package keyrate

import (
	"testing"
	"time"
)

// TestWaitPerKey: a key's burst is taken at once, the next call waits about one interval and takes
// nothing; another key has its own bucket.
func TestWaitPerKey(t *testing.T) {
	l := New(time.Hour, 2)
	for i := range 2 {
		if d := l.Wait("a"); d != 0 {
			t.Fatalf("call %d waits %v, want 0", i, d)
		}
	}
	d := l.Wait("a")
	if d <= 59*time.Minute || d > time.Hour {
		t.Fatalf("the third call waits %v, want about an hour", d)
	}
	if d2 := l.Wait("a"); d2 <= 59*time.Minute {
		t.Fatalf("a refused call took a token: the next waits %v", d2)
	}
	if d := l.Wait("b"); d != 0 {
		t.Fatalf("another key waits %v, want 0", d)
	}
}
