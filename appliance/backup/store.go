// Package backup keeps the base backups and the WAL archive of the projects.
package backup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
)

// Store is where base backups and archived WAL live.
type Store interface {
	// Prepare creates the project's directories (idempotent); the WAL and base directories are then
	// writable by the instances' OS user.
	Prepare(projectID string) error
	// WALDir is the directory archive_command copies the project's WAL segments into.
	WALDir(projectID string) string
	// BaseDir is the directory of one base backup (pg_basebackup creates it).
	BaseDir(projectID, key string) string
	// Size is the total size in bytes of one base backup.
	Size(projectID, key string) (int64, error)
	// Remove deletes one base backup (a missing one is not an error).
	Remove(projectID, key string) error
	// ProjectSize is the bytes the store holds of a project (WAL archive, base backups, exports, uploads);
	// 0 for a project it holds nothing of.
	ProjectSize(projectID string) (int64, error)
	// RemoveProject deletes everything the store holds of a project (WAL archive, base backups and any
	// other files under its directory) and reports whether there was anything; a missing project is not
	// an error.
	RemoveProject(projectID string) (bool, error)
}

// DirStore is a Store in a local directory:
//
//	<Root>/<project_id>/wal              archived WAL segments (and timeline history files)
//	<Root>/<project_id>/base/<key>       one plain-format base backup each
//
// Root and the project directories are mode 0711 (traversable, not listable, by the instances' OS user);
// wal and base are owned by that user with mode 0700.
type DirStore struct {
	Root string
	// Chown gives a path to the instances' OS user (nil: nothing to do, the appliance is that user).
	Chown func(path string) error
}

var _ Store = (*DirStore)(nil)

var safeName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

func checkName(kind, v string) error {
	if !safeName.MatchString(v) || v == "." || v == ".." {
		return fmt.Errorf("invalid %s %q", kind, v)
	}
	return nil
}

func (d *DirStore) projectDir(projectID string) string { return filepath.Join(d.Root, projectID) }

// WALDir implements Store.
func (d *DirStore) WALDir(projectID string) string {
	return filepath.Join(d.projectDir(projectID), "wal")
}

// BaseDir implements Store.
func (d *DirStore) BaseDir(projectID, key string) string {
	return filepath.Join(d.projectDir(projectID), "base", key)
}

// Prepare implements Store.
func (d *DirStore) Prepare(projectID string) error {
	if err := checkName("project id", projectID); err != nil {
		return err
	}
	for _, dir := range []string{d.Root, d.projectDir(projectID)} {
		if err := mkdir(dir, 0o711); err != nil {
			return err
		}
	}
	for _, dir := range []string{d.WALDir(projectID), filepath.Join(d.projectDir(projectID), "base")} {
		if err := mkdir(dir, 0o700); err != nil {
			return err
		}
		if d.Chown != nil {
			if err := d.Chown(dir); err != nil {
				return err
			}
		}
	}
	return nil
}

func mkdir(dir string, mode os.FileMode) error {
	if err := os.Mkdir(dir, mode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return os.Chmod(dir, mode)
}

// Size implements Store.
func (d *DirStore) Size(projectID, key string) (int64, error) {
	if err := checkName("backup key", key); err != nil {
		return 0, err
	}
	return dirSize(d.BaseDir(projectID, key))
}

// ProjectSize implements Store.
func (d *DirStore) ProjectSize(projectID string) (int64, error) {
	if err := checkName("project id", projectID); err != nil {
		return 0, err
	}
	n, err := dirSize(d.projectDir(projectID))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	return n, err
}

// dirSize is the sum of the sizes of the regular files under dir.
func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type().IsRegular() {
			fi, err := e.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

// Remove implements Store.
func (d *DirStore) Remove(projectID, key string) error {
	if err := checkName("project id", projectID); err != nil {
		return err
	}
	if err := checkName("backup key", key); err != nil {
		return err
	}
	return os.RemoveAll(d.BaseDir(projectID, key))
}

// RemoveProject implements Store.
func (d *DirStore) RemoveProject(projectID string) (bool, error) {
	if err := checkName("project id", projectID); err != nil {
		return false, err
	}
	dir := d.projectDir(projectID)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return true, fmt.Errorf("remove the backup store of %s: %w", projectID, err)
	}
	return true, nil
}
