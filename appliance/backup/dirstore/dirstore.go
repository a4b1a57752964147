// Package dirstore keeps the backup store's objects as files in a local directory.
package dirstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/postgres"
)

// Dir is a backup.Objects in a local directory: the object "a/b/c" is the file <Root>/a/b/c.
//
// Root and the directories of the first level (a project's) are mode 0711: traversable, not listable, by
// the instances' OS user. Deeper directories are that user's with mode 0700, files its with mode 0600
// (PostgreSQL's archive_command copies WAL segments in as that user; pg_basebackup writes base backups in
// a stage as that user). Work in progress has names starting with a dot, which keys cannot have: a Put
// writes ".<name>.tmp-*" next to its object and renames it (after fsync) into place, a stage of the
// prefix "a/b/" is the directory "a/.b.stage".
type Dir struct {
	Root string
	// Chown gives a path to the instances' OS user (nil: nothing to do, the appliance is that user).
	Chown func(path string) error
}

var (
	_ backup.Objects      = (*Dir)(nil)
	_ backup.Preparer     = (*Dir)(nil)
	_ backup.WALTransport = (*Dir)(nil)
	_ backup.Stager       = (*Dir)(nil)
	_ backup.Local        = (*Dir)(nil)
)

func (d *Dir) path(key string) string { return filepath.Join(d.Root, filepath.FromSlash(key)) }

func (d *Dir) chown(p string) error {
	if d.Chown == nil {
		return nil
	}
	return d.Chown(p)
}

// mkdirs makes the directory of the key or prefix dir ("" is Root) and its parents. Directories it makes
// get their modes and owners (see Dir); with again, existing ones get them again too.
func (d *Dir) mkdirs(dir string, again bool) error {
	p := d.Root
	if err := d.mkdir(p, 0o711, false, again); err != nil {
		return err
	}
	if dir == "" {
		return nil
	}
	for i, seg := range strings.Split(dir, "/") {
		p = filepath.Join(p, seg)
		if i == 0 {
			if err := d.mkdir(p, 0o711, false, again); err != nil {
				return err
			}
			continue
		}
		if err := d.mkdir(p, 0o700, true, again); err != nil {
			return err
		}
	}
	return nil
}

func (d *Dir) mkdir(p string, mode os.FileMode, owned, again bool) error {
	err := os.Mkdir(p, mode)
	if errors.Is(err, fs.ErrExist) && !again {
		return nil
	}
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := os.Chmod(p, mode); err != nil { // the umask may have taken bits away
		return err
	}
	if owned {
		return d.chown(p)
	}
	return nil
}

// Put implements backup.Objects: a temporary file next to the object, fsynced, renamed into place, and the
// directory fsynced.
func (d *Dir) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	if err := backup.CheckKey(key); err != nil {
		return 0, err
	}
	if parent := path.Dir(key); parent != "." {
		if err := d.mkdirs(parent, false); err != nil {
			return 0, err
		}
	} else if err := d.mkdirs("", false); err != nil {
		return 0, err
	}
	dst := d.path(key)
	f, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return 0, err
	}
	n, err := func() (int64, error) {
		n, err := io.Copy(f, &ctxReader{ctx: ctx, r: r})
		if err != nil {
			return n, err
		}
		if err := f.Chmod(0o600); err != nil {
			return n, err
		}
		if err := d.chown(f.Name()); err != nil {
			return n, err
		}
		return n, f.Sync()
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), dst)
	}
	if err != nil {
		os.Remove(f.Name())
		return 0, fmt.Errorf("put %s: %w", key, err)
	}
	return n, syncDir(filepath.Dir(dst))
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Get implements backup.Objects.
func (d *Dir) Get(_ context.Context, key string) (io.ReadCloser, error) {
	if err := backup.CheckKey(key); err != nil {
		return nil, err
	}
	f, err := os.Open(d.path(key))
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("get %s: %w", key, backup.ErrNotExist)
	}
	return f, nil
}

// Stat implements backup.Objects.
func (d *Dir) Stat(_ context.Context, key string) (backup.Info, error) {
	if err := backup.CheckKey(key); err != nil {
		return backup.Info{}, err
	}
	fi, err := os.Stat(d.path(key))
	if err != nil {
		return backup.Info{}, fmt.Errorf("stat %s: %w", key, err)
	}
	if !fi.Mode().IsRegular() {
		return backup.Info{}, fmt.Errorf("stat %s: %w", key, backup.ErrNotExist)
	}
	return backup.Info{Key: key, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

// List implements backup.Objects: the regular files below the prefix's directory whose keys start with
// prefix, leaving out names starting with a dot (work in progress) and what is below them.
func (d *Dir) List(ctx context.Context, prefix string) ([]backup.Info, error) {
	if err := backup.CheckPrefix(prefix); err != nil {
		return nil, err
	}
	out := []backup.Info{}
	start := ""
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		start = prefix[:i]
	}
	err := filepath.WalkDir(d.path(start), func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(d.Root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if e.IsDir() {
			if key == "." {
				return nil
			}
			if strings.HasPrefix(e.Name(), ".") ||
				(!strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") || !strings.HasPrefix(key, prefix) {
			return nil
		}
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // deleted meanwhile
		}
		if err != nil {
			return err
		}
		out = append(out, backup.Info{Key: key, Size: fi.Size(), ModTime: fi.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", prefix, err)
	}
	slices.SortFunc(out, func(a, b backup.Info) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// Delete implements backup.Objects.
func (d *Dir) Delete(_ context.Context, keys ...string) error {
	for _, k := range keys {
		if err := backup.CheckKey(k); err != nil {
			return err
		}
	}
	for _, k := range keys {
		if err := os.Remove(d.path(k)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("delete %s: %w", k, err)
		}
	}
	return nil
}

// DeleteAll implements backup.Objects. A prefix ending in "/" is a directory: it goes whole (with its
// stage, if any); another prefix deletes what List shows of it.
func (d *Dir) DeleteAll(ctx context.Context, prefix string) (bool, error) {
	if prefix == "" {
		return false, errors.New("delete all: empty prefix")
	}
	if err := backup.CheckPrefix(prefix); err != nil {
		return false, err
	}
	dir, ok := strings.CutSuffix(prefix, "/")
	if !ok {
		infos, err := d.List(ctx, prefix)
		if err != nil {
			return false, err
		}
		keys := make([]string, len(infos))
		for i, in := range infos {
			keys[i] = in.Key
		}
		return len(keys) > 0, d.Delete(ctx, keys...)
	}
	found := false
	for _, p := range []string{d.path(dir), d.stagePath(dir)} {
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return found, err
		}
		found = true
		if err := os.RemoveAll(p); err != nil {
			return found, fmt.Errorf("delete all of %q: %w", prefix, err)
		}
	}
	return found, nil
}

// Prepare implements backup.Preparer: the directory of prefix (a key followed by "/") and its parents,
// with their modes and owners applied again.
func (d *Dir) Prepare(_ context.Context, prefix string) error {
	dir, err := dirPrefix(prefix)
	if err != nil {
		return err
	}
	return d.mkdirs(dir, true)
}

func dirPrefix(prefix string) (string, error) {
	dir, ok := strings.CutSuffix(prefix, "/")
	if !ok || backup.CheckKey(dir) != nil {
		return "", fmt.Errorf("invalid directory prefix %q (a key followed by /)", prefix)
	}
	return dir, nil
}

// LocalDir implements backup.Local: the prefix's directory, which must exist.
func (d *Dir) LocalDir(prefix string) (string, error) {
	dir, err := dirPrefix(prefix)
	if err != nil {
		return "", err
	}
	p := d.path(dir)
	fi, err := os.Lstat(p)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", p)
	}
	return p, nil
}

// WALCommands implements backup.WALTransport: cp into and out of the prefix's directory (made here, as
// Prepare makes it), so that the segments PostgreSQL archives are the objects "<prefix><segment>".
func (d *Dir) WALCommands(ctx context.Context, prefix string) (archive, restore string, err error) {
	if err := d.Prepare(ctx, prefix); err != nil {
		return "", "", err
	}
	dir := d.path(strings.TrimSuffix(prefix, "/"))
	if archive, err = postgres.CopyArchiveCommand(dir); err != nil {
		return "", "", err
	}
	return archive, `cp "` + dir + `/%f" "%p"`, nil
}

// stagePath is where the stage of the directory prefix dir ("a/b") lives: "a/.b.stage".
func (d *Dir) stagePath(dir string) string {
	return filepath.Join(d.path(path.Dir(dir)), "."+path.Base(dir)+".stage")
}

// Stage implements backup.Stager: the directory "a/.b.stage" of the prefix "a/b/", on the filesystem the
// objects live on (Commit renames it into place), owned by the instances' OS user.
func (d *Dir) Stage(ctx context.Context, prefix string) (string, error) {
	dir, err := dirPrefix(prefix)
	if err != nil {
		return "", err
	}
	if parent := path.Dir(dir); parent != "." {
		if err := d.mkdirs(parent, false); err != nil {
			return "", err
		}
	}
	st := d.stagePath(dir)
	if err := os.RemoveAll(st); err != nil {
		return "", err
	}
	if err := d.mkdir(st, 0o700, true, false); err != nil {
		return "", err
	}
	return st, nil
}

// Commit implements backup.Stager: every file of the stage is fsynced, then the stage is renamed to the
// prefix's directory (which must not exist: DeleteAll it first) and the parent directory fsynced. Only
// regular files and directories may be in the stage.
func (d *Dir) Commit(ctx context.Context, prefix string) error {
	dir, err := dirPrefix(prefix)
	if err != nil {
		return err
	}
	st := d.stagePath(dir)
	err = filepath.WalkDir(st, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !e.IsDir() && !e.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", p)
		}
		if rel, _ := filepath.Rel(st, p); rel != "." && backup.CheckKey(filepath.ToSlash(rel)) != nil {
			return fmt.Errorf("%s: a name that cannot be an object key", p)
		}
		return syncDir(p)
	})
	if err != nil {
		return fmt.Errorf("commit %q: %w", prefix, err)
	}
	if err := os.Rename(st, d.path(dir)); err != nil {
		return fmt.Errorf("commit %q: %w", prefix, err)
	}
	return syncDir(filepath.Dir(d.path(dir)))
}

// syncDir fsyncs a file or a directory.
func syncDir(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Unstage implements backup.Stager.
func (d *Dir) Unstage(_ context.Context, prefix string) error {
	dir, err := dirPrefix(prefix)
	if err != nil {
		return err
	}
	return os.RemoveAll(d.stagePath(dir))
}
