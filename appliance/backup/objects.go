package backup

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"strings"
	"time"
)

// Objects is where the backup store keeps its bytes: immutable objects named by slash-separated keys
// (Litestream's ReplicaClient shape). The local directory (package dirstore) is one implementation; object
// storage is meant to be another. Keys are checked by CheckKey; a key names one object, never a
// directory.
type Objects interface {
	// Put stores what r yields as the object key, replacing any object there, and returns its size. The
	// object is visible (to Get, Stat and List) only once complete: a Put that fails or is killed midway
	// leaves nothing readable under key (the previous object, if any, stays).
	Put(ctx context.Context, key string, r io.Reader) (int64, error)
	// Get opens an object; a missing one is ErrNotExist.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Stat describes an object; a missing one is ErrNotExist.
	Stat(ctx context.Context, key string) (Info, error)
	// List describes the objects whose keys start with prefix (a plain string prefix: "p/wal/" lists
	// what is under p/wal), sorted by key; none is an empty list, not an error.
	List(ctx context.Context, prefix string) ([]Info, error)
	// Delete removes objects; missing ones are not an error.
	Delete(ctx context.Context, keys ...string) error
	// DeleteAll removes every object whose key starts with prefix (which must not be empty), and whatever
	// the implementation keeps for them that List does not show (unfinished puts, directories, staged
	// files), and reports whether there was anything.
	DeleteAll(ctx context.Context, prefix string) (bool, error)
}

// Info describes an object.
type Info struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// ErrNotExist is what Get and Stat return (wrapped) for a missing object; it is fs.ErrNotExist, so
// errors.Is(err, fs.ErrNotExist) holds too.
var ErrNotExist = fs.ErrNotExist

// Optional interfaces an Objects may implement. The Store uses them where they exist and says so in its
// error where they do not.
type (
	// Preparer makes the local places the objects of a prefix will live in (the directory store's
	// directories, with their owners and modes). Idempotent; it applies the modes again to what exists.
	Preparer interface {
		Prepare(ctx context.Context, prefix string) error
	}

	// WALTransport gives the commands PostgreSQL runs to archive a WAL segment as an object under prefix
	// ("<prefix><segment name>") and to fetch one back: archive_command (%p, %f) and restore_command (%f,
	// %p). The directory store copies files with cp. A store without it (object storage) needs the
	// appliance to receive the WAL and put it itself: that is issue 27's concern.
	WALTransport interface {
		WALCommands(ctx context.Context, prefix string) (archive, restore string, err error)
	}

	// Stager takes a tree of files written locally by a program (pg_basebackup) as the objects under
	// prefix: Stage gives an empty local directory (a leftover of an earlier attempt is removed first),
	// writable by the instances' OS user and invisible to List; Commit makes every regular file below it
	// the object prefix+<its relative path> (durably, when it returns) and removes the directory; Unstage
	// removes the directory of an abandoned stage (a missing one is not an error).
	Stager interface {
		Stage(ctx context.Context, prefix string) (string, error)
		Commit(ctx context.Context, prefix string) error
		Unstage(ctx context.Context, prefix string) error
	}

	// Local keeps the objects under a directory prefix as the files of one local directory, at their
	// relative paths (dirstore.Dir): LocalDir is that directory (it must exist). A base backup is then
	// copied from there file by file (by reflink where the filesystem has them) rather than streamed.
	Local interface {
		LocalDir(prefix string) (string, error)
	}
)

var keySegment = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

// CheckKey refuses keys that are not relative slash-separated paths of plain names: empty keys or
// segments, a leading or trailing slash, ".", "..", names starting with a dot (implementations keep
// their work in progress there) and characters other than ASCII letters, digits, '_', '.' and '-'.
func CheckKey(key string) error {
	if key == "" {
		return fmt.Errorf("invalid object key %q: empty", key)
	}
	for _, seg := range strings.Split(key, "/") {
		if !keySegment.MatchString(seg) {
			return fmt.Errorf("invalid object key %q", key)
		}
	}
	return nil
}

// CheckPrefix checks a List or DeleteAll prefix: "" (everything), or a key, or a key followed by "/".
func CheckPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := CheckKey(strings.TrimSuffix(prefix, "/")); err != nil {
		return fmt.Errorf("invalid object prefix %q", prefix)
	}
	return nil
}
