package postgres

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Reflinks are copies that share their source's extents (FICLONE: XFS with reflink=1, btrfs, bcachefs...):
// a copy of any size costs about as much as its metadata, and the copy is a file of its own (a write to
// either side unshares the extents written, the other is untouched; removing the source leaves the copy
// whole).

// errNoReflink is cloneFile's answer where the filesystem cannot clone these two files (not supported,
// across filesystems, or a file kind it refuses): the caller copies the bytes instead.
var errNoReflink = errors.New("no reflink")

// cloneFile makes out (empty) a reflink of all of in: FICLONE. Where that is not possible here it returns
// errNoReflink and out is untouched.
func cloneFile(out, in *os.File) error {
	err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd()))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOTSUP), errors.Is(err, unix.EXDEV),
		errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOTTY), errors.Is(err, unix.ENOSYS):
		return errNoReflink
	default:
		return fmt.Errorf("reflink: %w", err)
	}
}

// ReflinkSupport tells whether files in dir (a directory that exists and the caller may write) can be
// copied by reflink: it clones a probe file it writes there, then removes both. An error is a failure of
// the probe itself (dir unwritable); a filesystem without reflinks is (false, nil).
func ReflinkSupport(dir string) (bool, error) {
	src, err := os.CreateTemp(dir, ".reflink-probe-*")
	if err != nil {
		return false, fmt.Errorf("probe reflinks in %s: %w", dir, err)
	}
	defer os.Remove(src.Name())
	defer src.Close()
	// A whole block: some filesystems clone only block-aligned ranges (the last block of a file excepted).
	if _, err := src.Write(make([]byte, 4096)); err != nil {
		return false, fmt.Errorf("probe reflinks in %s: %w", dir, err)
	}
	dst, err := os.CreateTemp(dir, ".reflink-probe-*")
	if err != nil {
		return false, fmt.Errorf("probe reflinks in %s: %w", dir, err)
	}
	defer os.Remove(dst.Name())
	defer dst.Close()
	switch err := cloneFile(dst, src); {
	case err == nil:
		return true, nil
	case errors.Is(err, errNoReflink):
		return false, nil
	default:
		return false, fmt.Errorf("probe reflinks in %s: %w", dir, err)
	}
}

// SyncTree makes a copied tree durable: every regular file and every directory under root (root
// included, and root's parent directory) fsynced, directories after their entries. It returns how long that took. A copy by reflink
// is synced this way before it is used (its files' data is shared with the source's, already on disk: the
// sync writes the new metadata).
func SyncTree(root string) (time.Duration, error) {
	t0 := time.Now()
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			dirs = append(dirs, p)
		case d.Type().IsRegular():
			return syncPath(p)
		}
		return nil
	})
	if err != nil {
		return time.Since(t0), fmt.Errorf("sync %s: %w", root, err)
	}
	dirs = append([]string{filepath.Dir(root)}, dirs...) // root's own entry too
	for i := len(dirs) - 1; i >= 0; i-- {                // deepest first: a directory after what it holds
		if err := syncPath(dirs[i]); err != nil {
			return time.Since(t0), fmt.Errorf("sync %s: %w", root, err)
		}
	}
	return time.Since(t0), nil
}

func syncPath(p string) error {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
