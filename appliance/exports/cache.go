package exports

import (
	"context"
	"fmt"
	"io"

	"github.com/theappliance/appliance/appliance/dumpcache"
	"github.com/theappliance/appliance/store"
)

// With a bucket, an export is an object of the bucket once its job stored it (store.Export.ObjectKey); its
// file at store.Export.Path is then an entry of the local cache of the bucket's dumps (appliance/dumpcache,
// shared with the uploaded dumps: one bound). A download whose file is not there reads the object and
// caches it again as it streams (fill). Exports without an object (made without a bucket) are never
// entries: their file is the only copy.

// cachedPaths lists the files of the exports stored in the bucket: the cache's entries of this area.
func (s *Service) cachedPaths() ([]string, error) {
	return dumpcache.Paths(s.db, store.Exports, func(e *store.Export) bool { return e.State == StateCompleted && e.ObjectKey != "" },
		func(e *store.Export) string { return e.Path })
}

// fill caches an export's object as a download reads it from the bucket (dumpcache.Cache.Fill), unless
// the export stopped being completed meanwhile (the sweep, a project's deletion: under the cache's lock).
// When the directory cannot be made, src is read alone.
func (s *Service) fill(ctx context.Context, e *store.Export, src io.ReadCloser) io.ReadCloser {
	if s.cache.Bound() <= 0 {
		return src
	}
	if _, err := s.host.PrepareDumpDir(ctx, e.ProjectID); err != nil {
		s.log.Warn("cache an export read from the bucket", "export", e.ID, "err", err)
		return src
	}
	return s.cache.Fill(dumpcache.Entry{Path: e.Path, Size: e.SizeBytes, Name: "export " + e.ID, Valid: func() error {
		var cur *store.Export
		if err := s.db.View(func(tx *store.Tx) (err error) { cur, err = store.Exports.Get(tx, e.ID); return err }); err != nil {
			return err
		}
		if cur.State != StateCompleted {
			return fmt.Errorf("the export is %s now", cur.State)
		}
		return nil
	}}, src)
}

// LocalOnlyBytes is the bytes of a project's completed exports whose only copy is their local file (made
// without a bucket); the others' files are cache entries of objects, which the bucket's size counts.
func (s *Service) LocalOnlyBytes(projectID string) (int64, error) {
	paths, err := dumpcache.Paths(s.db, store.Exports, func(e *store.Export) bool {
		return e.ProjectID == projectID && e.State == StateCompleted && e.ObjectKey == ""
	}, func(e *store.Export) string { return e.Path })
	if err != nil {
		return 0, err
	}
	return dumpcache.FileBytes(paths)
}
