package migrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/dumpcache"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// With a bucket as the backup store, an uploaded dump is an object of the bucket (backup.UploadKey:
// sealed and compressed like every object) once its PUT is complete, and its file at store.Upload.Path an
// entry of the local cache of the bucket's dumps (appliance/dumpcache: one bound with the exports'). The
// import reads the file, fetched from the bucket again when it was evicted (localDump); the object is
// deleted once the dump is consumed, or expired by the sweep (RemoveUploadObjects). Without a bucket the
// file is the only copy, as before.

// importDir makes the project's imports directory in the backup store, owned by the instances' OS user
// (who must own the dumps too), and returns them.
func (s *Service) importDir(ctx context.Context, projectID string) (Owner, string, error) {
	owner, err := s.host.PrepareUploads(ctx, projectID)
	if err != nil {
		return nil, "", err
	}
	dir := ImportDir(s.dataDir, projectID)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, "", apperr.Internal(err, "create imports directory")
	}
	if err := owner.Chown(dir); err != nil {
		return nil, "", apperr.Internal(err, "chown imports directory")
	}
	return owner, dir, nil
}

// putUpload stores the complete dump at path (size bytes) as the upload's object; when it returns nil the
// object is complete. A bucket that cannot take it is Unavailable.
func (s *Service) putUpload(ctx context.Context, u *store.Upload, path string, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return apperr.Internal(err, "open upload")
	}
	defer f.Close()
	n, err := s.bucket.PutUpload(ctx, u.ProjectID, u.ID, f)
	if err == nil && n != size {
		err = fmt.Errorf("%d bytes stored of %d", n, size)
	}
	if err != nil {
		s.removeObject(context.WithoutCancel(ctx), u)
		return &apperr.Error{Kind: apperr.KindUnavailable, Msg: fmt.Sprintf("upload %s cannot be stored in the backup store now: try again later", u.ID), Cause: err}
	}
	return nil
}

// removeObject deletes an upload's object, logging a failure (the sweep deletes the objects of consumed
// and expired uploads still marked in the bucket).
func (s *Service) removeObject(ctx context.Context, u *store.Upload) {
	if err := s.bucket.RemoveUpload(ctx, u.ProjectID, u.ID); err != nil {
		s.log.Warn("delete an upload's object from the backup store", "upload", u.ID, "err", err)
	}
}

// cachedUploads lists the files of the uploaded dumps stored in the bucket: the cache's entries of this
// area.
func (s *Service) cachedUploads() ([]string, error) {
	return dumpcache.Paths(s.db, store.Uploads, func(u *store.Upload) bool { return u.State == UploadUploaded && u.InBucket },
		func(u *store.Upload) string { return u.Path })
}

// localDump is the file of the upload's dump for pg_restore, and the func to call once the restore is
// done. A dump in the bucket is pinned in the cache until then, and fetched from the bucket first when
// its file was evicted (or the appliance was recovered on a new machine). A bucket that cannot be read,
// or an object that is not the dump (its size, its seal), is a transient error (the job's attempts run
// out on a bad object); an object missing is not.
func (s *Service) localDump(ctx context.Context, u *store.Upload) (string, func(), error) {
	if !u.InBucket {
		return u.Path, func() {}, nil
	}
	unpin := s.cache.Pin(u.Path)
	done := func() {
		unpin()
		s.cache.EvictAfter("import of upload " + u.ID)
	}
	_, err := os.Stat(u.Path)
	if err == nil {
		s.cache.Touch(u.Path)
		return u.Path, done, nil
	}
	unpinned := func(err error) (string, func(), error) { unpin(); return "", nil, err }
	if !errors.Is(err, fs.ErrNotExist) {
		return unpinned(err)
	}
	if s.bucket == nil {
		return unpinned(fmt.Errorf("upload %s is in a bucket backup store, and the appliance runs without one now", u.ID))
	}
	owner, _, err := s.importDir(ctx, u.ProjectID)
	if err != nil {
		return unpinned(scheduler.Transient(err))
	}
	r, err := s.bucket.GetUpload(ctx, u.ProjectID, u.ID)
	if errors.Is(err, fs.ErrNotExist) {
		return unpinned(fmt.Errorf("upload %s: its dump is not in the backup store", u.ID))
	}
	if err != nil {
		return unpinned(scheduler.Transient(fmt.Errorf("read upload %s from the backup store: %w", u.ID, err)))
	}
	err = s.cache.Fetch(dumpcache.Entry{Path: u.Path, Size: u.SizeBytes, Name: "upload " + u.ID, Own: owner.Chown,
		Valid: func() error {
			var cur *store.Upload
			if err := s.db.View(func(tx *store.Tx) (err error) { cur, err = store.Uploads.Get(tx, u.ID); return err }); err != nil {
				return err
			}
			if cur.State != UploadUploaded {
				return fmt.Errorf("the upload is %s now", cur.State)
			}
			return nil
		}}, r)
	if err != nil {
		return unpinned(scheduler.Transient(fmt.Errorf("upload %s: %w", u.ID, err)))
	}
	return u.Path, done, nil
}

// RemoveUploadObjects deletes the objects of consumed and expired uploads still in the bucket (an import
// or a sweep that could not delete one before) and returns how many (the sweep runs it). Without a
// bucket now, such an object stays where it is (logged) and the upload is no longer marked in it.
func (s *Service) RemoveUploadObjects(ctx context.Context) (int, error) {
	var due []*store.Upload
	if err := s.db.View(func(tx *store.Tx) (err error) {
		due, err = store.Uploads.All(tx, func(u *store.Upload) bool {
			return u.InBucket && (u.State == UploadConsumed || u.State == UploadExpired)
		})
		return err
	}); err != nil {
		return 0, err
	}
	n := 0
	for _, u := range due {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		if s.bucket == nil {
			s.log.Warn("an upload's object stays in the bucket the appliance no longer runs with", "upload", u.ID)
		} else if err := s.bucket.RemoveUpload(ctx, u.ProjectID, u.ID); err != nil {
			return n, fmt.Errorf("remove upload %s from the backup store: %w", u.ID, err)
		}
		if err := s.forgetObject(u.ID); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// forgetObject marks an upload's object deleted.
func (s *Service) forgetObject(id string) error {
	err := s.db.Update(func(tx *store.Tx) error {
		cur, err := store.Uploads.Get(tx, id)
		if err != nil {
			return err
		}
		cur.InBucket = false
		return store.Uploads.Put(tx, cur)
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// LocalOnlyBytes is the bytes of a project's uploaded dumps whose only copy is their local file (uploaded
// without a bucket); the others' files are cache entries of objects, which the bucket's size counts.
func (s *Service) LocalOnlyBytes(projectID string) (int64, error) {
	paths, err := dumpcache.Paths(s.db, store.Uploads, func(u *store.Upload) bool {
		return u.ProjectID == projectID && u.State == UploadUploaded && !u.InBucket
	}, func(u *store.Upload) string { return u.Path })
	if err != nil {
		return 0, err
	}
	return dumpcache.FileBytes(paths)
}
