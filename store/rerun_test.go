package store

import (
	"path/filepath"
	"testing"
)

// TestRerunUpdates: with RerunUpdates, bbolt's Update runs fn twice; the first run's writes are rolled back
// (the second run does not see them) and its OnCommit functions never run; the version moves once.
func TestRerunUpdates(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.RerunUpdates(true)
	before := APIKeys.Version(db)
	runs, commits, sawFirst := 0, 0, false
	if err := db.Update(func(tx *Tx) error {
		runs++
		if _, err := APIKeys.Get(tx, "k1"); err == nil {
			sawFirst = true
		}
		tx.OnCommit(func() { commits++ })
		return APIKeys.Put(tx, &APIKey{ID: "k1", KeyHash: "h"})
	}); err != nil {
		t.Fatal(err)
	}
	if runs != 2 || commits != 1 || sawFirst {
		t.Fatalf("runs %d (want 2), OnCommit ran %d times (want 1), second run saw the first's write: %v", runs, commits, sawFirst)
	}
	if got := APIKeys.Version(db); got != before+1 {
		t.Fatalf("version %d, want %d", got, before+1)
	}
	db.RerunUpdates(false)
	runs = 0
	if err := db.Update(func(tx *Tx) error { runs++; return nil }); err != nil || runs != 1 {
		t.Fatalf("off: runs %d, err %v", runs, err)
	}
}
