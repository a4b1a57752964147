package store

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestCopyAll copies a bbolt store with records in several tables (more than one batch of one), index
// entries, meta values and an event sequence into etcd and finds every key again; a copy changed after
// (a value, a missing key, an extra key) fails the verification, naming the bucket and key.
func TestCopyAll(t *testing.T) {
	src := openBackend(t, "bbolt")
	const n = copyBatchKeys + 100
	if err := src.Update(func(tx *Tx) error {
		if err := tx.SetMeta("cluster_test", "yes"); err != nil {
			return err
		}
		for i := range n {
			if err := Organizations.Put(tx, &Organization{ID: fmt.Sprintf("org_%05d", i), Name: "o", Slug: fmt.Sprintf("o%d", i), CreatedAt: time.Now().UTC()}); err != nil {
				return err
			}
		}
		for i := range 3 {
			if err := Projects.Put(tx, &Project{ID: fmt.Sprintf("prj_%d", i), OrganizationID: "org_00001", Name: "p"}); err != nil {
				return err
			}
		}
		for range 5 {
			if _, err := tx.kv.bucket(Events.bucket).NextSequence(); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	dst := openBackend(t, "etcd")
	rep, err := CopyAll(dst, src)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Records < n+3 || rep.Buckets != len(allBuckets())+1 {
		t.Fatalf("report %+v: want at least %d records in %d buckets", rep, n+3, len(allBuckets())+1)
	}
	if err := dst.View(func(tx *Tx) error {
		ps, err := Projects.Lookup(tx, ProjectsByOrg, "org_00001", Query{})
		if err != nil {
			return err
		}
		if len(ps) != 3 {
			return fmt.Errorf("projects of org_00001 on the copy: %d, want 3", len(ps))
		}
		if got := EventPosition(tx); got != 5 {
			return fmt.Errorf("event position on the copy: %d, want 5", got)
		}
		if got := tx.Meta("cluster_test"); got != "yes" {
			return fmt.Errorf("meta value on the copy: %q", got)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, want string
		change     func(tx *Tx) error
	}{
		{"changed", `key "org_00007" differs`, func(tx *Tx) error { return tx.kv.bucket(Organizations.bucket).Put([]byte("org_00007"), []byte("{}")) }},
		{"missing", `key "prj_1" missing`, func(tx *Tx) error { return tx.kv.bucket(Projects.bucket).Delete([]byte("prj_1")) }},
		{"extra", `key "zzz" is not in the source`, func(tx *Tx) error { return tx.kv.bucket(APIKeys.bucket).Put([]byte("zzz"), []byte("{}")) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dst := openBackend(t, "etcd")
			if _, err := CopyAll(dst, src); err != nil {
				t.Fatal(err)
			}
			if err := dst.Update(c.change); err != nil {
				t.Fatal(err)
			}
			err := VerifyCopy(dst, src)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("verify after a change: %v, want an error with %q", err, c.want)
			}
		})
	}
}
