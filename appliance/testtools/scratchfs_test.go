package testtools

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestScratchFS: the filesystem is mounted where ScratchFS says, an ext4 with a journal (the point: the
// machines' root filesystem has none), traversable by others and writable; unmount leaves neither the
// mount, its directory nor its image.
func TestScratchFS(t *testing.T) {
	mnt, unmount, err := ScratchFS(64 << 20)
	if err != nil {
		t.Fatalf("ScratchFS (it needs root and loop devices, which CI has): %v", err)
	}
	unmounted := false
	t.Cleanup(func() {
		if !unmounted {
			unmount()
		}
	})
	if !mounted(mnt) {
		t.Fatalf("%s is not a mount point", mnt)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(mnt, &st); err != nil || st.Type != 0xEF53 {
		t.Fatalf("statfs %s: type %#x, %v; want ext4 (0xef53)", mnt, st.Type, err)
	}
	dumpe2fs, err := sbinProgram("dumpe2fs")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(dumpe2fs, "-h", mnt+".img").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "has_journal") {
		t.Fatalf("dumpe2fs -h: %v, no has_journal in:\n%s", err, out)
	}
	if fi, err := os.Stat(mnt); err != nil || fi.Mode().Perm() != 0o711 {
		t.Fatalf("the mount's mode: %v %v", fi.Mode(), err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	unmounted = true
	if err := unmount(); err != nil {
		t.Fatal(err)
	}
	if mounted(mnt) {
		t.Fatalf("%s is still mounted", mnt)
	}
	for _, p := range []string{mnt, mnt + ".img"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s after unmount: %v", p, err)
		}
	}
}
