package backup_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/backup/dirstore"
)

func put(t *testing.T, o backup.Objects, key, data string) {
	t.Helper()
	if _, err := o.Put(context.Background(), key, strings.NewReader(data)); err != nil {
		t.Fatal(err)
	}
}

func TestRemoveProject(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	d := &dirstore.Dir{Root: root}
	s := backup.New(d)
	if err := s.Prepare(ctx, "prj_a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Prepare(ctx, "prj_b"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"prj_a/wal/000000010000000000000001", "prj_a/base/k1/backup_label", "prj_a/exports/exp_1.dump",
		"prj_b/wal/000000010000000000000001"} {
		put(t, d, k, "x")
	}
	if n, err := s.ProjectSize(ctx, "prj_a"); err != nil || n != 3 {
		t.Fatalf("size: %d %v", n, err)
	}
	if removed, err := s.RemoveProject(ctx, "prj_a"); err != nil || !removed {
		t.Fatalf("remove: %v %v", removed, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "prj_a")); !os.IsNotExist(err) {
		t.Fatalf("prj_a is left: %v", err)
	}
	if l, err := d.List(ctx, ""); err != nil || len(l) != 1 || l[0].Key != "prj_b/wal/000000010000000000000001" {
		t.Fatalf("another project's store was touched: %v %v", l, err)
	}
	if removed, err := s.RemoveProject(ctx, "prj_a"); err != nil || removed {
		t.Fatalf("second remove: %v %v", removed, err)
	}
	if n, err := s.ProjectSize(ctx, "prj_a"); err != nil || n != 0 {
		t.Fatalf("size of nothing: %d %v", n, err)
	}
	for _, bad := range []string{"", ".", "..", "../prj_b", "a/b"} {
		if _, err := s.RemoveProject(ctx, bad); err == nil {
			t.Errorf("RemoveProject(%q) accepted", bad)
		}
	}
	if _, err := os.Stat(root); err != nil {
		t.Fatalf("the root is gone: %v", err)
	}
}

func TestPruneWAL(t *testing.T) {
	ctx := context.Background()
	d := &dirstore.Dir{Root: t.TempDir()}
	s := backup.New(d)
	for _, seg := range []string{"000000010000000000000001", "000000010000000000000002", "000000010000000000000003",
		"000000020000000000000002", "000000020000000000000004", "00000002.history", "000000010000000000000002.00000028.backup"} {
		put(t, d, "p/wal/"+seg, "x")
		put(t, d, "p/wal-pg17-a/"+seg, "x") // another cluster's archive: untouched by the first's prune
	}
	n, err := s.PruneWAL(ctx, "p", "", "000000020000000000000003")
	if err != nil || n != 3 {
		t.Fatalf("pruned %d %v", n, err)
	}
	l, _ := d.List(ctx, "p/wal/")
	var left []string
	for _, in := range l {
		left = append(left, strings.TrimPrefix(in.Key, "p/wal/"))
	}
	if want := []string{"000000010000000000000002.00000028.backup", "000000010000000000000003", "00000002.history",
		"000000020000000000000004"}; !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
	if ok, err := s.WALArchived(ctx, "p", "", "000000020000000000000004"); err != nil || !ok {
		t.Fatalf("archived: %v %v", ok, err)
	}
	if ok, err := s.WALArchived(ctx, "p", "", "000000010000000000000001"); err != nil || ok {
		t.Fatalf("pruned segment archived: %v %v", ok, err)
	}
	if ok, err := s.WALArchived(ctx, "p", "pg17-a", "000000010000000000000001"); err != nil || !ok {
		t.Fatalf("the other cluster's segment after the first's prune: %v %v", ok, err)
	}
	if n, err := s.PruneWAL(ctx, "p", "pg17-a", "000000010000000000000003"); err != nil || n != 2 {
		t.Fatalf("pruned %d of the other cluster's archive: %v", n, err)
	}
	if found, err := s.RemoveWAL(ctx, "p", "pg17-a"); err != nil || !found {
		t.Fatalf("remove the other cluster's archive: %v %v", found, err)
	}
	if l, _ := d.List(ctx, "p/wal-pg17-a/"); len(l) != 0 {
		t.Fatalf("left in the removed archive: %v", l)
	}
	if l, _ := d.List(ctx, "p/wal/"); len(l) != 4 {
		t.Fatalf("the first cluster's archive after the other's removal: %v", l)
	}
	for _, bad := range []string{"..", "a/b", "x y"} {
		if _, err := s.WALArchived(ctx, "p", bad, "000000010000000000000001"); err == nil {
			t.Errorf("WAL archive %q accepted", bad)
		}
	}
}

const label = "START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\nCHECKPOINT LOCATION: 0/2000060\n" +
	"BACKUP METHOD: streamed\nBACKUP FROM: primary\nSTART TIME: 2026-11-26 23:00:00 UTC\nLABEL: x\nSTART TIMELINE: 1\n"

// untar reads a tar stream into name → content ("" and a trailing slash for directories).
func untar(t *testing.T, b []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		if h.Typeflag == tar.TypeDir && h.Mode != 0o700 || h.Typeflag == tar.TypeReg && h.Mode != 0o600 {
			t.Errorf("%s: mode %o", h.Name, h.Mode)
		}
		out[h.Name] = string(data)
	}
}

// A staged backup is stored with its manifest last; it is fetched as a tar stream with its empty
// directories; removed, it is gone.
func TestBackupStageCommitFetch(t *testing.T) {
	ctx := context.Background()
	d := &dirstore.Dir{Root: t.TempDir()}
	s := backup.New(d)
	dir, err := s.StageBackup(ctx, "p", "k1")
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"pg_wal/archive_status", "global", "pg_custom_empty"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for f, data := range map[string]string{"backup_label": label, "global/pg_control": "ctl", "backup_manifest": "{}"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if err := s.WriteBackupTar(ctx, "p", "k1", &buf); err == nil {
		t.Fatal("a staged backup was fetched")
	}
	m, err := s.CommitBackup(ctx, "p", "k1", dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if m.Files != 3 || m.SizeBytes != int64(len(label)+5) || m.Timeline != 1 || m.StartSegment != "000000010000000000000002" {
		t.Fatalf("manifest %+v", m)
	}
	if n, err := s.BackupSize(ctx, "p", "k1"); err != nil || n != m.SizeBytes {
		t.Fatalf("size %d %v", n, err)
	}
	if tl, seg, err := s.BackupStart(ctx, "p", "k1"); err != nil || tl != 1 || seg != "000000010000000000000002" {
		t.Fatalf("start %d %s %v", tl, seg, err)
	}
	if err := s.WriteBackupTar(ctx, "p", "k1", &buf); err != nil {
		t.Fatal(err)
	}
	got := untar(t, buf.Bytes())
	for name, want := range map[string]string{"pg_custom_empty/": "", "pg_wal/archive_status/": "", "global/pg_control": "ctl",
		"backup_label": label} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s: %q %v", name, v, ok)
		}
	}
	if err := s.RemoveBackup(ctx, "p", "k1"); err != nil {
		t.Fatal(err)
	}
	if l, err := d.List(ctx, "p/"); err != nil || len(l) != 0 {
		t.Fatalf("after remove: %v %v", l, err)
	}
}

// A backup written before the store was objects (pg_basebackup's plain directory, no manifest) is fetched
// file by file, with PostgreSQL's directories that may be empty; one without its backup_manifest is not
// complete.
func TestLegacyBackupFetch(t *testing.T) {
	ctx := context.Background()
	d := &dirstore.Dir{Root: t.TempDir()}
	s := backup.New(d)
	put(t, d, "p/base/old/backup_label", label)
	put(t, d, "p/base/old/base/1/1259", "rel")
	var buf bytes.Buffer
	if err := s.WriteBackupTar(ctx, "p", "old", &buf); err == nil || !strings.Contains(err.Error(), "not complete") {
		t.Fatalf("an incomplete legacy backup: %v", err)
	}
	put(t, d, "p/base/old/backup_manifest", "{}")
	buf.Reset()
	if err := s.WriteBackupTar(ctx, "p", "old", &buf); err != nil {
		t.Fatal(err)
	}
	got := untar(t, buf.Bytes())
	for _, name := range []string{"pg_replslot/", "pg_wal/archive_status/", "pg_tblspc/", "base/", "base/1/", "base/1/1259", "backup_manifest"} {
		if _, ok := got[name]; !ok {
			t.Errorf("%s missing from %v", name, got)
		}
	}
}
