package dumpcache

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestEvictEntries: the least recently used files go first until the others fit in the bound; a file
// already gone is not an error; a pinned file stays; a bound of 0 deletes all the others.
func TestEvictEntries(t *testing.T) {
	dir := t.TempDir()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func(name string, size int, used time.Duration) entry {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
		return entry{path: p, size: int64(size), used: base.Add(used)}
	}
	present := func(name string) bool {
		_, err := os.Stat(filepath.Join(dir, name))
		return err == nil
	}
	entries := []entry{mk("old", 40, 0), mk("newest", 50, 3*time.Minute), mk("middle", 30, time.Minute),
		mk("recent", 10, 2*time.Minute)}
	// Newest first: newest 50, recent 10 (60), middle 30 (90), old 40 (130 > 100: evicted).
	n, err := evictEntries(entries, 100, nil)
	if err != nil || n != 1 {
		t.Fatalf("evicted %d (%v), want 1", n, err)
	}
	for name, want := range map[string]bool{"old": false, "middle": true, "recent": true, "newest": true} {
		if present(name) != want {
			t.Errorf("%s present: %v, want %v", name, present(name), want)
		}
	}
	// A smaller bound: middle (60+30 > 80) goes; old, already gone, is not an error.
	if n, err := evictEntries(entries, 80, nil); err != nil || n != 2 || present("middle") || !present("recent") {
		t.Fatalf("bound 80: evicted %d (%v); middle present %v, recent present %v", n, err, present("middle"), present("recent"))
	}
	pinned := map[string]int{filepath.Join(dir, "recent"): 1}
	if n, err := evictEntries(entries, 0, pinned); err != nil || n != 3 || present("newest") || !present("recent") {
		t.Fatalf("bound 0, recent pinned: evicted %d (%v); recent present %v", n, err, present("recent"))
	}
	if n, err := evictEntries(entries, 0, nil); err != nil || n != 4 || present("recent") {
		t.Fatalf("bound 0: evicted %d (%v)", n, err)
	}
}
