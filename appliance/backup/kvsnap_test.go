package backup_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/backup/dirstore"
)

func keysUnder(t *testing.T, o backup.Objects, prefix string) []string {
	t.Helper()
	l, err := o.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, in := range l {
		keys = append(keys, strings.TrimPrefix(in.Key, prefix))
	}
	return keys
}

// TestKVSnapshots: a store's snapshots are an .rdb then its manifest; the newest manifest is the latest
// snapshot (an .rdb without one, as a killed upload leaves, is ignored, and pruned once older than the
// newest manifest); ids follow the shipping order even when a file's time goes back; the newest 2 of
// keep=2 stay; a snapshot whose object does not match its manifest is refused by name; removal deletes
// them all and only them.
func TestKVSnapshots(t *testing.T) {
	ctx := context.Background()
	d := &dirstore.Dir{Root: t.TempDir()}
	s := backup.New(d)
	const prj, kv, prefix = "prj_a", "kv_1", "prj_a/kv/kv_1/"
	put(t, d, "prj_a/wal/000000010000000000000001", "wal")
	put(t, d, "prj_a/kv/kv_2/20200101T000000.000000000Z.json", "{}") // another store's
	if _, err := s.LatestKVSnapshot(ctx, prj, kv); !errors.Is(err, backup.ErrNotExist) {
		t.Fatalf("no snapshot yet: %v", err)
	}
	t0 := time.Date(2026, 11, 27, 2, 0, 0, 0, time.UTC)
	m1, err := s.PutKVSnapshot(ctx, prj, kv, strings.NewReader("first"), t0, t0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if m1.ID != "20261127T020000.000000000Z" || m1.Size != 5 || m1.Key != prefix+m1.ID+".rdb" {
		t.Fatalf("first: %+v", m1)
	}
	// A killed upload: a newer .rdb without its manifest.
	put(t, d, prefix+"20261127T030000.000000000Z.rdb", "half")
	got, err := s.LatestKVSnapshot(ctx, prj, kv)
	if err != nil || got.ID != m1.ID || got.SHA256 != m1.SHA256 {
		t.Fatalf("latest with a half-written upload: %+v %v", got, err)
	}
	var buf bytes.Buffer
	if err := s.ReadKVSnapshot(ctx, got, &buf); err != nil || buf.String() != "first" {
		t.Fatalf("read: %q %v", buf.String(), err)
	}
	// A file older than the newest snapshot (a clock set back) still comes after it.
	m2, err := s.PutKVSnapshot(ctx, prj, kv, strings.NewReader("second"), t0.Add(-time.Hour), t0, 2)
	if err != nil || m2.ID != "20261127T020000.000000001Z" || !m2.FileTime.Equal(t0.Add(-time.Hour)) {
		t.Fatalf("second: %+v %v", m2, err)
	}
	m3, err := s.PutKVSnapshot(ctx, prj, kv, strings.NewReader("third"), t0.Add(2*time.Hour), t0, 2)
	if err != nil {
		t.Fatal(err)
	}
	// keep=2: the first is gone; the half-written .rdb older than the newest manifest is gone too.
	want := []string{m2.ID + ".json", m2.ID + ".rdb", m3.ID + ".json", m3.ID + ".rdb"}
	if got := keysUnder(t, d, prefix); !slices.Equal(got, want) {
		t.Fatalf("after pruning: %q, want %q", got, want)
	}
	if got, err := s.LatestKVSnapshot(ctx, prj, kv); err != nil || got.ID != m3.ID {
		t.Fatalf("latest: %+v %v", got, err)
	}
	// The object replaced behind the manifest's back: refused, naming it.
	put(t, d, m3.Key, "thirD")
	if err := s.ReadKVSnapshot(ctx, m3, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), m3.Key) {
		t.Fatalf("a changed object: %v", err)
	}
	if err := s.RemoveKVSnapshots(ctx, prj, kv); err != nil {
		t.Fatal(err)
	}
	if got := keysUnder(t, d, prefix); len(got) != 0 {
		t.Fatalf("after removal: %q", got)
	}
	if got := keysUnder(t, d, ""); !slices.Equal(got, []string{"prj_a/kv/kv_2/20200101T000000.000000000Z.json", "prj_a/wal/000000010000000000000001"}) {
		t.Fatalf("removal touched others: %q", got)
	}
	if err := s.RemoveKVSnapshots(ctx, prj, kv); err != nil {
		t.Fatalf("removing nothing: %v", err)
	}
	for _, bad := range [][2]string{{"", kv}, {prj, ""}, {prj, "../x"}, {"a/b", kv}, {prj, "a/b"}} {
		if _, err := s.LatestKVSnapshot(ctx, bad[0], bad[1]); err == nil || errors.Is(err, backup.ErrNotExist) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
