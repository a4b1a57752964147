package appliance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Upload states; see docs/api-decisions.md (Imports).
const (
	UploadPending  = "pending"  // the signed URL is issued, nothing received yet
	UploadUploaded = "uploaded" // the dump is in the backup store, ready for import.restore
	UploadConsumed = "consumed" // import.restore restored it; its dump is deleted
	UploadExpired  = "expired"  // the sweep deleted it: pending past its URL's expiry, or never imported (see UploadRetention)
)

// JobImportRestore restores an uploaded dump into a project's database with pg_restore.
const JobImportRestore = "import.restore"

// UploadTTL is how long a signed upload URL is valid.
const UploadTTL = time.Hour

const uploadMACPurpose = "import-upload"

func uploadView(u *store.Upload) *Upload {
	return &Upload{ID: u.ID, ObjectKey: u.ObjectKey, State: u.State, SizeBytes: u.SizeBytes, ExpiresAt: u.ExpiresAt}
}

type importPayload struct {
	UploadID string `json:"upload_id"`
}

// importDir is the directory of a project's uploaded dumps in the backup store.
func (s *Service) importDir(projectID string) string {
	return filepath.Join(s.cfg.DataDir, "backups", projectID, "imports")
}

// CreateImportUpload records a pending upload and returns its signed URL (valid UploadTTL). A session
// needs the admin role: the dump is meant to overwrite the database.
func (s *Service) CreateImportUpload(ctx context.Context, p *Principal, projectID string) (*UploadResponse, error) {
	if err := p.RequireAdminRole("importing into a project"); err != nil {
		return nil, err
	}
	var out *UploadResponse
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := s.visibleActiveProject(tx, p, projectID)
		if err != nil {
			return err
		}
		if err := s.requireFeature(FeatureDumps); err != nil {
			return err
		}
		now := s.now()
		pending, err := store.Uploads.All(tx, func(x *store.Upload) bool {
			return x.ProjectID == prj.ID && x.State == UploadPending && now.Before(x.ExpiresAt)
		})
		if err != nil {
			return Internal(err, "list uploads")
		}
		if len(pending) >= MaxPendingUploads {
			first := slices.MinFunc(pending, func(a, b *store.Upload) int { return a.ExpiresAt.Compare(b.ExpiresAt) })
			return &Error{Kind: KindTooMany, RetryAfter: first.ExpiresAt.Sub(now), Msg: fmt.Sprintf("a project has at most %d upload URLs waiting for their dump: use them, or let them expire (%v)", MaxPendingUploads, UploadTTL)}
		}
		u := &store.Upload{ID: ids.New("upl"), ProjectID: prj.ID, OrganizationID: prj.OrganizationID, State: UploadPending,
			CreatedAt: now, ExpiresAt: now.Add(UploadTTL).Truncate(time.Second)}
		u.ObjectKey = "imports/" + u.ID + ".dump"
		u.Path = filepath.Join(s.importDir(prj.ID), u.ID+".dump")
		if err := store.Uploads.Put(tx, u); err != nil {
			return Internal(err, "store upload")
		}
		if err := s.audit(tx, p, "import.upload", prj.OrganizationID, prj.ID, map[string]any{"upload_id": u.ID}); err != nil {
			return Internal(err, "audit")
		}
		v := uploadView(u)
		v.UploadURL = s.signedURL(uploadMACPurpose, "/v1/uploads/imports", u.ID, u.ExpiresAt)
		out = &UploadResponse{Upload: v}
		return nil
	})
	return out, err
}

// ReceiveImportUpload checks a signed upload URL (constant-time; bad or expired is Forbidden) and stores
// body as the upload's dump: a temporary file next to the target, fsync, rename, owned by the instances'
// OS user. A body over the project's storage_limit_bytes is TooLarge and nothing is kept; an upload that
// is no longer pending is a Conflict.
//
// The limit holds for the project's uploads together: dumps uploaded and not yet imported, and the
// shares other uploads being received reserved, count against it. declared is the request's
// Content-Length (-1 when unknown): the PUT reserves that much, or all that is left when unknown, before
// a byte is read, and is refused when that much is not left. A second PUT to an upload being received is
// a Conflict at once.
func (s *Service) ReceiveImportUpload(ctx context.Context, uploadID, expires, sig string, declared int64, body io.Reader) (*UploadResponse, error) {
	if err := s.checkSignedURL(uploadMACPurpose, "upload", uploadID, expires, sig); err != nil {
		return nil, err
	}
	var u *store.Upload
	var prj *store.Project
	if err := s.db.View(func(tx *store.Tx) (err error) {
		if u, err = store.Uploads.Get(tx, uploadID); err != nil {
			return err
		}
		prj, err = store.Projects.Get(tx, u.ProjectID)
		return err
	}); err != nil {
		return nil, Forbidden("upload %s is not accepted", uploadID)
	}
	if prj.State == ProjectDeleting || prj.State == ProjectDeleted {
		return nil, Forbidden("upload %s is not accepted: project %s is %s", u.ID, prj.ID, prj.State)
	}
	if u.State != UploadPending {
		return nil, Conflict("upload %s is %s", u.ID, u.State)
	}
	if !s.uploads.begin(u.ID) {
		return nil, Conflict("upload %s is being received by another request", u.ID)
	}
	defer s.uploads.end(u.ID)
	limit := prj.StorageLimitBytes
	if n := s.importLimit(); n > 0 {
		limit = n
	}
	if limit <= 0 {
		if pl, ok := PlanByName(prj.Plan); ok {
			limit = pl.StorageLimitBytes
		}
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
	tooLarge := &Error{Kind: KindTooLarge, Msg: fmt.Sprintf("the project's uploads together may hold at most its storage limit of %d bytes: this upload had %d of them", limit, share)}
	dp, err := s.dataPlane()
	if err != nil {
		return nil, err
	}
	if err := s.localBackups(dp).Prepare(ctx, prj.ID); err != nil {
		return nil, Internal(err, "prepare backup store")
	}
	dir := s.importDir(prj.ID)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, Internal(err, "create imports directory")
	}
	if err := dp.User.Chown(dir); err != nil {
		return nil, Internal(err, "chown imports directory")
	}
	tmp, err := os.CreateTemp(dir, u.ID+".*.part")
	if err != nil {
		return nil, Internal(err, "create upload file")
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
		return nil, Invalid("read the upload: %v", err)
	}
	if limit > 0 && n > share {
		return nil, tooLarge
	}
	if err := tmp.Sync(); err != nil {
		return nil, Internal(err, "sync upload")
	}
	if err := tmp.Close(); err != nil {
		return nil, Internal(err, "close upload")
	}
	if err := dp.User.Chown(tmp.Name()); err != nil {
		return nil, Internal(err, "chown upload")
	}
	var out *UploadResponse
	err = s.db.Update(func(tx *store.Tx) error {
		cur, err := store.Uploads.Get(tx, u.ID)
		if errors.Is(err, store.ErrNotFound) { // its project was deleted meanwhile
			return Forbidden("upload %s is not accepted", u.ID)
		}
		if err != nil {
			return Internal(err, "get upload")
		}
		if cur.State != UploadPending {
			return Conflict("upload %s is %s", cur.ID, cur.State)
		}
		if err := os.Rename(tmp.Name(), cur.Path); err != nil {
			return Internal(err, "store upload file")
		}
		now := s.now()
		cur.State, cur.SizeBytes, cur.UploadedAt = UploadUploaded, n, &now
		if err := store.Uploads.Put(tx, cur); err != nil {
			_ = os.Remove(cur.Path)
			return Internal(err, "store upload")
		}
		if err := s.audit(tx, nil, "import.upload_received", cur.OrganizationID, cur.ProjectID,
			map[string]any{"upload_id": cur.ID, "size_bytes": n}); err != nil {
			_ = os.Remove(cur.Path)
			return Internal(err, "audit")
		}
		out = &UploadResponse{Upload: uploadView(cur)}
		return nil
	})
	if err != nil {
		return nil, err
	}
	keep = true
	if d, err := os.Open(dir); err == nil { // make the rename durable
		_ = d.Sync()
		d.Close()
	}
	return out, nil
}

// CreateImport enqueues import.restore of the named, or the newest uploaded, upload. It needs
// confirm: true; a session needs the admin role.
func (s *Service) CreateImport(ctx context.Context, p *Principal, projectID string, req *ImportRequest) (*JobResponse, error) {
	if err := p.RequireAdminRole("importing into a project"); err != nil {
		return nil, err
	}
	if !req.Confirm {
		return nil, Invalid("an import overwrites the project's database; send confirm: true")
	}
	var job *store.Job
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := s.visibleActiveProject(tx, p, projectID)
		if err != nil {
			return err
		}
		if err := s.requireFeature(FeatureDumps); err != nil {
			return err
		}
		var u *store.Upload
		if req.UploadID != "" {
			u, err = store.Uploads.Get(tx, req.UploadID)
			if errors.Is(err, store.ErrNotFound) || (err == nil && u.ProjectID != prj.ID) {
				return NotFound("upload %s not found", req.UploadID)
			}
			if err != nil {
				return Internal(err, "get upload")
			}
			if u.State != UploadUploaded {
				return Conflict("upload %s is %s, not uploaded", u.ID, u.State)
			}
		} else {
			us, err := store.Uploads.Lookup(tx, store.UploadsByProject, prj.ID, store.Query{Newest: true})
			if err != nil {
				return Internal(err, "list uploads")
			}
			for _, c := range us {
				if c.State == UploadUploaded && (u == nil || c.UploadedAt.After(*u.UploadedAt)) {
					u = c
				}
			}
			if u == nil {
				return Conflict("project %s has no uploaded dump to import", prj.ID)
			}
		}
		j, err := s.enqueue(tx, prj, JobImportRestore, prj.ID, importPayload{UploadID: u.ID})
		if err != nil {
			return err
		}
		if err := s.audit(tx, p, JobImportRestore, prj.OrganizationID, prj.ID,
			map[string]any{"upload_id": u.ID, "job_id": j.ID}); err != nil {
			return Internal(err, "audit")
		}
		job = j
		return nil
	})
	return s.answerJob(job, err)
}

// importRestoreJob restores the upload's dump over the project's database (restoreDump: any error
// pg_restore reports fails the job, and then nothing changed); on success the upload is consumed.
func (s *Service) importRestoreJob(ctx context.Context, run *scheduler.Run) (any, error) {
	var in importPayload
	dp, prj, inst, err := s.activeTarget(run, &in)
	if err != nil {
		return nil, err
	}
	var u *store.Upload
	if err := s.db.View(func(tx *store.Tx) (err error) { u, err = store.Uploads.Get(tx, in.UploadID); return err }); err != nil {
		return nil, fmt.Errorf("upload %s: %w", in.UploadID, err)
	}
	if u.State == UploadConsumed {
		return map[string]any{"skipped": "upload is consumed"}, nil
	}
	if u.State != UploadUploaded {
		return nil, fmt.Errorf("upload %s is %s, not uploaded", u.ID, u.State)
	}
	if err := s.restoreDump(ctx, run, dp, prj, inst, prj.DatabaseName, u.Path, nil); err != nil {
		return nil, err
	}
	now := s.now()
	if err := s.db.Update(func(tx *store.Tx) error {
		cur, err := store.Uploads.Get(tx, u.ID)
		if err != nil {
			return err
		}
		cur.State, cur.ConsumedAt = UploadConsumed, &now
		return store.Uploads.Put(tx, cur)
	}); err != nil {
		return nil, err
	}
	// The dump has served its purpose (the record keeps its size). A file left by a failure here or a
	// crash before is deleted by the sweep, which deletes the files of consumed uploads.
	if err := os.Remove(u.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("delete consumed upload", "upload", u.ID, "err", err)
	}
	return map[string]any{"upload_id": u.ID, "size_bytes": u.SizeBytes}, nil
}

// filterRestoreList drops from a pg_restore --list file the entries a project's role may not or need not
// restore: extensions (the platform manages them), event triggers (they need a superuser) and the public
// schema itself (every database has it; --clean would try to drop it), with their comments, and the
// schemas named in skip (themselves, not what they hold).
func filterRestoreList(path string, skip []string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var keep []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, ";") && (skippedRestoreEntry.MatchString(line) || slices.ContainsFunc(skip, func(name string) bool {
			return schemaEntry.MatchString(line) && strings.HasPrefix(schemaEntry.FindStringSubmatch(line)[1], name+" ")
		})) {
			continue
		}
		keep = append(keep, line)
	}
	return os.WriteFile(path, []byte(strings.Join(keep, "\n")), 0o600)
}

// skippedRestoreEntry matches the list entries filterRestoreList drops ("<id>; <oid> <oid> TYPE schema name owner").
var skippedRestoreEntry = regexp.MustCompile(`^\d+; \d+ \d+ (.* )?(EXTENSION|EVENT TRIGGER|SCHEMA (- )?public) `)

// schemaEntry matches a schema's own entry; its group is "name owner".
var schemaEntry = regexp.MustCompile(`^\d+; \d+ \d+ SCHEMA - (.*)$`)

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
		return 0, Internal(err, "list uploads")
	}
	left := limit - waiting - g.reserved[project]
	if left <= 0 || declared > left {
		return 0, &Error{Kind: KindTooLarge, Msg: fmt.Sprintf("the project's uploads together may hold at most its storage limit of %d bytes (%d are in dumps waiting for their import, %d reserved by uploads being received)", limit, waiting, g.reserved[project])}
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
