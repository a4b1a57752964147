package migrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/store"
)

// Upload states; see docs/api-decisions.md (Imports).
const (
	UploadPending  = api.UploadPending  // the signed URL is issued, nothing received yet
	UploadUploaded = api.UploadUploaded // the dump is in the backup store, ready for import.restore
	UploadConsumed = api.UploadConsumed // import.restore restored it; its dump is deleted
	UploadExpired  = api.UploadExpired  // the sweep deleted it: pending past its URL's expiry, or never imported (see UploadRetention)
)

// JobImportRestore restores an uploaded dump into a project's database with pg_restore.
const JobImportRestore = "import.restore"

// UploadTTL is how long a signed upload URL is valid.
const UploadTTL = time.Hour

const uploadMACPurpose = "import-upload"

// uploadView is the API view of an upload; its URL is the one signed at creation (same ID and expiry).
func (s *Service) uploadView(u *store.Upload) *api.Upload {
	return &api.Upload{ID: u.ID, ObjectKey: u.ObjectKey, State: u.State, SizeBytes: u.SizeBytes, ExpiresAt: u.ExpiresAt,
		UploadURL: s.uploadURLs.URL(u.ID, u.ExpiresAt)}
}

// ImportPayload is import.restore's payload.
type ImportPayload struct {
	UploadID string `json:"upload_id"`
}

// ImportDir is the directory of a project's uploaded dumps in the backup store under the data directory.
func ImportDir(dataDir, projectID string) string {
	return filepath.Join(dataDir, "backups", projectID, "imports")
}

// CreateUpload records a pending upload and returns its signed URL (valid UploadTTL). A session
// needs the admin role: the dump is meant to overwrite the database.
func (s *Service) CreateUpload(ctx context.Context, p *authz.Principal, projectID string) (*api.UploadResponse, error) {
	if err := p.RequireAdminRole("importing into a project"); err != nil {
		return nil, err
	}
	var out *api.UploadResponse
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := s.host.ActiveProject(tx, p, projectID)
		if err != nil {
			return err
		}
		if err := s.host.RequireDumps(tx, prj); err != nil {
			return err
		}
		now := s.now()
		pending, err := store.Uploads.All(tx, func(x *store.Upload) bool {
			return x.ProjectID == prj.ID && x.State == UploadPending && now.Before(x.ExpiresAt)
		})
		if err != nil {
			return apperr.Internal(err, "list uploads")
		}
		if len(pending) >= MaxPendingUploads {
			first := slices.MinFunc(pending, func(a, b *store.Upload) int { return a.ExpiresAt.Compare(b.ExpiresAt) })
			return &apperr.Error{Kind: apperr.KindTooMany, RetryAfter: first.ExpiresAt.Sub(now), Msg: fmt.Sprintf("a project has at most %d upload URLs waiting for their dump: use them, or let them expire (%v)", MaxPendingUploads, UploadTTL)}
		}
		u := &store.Upload{ID: ids.New("upl"), ProjectID: prj.ID, OrganizationID: prj.OrganizationID, State: UploadPending,
			CreatedAt: now, ExpiresAt: now.Add(UploadTTL).Truncate(time.Second)}
		u.ObjectKey = "imports/" + u.ID + ".dump"
		u.Path = filepath.Join(ImportDir(s.dataDir, prj.ID), u.ID+".dump")
		if err := store.Uploads.Put(tx, u); err != nil {
			return apperr.Internal(err, "store upload")
		}
		if err := s.host.Audit(tx, p, "import.upload", prj.OrganizationID, prj.ID, map[string]any{"upload_id": u.ID}); err != nil {
			return apperr.Internal(err, "audit")
		}
		out = &api.UploadResponse{Upload: s.uploadView(u)}
		return nil
	})
	return out, err
}

// ReceiveUpload checks a signed upload URL (constant-time; bad or expired is Forbidden) and stores
// body as the upload's dump: a temporary file next to the target, fsync, rename, owned by the instances'
// OS user; with a bucket, the complete file is stored as the dump's object first (a bucket that cannot
// take it is Unavailable, and nothing is kept) and the file is then a cache entry. A body over the
// project's storage_limit_bytes is TooLarge and nothing is kept; an upload that is no longer pending is a
// Conflict.
//
// The limit holds for the project's uploads together: dumps uploaded and not yet imported, and the
// shares other uploads being received reserved, count against it. declared is the request's
// Content-Length (-1 when unknown): the PUT reserves that much, or all that is left when unknown, before
// a byte is read, and is refused when that much is not left. A second PUT to an upload being received is
// a Conflict at once.
func (s *Service) ReceiveUpload(ctx context.Context, uploadID, expires, sig string, declared int64, body io.Reader) (*api.UploadResponse, error) {
	u, prj, err := s.uploadURLs.Open(uploadID, expires, sig)
	if err != nil {
		return nil, err
	}
	if u.State != UploadPending {
		return nil, apperr.Conflict("upload %s is %s", u.ID, u.State)
	}
	if !s.uploads.begin(u.ID) {
		return nil, apperr.Conflict("upload %s is being received by another request", u.ID)
	}
	defer s.uploads.end(u.ID)
	limit := prj.StorageLimitBytes
	if n := s.uploadLimit(); n > 0 {
		limit = n
	}
	if limit <= 0 {
		limit = s.host.PlanStorageLimitBytes(prj.Plan)
	}
	// Reserve this PUT's share of the limit before reading a byte: its Content-Length, or all that is
	// left when it declares none. Dumps waiting for their import and other PUTs' reservations count.
	share, err := s.uploads.reserve(prj.ID, limit, declared, func() (stored int64, err error) {
		err = s.db.View(func(tx *store.Tx) error {
			waiting, err := store.Uploads.All(tx, func(x *store.Upload) bool { return x.ProjectID == prj.ID && x.State == UploadUploaded })
			for _, x := range waiting {
				stored += x.SizeBytes
			}
			return err
		})
		return stored, err
	})
	if err != nil {
		return nil, err
	}
	defer s.uploads.release(prj.ID, share) // after the upload is stored (or refused): it counts there then
	tooLarge := &apperr.Error{Kind: apperr.KindTooLarge, Msg: fmt.Sprintf("the project's uploads together may hold at most its storage limit of %d bytes: this upload had %d of them", limit, share)}
	owner, dir, err := s.importDir(ctx, prj.ID)
	if err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(dir, u.ID+".*.part")
	if err != nil {
		return nil, apperr.Internal(err, "create upload file")
	}
	keep := false
	defer func() {
		if !keep {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	var r io.Reader = body
	if limit > 0 {
		r = io.LimitReader(body, share+1)
	}
	n, err := io.Copy(tmp, r)
	if err != nil {
		return nil, apperr.Invalid("read the upload: %v", err)
	}
	if limit > 0 && n > share {
		return nil, tooLarge
	}
	if err := tmp.Sync(); err != nil {
		return nil, apperr.Internal(err, "sync upload")
	}
	if err := tmp.Close(); err != nil {
		return nil, apperr.Internal(err, "close upload")
	}
	if err := owner.Chown(tmp.Name()); err != nil {
		return nil, apperr.Internal(err, "chown upload")
	}
	// With a bucket the dump is stored as its object before the upload is recorded uploaded: the file
	// becomes a cache entry. An upload refused after this (its project deleted meanwhile, a second PUT
	// first) deletes the object.
	inBucket := s.bucket != nil
	if inBucket {
		if err := s.putUpload(ctx, u, tmp.Name(), n); err != nil {
			return nil, err
		}
		defer func() {
			if !keep {
				s.removeObject(context.WithoutCancel(ctx), u)
			}
		}()
	}
	var out *api.UploadResponse
	var path string
	err = s.db.Update(func(tx *store.Tx) error {
		cur, err := store.Uploads.Get(tx, u.ID)
		if errors.Is(err, store.ErrNotFound) { // its project was deleted meanwhile
			return apperr.Forbidden("upload %s is not accepted", u.ID)
		}
		if err != nil {
			return apperr.Internal(err, "get upload")
		}
		if cur.State != UploadPending {
			return apperr.Conflict("upload %s is %s", cur.ID, cur.State)
		}
		now := s.now()
		cur.State, cur.SizeBytes, cur.UploadedAt, cur.InBucket = UploadUploaded, n, &now, inBucket
		if err := store.Uploads.Put(tx, cur); err != nil {
			return apperr.Internal(err, "store upload")
		}
		if err := s.host.Audit(tx, nil, "import.upload_received", cur.OrganizationID, cur.ProjectID,
			map[string]any{"upload_id": cur.ID, "size_bytes": n}); err != nil {
			return apperr.Internal(err, "audit")
		}
		out = &api.UploadResponse{Upload: s.uploadView(cur)}
		path = cur.Path
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The file goes to its place once the record says it is there, not inside the transaction: on etcd a
	// transaction may run more than once, and a rename is not undone with an attempt that is. When it
	// fails, the upload is put back to pending (it can be sent again).
	if err := os.Rename(tmp.Name(), path); err != nil {
		if uerr := s.db.Update(func(tx *store.Tx) error {
			cur, err := store.Uploads.Get(tx, u.ID)
			if err != nil || cur.State != UploadUploaded {
				return err
			}
			cur.State, cur.SizeBytes, cur.UploadedAt, cur.InBucket = UploadPending, 0, nil, false
			return store.Uploads.Put(tx, cur)
		}); uerr != nil {
			err = errors.Join(err, uerr)
		}
		return nil, apperr.Internal(err, "store upload file")
	}
	keep = true
	if d, err := os.Open(dir); err == nil { // make the rename durable
		_ = d.Sync()
		d.Close()
	}
	if inBucket {
		s.cache.Touch(u.Path)
		s.cache.EvictAfter("upload " + u.ID)
	}
	return out, nil
}

// CreateImport enqueues import.restore of the named, or the newest uploaded, upload. It needs
// confirm: true; a session needs the admin role.
func (s *Service) CreateImport(ctx context.Context, p *authz.Principal, projectID string, req *api.ImportRequest) (*api.JobResponse, error) {
	if err := p.RequireAdminRole("importing into a project"); err != nil {
		return nil, err
	}
	if !req.Confirm {
		return nil, apperr.Invalid("an import overwrites the project's database; send confirm: true")
	}
	var job *store.Job
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := s.host.ActiveProject(tx, p, projectID)
		if err != nil {
			return err
		}
		if err := s.host.RequireDumps(tx, prj); err != nil {
			return err
		}
		var u *store.Upload
		if req.UploadID != "" {
			u, err = store.Uploads.Get(tx, req.UploadID)
			if errors.Is(err, store.ErrNotFound) || (err == nil && u.ProjectID != prj.ID) {
				return apperr.NotFound("upload %s not found", req.UploadID)
			}
			if err != nil {
				return apperr.Internal(err, "get upload")
			}
			if u.State != UploadUploaded {
				return apperr.Conflict("upload %s is %s, not uploaded", u.ID, u.State)
			}
		} else {
			us, err := store.Uploads.Lookup(tx, store.UploadsByProject, prj.ID, store.Query{Newest: true})
			if err != nil {
				return apperr.Internal(err, "list uploads")
			}
			for _, c := range us {
				if c.State == UploadUploaded && (u == nil || c.UploadedAt.After(*u.UploadedAt)) {
					u = c
				}
			}
			if u == nil {
				return apperr.Conflict("project %s has no uploaded dump to import", prj.ID)
			}
		}
		j, err := s.host.Enqueue(tx, prj, JobImportRestore, prj.ID, ImportPayload{UploadID: u.ID})
		if err != nil {
			return err
		}
		if err := s.host.Audit(tx, p, JobImportRestore, prj.OrganizationID, prj.ID,
			map[string]any{"upload_id": u.ID, "job_id": j.ID}); err != nil {
			return apperr.Internal(err, "audit")
		}
		job = j
		return nil
	})
	return s.host.AnswerJob(job, err)
}

// MaxPendingUploads is how many upload URLs a project may hold that have not received their dump.
const MaxPendingUploads = 5

// uploadGate tracks the upload PUTs being received: which uploads (one request each at a time), and how
// many bytes of each project's limit they have reserved.
type uploadGate struct {
	mu       sync.Mutex
	busy     map[string]bool
	reserved map[string]int64
}

func (g *uploadGate) begin(uploadID string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.busy == nil {
		g.busy, g.reserved = map[string]bool{}, map[string]int64{}
	}
	if g.busy[uploadID] {
		return false
	}
	g.busy[uploadID] = true
	return true
}

func (g *uploadGate) end(uploadID string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.busy, uploadID)
}

// reserve claims an upload's share of its project's limit (0: none) and returns it: declared bytes, or
// (declared < 0) all that the stored dumps (read by stored, under the gate's lock, so a dump stored
// meanwhile is counted either there or in its reservation) and the other reservations leave. Too little
// left is TooLarge. An unlimited project reserves nothing.
func (g *uploadGate) reserve(project string, limit, declared int64, stored func() (int64, error)) (int64, error) {
	if limit <= 0 {
		return 0, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	waiting, err := stored()
	if err != nil {
		return 0, apperr.Internal(err, "list uploads")
	}
	left := limit - waiting - g.reserved[project]
	if left <= 0 || declared > left {
		return 0, &apperr.Error{Kind: apperr.KindTooLarge, Msg: fmt.Sprintf("the project's uploads together may hold at most its storage limit of %d bytes (%d are in dumps waiting for their import, %d reserved by uploads being received)", limit, waiting, g.reserved[project])}
	}
	share := left
	if declared >= 0 {
		share = declared
	}
	g.reserved[project] += share
	return share, nil
}

// release gives a reservation back (the upload is stored, and counted there, or refused).
func (g *uploadGate) release(project string, share int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.reserved[project] -= share; g.reserved[project] <= 0 {
		delete(g.reserved, project)
	}
}
