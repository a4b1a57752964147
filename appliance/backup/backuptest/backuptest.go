// Package backuptest is the conformance test every backup.Objects implementation runs.
package backuptest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/theappliance/appliance/appliance/backup"
)

// failingReader yields some bytes, then fails: a Put killed midway.
type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("the writer died")
	}
	n := min(len(p), f.n)
	for i := range n {
		p[i] = 'x'
	}
	f.n -= n
	return n, nil
}

// TestObjects runs the contract of backup.Objects against the store open returns (a new, empty one on
// each call).
func TestObjects(t *testing.T, open func(t *testing.T) backup.Objects) {
	ctx := context.Background()
	put := func(t *testing.T, o backup.Objects, key, data string) {
		t.Helper()
		n, err := o.Put(ctx, key, bytes.NewReader([]byte(data)))
		if err != nil || n != int64(len(data)) {
			t.Fatalf("put %s: %d %v", key, n, err)
		}
	}
	get := func(t *testing.T, o backup.Objects, key string) (string, error) {
		t.Helper()
		r, err := o.Get(ctx, key)
		if err != nil {
			return "", err
		}
		defer r.Close()
		b, err := io.ReadAll(r)
		return string(b), err
	}
	keys := func(infos []backup.Info) []string {
		out := []string{}
		for _, in := range infos {
			out = append(out, in.Key)
		}
		return out
	}

	t.Run("put get stat", func(t *testing.T) {
		o := open(t)
		put(t, o, "p/base/k/backup_label", "label")
		if got, err := get(t, o, "p/base/k/backup_label"); err != nil || got != "label" {
			t.Fatalf("get: %q %v", got, err)
		}
		if in, err := o.Stat(ctx, "p/base/k/backup_label"); err != nil || in.Size != 5 || in.Key != "p/base/k/backup_label" {
			t.Fatalf("stat: %+v %v", in, err)
		}
		put(t, o, "p/base/k/backup_label", "replaced")
		if got, err := get(t, o, "p/base/k/backup_label"); err != nil || got != "replaced" {
			t.Fatalf("get after replace: %q %v", got, err)
		}
		put(t, o, "p/empty", "")
		if in, err := o.Stat(ctx, "p/empty"); err != nil || in.Size != 0 {
			t.Fatalf("stat of an empty object: %+v %v", in, err)
		}
	})

	t.Run("missing", func(t *testing.T) {
		o := open(t)
		put(t, o, "p/a", "a")
		for _, k := range []string{"p/b", "q/a", "p"} {
			if _, err := o.Get(ctx, k); !errors.Is(err, backup.ErrNotExist) {
				t.Errorf("get %s: %v, want ErrNotExist", k, err)
			}
			if _, err := o.Stat(ctx, k); !errors.Is(err, backup.ErrNotExist) {
				t.Errorf("stat %s: %v, want ErrNotExist", k, err)
			}
		}
	})

	t.Run("a failed put leaves nothing", func(t *testing.T) {
		o := open(t)
		if _, err := o.Put(ctx, "p/wal/000000010000000000000001", &failingReader{n: 100 << 10}); err == nil {
			t.Fatal("a put whose reader failed succeeded")
		}
		if _, err := o.Get(ctx, "p/wal/000000010000000000000001"); !errors.Is(err, backup.ErrNotExist) {
			t.Fatalf("get after a failed put: %v", err)
		}
		if l, err := o.List(ctx, ""); err != nil || len(l) != 0 {
			t.Fatalf("list after a failed put: %v %v", keys(l), err)
		}
		// Over an existing object, the old one stays.
		put(t, o, "p/x", "old")
		if _, err := o.Put(ctx, "p/x", &failingReader{n: 10}); err == nil {
			t.Fatal("a put whose reader failed succeeded")
		}
		if got, err := get(t, o, "p/x"); err != nil || got != "old" {
			t.Fatalf("after a failed replace: %q %v", got, err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := o.Put(cctx, "p/y", bytes.NewReader([]byte("y"))); err == nil {
			t.Fatal("a put with an ended context succeeded")
		}
		if l, err := o.List(ctx, ""); err != nil || !slices.Equal(keys(l), []string{"p/x"}) {
			t.Fatalf("list: %v %v", keys(l), err)
		}
	})

	t.Run("keys refused", func(t *testing.T) {
		o := open(t)
		for _, k := range []string{"", "/abs", "a//b", "../x", "a/../b", "a/..", "..", ".", "a/./b", "a/", ".hidden",
			"a/.tmp", `a\b`, "a b", "a/b\x00"} {
			if _, err := o.Put(ctx, k, bytes.NewReader(nil)); err == nil {
				t.Errorf("put %q accepted", k)
			}
			if _, err := o.Get(ctx, k); err == nil || errors.Is(err, backup.ErrNotExist) {
				t.Errorf("get %q: %v, want a refusal", k, err)
			}
			if _, err := o.Stat(ctx, k); err == nil || errors.Is(err, backup.ErrNotExist) {
				t.Errorf("stat %q: %v, want a refusal", k, err)
			}
			if err := o.Delete(ctx, k); err == nil {
				t.Errorf("delete %q accepted", k)
			}
		}
		for _, p := range []string{"/", "../", "a//", "/abs/", "a/../"} {
			if _, err := o.List(ctx, p); err == nil {
				t.Errorf("list %q accepted", p)
			}
			if _, err := o.DeleteAll(ctx, p); err == nil {
				t.Errorf("delete all %q accepted", p)
			}
		}
		if _, err := o.DeleteAll(ctx, ""); err == nil {
			t.Error("delete all of everything accepted")
		}
	})

	t.Run("list", func(t *testing.T) {
		o := open(t)
		for _, k := range []string{"p/wal/000000010000000000000002", "p/wal/000000010000000000000001", "p/base/k/global/pg_control",
			"p/timelines.json", "p2/x", "p-x", "q"} {
			put(t, o, k, k)
		}
		for _, c := range []struct {
			prefix string
			want   []string
		}{
			{"p/wal/", []string{"p/wal/000000010000000000000001", "p/wal/000000010000000000000002"}},
			{"p/wal/0000000100000000000000", []string{"p/wal/000000010000000000000001", "p/wal/000000010000000000000002"}},
			{"p/", []string{"p/base/k/global/pg_control", "p/timelines.json", "p/wal/000000010000000000000001", "p/wal/000000010000000000000002"}},
			{"p", []string{"p-x", "p/base/k/global/pg_control", "p/timelines.json", "p/wal/000000010000000000000001", "p/wal/000000010000000000000002", "p2/x"}},
			{"", []string{"p-x", "p/base/k/global/pg_control", "p/timelines.json", "p/wal/000000010000000000000001", "p/wal/000000010000000000000002", "p2/x", "q"}},
			{"r/", []string{}},
			{"p/timelines.json", []string{"p/timelines.json"}},
		} {
			l, err := o.List(ctx, c.prefix)
			if err != nil || l == nil || !slices.Equal(keys(l), c.want) {
				t.Errorf("list %q: %v %v, want %v", c.prefix, keys(l), err, c.want)
			}
			for _, in := range l {
				if in.Size != int64(len(in.Key)) {
					t.Errorf("list %q: %s has size %d", c.prefix, in.Key, in.Size)
				}
			}
		}
	})

	t.Run("delete", func(t *testing.T) {
		o := open(t)
		for _, k := range []string{"p/wal/1", "p/wal/2", "p/base/k/f", "p2/x"} {
			put(t, o, k, "x")
		}
		if err := o.Delete(ctx, "p/wal/1", "p/wal/missing"); err != nil {
			t.Fatal(err)
		}
		if l, err := o.List(ctx, "p/wal/"); err != nil || !slices.Equal(keys(l), []string{"p/wal/2"}) {
			t.Fatalf("after delete: %v %v", keys(l), err)
		}
		if found, err := o.DeleteAll(ctx, "p/"); err != nil || !found {
			t.Fatalf("delete all: %v %v", found, err)
		}
		if l, err := o.List(ctx, ""); err != nil || !slices.Equal(keys(l), []string{"p2/x"}) {
			t.Fatalf("after delete all: %v %v", keys(l), err)
		}
		if found, err := o.DeleteAll(ctx, "p/"); err != nil || found {
			t.Fatalf("delete all again: %v %v", found, err)
		}
		// Deleting all under a plain string prefix.
		put(t, o, "p2/y", "y")
		if found, err := o.DeleteAll(ctx, "p2/x"); err != nil || !found {
			t.Fatalf("delete all p2/x: %v %v", found, err)
		}
		if l, err := o.List(ctx, ""); err != nil || !slices.Equal(keys(l), []string{"p2/y"}) {
			t.Fatalf("after delete all p2/x: %v %v", keys(l), err)
		}
	})
}
