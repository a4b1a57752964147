package store

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestUniqueAndCountedIndexes: the saved queries' names are a unique index (a key per project and name,
// case folded) and their projects a counted one; Put, a change of name or project, and Delete keep both in
// step, a name another record holds is refused (ErrExists), and Holder in an Update is right even when
// the first attempt took the key as free (etcd: the commit's compare catches it and the function runs
// again).
func TestUniqueAndCountedIndexes(t *testing.T) { onBackends(t, testUniqueAndCountedIndexes) }

func testUniqueAndCountedIndexes(t *testing.T, db *DB) {
	put := func(q *SavedQuery) error { return db.Update(func(tx *Tx) error { return SavedQueries.Put(tx, q) }) }
	for _, q := range []*SavedQuery{{ID: "sq_a", ProjectID: "p1", Name: "Alpha"}, {ID: "sq_b", ProjectID: "p1", Name: "beta"}, {ID: "sq_c", ProjectID: "p2", Name: "alpha"}} {
		if err := put(q); err != nil {
			t.Fatal(err)
		}
	}
	check := func(holders map[[2]string]string, counts map[string]int) {
		t.Helper()
		for _, update := range []bool{false, true} { // a View reads; an Update's first attempt may assume
			run := db.View
			if update {
				run = db.Update
			}
			for pn, want := range holders {
				var got string
				if err := run(func(tx *Tx) error {
					var err error
					got, err = SavedQueries.Holder(tx, SavedQueriesByName, SavedQueryName(pn[0], pn[1]))
					return err
				}); err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("holder of %q in %s (update %v): %q, want %q", pn[1], pn[0], update, got, want)
				}
			}
			for p, want := range counts {
				var got int
				if err := run(func(tx *Tx) error {
					var err error
					got, err = SavedQueries.Count(tx, SavedQueriesByProject, p)
					return err
				}); err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("count of %s (update %v): %d, want %d", p, update, got, want)
				}
			}
		}
	}
	check(map[[2]string]string{{"p1", "ALPHA"}: "sq_a", {"p1", "Beta"}: "sq_b", {"p2", "alpha"}: "sq_c", {"p1", "gamma"}: "", {"p3", "alpha"}: ""},
		map[string]int{"p1": 2, "p2": 1, "p3": 0})

	if err := put(&SavedQuery{ID: "sq_d", ProjectID: "p1", Name: "aLPHA"}); !errors.Is(err, ErrExists) {
		t.Fatalf("a second record named alpha in p1: %v, want ErrExists", err)
	}
	if err := put(&SavedQuery{ID: "sq_a", ProjectID: "p1", Name: "Gamma"}); err != nil { // renamed
		t.Fatal(err)
	}
	if err := put(&SavedQuery{ID: "sq_b", ProjectID: "p2", Name: "beta"}); err != nil { // moved
		t.Fatal(err)
	}
	check(map[[2]string]string{{"p1", "alpha"}: "", {"p1", "GAMMA"}: "sq_a", {"p1", "beta"}: "", {"p2", "beta"}: "sq_b", {"p2", "alpha"}: "sq_c"},
		map[string]int{"p1": 1, "p2": 2})
	if err := db.Update(func(tx *Tx) error { return SavedQueries.Delete(tx, "sq_a") }); err != nil {
		t.Fatal(err)
	}
	if err := put(&SavedQuery{ID: "sq_e", ProjectID: "p1", Name: "gamma"}); err != nil { // the name deleted is free
		t.Fatal(err)
	}
	check(map[[2]string]string{{"p1", "gamma"}: "sq_e"}, map[string]int{"p1": 1, "p2": 2})
	if err := db.View(func(tx *Tx) error {
		_, err := SavedQueries.Lookup(tx, SavedQueriesByName, "p1", Query{})
		return err
	}); err == nil {
		t.Error("a lookup in a unique index: no error")
	}
}

// TestSavedQueryNameFolds: the names strings.EqualFold calls equal have one key, and only they.
func TestSavedQueryNameFolds(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{{"Report", "rEPORT", true}, {"kelvin", "\u212aelvin", true}, {"ſtraße", "STRASSE", false}, {"straße", "STRAẞE", true}, {"a", "b", false}, {"ΣΑΣ", "σας", true}} {
		same := SavedQueryName("p", c.a) == SavedQueryName("p", c.b)
		if same != c.same || same != strings.EqualFold(c.a, c.b) {
			t.Errorf("%q and %q: one key %v, want %v", c.a, c.b, same, c.same)
		}
	}
	if SavedQueryName("p1", "a") == SavedQueryName("p2", "a") {
		t.Error("one name in two projects: one key")
	}
}

// TestOpenFillsUniqueAndCountedIndexes: a store whose saved queries predate the unique and counted indexes
// gets them filled when it opens; a name two records have (which nothing could write) is the oldest's, and
// deleting the other leaves it the oldest's.
func TestOpenFillsUniqueAndCountedIndexes(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) { testOpenFillsUniqueAndCountedIndexes(t, backend) })
	}
}

func testOpenFillsUniqueAndCountedIndexes(t *testing.T, backend string) {
	path := filepath.Join(t.TempDir(), "meta.db")
	var prefix string
	if backend == "etcd" {
		etcdServer(t)
		prefix = newEtcdPrefix()
	}
	open := func() *DB {
		t.Helper()
		var db *DB
		var err error
		if backend == "bbolt" {
			db, err = Open(path)
		} else {
			db, err = OpenEtcd(testEtcd.local, prefix)
		}
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	db := open()
	if err := db.Update(func(tx *Tx) error {
		for _, q := range []*SavedQuery{{ID: "sq_1", ProjectID: "p1", Name: "Alpha"}, {ID: "sq_2", ProjectID: "p1", Name: "beta"}} {
			if err := SavedQueries.Put(tx, q); err != nil {
				return err
			}
		}
		// A record of a name sq_1 has, written past the indexes.
		raw, err := json.Marshal(&SavedQuery{ID: "sq_3", ProjectID: "p1", Name: "ALPHA"})
		if err != nil {
			return err
		}
		return tx.kv.bucket(SavedQueries.bucket).Put([]byte("sq_3"), seal(raw))
	}); err != nil {
		t.Fatal(err)
	}
	// The indexes' buckets go, as if a later version had added them.
	for _, name := range []string{string(SavedQueriesByProject.bucket), string(SavedQueriesByProject.counts), string(SavedQueriesByName.bucket)} {
		if backend == "bbolt" {
			if err := db.bolt.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte(name)) }); err != nil {
				t.Fatal(err)
			}
			continue
		}
		ctx := context.Background()
		if _, err := testEtcd.client.Delete(ctx, prefix+"d/"+name+"/", clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
		if _, err := testEtcd.client.Delete(ctx, prefix+"d/"+etcdBuckets+"/"+name); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	db = open()
	defer db.Close()
	state := func() (holder string, count, listed int) {
		t.Helper()
		if err := db.View(func(tx *Tx) error {
			var err error
			if holder, err = SavedQueries.Holder(tx, SavedQueriesByName, SavedQueryName("p1", "alpha")); err != nil {
				return err
			}
			if count, err = SavedQueries.Count(tx, SavedQueriesByProject, "p1"); err != nil {
				return err
			}
			qs, err := SavedQueries.Lookup(tx, SavedQueriesByProject, "p1", Query{})
			listed = len(qs)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if h, n, l := state(); h != "sq_1" || n != 3 || l != 3 {
		t.Fatalf("after the fill: alpha is %q's, p1 counts %d and lists %d; want sq_1's, 3, 3", h, n, l)
	}
	if err := db.Update(func(tx *Tx) error { return SavedQueries.Delete(tx, "sq_3") }); err != nil {
		t.Fatal(err)
	}
	if h, n, l := state(); h != "sq_1" || n != 2 || l != 2 {
		t.Fatalf("after sq_3's delete: alpha is %q's, p1 counts %d and lists %d; want sq_1's, 2, 2", h, n, l)
	}
}
