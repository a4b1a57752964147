package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// filledStore writes n instance records (ports 40000+i) into a store at dir/meta.db and closes it.
func filledStore(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "meta.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *Tx) error {
		for i := range n {
			in := &Instance{ID: fmt.Sprintf("ins_%04d", i), Dir: strings.Repeat("d", 200), Port: 40000 + i, State: "running"}
			if err := Instances.Put(tx, in); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestOpenRefusesATruncatedFile: a store file cut short (as by a full disk or a partial copy) is an error
// that says so, not a SIGBUS or a panic from the mapping; so is one cut inside its header.
func TestOpenRefusesATruncatedFile(t *testing.T) {
	t.Parallel()
	// used is how much of the file its pages take (bbolt grows the file ahead of them).
	for _, keep := range []func(used int64) int64{
		func(used int64) int64 { return used / 2 },
		func(used int64) int64 { return used - 4096 },
		func(int64) int64 { return 100 },
	} {
		path := filledStore(t, 500)
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		var used int64
		b.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil })
		b.Close()
		to := keep(used)
		if err := os.Truncate(path, to); err != nil {
			t.Fatal(err)
		}
		db, err := Open(path)
		if err == nil {
			db.Close()
			t.Fatalf("truncated to %d of %d bytes: opened", to, st.Size())
		}
		if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), path) ||
			!(strings.Contains(err.Error(), "is truncated") || strings.Contains(err.Error(), "has no valid header")) {
			t.Fatalf("truncated to %d of %d bytes: %v", to, st.Size(), err)
		}
	}
}

// TestOpenDetectsAChangedByte: one digit of a stored port changed in the file makes Open fail, naming the
// bucket and the record; the read-only open (doctor's) says the same.
func TestOpenDetectsAChangedByte(t *testing.T) {
	t.Parallel()
	path := filledStore(t, 20)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(raw, []byte(`"port":40007`))
	if i < 0 || bytes.Count(raw, []byte(`"port":40007`)) != 1 {
		t.Fatalf("the port is not in the file once (at %d)", i)
	}
	raw[i+len(`"port":4000`)] = '8' // 40007 → 40008
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		db, err := OpenWith(path, Options{ReadOnly: ro})
		if err == nil {
			db.Close()
			t.Fatalf("read-only %v: a changed port was accepted", ro)
		}
		if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), `instances/"ins_0007" fails its checksum`) {
			t.Fatalf("read-only %v: %v", ro, err)
		}
	}
}

// TestOpenSealsAVersion1Store: a store written before records had checksums (schema version 1, bare JSON
// values) opens, its records read as before, and from then on a changed byte in them is caught.
func TestOpenSealsAVersion1Store(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "meta.db")
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Update(func(tx *bolt.Tx) error {
		meta, _ := tx.CreateBucket(bucketMeta)
		meta.Put([]byte("schema_version"), []byte("1"))
		for _, name := range allBuckets() {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		v, _ := json.Marshal(&Instance{ID: "ins_old", ProjectID: "prj_old", Port: 41234})
		if err := tx.Bucket([]byte("instances")).Put([]byte("ins_old"), v); err != nil {
			return err
		}
		return tx.Bucket([]byte("instances.project")).Put([]byte("prj_old"+sep+"ins_old"), nil)
	}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	// doctor's look, before any up migrated it: read as it is
	ro, err := OpenWith(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var got *Instance
	if err := ro.View(func(tx *Tx) error {
		got, err = Instances.First(tx, InstancesByProject, "prj_old")
		return err
	}); err != nil || got.Port != 41234 {
		t.Fatalf("the old record, read-only: %+v, %v", got, err)
	}
	ro.Close()
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.View(func(tx *Tx) error {
		if tx.Meta("schema_version") != fmt.Sprint(SchemaVersion) {
			return fmt.Errorf("schema version %q", tx.Meta("schema_version"))
		}
		got, err = Instances.First(tx, InstancesByProject, "prj_old")
		return err
	}); err != nil || got.Port != 41234 {
		t.Fatalf("the old record: %+v, %v", got, err)
	}
	db.Close()
	raw, _ := os.ReadFile(path)
	i := bytes.Index(raw, []byte(`"port":41234`))
	if i < 0 {
		t.Fatal("the port is not in the file")
	}
	raw[i+len(`"port":4123`)] = '5'
	os.WriteFile(path, raw, 0o600)
	if db, err := Open(path); err == nil || !strings.Contains(err.Error(), `instances/"ins_old" fails its checksum`) {
		if db != nil {
			db.Close()
		}
		t.Fatalf("a changed byte in a migrated record: %v", err)
	}
}

// TestOpenRefusesOlderMetadata: an older copy of the file put back (or the file gone and a new one about
// to be made) is refused, naming both generations and the flag; with AcceptOlderMetadata it opens, and the
// data directory's recorded generation follows it from then on.
func TestOpenRefusesOlderMetadata(t *testing.T) {
	t.Parallel()
	path := filledStore(t, 1)
	older, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := db.Update(func(tx *Tx) error { return Instances.Put(tx, &Instance{ID: fmt.Sprint("ins_new", i)}) }); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	newer, _ := os.ReadFile(path)
	os.WriteFile(path, older, 0o600)
	if db, err := Open(path); !errors.Is(err, ErrOlderMetadata) || !strings.Contains(err.Error(), "--accept-older-metadata") {
		if db != nil {
			db.Close()
		}
		t.Fatalf("older copy: %v", err)
	}
	if db, err := OpenWith(path, Options{ReadOnly: true}); !errors.Is(err, ErrOlderMetadata) {
		if db != nil {
			db.Close()
		}
		t.Fatalf("older copy, read-only: %v", err)
	}
	os.Remove(path)
	if db, err := Open(path); !errors.Is(err, ErrOlderMetadata) {
		if db != nil {
			db.Close()
		}
		t.Fatalf("file gone: %v", err)
	}
	os.WriteFile(path, newer, 0o600)
	if db, err = Open(path); err != nil {
		t.Fatalf("the newest file: %v", err)
	}
	db.Close()
	os.WriteFile(path, older, 0o600)
	if db, err = OpenWith(path, Options{AcceptOlderMetadata: true}); err != nil {
		t.Fatalf("older copy accepted: %v", err)
	}
	db.Close()
	if db, err = Open(path); err != nil {
		t.Fatalf("after accepting: %v", err)
	}
	db.Close()
}
