package store

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestVersion: a table's version moves once per committed transaction that put or deleted one of its
// records (in an Update, concurrent ones included), before the writer gets its answer; not for a rolled-back transaction,
// a read, or a write to another table.
// On etcd a version is a revision: it moves on by more than one, and the test asks only that it moves.
func TestVersion(t *testing.T) { onBackends(t, testVersion) }

func testVersion(t *testing.T, db *DB) {
	exact := db.etcd == nil // bbolt counts the transactions
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
	if got := APIKeys.Version(db); got <= keys || exact && got != keys+1 {
		t.Fatalf("after one commit: version %d, want %d", got, keys+1)
	}
	keys = APIKeys.Version(db)
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
	if !errors.Is(err, boom) || APIKeys.Version(db) != keys {
		t.Fatalf("rolled back: err %v, version %d, want %d", err, APIKeys.Version(db), keys)
	}
	db.View(func(tx *Tx) error { _, err := APIKeys.Get(tx, "k1"); return err })
	if err := db.Update(func(tx *Tx) error { return APIKeys.Delete(tx, "k1") }); err != nil {
		t.Fatal(err)
	}
	if got := APIKeys.Version(db); got <= keys || exact && got != keys+1 {
		t.Fatalf("after a delete: version %d, want %d", got, keys+1)
	}
	var wg sync.WaitGroup
	for _, id := range []string{"u1", "u2", "u3"} {
		wg.Go(func() {
			if err := db.Update(func(tx *Tx) error { return Users.Put(tx, &User{ID: id, Email: id}) }); err != nil {
				t.Error(err)
			}
			if Users.Version(db) == users { // the writer sees its own commit counted
				t.Errorf("the update of %s returned before the version moved", id)
			}
		})
	}
	wg.Wait()
	if got := Users.Version(db); got <= users || exact && got > users+3 {
		t.Fatalf("after three concurrent puts: version %d, want %d to %d", got, users+1, users+3)
	}
}

// TestPutRewritesChangedIndexEntriesOnly: a Put files the record under its new keys and no longer under
// keys it lost, and leaves entries it keeps untouched (no page of theirs is copied in the transaction).
// (The count of pages copied is bbolt's; on etcd the entries are checked.)
func TestPutRewritesChangedIndexEntriesOnly(t *testing.T) {
	onBackends(t, testPutRewritesChangedIndexEntriesOnly)
}

func testPutRewritesChangedIndexEntriesOnly(t *testing.T, db *DB) {
	due := time.Unix(1700000000, 0)
	d := &WebhookDelivery{ID: "msg_1", EndpointID: "we_1", OrganizationID: "org_1", State: "pending", NextAttemptAt: &due}
	entries := func() map[string][]string {
		out := map[string][]string{}
		db.View(func(tx *Tx) error {
			for _, ix := range WebhookDeliveries.indexes {
				tx.kv.bucket(ix.bucket).ForEach(func(k, _ []byte) error {
					out[string(ix.bucket)] = append(out[string(ix.bucket)], string(k))
					return nil
				})
			}
			return nil
		})
		return out
	}
	// put stores d and returns how many nodes the transaction materialized.
	put := func() int {
		var nodes int
		if err := db.Update(func(tx *Tx) error {
			if err := WebhookDeliveries.Put(tx, d); err != nil {
				return err
			}
			if b, ok := tx.kv.(boltTx); ok {
				st := b.tx.Stats()
				nodes = int(st.GetNodeCount())
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return nodes
	}
	put()
	want := map[string][]string{
		"webhook_deliveries.endpoint":     {"we_1\x00msg_1"},
		"webhook_deliveries.organization": {"org_1\x00msg_1"},
		"webhook_deliveries.due":          {"we_1 " + DueKey(due) + "\x00msg_1"},
	}
	if got := entries(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after the first put: %q, want %q", got, want)
	}
	d.LastError = "timeout" // no key changes
	same := put()
	if got := entries(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a put keeping the keys: %q, want %q", got, want)
	}
	later := due.Add(time.Minute) // the due key changes
	d.NextAttemptAt = &later
	moved := put()
	want["webhook_deliveries.due"] = []string{"we_1 " + DueKey(later) + "\x00msg_1"}
	if got := entries(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a put moving the due key: %q, want %q", got, want)
	}
	if db.etcd == nil && same >= moved {
		t.Errorf("a put keeping every index key materialized %d nodes, one changing a key %d: unchanged entries were rewritten", same, moved)
	}
	d.State, d.NextAttemptAt = "delivered", nil // the due entry goes
	put()
	delete(want, "webhook_deliveries.due")
	if got := entries(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a put leaving the due index: %q, want %q", got, want)
	}
}

// TestOpenFillsANewIndex: an index bucket missing from an existing store (an index a later version added)
// is created and filed with the records already there when the store opens.
func TestOpenFillsANewIndex(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) { testOpenFillsANewIndex(t, backend) })
	}
}

func testOpenFillsANewIndex(t *testing.T, backend string) {
	path := filepath.Join(t.TempDir(), "meta.db")
	var prefix string
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
	if backend == "etcd" {
		etcdServer(t)
		prefix = newEtcdPrefix()
	}
	db := open()
	due := time.Unix(1700000000, 0)
	if err := db.Update(func(tx *Tx) error {
		for _, id := range []string{"msg_1", "msg_2"} {
			if err := WebhookDeliveries.Put(tx, &WebhookDelivery{ID: id, EndpointID: "we_1", State: "pending", NextAttemptAt: &due}); err != nil {
				return err
			}
		}
		return WebhookDeliveries.Put(tx, &WebhookDelivery{ID: "msg_3", EndpointID: "we_1", State: "delivered"})
	}); err != nil {
		t.Fatal(err)
	}
	// The index's bucket goes, as if a later version had added it.
	if backend == "bbolt" {
		if err := db.bolt.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(WebhookDeliveriesDue.bucket) }); err != nil {
			t.Fatal(err)
		}
	} else {
		ctx := context.Background()
		name := string(WebhookDeliveriesDue.bucket)
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
	var got []string
	if err := db.View(func(tx *Tx) error {
		ds, err := WebhookDeliveries.Range(tx, WebhookDeliveriesDue, "we_1 ", "we_1 "+DueKey(due.Add(time.Second)), 0)
		for _, d := range ds {
			got = append(got, d.ID)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []string{"msg_1", "msg_2"}) {
		t.Fatalf("due deliveries after the index was filled: %v, want msg_1 and msg_2", got)
	}
}

// TestCommitVersion: in an OnCommit function, a table the transaction wrote has the version its commit
// gave it (the table's version then, with no other writer), and one it did not write has 0; the attempt
// that is run again (RerunUpdates on bbolt, a conflict on etcd) runs no OnCommit function.
func TestCommitVersion(t *testing.T) {
	onBackends(t, func(t *testing.T, db *DB) {
		db.RerunUpdates(true)
		for range 2 {
			var wrote, other, now uint64
			calls := 0
			if err := db.Update(func(tx *Tx) error {
				tx.OnCommit(func() {
					calls++
					wrote, other, now = Organizations.CommitVersion(tx), Projects.CommitVersion(tx), Organizations.Version(db)
				})
				return Organizations.Put(tx, &Organization{ID: "org_1", Name: "one"})
			}); err != nil {
				t.Fatal(err)
			}
			if calls != 1 || wrote == 0 || wrote != now || other != 0 {
				t.Fatalf("OnCommit ran %d times; the organizations' commit version %d (version %d), the projects' %d", calls, wrote, now, other)
			}
		}
	})
}
