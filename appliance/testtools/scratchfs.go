package testtools

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// ScratchFS mounts a filesystem of the test process's own: an ext4 with a journal (Debian's mkfs.ext4, as
// a Debian server's disk has it) in a sparse image file of size bytes, mounted with `mount -o
// loop,discard` (the blocks its files free are given back to the image's filesystem) on a directory it
// returns, <tmp>/appliance-test-scratch/<pid> (short: the appliances' Unix sockets live under it), of
// mode 0711 (the instances' OS user traverses it), through a loop device with direct I/O where it can. unmount unmounts it and removes the image;
// a process that died with its filesystem mounted has it removed by the next process's ScratchFS.
//
// Why: the machines of this project (CI's too) have a root filesystem that is an ext4 without a journal,
// where the kernel's inode allocator skips every inode freed in the last seconds and looks each one up
// (ext4's recently_deleted, checked only without a journal): a test that removes a cluster's thousand
// files and copies another spent a quarter to a half of its CPU in that scan. It needs root and loop
// devices; where it cannot mount, it says why and the tests run in the temporary directory as before.
func ScratchFS(size int64) (mnt string, unmount func() error, err error) {
	if os.Geteuid() != 0 {
		return "", nil, errors.New("a loop mount needs root")
	}
	mkfs, err := sbinProgram("mkfs.ext4")
	if err != nil {
		return "", nil, err
	}
	root := filepath.Join(os.TempDir(), "appliance-test-scratch")
	if err := os.MkdirAll(root, 0o711); err != nil {
		return "", nil, err
	}
	if err := os.Chmod(root, 0o711); err != nil {
		return "", nil, err
	}
	removeStaleScratch(root)
	mnt = filepath.Join(root, strconv.Itoa(os.Getpid()))
	removeScratch(mnt) // a process of the same pid before this one
	fail := func(err error) (string, func() error, error) {
		removeScratch(mnt)
		return "", nil, err
	}
	img := mnt + ".img"
	f, err := os.Create(img)
	if err != nil {
		return fail(err)
	}
	if err := f.Truncate(size); err != nil { // sparse: blocks are allocated as the filesystem writes
		f.Close()
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	// One inode per 64 KiB (a few hundred thousand: clusters of about a thousand files each), all inode
	// tables and the journal written by mkfs (not zeroed later by the kernel's lazy init in the background).
	if out, err := exec.Command(mkfs, "-q", "-F", "-b", "4096", "-i", "65536", "-E", "lazy_itable_init=0,lazy_journal_init=0", img).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("mkfs.ext4: %v: %s", err, out))
	}
	if err := os.Mkdir(mnt, 0o711); err != nil {
		return fail(err)
	}
	// The loop device reads and writes the image with direct I/O: with the image's pages cached, each flush
	// of the filesystem (every fsync, every journal commit) had the loop device's kernel worker write the
	// image's dirty pages out (ext4_sync_file from the loop worker: about a sixth of the CPU the suite's own
	// processes used, and none of it in their cgroup). Where direct I/O cannot be had, the mount's own loop.
	if dev, err := exec.Command("losetup", "--find", "--show", "--direct-io=on", "--sector-size", "4096", img).Output(); err == nil {
		if out, err := exec.Command("mount", "-o", "discard", "-t", "ext4", strings.TrimSpace(string(dev)), mnt).CombinedOutput(); err != nil {
			return fail(fmt.Errorf("mount %s (%s): %v: %s", strings.TrimSpace(string(dev)), img, err, strings.TrimSpace(string(out))))
		}
	} else if out, err := exec.Command("mount", "-o", "loop,discard", "-t", "ext4", img, mnt).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("mount -o loop %s: %v: %s", img, err, strings.TrimSpace(string(out))))
	}
	// The filesystem's root, made by mkfs, is root's 0755 with lost+found: 0711 lets the instances' user
	// through, as the temporary directories' parents do.
	if err := os.Chmod(mnt, 0o711); err != nil {
		removeScratch(mnt)
		return "", nil, err
	}
	return mnt, func() error { return removeScratch(mnt) }, nil
}

// removeScratch unmounts mnt (lazily when busy: a process left running in it), detaches its loop device
// (a lazily unmounted one once free) and removes mnt and its image mnt.img.
func removeScratch(mnt string) error {
	img := mnt + ".img"
	var errs []error
	if mounted(mnt) {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("umount %s: %v: %s", mnt, err, strings.TrimSpace(string(out))))
			if out, err := exec.Command("umount", "-l", mnt).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("umount -l %s: %v: %s", mnt, err, strings.TrimSpace(string(out))))
			}
		}
	}
	if out, err := exec.Command("losetup", "-j", img).Output(); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if dev, _, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(dev, "/dev/loop") {
				_ = exec.Command("losetup", "-d", dev).Run() // a lazily unmounted one detaches once free
			}
		}
	}
	if mounted(mnt) { // never remove what is still mounted there
		return errors.Join(append(errs, fmt.Errorf("%s is still mounted", mnt))...)
	}
	for _, p := range []string{mnt, img} {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeStaleScratch removes the scratch filesystems of test processes that are gone.
func removeStaleScratch(root string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, en := range entries {
		name := strings.TrimSuffix(en.Name(), ".img")
		pid, err := strconv.Atoi(name)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(filepath.Join("/proc", name)); os.IsNotExist(err) {
			_ = removeScratch(filepath.Join(root, name))
		}
	}
}

// mounted reports whether dir is a mount point (it is in /proc/self/mountinfo).
func mounted(dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// sbinProgram finds a program on PATH or in /usr/sbin (root's PATH under some runners lacks it).
func sbinProgram(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	if p, err := exec.LookPath(filepath.Join("/usr/sbin", name)); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s is required (e2fsprogs)", name)
}
