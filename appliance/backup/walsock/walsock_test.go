package walsock_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/backup/dirstore"
	"github.com/theappliance/appliance/appliance/backup/walsock"
)

func setup(t *testing.T) (socket string, st *backup.Store) {
	t.Helper()
	dir := t.TempDir()
	st = backup.New(&dirstore.Dir{Root: filepath.Join(dir, "store")})
	socket = filepath.Join(dir, "wal", "s.sock")
	srv, err := walsock.Start(socket, nil, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop(context.Background()) })
	return socket, st
}

// TestWALPushFetch: a push is in the store when it returns; a fetch writes it back; a missing file is
// ErrNotFound (Main: exit 1), a bad name is refused, the socket's directory is 0700.
func TestWALPushFetch(t *testing.T) {
	socket, st := setup(t)
	ctx := t.Context()
	dir := t.TempDir()
	seg := bytes.Repeat([]byte("wal!"), 1<<18)
	src := filepath.Join(dir, "seg")
	if err := os.WriteFile(src, seg, 0o600); err != nil {
		t.Fatal(err)
	}
	const name = "000000010000000000000003"
	if code := walsock.Main([]string{"push", "--socket", socket, "--project", "p_1", src, name}, os.Stderr); code != 0 {
		t.Fatalf("push: exit %d", code)
	}
	if ok, err := st.WALArchived(ctx, "p_1", "", name); !ok || err != nil {
		t.Fatalf("after the push: archived %v, %v", ok, err)
	}
	// A later cluster's archive is another place: the same segment name does not collide.
	other := bytes.Repeat([]byte("17!!"), 1<<10)
	src17 := filepath.Join(dir, "seg17")
	if err := os.WriteFile(src17, other, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := walsock.Main([]string{"push", "--socket", socket, "--project", "p_1", "--archive", "pg17-a", src17, name}, os.Stderr); code != 0 {
		t.Fatalf("push into an archive: exit %d", code)
	}
	dst := filepath.Join(dir, "RECOVERYXLOG")
	if err := walsock.Fetch(ctx, socket, "p_1", "pg17-a", name, dst); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, other) {
		t.Fatalf("fetched %d bytes from pg17-a, not the %d pushed there", len(got), len(other))
	}
	if err := walsock.Push(ctx, socket, "p_1", "../x", src17, name); err == nil {
		t.Fatal("a push into the archive ../x was taken")
	}
	if err := walsock.Fetch(ctx, socket, "p_1", "", name, dst); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, seg) {
		t.Fatalf("fetched %d bytes, not the %d pushed", len(got), len(seg))
	}
	if err := walsock.Fetch(ctx, socket, "p_1", "", "00000002.history", dst); !errors.Is(err, walsock.ErrNotFound) {
		t.Fatalf("fetch of a missing file: %v", err)
	}
	var stderr bytes.Buffer
	if code := walsock.Main([]string{"fetch", "--socket", socket, "--project", "p_1", "00000002.history", dst}, &stderr); code != 1 || !strings.Contains(stderr.String(), "not in the archive") {
		t.Fatalf("fetch of a missing file: exit %d, %s", code, &stderr)
	}
	if err := walsock.Push(ctx, socket, "p_1", "", src, "../x"); err == nil {
		t.Fatal("a push named ../x was taken")
	}
	if err := walsock.Push(ctx, socket, "p_1", "", filepath.Join(dir, "absent"), name); err == nil {
		t.Fatal("a push of a missing file succeeded")
	}
	if fi, err := os.Stat(filepath.Dir(socket)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("socket directory: %v %v", fi.Mode(), err)
	}
}

// TestWALPushWithoutAppliance: no one on the socket, the push fails (PostgreSQL keeps the segment).
func TestWALPushWithoutAppliance(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "seg")
	os.WriteFile(src, []byte("x"), 0o600)
	if code := walsock.Main([]string{"push", "--socket", filepath.Join(dir, "none.sock"), "--project", "p_1", src, "000000010000000000000001"}, &bytes.Buffer{}); code == 0 {
		t.Fatal("a push with no appliance listening exited 0")
	}
}

// TestWALCommandsQuoted: every word of the commands reaches the program as it was, through sh, once
// PostgreSQL has replaced %p and %f (and %% by %).
func TestWALCommandsQuoted(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "it's a 100% \"odd\" $(name)")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	socket := "/run/x y/s.sock"
	archive, restore, err := walsock.Commands([]string{prog}, socket, "p_1", "")
	if err != nil {
		t.Fatal(err)
	}
	archive17, restore17, err := walsock.Commands([]string{prog}, socket, "p_1", "pg17-a")
	if err != nil {
		t.Fatal(err)
	}
	pg := strings.NewReplacer("%p", "pg_wal/000000010000000000000001", "%f", "000000010000000000000001", "%%", "%")
	for cmd, want := range map[string]string{
		archive:   "wal\npush\n--socket\n" + socket + "\n--project\np_1\npg_wal/000000010000000000000001\n000000010000000000000001\n",
		restore:   "wal\nfetch\n--socket\n" + socket + "\n--project\np_1\n000000010000000000000001\npg_wal/000000010000000000000001\n",
		archive17: "wal\npush\n--socket\n" + socket + "\n--project\np_1\n--archive\npg17-a\npg_wal/000000010000000000000001\n000000010000000000000001\n",
		restore17: "wal\nfetch\n--socket\n" + socket + "\n--project\np_1\n--archive\npg17-a\n000000010000000000000001\npg_wal/000000010000000000000001\n",
	} {
		out, err := exec.Command("sh", "-c", pg.Replace(cmd)).CombinedOutput()
		if err != nil || string(out) != want {
			t.Fatalf("%s: %v\n%q, want %q", cmd, err, out, want)
		}
	}
	if _, _, err := walsock.Commands([]string{"a\nb"}, socket, "p_1", ""); err == nil {
		t.Fatal("a newline in the program was taken")
	}
}
