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

// TestAddressKey: an IPv6 address counts by its /64, IPv4 (also mapped into IPv6) and loopback addresses
// one each, and what is not an address is its own key.
func TestAddressKey(t *testing.T) {
	for _, c := range []struct{ ip, want string }{
		{"192.0.2.1", "192.0.2.1"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{"2001:db8:1:2::3", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff::9", "2001:db8:1:2::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"::1", "::1"},
		{"not-an-address", "not-an-address"},
	} {
		if got := AddressKey(c.ip); got != c.want {
			t.Errorf("AddressKey(%q) = %q, want %q", c.ip, got, c.want)
		}
	}
}
