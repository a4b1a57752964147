package store

import (
	"errors"
	"sync"
	"testing"
)

// TestVersion: a table's version moves once per committed transaction that put or deleted one of its
// records (in an Update or a Batch), before the writer gets its answer; not for a rolled-back transaction,
// a read, or a write to another table.
func TestVersion(t *testing.T) {
	db := openTest(t)
	keys, users := APIKeys.Version(db), Users.Version(db)
	put := func(id string) error {
		return db.Update(func(tx *Tx) error {
			if err := APIKeys.Put(tx, &APIKey{ID: id, KeyHash: "h" + id}); err != nil {
				return err
			}
			return APIKeys.Put(tx, &APIKey{ID: id + "b", KeyHash: "h" + id + "b"}) // same table: counted once
		})
	}
	if err := put("k1"); err != nil {
		t.Fatal(err)
	}
	if got := APIKeys.Version(db); got != keys+1 {
		t.Fatalf("after one commit: version %d, want %d", got, keys+1)
	}
	if Users.Version(db) != users {
		t.Fatal("a write to api_keys moved the users table's version")
	}
	boom := errors.New("boom")
	err := db.Update(func(tx *Tx) error {
		if err := APIKeys.Delete(tx, "k1"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) || APIKeys.Version(db) != keys+1 {
		t.Fatalf("rolled back: err %v, version %d, want %d", err, APIKeys.Version(db), keys+1)
	}
	db.View(func(tx *Tx) error { _, err := APIKeys.Get(tx, "k1"); return err })
	if err := db.Update(func(tx *Tx) error { return APIKeys.Delete(tx, "k1") }); err != nil {
		t.Fatal(err)
	}
	if APIKeys.Version(db) != keys+2 {
		t.Fatalf("after a delete: version %d, want %d", APIKeys.Version(db), keys+2)
	}
	var wg sync.WaitGroup
	for _, id := range []string{"u1", "u2", "u3"} {
		wg.Go(func() {
			if err := db.Batch(func(tx *Tx) error { return Users.Put(tx, &User{ID: id, Email: id}) }); err != nil {
				t.Error(err)
			}
			if Users.Version(db) == users { // the writer sees its own commit counted
				t.Errorf("batch of %s returned before the version moved", id)
			}
		})
	}
	wg.Wait()
	if got := Users.Version(db); got <= users || got > users+3 {
		t.Fatalf("after three batched puts: version %d, want %d to %d", got, users+1, users+3)
	}
}
