// Package dumpcache is the local cache of the dumps a bucket backup store holds: the exports
// (appliance/exports) and the uploaded dumps for imports (appliance/migrate). With a bucket, each such dump
// is an object of the bucket once stored, and its local file a cache entry: whatever uses it (its creation,
// a download, an import) sets its modification time to now, and after every new entry the least recently
// used entries are deleted until the entries together are within one bound, the exports' and the uploads'
// together (Cache.Bound: up --backup-cache-mb). A dump whose file is not there is read from its object and
// cached again as it is read (Fill: a download), or copied whole first (Fetch: pg_restore reads a file).
//
// The bound holds between evictions: an entry being written or filled counts once it is complete; a file
// evicted while being read stays readable to its reader (an open file outlives its name), and an entry an
// import restores from is pinned (Pin) until the restore ends. Dumps without an object (made without a
// bucket) are never entries: their file is the only copy. The areas tell the cache which dumps are stored
// (AddSource); it keeps no record of its own (the last use is the file's modification time, so it survives
// restarts).
package dumpcache

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/theappliance/appliance/store"
)

// DefaultBytes is the bound when New is given 0: 1 GiB.
const DefaultBytes = 1 << 30

// Cache is the local cache of a bucket's dumps.
type Cache struct {
	bound int64
	log   *slog.Logger
	now   func() time.Time

	// mu serializes the cache's changes: evictions, pins, a copy becoming an entry, and whatever an area
	// runs under it (Locked: a dump's deletion with its record's change).
	mu      sync.Mutex
	sources []func() ([]string, error)
	pins    map[string]int
}

// New returns a cache of bound bytes (0: DefaultBytes; negative: none kept) with the clock of the uses.
func New(bound int64, log *slog.Logger, clock func() time.Time) *Cache {
	switch {
	case bound == 0:
		bound = DefaultBytes
	case bound < 0:
		bound = 0
	}
	return &Cache{bound: bound, log: log, now: clock, pins: map[string]int{}}
}

// Bound is the cache's size in bytes (0: keep none).
func (c *Cache) Bound() int64 { return c.bound }

// AddSource adds a lister of dumps whose object is stored: the paths of their files, which are the
// cache's entries where they exist. Each area adds its own when it is built.
func (c *Cache) AddSource(list func() ([]string, error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sources = append(c.sources, list)
}

// Locked runs fn under the cache's lock: a dump's deletion and its record's change there are ordered with
// a copy becoming its entry (whose Entry.Valid runs under the lock too).
func (c *Cache) Locked(fn func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fn()
}

// Touch marks an entry used now.
func (c *Cache) Touch(path string) {
	now := c.now()
	if err := os.Chtimes(path, now, now); err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.log.Warn("mark a cached dump used", "path", path, "err", err)
	}
}

// Open opens an entry's file and marks it used; a dump not cached is fs.ErrNotExist.
func (c *Cache) Open(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err == nil {
		c.Touch(path)
	}
	return f, err
}

// Pin keeps path's entry from eviction until the returned func is called (an import restoring from it);
// pins of one path nest.
func (c *Cache) Pin(path string) (unpin func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pins[path]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.pins[path]--; c.pins[path] <= 0 {
				delete(c.pins, path)
			}
		})
	}
}

// entry is a file in the cache.
type entry struct {
	path string
	size int64
	used time.Time
}

// Evict deletes the least recently used entries that are not pinned until the entries together are
// within the bound, and returns how many it deleted.
func (c *Cache) Evict() (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var entries []entry
	for _, list := range c.sources {
		paths, err := list()
		if err != nil {
			return 0, fmt.Errorf("list the cached dumps: %w", err)
		}
		for _, p := range paths {
			fi, err := os.Stat(p)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return 0, err
			}
			if c.pins[p] > 0 { // not deleted, but it fills the bound first
				entries = append(entries, entry{path: p, size: fi.Size(), used: time.Unix(1<<62, 0)})
				continue
			}
			entries = append(entries, entry{path: p, size: fi.Size(), used: fi.ModTime()})
		}
	}
	return evictEntries(entries, c.bound, c.pins)
}

// evictEntries deletes the least recently used entries not in pinned until the others together are
// within bound.
func evictEntries(entries []entry, bound int64, pinned map[string]int) (int, error) {
	slices.SortFunc(entries, func(a, b entry) int { // the most recently used first
		return cmp.Or(b.used.Compare(a.used), cmp.Compare(a.path, b.path))
	})
	var kept int64
	n := 0
	for _, e := range entries {
		if kept+e.size <= bound || pinned[e.path] > 0 {
			kept += e.size
			continue
		}
		if err := os.Remove(e.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, fmt.Errorf("evict %s from the local cache: %w", e.path, err)
		}
		n++
	}
	return n, nil
}

// EvictAfter runs Evict after a new entry (what), logging what it did.
func (c *Cache) EvictAfter(what string) {
	n, err := c.Evict()
	if err != nil {
		c.log.Warn("evict dumps from the local cache", "after", what, "err", err)
	} else if n > 0 {
		c.log.Info("evicted dumps from the local cache", "after", what, "evicted", n, "bound_bytes", c.bound)
	}
}

// Entry is a dump being cached from its object.
type Entry struct {
	Path string // its file: the entry
	Size int64  // the dump's bytes: a copy of another size never becomes the entry
	Name string // what it is, for logs and errors ("export exp_…")
	// Own gives the complete copy to whoever reads it (the instances' OS user for pg_restore); nil: none.
	Own func(path string) error
	// Valid is checked under the cache's lock before the copy becomes the entry: the dump must still be
	// wanted (not expired or deleted meanwhile, which an area does under Locked). nil: always.
	Valid func() error
}

// Fill returns a reader of src (the dump's object) that caches what it yields: a temporary file beside the
// entry's path (a dot name: the directory store's List skips it) becomes the entry when src ended (the
// object authenticated) with the dump's size; then the cache evicts. A short read, a failed write or a
// Close before the end removes it. With a bound of 0, or when the temporary file cannot be made, src is
// read alone.
func (c *Cache) Fill(e Entry, src io.ReadCloser) io.ReadCloser {
	if c.bound <= 0 {
		return src
	}
	f, err := c.filling(e, src)
	if err != nil {
		c.log.Warn("cache a dump read from the bucket", "dump", e.Name, "err", err)
		return src
	}
	f.evict = true
	return f
}

// Fetch copies the dump's object (src, which it closes) whole into its entry, whatever the bound (its
// reader needs the file: Pin it first, so that it is not evicted before it is used, and EvictAfter once
// done). An object that is not the dump's size, or a dump no longer Valid, is an error and leaves nothing.
func (c *Cache) Fetch(e Entry, src io.ReadCloser) error {
	f, err := c.filling(e, src)
	if err != nil {
		src.Close()
		return fmt.Errorf("cache %s read from the bucket: %w", e.Name, err)
	}
	_, err = io.Copy(io.Discard, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && !f.kept {
		err = f.err
	}
	if err != nil {
		return fmt.Errorf("read %s from the bucket: %w", e.Name, err)
	}
	return nil
}

func (c *Cache) filling(e Entry, src io.ReadCloser) (*filling, error) {
	tmp, err := os.CreateTemp(filepath.Dir(e.Path), "."+filepath.Base(e.Path)+".*.part")
	if err != nil {
		return nil, err
	}
	return &filling{c: c, e: e, src: src, tmp: tmp}, nil
}

type filling struct {
	c     *Cache
	e     Entry
	src   io.ReadCloser
	tmp   *os.File // nil once kept or dropped
	n     int64
	evict bool  // evict after keeping (Fill; Fetch's caller does once done)
	kept  bool  // the copy is the entry
	err   error // why it was dropped
}

func (f *filling) Read(p []byte) (int, error) {
	n, err := f.src.Read(p)
	if f.tmp != nil && n > 0 {
		if _, werr := f.tmp.Write(p[:n]); werr != nil {
			f.drop(werr)
		}
		f.n += int64(n)
	}
	if f.tmp != nil && err == io.EOF {
		f.keep()
	}
	return n, err
}

func (f *filling) Close() error {
	err := f.src.Close()
	if f.tmp != nil {
		f.drop(nil)
	}
	return err
}

// drop removes the temporary file (why: logged and kept, when not nil).
func (f *filling) drop(why error) {
	if why != nil {
		f.err = why
		if f.evict {
			f.c.log.Warn("cache a dump read from the bucket", "dump", f.e.Name, "err", why)
		}
	}
	f.tmp.Close()
	os.Remove(f.tmp.Name())
	f.tmp = nil
}

// keep makes the complete temporary file the entry, unless the dump stopped being Valid meanwhile (under
// the lock, so that a deletion under Locked sees the entry or the entry is not made), then evicts (Fill).
func (f *filling) keep() {
	if f.n != f.e.Size {
		f.drop(fmt.Errorf("read %d bytes of the bucket's object, the dump has %d", f.n, f.e.Size))
		return
	}
	if err := f.tmp.Close(); err != nil {
		f.drop(err)
		return
	}
	tmp := f.tmp.Name()
	f.tmp = nil
	if f.e.Own != nil {
		if err := f.e.Own(tmp); err != nil {
			os.Remove(tmp)
			f.err = err
			return
		}
	}
	now := f.c.now()
	err := f.c.Locked(func() error {
		if f.e.Valid != nil {
			if err := f.e.Valid(); err != nil {
				return err
			}
		}
		if err := os.Chtimes(tmp, now, now); err != nil {
			return err
		}
		return os.Rename(tmp, f.e.Path)
	})
	if err != nil {
		os.Remove(tmp)
		f.err = err
		if f.evict {
			f.c.log.Warn("cache a dump read from the bucket", "dump", f.e.Name, "err", err)
		}
		return
	}
	f.kept = true
	if f.evict {
		f.c.EvictAfter(f.e.Name + " read from the bucket")
	}
}

// Paths reads the paths (path) of the records of table that keep selects, in one read transaction: an
// area's source of entries, or its dumps whose file is the only copy.
func Paths[T any](db *store.DB, table *store.Table[T], keep func(*T) bool, path func(*T) string) ([]string, error) {
	var recs []*T
	if err := db.View(func(tx *store.Tx) (err error) { recs, err = table.All(tx, keep); return err }); err != nil {
		return nil, err
	}
	paths := make([]string, len(recs))
	for i, r := range recs {
		paths[i] = path(r)
	}
	return paths, nil
}

// FileBytes is the bytes of the files at paths that exist.
func FileBytes(paths []string) (int64, error) {
	var n int64
	for _, p := range paths {
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return n, err
		}
		n += fi.Size()
	}
	return n, nil
}
