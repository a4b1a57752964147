package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
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

// SyncTree makes a copied tree durable, files and directories (root's own entry in its parent included):
// syncfs(2) of its filesystem, which writes every dirty page and the metadata of that filesystem and
// forces its journal once. It returns how long that took. A copy by reflink is synced this way before it
// is used: its files' data is shared with the source's, already on disk, so what is written is the new
// metadata; an fsync of each file and directory instead forces the journal once per file (on XFS, 1.2 to
// 6 s for the 1,000 files of a 100 MB project here, bench/README.md). Linux reports a writeback error
// of the filesystem to syncfs since 5.8.
func SyncTree(root string) (time.Duration, error) {
	t0 := time.Now()
	f, err := os.Open(root)
	if err != nil {
		return 0, fmt.Errorf("sync %s: %w", root, err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return time.Since(t0), fmt.Errorf("sync %s: syncfs: %w", root, err)
	}
	return time.Since(t0), nil
}

// CopyTree copies the tree src (a stored base backup's data directory: regular files and directories
// only) into the directory dst (which exists, empty, the OS user's), as OnlineCopy copies a data directory:
// each file by reflink where the filesystem can (else its bytes), directories mode 0700 and files their
// source's mode, everything user's; then the copy is synced (SyncTree). A symbolic link or another kind of
// file in src fails the copy. On failure what it copied is left for the caller to remove with dst.
func CopyTree(ctx context.Context, user interface{ ChownFile(*os.File) error }, src, dst string) (st CopyStats, err error) {
	t0 := time.Now()
	c, err := newCopier(ctx, user, src, dst, false)
	if err != nil {
		return st, err
	}
	defer c.close()
	c.reflink = true
	var jobs []copyJob
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := within(src, p)
		if err != nil || rel == "." {
			return err
		}
		switch {
		case d.IsDir():
			return c.mkdir(filepath.Join(dst, rel))
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			jobs = append(jobs, copyJob{src: p, dst: filepath.Join(dst, rel), size: fi.Size()})
			return nil
		default:
			return fmt.Errorf("%s is not a regular file or a directory", p)
		}
	})
	if err != nil {
		return st, fmt.Errorf("copy %s: %w", src, err)
	}
	slices.SortStableFunc(jobs, func(a, b copyJob) int { return cmp.Compare(b.size, a.size) })
	if err := c.copyAll(jobs, DefaultCopyWorkers); err != nil {
		return st, err
	}
	st.Copy = time.Since(t0)
	st.Files, st.Bytes, st.Reflinked = c.files, c.bytes, c.reflinked
	if st.Sync, err = SyncTree(dst); err != nil {
		return st, err
	}
	return st, nil
}
