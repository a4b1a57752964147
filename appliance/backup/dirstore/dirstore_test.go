package dirstore_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/backup/backuptest"
	"github.com/theappliance/appliance/appliance/backup/dirstore"
	"github.com/theappliance/appliance/appliance/postgres"
)

func TestObjects(t *testing.T) {
	backuptest.TestObjects(t, func(t *testing.T) backup.Objects {
		return &dirstore.Dir{Root: filepath.Join(t.TempDir(), "backups")}
	})
}

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// The layout on disk: an object is the file of its key; the first level is traversable by the instances'
// user, deeper directories and files are its own; the user is given every directory below the first
// level and every file.
func TestLayoutModesAndOwners(t *testing.T) {
	root := filepath.Join(t.TempDir(), "backups")
	var chowned []string
	d := &dirstore.Dir{Root: root, Chown: func(p string) error { chowned = append(chowned, p); return nil }}
	ctx := context.Background()
	if _, err := d.Put(ctx, "prj_a/base/k1/global/pg_control", bytes.NewReader([]byte("x"))); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{
		root: 0o711, filepath.Join(root, "prj_a"): 0o711, filepath.Join(root, "prj_a", "base"): 0o700,
		filepath.Join(root, "prj_a", "base", "k1", "global"): 0o700, filepath.Join(root, "prj_a", "base", "k1", "global", "pg_control"): 0o600,
	} {
		if got := mode(t, p); got != want {
			t.Errorf("%s: mode %v, want %v", p, got, want)
		}
	}
	for _, p := range []string{filepath.Join(root, "prj_a", "base"), filepath.Join(root, "prj_a", "base", "k1", "global")} {
		if !slices.Contains(chowned, p) {
			t.Errorf("%s was not given to the instances' user (%v)", p, chowned)
		}
	}
	if slices.Contains(chowned, filepath.Join(root, "prj_a")) {
		t.Error("the first level was given to the instances' user")
	}
	// Prepare applies the modes again.
	if err := os.Chmod(filepath.Join(root, "prj_a", "base"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := d.Prepare(ctx, "prj_a/base/"); err != nil {
		t.Fatal(err)
	}
	if got := mode(t, filepath.Join(root, "prj_a", "base")); got != 0o700 {
		t.Errorf("after Prepare: mode %v", got)
	}
}

// A put killed by a crash leaves its temporary file: List, Get and Stat do not see it, DeleteAll removes it.
func TestCrashedPutInvisible(t *testing.T) {
	root := t.TempDir()
	d := &dirstore.Dir{Root: root}
	ctx := context.Background()
	if _, err := d.Put(ctx, "p/wal/000000010000000000000001", bytes.NewReader([]byte("seg"))); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(root, "p", "wal", ".000000010000000000000002.tmp-123")
	if err := os.WriteFile(left, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := d.List(ctx, "p/")
	if err != nil || len(l) != 1 || l[0].Key != "p/wal/000000010000000000000001" {
		t.Fatalf("list: %+v %v", l, err)
	}
	if found, err := d.DeleteAll(ctx, "p/"); err != nil || !found {
		t.Fatalf("delete all: %v %v", found, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "p")); !os.IsNotExist(err) {
		t.Fatalf("the prefix's directory is left: %v", err)
	}
}

// A stage is invisible until committed; Commit makes its files the objects under the prefix; DeleteAll of
// the prefix removes an uncommitted stage too.
func TestStageCommit(t *testing.T) {
	root := t.TempDir()
	d := &dirstore.Dir{Root: root}
	ctx := context.Background()
	st, err := d.Stage(ctx, "p/base/k1/")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(st, "pg_wal", "archive_status"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"backup_label", "global/pg_control"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(st, f)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(st, f), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if l, err := d.List(ctx, "p/"); err != nil || len(l) != 0 {
		t.Fatalf("a stage is listed: %+v %v", l, err)
	}
	if err := d.Commit(ctx, "p/base/k1/"); err != nil {
		t.Fatal(err)
	}
	l, err := d.List(ctx, "p/base/k1/")
	if err != nil || len(l) != 2 || l[0].Key != "p/base/k1/backup_label" || l[1].Key != "p/base/k1/global/pg_control" {
		t.Fatalf("after commit: %+v %v", l, err)
	}
	if _, err := os.Stat(st); !os.IsNotExist(err) {
		t.Fatalf("the stage is left: %v", err)
	}
	// A stage again over a leftover one starts empty; DeleteAll removes it.
	st, err = d.Stage(ctx, "p/base/k2/")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(st, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if st2, err := d.Stage(ctx, "p/base/k2/"); err != nil || st2 != st {
		t.Fatal(st2, err)
	}
	if ents, _ := os.ReadDir(st); len(ents) != 0 {
		t.Fatalf("a new stage holds %v", ents)
	}
	if found, err := d.DeleteAll(ctx, "p/base/k2/"); err != nil || !found {
		t.Fatalf("delete all of a stage: %v %v", found, err)
	}
	if _, err := os.Stat(st); !os.IsNotExist(err) {
		t.Fatalf("the stage is left: %v", err)
	}
	for _, bad := range []string{"p/base/k1", "", "../x/", "p/../"} {
		if _, err := d.Stage(ctx, bad); err == nil {
			t.Errorf("stage %q accepted", bad)
		}
	}
}

// The WAL commands copy into and out of the prefix's directory, which they make: PostgreSQL's archived
// segments are the objects of that prefix.
func TestWALCommands(t *testing.T) {
	root := t.TempDir()
	d := &dirstore.Dir{Root: root}
	ctx := context.Background()
	archive, restore, err := d.WALCommands(ctx, "p/wal/")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "p", "wal")
	want, err := postgres.CopyArchiveCommand(dir)
	if err != nil {
		t.Fatal(err)
	}
	if archive != want || restore != `cp "`+dir+`/%f" "%p"` {
		t.Fatalf("commands %q %q", archive, restore)
	}
	if got := mode(t, dir); got != 0o700 {
		t.Fatalf("wal dir mode %v", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "000000010000000000000001"), []byte("seg"), 0o600); err != nil {
		t.Fatal(err)
	}
	if in, err := d.Stat(ctx, "p/wal/000000010000000000000001"); err != nil || in.Size != 3 {
		t.Fatalf("a segment cp wrote: %+v %v", in, err)
	}
}
