package exports

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/theappliance/appliance/store"
)

// The local cache of the bucket's exports. With a bucket, an export is an object of the bucket once its
// job stored it (store.Export.ObjectKey); its file at store.Export.Path is then a cache entry: whatever
// uses it (its creation, a download) sets its modification time to now, and after every new entry the
// least recently used entries are deleted until the entries together are within the bound (cacheBound).
// A download whose file is not there reads the object and caches it again as it streams (fill). The bound
// holds between evictions: an entry being downloaded or filled counts once it is complete, and a file
// evicted while being downloaded stays readable to that download (an open file outlives its name).
// Exports without an object (made without a bucket) are never evicted: their file is the only copy.

// cacheBound is the local cache's size in bytes (0: keep none).
func (s *Service) cacheBound() int64 {
	switch n := s.cfg.CacheBytes; {
	case n == 0:
		return DefaultCacheBytes
	case n < 0:
		return 0
	default:
		return n
	}
}

// touch marks a cache entry used now.
func (s *Service) touch(path string) {
	now := s.now()
	if err := os.Chtimes(path, now, now); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("mark an export's cached file used", "path", path, "err", err)
	}
}

// cacheEntry is an export's file in the local cache.
type cacheEntry struct {
	path string
	size int64
	used time.Time
}

// evict deletes the least recently used cache entries until the entries together are within the bound,
// and returns how many it deleted.
func (s *Service) evict() (int, error) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	var cached []*store.Export
	if err := s.db.View(func(tx *store.Tx) (err error) {
		cached, err = store.Exports.All(tx, func(e *store.Export) bool { return e.State == StateCompleted && e.ObjectKey != "" })
		return err
	}); err != nil {
		return 0, fmt.Errorf("list the cached exports: %w", err)
	}
	var entries []cacheEntry
	for _, e := range cached {
		fi, err := os.Stat(e.Path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("export %s: %w", e.ID, err)
		}
		entries = append(entries, cacheEntry{path: e.Path, size: fi.Size(), used: fi.ModTime()})
	}
	return evictEntries(entries, s.cacheBound())
}

// evictEntries deletes the least recently used entries until the others together are within bound.
func evictEntries(entries []cacheEntry, bound int64) (int, error) {
	slices.SortFunc(entries, func(a, b cacheEntry) int { // the most recently used first
		return cmp.Or(b.used.Compare(a.used), cmp.Compare(a.path, b.path))
	})
	var kept int64
	n := 0
	for _, c := range entries {
		if kept+c.size <= bound {
			kept += c.size
			continue
		}
		if err := os.Remove(c.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, fmt.Errorf("evict %s from the local cache: %w", c.path, err)
		}
		n++
	}
	return n, nil
}

// evictAfter runs evict after a new cache entry, logging what it did.
func (s *Service) evictAfter(what string) {
	n, err := s.evict()
	if err != nil {
		s.log.Warn("evict exports from the local cache", "after", what, "err", err)
	} else if n > 0 {
		s.log.Info("evicted exports from the local cache", "after", what, "evicted", n, "bound_bytes", s.cacheBound())
	}
}

// fill caches an export's object as a download reads it from the bucket: what src yields goes to the
// reader and to a temporary file beside the export's path (a name List skips), which becomes the cache
// entry when src ended (the object authenticated) with the export's size; a short read, a failed write or
// a Close before the end removes it. Without a bound, or when the directory cannot be made, src is read
// alone.
func (s *Service) fill(ctx context.Context, e *store.Export, src io.ReadCloser) io.ReadCloser {
	if s.cacheBound() <= 0 {
		return src
	}
	if _, err := s.host.PrepareDumpDir(ctx, e.ProjectID); err != nil {
		s.log.Warn("cache an export read from the bucket", "export", e.ID, "err", err)
		return src
	}
	tmp, err := os.CreateTemp(filepath.Dir(e.Path), "."+e.ID+".*.part")
	if err != nil {
		s.log.Warn("cache an export read from the bucket", "export", e.ID, "err", err)
		return src
	}
	return &filling{s: s, e: e, src: src, tmp: tmp}
}

type filling struct {
	s   *Service
	e   *store.Export
	src io.ReadCloser
	tmp *os.File // nil once kept or dropped
	n   int64
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

// drop removes the temporary file (why: logged, when not nil).
func (f *filling) drop(why error) {
	if why != nil {
		f.s.log.Warn("cache an export read from the bucket", "export", f.e.ID, "err", why)
	}
	f.tmp.Close()
	os.Remove(f.tmp.Name())
	f.tmp = nil
}

// keep makes the complete temporary file the export's cache entry, unless the export stopped being
// completed meanwhile (the sweep, a project's deletion: under cacheMu, so one of the two sees the other),
// then evicts.
func (f *filling) keep() {
	if f.n != f.e.SizeBytes {
		f.drop(fmt.Errorf("read %d bytes of the bucket's object, the export has %d", f.n, f.e.SizeBytes))
		return
	}
	if err := f.tmp.Close(); err != nil {
		f.drop(err)
		return
	}
	tmp := f.tmp.Name()
	f.tmp = nil
	now := f.s.now()
	err := func() error {
		f.s.cacheMu.Lock()
		defer f.s.cacheMu.Unlock()
		var cur *store.Export
		if err := f.s.db.View(func(tx *store.Tx) (err error) { cur, err = store.Exports.Get(tx, f.e.ID); return err }); err != nil {
			return err
		}
		if cur.State != StateCompleted {
			return fmt.Errorf("the export is %s now", cur.State)
		}
		if err := os.Chtimes(tmp, now, now); err != nil {
			return err
		}
		return os.Rename(tmp, f.e.Path)
	}()
	if err != nil {
		os.Remove(tmp)
		f.s.log.Warn("cache an export read from the bucket", "export", f.e.ID, "err", err)
		return
	}
	f.s.evictAfter("export " + f.e.ID + " read from the bucket")
}

// LocalOnlyBytes is the bytes of a project's completed exports whose only copy is their local file (made
// without a bucket); the others' files are cache entries of objects, which the bucket's size counts.
func (s *Service) LocalOnlyBytes(projectID string) (int64, error) {
	var local []*store.Export
	if err := s.db.View(func(tx *store.Tx) (err error) {
		local, err = store.Exports.Lookup(tx, store.ExportsByProject, projectID, store.Query{})
		return err
	}); err != nil {
		return 0, err
	}
	var n int64
	for _, e := range local {
		if e.State != StateCompleted || e.ObjectKey != "" {
			continue
		}
		fi, err := os.Stat(e.Path)
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
