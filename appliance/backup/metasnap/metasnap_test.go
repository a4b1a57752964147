package metasnap

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/theappliance/appliance/appliance/backup/s3store"
	"github.com/theappliance/appliance/appliance/backup/s3store/s3test"
	"github.com/theappliance/appliance/store"
)

// snapshotBucket is the server's bucket sealed with the snapshot key of recoveryKey.
func snapshotBucket(t *testing.T, srv *s3test.Server, recoveryKey []byte) *s3store.Bucket {
	t.Helper()
	key, err := SnapshotKey(recoveryKey)
	if err != nil {
		t.Fatal(err)
	}
	cfg := srv.Config("appl")
	cfg.DataKey = key
	b, err := s3store.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newDataDir(t *testing.T) (string, *store.DB) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "ca"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"ca/ca.crt": "CERTIFICATE", "ca/ca.key": "CA PRIVATE KEY", "secret.key": "SEALING KEY"} {
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(name)), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	db, err := store.Open(filepath.Join(dir, DBName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return dir, db
}

// TestSnapshotToBucket: a change of the metadata is in a new snapshot in the bucket within the coalescing
// window; the snapshot, restored with the recovery key, holds the change and the files; the objects are
// sealed (neither bbolt's magic nor the organization's name in the bucket's bytes); a wrong recovery key
// reads nothing; retention keeps Keep snapshots.
func TestSnapshotToBucket(t *testing.T) {
	srv := s3test.Start(t)
	recoveryKey, created, err := LoadOrCreateRecoveryKey(filepath.Join(t.TempDir(), "recovery.key"))
	if err != nil || !created {
		t.Fatal(created, err)
	}
	objs := snapshotBucket(t, srv, recoveryKey)
	dir, db := newDataDir(t)
	s := &Snapshotter{DB: db, Objects: objs, DataDir: dir, Files: []string{"ca/ca.crt", "ca/ca.key", "secret.key"},
		Interval: 500 * time.Millisecond, Keep: 3}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	ctx0 := context.Background()
	// waitFor waits until the newest snapshot satisfies ok (polling the bucket, as recover would read it),
	// for at most the coalescing window plus an upload's time.
	waitFor := func(what string, ok func(*Manifest) bool) *Manifest {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			m, err := LatestSnapshot(ctx0, objs)
			if err == nil && ok(m) {
				return m
			}
			if err != nil && !errors.Is(err, ErrNoSnapshot) {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("no snapshot with %s within 10 s (last: %+v, %v)", what, m, err)
			}
			time.Sleep(50 * time.Millisecond) // polling the bucket, as a reader does
		}
	}
	first := waitFor("anything", func(*Manifest) bool { return true })

	org := &store.Organization{ID: "org_snapshotted", Name: "Snapshotted Widgets Ltd", Slug: "snapshotted-widgets"}
	var gen uint64
	if err := db.Update(func(tx *store.Tx) error { gen = uint64(tx.Generation()); return store.Organizations.Put(tx, org) }); err != nil {
		t.Fatal(err)
	}
	m := waitFor("the organization", func(m *Manifest) bool { return m.Generation >= gen && m.ID != first.ID })

	restored := t.TempDir()
	if err := Restore(ctx0, objs, m, restored); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"ca/ca.crt": "CERTIFICATE", "ca/ca.key": "CA PRIVATE KEY", "secret.key": "SEALING KEY"} {
		if got, err := os.ReadFile(filepath.Join(restored, filepath.FromSlash(name))); err != nil || string(got) != want {
			t.Fatalf("restored %s: %q, %v", name, got, err)
		}
	}
	bdb, err := bolt.Open(filepath.Join(restored, DBName), 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	bdb.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket([]byte("organizations")); b != nil {
			found = bytes.Contains(b.Get([]byte(org.ID)), []byte(org.Name))
		}
		return nil
	})
	bdb.Close()
	if !found {
		t.Fatal("the snapshot's meta.db lacks the organization")
	}
	// The same through the store package.
	sdb, err := store.OpenWith(filepath.Join(restored, DBName), store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := sdb.View(func(tx *store.Tx) error {
		got, err := store.Organizations.Get(tx, org.ID)
		if err == nil && got.Name != org.Name {
			err = errors.New("another name: " + got.Name)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	sdb.Close()

	// Sealed: the bucket's bytes hold neither bbolt's magic nor the name nor the sealing key.
	for _, o := range m.Objects {
		raw, err := os.ReadFile(srv.Path("appl/" + o.Key))
		if err != nil {
			t.Fatal(err)
		}
		for _, clear := range [][]byte{{0xed, 0xda, 0x0c, 0xed}, {0xed, 0x0c, 0xda, 0xed}, []byte(org.Name), []byte("SEALING KEY"), []byte("CA PRIVATE KEY")} {
			if bytes.Contains(raw, clear) {
				t.Fatalf("%s holds %q in the clear", o.Key, clear)
			}
		}
	}

	// Another recovery key reads nothing.
	other := make([]byte, RecoveryKeySize)
	if _, err := LatestSnapshot(ctx0, snapshotBucket(t, srv, other)); err == nil {
		t.Fatal("a wrong recovery key read the manifest")
	}

	// Retention: more changes, more snapshots; never more than Keep manifests.
	var last uint64 // the generation of the last change
	for i := range 4 {
		var g uint64
		if err := db.Update(func(tx *store.Tx) error {
			g = uint64(tx.Generation())
			return store.Organizations.Put(tx, &store.Organization{ID: "org_more" + strings.Repeat("x", i), Name: "more", Slug: "more" + strings.Repeat("x", i)})
		}); err != nil {
			t.Fatal(err)
		}
		waitFor("the next change", func(m *Manifest) bool { return m.Generation >= g })
		last = g
	}
	// The manifest is written before the older snapshots are pruned: the attempt has ended once the
	// snapshotter recorded it.
	for deadline := time.Now().Add(10 * time.Second); ; {
		s.mu.Lock()
		done := s.lastGen >= last && s.lastErr == nil
		s.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the last snapshot's attempt did not end within 10 s")
		}
		time.Sleep(20 * time.Millisecond) // polling the snapshotter's record
	}
	ids, err := manifestIDs(ctx0, objs)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 3 {
		t.Fatalf("%d manifests kept, want 3: %v", len(ids), ids)
	}
	all, err := objs.List(ctx0, snapshotsPrefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range all {
		id, _, _ := strings.Cut(strings.TrimPrefix(in.Key, snapshotsPrefix), "/")
		if !strings.Contains(strings.Join(ids, " "), id) {
			t.Fatalf("%s is left of a pruned snapshot (kept: %v)", in.Key, ids)
		}
	}
	if ok, msg := s.Health(); !ok || !strings.Contains(msg, "last snapshot") {
		t.Fatalf("health: %v %s", ok, msg)
	}
}

// TestLatestSnapshotIgnoresHalfWritten: objects of a snapshot whose manifest was never written are not a
// snapshot; the newest complete one is read, and the next pruning removes the leftovers.
func TestLatestSnapshotIgnoresHalfWritten(t *testing.T) {
	srv := s3test.Start(t)
	objs := snapshotBucket(t, srv, bytes.Repeat([]byte{7}, RecoveryKeySize))
	ctx := context.Background()
	if _, err := LatestSnapshot(ctx, objs); !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("empty bucket: %v", err)
	}
	dir, db := newDataDir(t)
	tick := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &Snapshotter{DB: db, Objects: objs, DataDir: dir, Files: []string{"secret.key"}, Keep: 5,
		now: func() time.Time { tick = tick.Add(time.Second); return tick }}
	complete, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A later snapshot killed before its manifest: its objects are there, its manifest is not.
	half := snapshotsPrefix + tick.Add(time.Hour).Format(idLayout) + "/"
	if _, err := objs.Put(ctx, half+DBName, strings.NewReader("half")); err != nil {
		t.Fatal(err)
	}
	if m, err := LatestSnapshot(ctx, objs); err != nil || m.ID != complete.ID {
		t.Fatalf("latest: %+v, %v; want %s", m, err, complete.ID)
	}
	// An older leftover is pruned by the next snapshot; a newer one (perhaps being written) is not.
	old := snapshotsPrefix + tick.Add(-time.Hour).Format(idLayout) + "/"
	if _, err := objs.Put(ctx, old+DBName, strings.NewReader("old")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := objs.Stat(ctx, old+DBName); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("old leftover: %v", err)
	}
	if _, err := objs.Stat(ctx, half+DBName); err != nil {
		t.Fatalf("newer leftover: %v", err)
	}
}
