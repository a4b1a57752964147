package node

import (
	"syscall"
	"testing"
)

// TestFDBudget: the connection caps fit the open-files limit with a reserve: the key-value fronts' cap is
// lowered to what fits, and a limit too small for the API's cap is an error.
func TestFDBudget(t *testing.T) {
	for _, c := range []struct {
		limit          uint64
		api, kv, want  int
		changed, fails bool
	}{
		{limit: 1 << 20, api: 1000, kv: 10000, want: 10000},
		{limit: 20000, api: 1000, kv: 4096, want: 4096}, // the defaults fit a 20000 limit
		{limit: 20000, api: 1000, kv: 10000, want: (20000 - fdReserve - 1000) / 4, changed: true},
		{limit: 1024, api: 1000, kv: 10000, fails: true},
		{limit: 1 << 20, api: 0, kv: 10, fails: true},
	} {
		got, changed, err := fdBudget(c.limit, c.api, c.kv)
		if (err != nil) != c.fails || got != c.want || changed != c.changed {
			t.Errorf("fdBudget(%d, %d, %d) = %d, %v, %v", c.limit, c.api, c.kv, got, changed, err)
		}
		if !c.fails && 4*got+c.api+fdReserve > int(c.limit) {
			t.Errorf("limit %d: %d per front and %d API connections overrun it", c.limit, got, c.api)
		}
	}
}

// TestRaiseFileLimit: the soft open-files limit ends at the hard one.
func TestRaiseFileLimit(t *testing.T) {
	got, err := raiseFileLimit()
	if err != nil {
		t.Fatal(err)
	}
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
	if got != l.Max || l.Cur != l.Max {
		t.Fatalf("raised to %d; now soft %d, hard %d", got, l.Cur, l.Max)
	}
}
