package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// laterLayout is the layout a later appliance would write: this one's, a schema version on and a bucket
// more.
func laterLayout(t *testing.T, schemaStep int, bucket string) string {
	t.Helper()
	var l layout
	if err := json.Unmarshal([]byte(layoutOf()), &l); err != nil {
		t.Fatal(err)
	}
	l.Schema += schemaStep
	if bucket != "" {
		l.Buckets = append(l.Buckets, bucket)
	}
	v, _ := json.Marshal(l)
	return string(v)
}

// sameStore is one store opened again and again (a bbolt file, or an etcd prefix), and its meta values
// read and written past Open (which refuses a later appliance's store).
type sameStore struct {
	backend, path, prefix string
}

func newSameStore(t *testing.T, backend string) *sameStore {
	s := &sameStore{backend: backend, path: filepath.Join(t.TempDir(), "meta.db")}
	if backend == "etcd" {
		etcdServer(t)
		s.prefix = newEtcdPrefix()
	}
	return s
}

func (s *sameStore) open() (*DB, error) {
	if s.backend == "bbolt" {
		return Open(s.path)
	}
	return OpenEtcd(testEtcd.local, s.prefix)
}

// bolt runs fn on the file opened by bbolt alone (no store checks).
func (s *sameStore) bolt(t *testing.T, fn func(*bolt.DB) error) {
	t.Helper()
	b, err := bolt.Open(s.path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := fn(b); err != nil {
		t.Fatal(err)
	}
}

// rawMeta reads a meta value ("" when absent) with the backend's own client.
func (s *sameStore) rawMeta(t *testing.T, key string) string {
	t.Helper()
	if s.backend == "bbolt" {
		var v string
		s.bolt(t, func(b *bolt.DB) error {
			return b.View(func(tx *bolt.Tx) error { v = string(tx.Bucket(bucketMeta).Get([]byte(key))); return nil })
		})
		return v
	}
	resp, err := testEtcd.client.Get(context.Background(), s.prefix+"d/"+string(bucketMeta)+"/"+key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// setRawMeta writes a meta value ("": deletes it) with the backend's own client.
func (s *sameStore) setRawMeta(t *testing.T, key, value string) {
	t.Helper()
	if s.backend == "bbolt" {
		s.bolt(t, func(b *bolt.DB) error {
			return b.Update(func(tx *bolt.Tx) error {
				if value == "" {
					return tx.Bucket(bucketMeta).Delete([]byte(key))
				}
				return tx.Bucket(bucketMeta).Put([]byte(key), []byte(value))
			})
		})
		return
	}
	k := s.prefix + "d/" + string(bucketMeta) + "/" + key
	var err error
	if value == "" {
		_, err = testEtcd.client.Delete(context.Background(), k)
	} else {
		_, err = testEtcd.client.Put(context.Background(), k, value)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestNewerLayoutRefused: a store a later appliance opened (its layout names a later schema version or a
// bucket this one does not maintain, or its schema_version is later) is refused with ErrNewerLayout,
// naming why, and left as it was; a version 2 store (no layout record) opens and becomes this version.
func TestNewerLayoutRefused(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			st := newSameStore(t, backend)
			db, err := st.open() // a store of this version
			if err != nil {
				t.Fatal(err)
			}
			db.Close()
			for _, c := range []struct {
				name, key, value, says string
			}{
				{"a bucket more", metaLayout, laterLayout(t, 0, "zz_later_index"), "it keeps zz_later_index, which this appliance does not maintain"},
				{"a later schema in the layout", metaLayout, laterLayout(t, 1, ""), fmt.Sprintf("schema version %d, this appliance's is %d", SchemaVersion+1, SchemaVersion)},
				{"a later schema_version", "schema_version", fmt.Sprint(SchemaVersion + 1), fmt.Sprintf("metadata schema version %d is not supported", SchemaVersion+1)},
			} {
				before := st.rawMeta(t, c.key)
				st.setRawMeta(t, c.key, c.value)
				_, err := st.open()
				if !errors.Is(err, ErrNewerLayout) || !strings.Contains(err.Error(), c.says) {
					t.Fatalf("%s: open: %v, want ErrNewerLayout saying %q", c.name, err, c.says)
				}
				if v := st.rawMeta(t, c.key); v != c.value {
					t.Fatalf("%s: the refused open changed %s to %q", c.name, c.key, v)
				}
				st.setRawMeta(t, c.key, before)
			}

			// A version 2 store: no layout record, schema_version 2. It opens and becomes this version.
			st.setRawMeta(t, metaLayout, "")
			st.setRawMeta(t, "schema_version", "2")
			db, err = st.open()
			if err != nil {
				t.Fatalf("a version 2 store: %v", err)
			}
			db.Close()
			if v := st.rawMeta(t, "schema_version"); v != fmt.Sprint(SchemaVersion) {
				t.Fatalf("a version 2 store opened: schema_version %q", v)
			}
			if v := st.rawMeta(t, metaLayout); v != layoutOf() {
				t.Fatalf("a version 2 store opened: layout %q, want %q", v, layoutOf())
			}
		})
	}
}

// TestLayoutChangeStopsRunningWriters (etcd): two nodes' stores on one cluster write; a third node of the
// same version opening, or the same layout written again, changes nothing for them; once a later appliance upgrades the layout, their next
// writes fail at once with ErrNewerLayout (not retried into ErrConflict) and change nothing, while reads
// go on.
func TestLayoutChangeStopsRunningWriters(t *testing.T) {
	etcdServer(t)
	prefix := newEtcdPrefix()
	a, b := openEtcdNode(t, prefix), openEtcdNode(t, prefix)
	put := func(db *DB, id string) error {
		return db.Update(func(tx *Tx) error { return SavedQueries.Put(tx, &SavedQuery{ID: id, ProjectID: "p1", Name: id}) })
	}
	for i, db := range []*DB{a, b} {
		if err := put(db, fmt.Sprintf("sq_%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	openEtcdNode(t, prefix) // a node of the same version starts
	if err := put(a, "sq_after_a_peer_started"); err != nil {
		t.Fatalf("a write after a node of the same version opened the store: %v", err)
	}

	// The same layout written again (a copy of the store put back): the writes go on.
	layoutKey := prefix + "d/" + string(bucketMeta) + "/" + metaLayout
	if _, err := testEtcd.client.Put(context.Background(), layoutKey, layoutOf()); err != nil {
		t.Fatal(err)
	}
	for i, db := range []*DB{a, b} {
		if err := put(db, fmt.Sprintf("sq_same_layout_%d", i)); err != nil {
			t.Fatalf("a write after the same layout was written again: %v", err)
		}
	}

	later := laterLayout(t, 0, "zz_later_index")
	if _, err := testEtcd.client.Put(context.Background(), layoutKey, later); err != nil {
		t.Fatal(err)
	}
	for _, db := range []*DB{a, b} {
		err := put(db, "sq_under_a_later_layout")
		if !errors.Is(err, ErrNewerLayout) || errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "zz_later_index") {
			t.Fatalf("a write under a later layout: %v, want ErrNewerLayout naming zz_later_index", err)
		}
		err = db.View(func(tx *Tx) error {
			if _, err := SavedQueries.Get(tx, "sq_0"); err != nil {
				return err
			}
			if _, err := SavedQueries.Get(tx, "sq_under_a_later_layout"); !errors.Is(err, ErrNotFound) {
				return fmt.Errorf("the refused write: %v", err)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("a read under a later layout: %v", err)
		}
	}
	if _, err := OpenEtcd(testEtcd.local, prefix); !errors.Is(err, ErrNewerLayout) {
		t.Fatalf("an open under a later layout: %v", err)
	}
}
