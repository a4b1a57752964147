package moves

import "testing"

// TestLSNBefore: WAL positions compare as 64-bit numbers (high/low hex halves), not as strings; an
// unreadable position is before any readable one, and nothing is before an unreadable one.
func TestLSNBefore(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"0/6000000", "0/6000000", false},
		{"0/5FFFFFF", "0/6000000", true},
		{"0/6000000", "0/5FFFFFF", false},
		{"0/FFFFFFFF", "1/0", true},  // the low half carries into the high one
		{"A/0", "9/FFFFFFFF", false}, // "A" < "9" as strings, not as positions
		{"16/B374D848", "16/B374D849", true},
		{"", "0/1", true},
		{"junk", "0/1", true},
		{"0/1", "", false},
	} {
		if got := lsnBefore(c.a, c.b); got != c.want {
			t.Errorf("lsnBefore(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
