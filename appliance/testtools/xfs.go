package testtools

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// XFSMount makes a real XFS filesystem with reflinks for a test: a sparse image file of size bytes in a
// temporary directory, mkfs.xfs -m reflink=1 (Debian's xfsprogs, which Main installs), mounted with
// `mount -o loop` on a directory it returns (mode 0711, so that the instances' OS user can traverse it).
// The filesystem is unmounted and its loop device detached when the test ends, whatever it left mounted
// inside.
//
// It needs root and a kernel that allows loop mounts: where mounting is refused (not root, a container
// without loop devices) the test is skipped with the reason; under CI (CI set) it fails instead, since CI
// runs as root on a machine that has them.
func XFSMount(t testing.TB, size int64) string {
	t.Helper()
	refused := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip("loop mounts are refused here: " + msg)
	}
	if os.Geteuid() != 0 {
		refused("an XFS loop mount needs root")
	}
	mkfs, err := exec.LookPath("mkfs.xfs")
	if err != nil {
		if mkfs, err = exec.LookPath("/usr/sbin/mkfs.xfs"); err != nil {
			t.Fatalf("mkfs.xfs is required (apt-get install xfsprogs; testtools.Main installs it as root): %v", err)
		}
	}
	base := t.TempDir()
	// t.TempDir() is /tmp/<Test><n>/<nnn>, both levels root's 0700: the instances' user must traverse them.
	for _, d := range []string{base, filepath.Dir(base)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	img := filepath.Join(base, "xfs.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil { // sparse: blocks are allocated as the filesystem writes
		f.Close()
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-q", "-m", "reflink=1", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.xfs: %v: %s", err, out)
	}
	mnt := filepath.Join(base, "mnt")
	if err := os.Mkdir(mnt, 0o711); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-o", "loop", "-t", "xfs", img, mnt).CombinedOutput(); err != nil {
		refused("mount -o loop %s: %v: %s", img, err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		// The loop device mount made is detached with the unmount (autoclear); one left attached (an
		// unmount that failed) is detached by name.
		out, err := exec.Command("umount", mnt).CombinedOutput()
		if err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
			if out, err := exec.Command("umount", "-l", mnt).CombinedOutput(); err != nil {
				t.Errorf("umount -l %s: %v: %s", mnt, err, out)
			}
		}
		if out, err := exec.Command("losetup", "-j", img).Output(); err == nil {
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				if dev, _, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(dev, "/dev/loop") {
					if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
						t.Errorf("losetup -d %s: %v: %s", dev, err, out)
					}
				}
			}
		}
	})
	// The filesystem's root, made by mkfs, is root's 0755: 0711 lets the instances' user through.
	if err := os.Chmod(mnt, 0o711); err != nil {
		t.Fatal(err)
	}
	return mnt
}
