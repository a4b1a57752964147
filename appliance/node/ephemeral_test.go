package node

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestCleanLeftovers: a start removes the directory of a throwaway appliance whose owner is dead (or whose
// pid was reused: another start time), and keeps a live owner's, a fresh one without an owner yet, and
// another user's.
func TestCleanLeftovers(t *testing.T) {
	parent := t.TempDir()
	start, err := procStart(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	mk := func(name, owner string) string {
		t.Helper()
		d := filepath.Join(parent, ephemeralPrefix+name)
		if err := os.MkdirAll(filepath.Join(d, "data"), 0o700); err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			if err := os.WriteFile(filepath.Join(d, ownerFile), []byte(owner), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	live := mk("live", fmt.Sprintf("%d %s\n", os.Getpid(), start))
	reused := mk("reused", fmt.Sprintf("%d %s0\n", os.Getpid(), start))
	dead := mk("dead", "2147483646 1\n")
	fresh := mk("fresh", "")
	others := mk("others", "2147483646 1\n")
	if os.Geteuid() == 0 {
		if err := os.Chown(others, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	cleanLeftovers(parent, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for d, kept := range map[string]bool{live: true, reused: false, dead: false, fresh: true, others: os.Geteuid() == 0} {
		_, err := os.Stat(d)
		if kept != (err == nil) {
			t.Errorf("%s: kept %v, want %v", filepath.Base(d), err == nil, kept)
		}
	}
}
