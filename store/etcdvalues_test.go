package store

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestEtcdChangedKeys(t *testing.T) {
	keys := []string{"a", "", "with\x00nul", string(make([]byte, 300))}
	got, ok := etcdChangedKeys(etcdChangedValue(keys))
	if !ok || !slices.Equal(got, keys) {
		t.Fatalf("round trip of %q: %q %v", keys, got, ok)
	}
	for _, v := range [][]byte{nil, {}, {5, 'a'}, {0x80}} {
		if keys, ok := etcdChangedKeys(v); ok {
			t.Errorf("%q reads as keys %q", v, keys)
		}
	}
}

// Another client's commit drops, from what this process knows (etcdKV.values), the values of the keys it
// wrote only (its version key names them); an empty version key value (an older appliance's) drops the
// bucket's.
func TestEtcdKnownValuesFollowOthersCommits(t *testing.T) {
	etcdServer(t)
	prefix := newEtcdPrefix()
	a, b := openEtcdNode(t, prefix), openEtcdNode(t, prefix)
	put := func(db *DB, kv ...string) {
		t.Helper()
		if err := db.Update(func(tx *Tx) error {
			if err := ScheduledBackups.Put(tx, &ScheduledBackup{ID: "sb", ProjectID: "p"}); err != nil { // a table: its version says when b saw it
				return err
			}
			for i := 0; i < len(kv); i += 2 {
				if err := tx.SetMeta(kv[i], kv[i+1]); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	sawA := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for want := ScheduledBackups.Version(a); ScheduledBackups.Version(b) < want; {
			select {
			case <-b.Changes():
			case <-ctx.Done():
				t.Fatal("b's watch never brought a's commit")
			}
		}
	}
	known := func(key string) bool {
		_, ok := b.etcd.values.get(string(bucketMeta), b.etcd.prefix+"d/"+string(bucketMeta)+"/"+key)
		return ok
	}
	put(b, "k1", "1", "k2", "2")
	if !known("k1") || !known("k2") {
		t.Fatal("b does not know the values it committed")
	}
	put(a, "k1", "10")
	sawA()
	if known("k1") || !known("k2") {
		t.Fatalf("after a's write of k1, b knows k1 %v (want false), k2 %v (want true)", known("k1"), known("k2"))
	}
	if _, err := testEtcd.client.Put(context.Background(), prefix+"v/"+string(bucketMeta), ""); err != nil { // an older appliance's commit
		t.Fatal(err)
	}
	put(a)
	sawA()
	if known("k2") {
		t.Fatal("after a version key written empty, b still knows k2")
	}
}

// Insert adds a record of a new ID, and refuses (ErrExists) one whose ID the table holds, leaving it as it
// was: on etcd the first attempt takes the key as absent without reading it, and its commit's compare finds
// it there (the transaction runs again, reads it, and refuses).
func TestInsert(t *testing.T) {
	onBackends(t, func(t *testing.T, db *DB) {
		ev := &AuditEvent{ID: "aud1", Action: "first", OrganizationID: "o1"}
		if err := db.Update(func(tx *Tx) error { return AuditEvents.Insert(tx, ev) }); err != nil {
			t.Fatal(err)
		}
		runs := 0
		err := db.Update(func(tx *Tx) error {
			runs++
			return AuditEvents.Insert(tx, &AuditEvent{ID: "aud1", Action: "second", OrganizationID: "o2"})
		})
		if !errors.Is(err, ErrExists) {
			t.Fatalf("insert of an ID the table holds: %v, want ErrExists", err)
		}
		if db.etcd != nil && runs != 2 {
			t.Errorf("on etcd the insert ran %d times, want 2 (taken as absent, then read)", runs)
		}
		if err := db.View(func(tx *Tx) error {
			got, err := AuditEvents.Get(tx, "aud1")
			if err != nil || got.Action != "first" {
				t.Errorf("the record after the refused insert: %+v, %v", got, err)
			}
			n, err := AuditEvents.Count(tx, AuditEventsByOrg, "o2")
			if err != nil || n != 0 {
				t.Errorf("the refused insert left %d index entries (%v)", n, err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
}
