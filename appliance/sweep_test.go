package appliance_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/identity"
	"github.com/theappliance/appliance/appliance/migrate"
	"github.com/theappliance/appliance/appliance/studio"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

func setup(t *testing.T) (*appliance.Service, *appliance.Bootstrap, *time.Time) {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.RerunUpdates(os.Getenv(store.RerunUpdatesEnv) == "1")
	box, err := appliance.OpenSecretBox(filepath.Join(dir, "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	svc := appliance.New(appliance.Config{PasswordCost: 4}, appliance.Deps{DB: db, Box: box, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Clock: func() time.Time { return now }})
	boot, err := svc.EnsureBootstrap(t.Context(), filepath.Join(dir, "bootstrap.json"), "ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	return svc, boot, &now
}

func TestSweepExpiresAndDeletes(t *testing.T) {
	t.Parallel()
	svc, boot, now := setup(t)
	ctx := t.Context()
	pending, err := svc.Identity().StartCLILogin(ctx, &appliance.CLILoginStartRequest{DeviceName: "laptop"})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := svc.Identity().CreateSession(ctx, &appliance.SessionRequest{Email: boot.Email, Password: boot.Password})
	if err != nil {
		t.Fatal(err)
	}
	p, err := svc.Identity().Authenticate(ctx, sess.Token)
	if err != nil {
		t.Fatal(err)
	}
	authorized, err := svc.Identity().StartCLILogin(ctx, &appliance.CLILoginStartRequest{DeviceName: "desk"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Identity().AuthorizeCLILogin(ctx, p, authorized.SessionID); err != nil {
		t.Fatal(err)
	}

	// Nothing is due yet.
	if res, err := svc.Sweep(ctx); err != nil || res != (appliance.SweepResult{}) {
		t.Fatalf("early sweep: %+v %v", res, err)
	}

	// Past the login deadline: both logins expire and the uncollected key is revoked.
	*now = now.Add(identity.CLILoginTTL + time.Minute)
	res, err := svc.Sweep(ctx)
	if err != nil || res.LoginsExpired != 2 {
		t.Fatalf("sweep after expiry: %+v %v", res, err)
	}
	keys, err := svc.Identity().ListAPIKeys(ctx, p, boot.OrganizationID)
	if err != nil {
		t.Fatal(err)
	}
	revoked := 0
	for _, k := range keys.APIKeys {
		if k.RevokedAt != nil {
			revoked++
		}
	}
	if revoked != 1 {
		t.Fatalf("want the uncollected CLI key revoked, got %d revoked of %d", revoked, len(keys.APIKeys))
	}
	if r, err := svc.Identity().PollCLILogin(ctx, pending.SessionID, pending.PollToken); err != nil || r.State != identity.CLILoginExpired {
		t.Fatalf("poll after sweep: %+v %v", r, err)
	}

	// A day later the records are gone, and so is the expired session.
	*now = now.Add(identity.SessionTTL + 25*time.Hour)
	res, err = svc.Sweep(ctx)
	if err != nil || res.LoginsDeleted != 2 || res.SessionsDeleted != 1 {
		t.Fatalf("late sweep: %+v %v", res, err)
	}
	if _, err := svc.Identity().PollCLILogin(ctx, pending.SessionID, pending.PollToken); appliance.KindOf(err) != appliance.KindNotFound {
		t.Fatalf("poll of a deleted login: %v", err)
	}
}

func TestSweepExpiresUploads(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	ctx := t.Context()
	prj := provision(t, e, p, "uploads", "development")
	base := time.Now().UTC()
	at := func(t time.Time) { e.Clock.Set(func() time.Time { return t }) }
	at(base)
	dir := filepath.Join(e.Dir, "backups", prj.ID, "imports")
	create := func() *appliance.Upload {
		t.Helper()
		up, err := e.Svc.Migrate().CreateUpload(ctx, p, prj.ID)
		if err != nil {
			t.Fatal(err)
		}
		return up.Upload
	}
	put := func(body string) *appliance.Upload {
		t.Helper()
		u := create()
		q, _ := url.Parse(u.UploadURL)
		if _, err := e.Svc.Migrate().ReceiveUpload(ctx, u.ID, q.Query().Get("expires"), q.Query().Get("sig"), -1, strings.NewReader(body)); err != nil {
			t.Fatal(err)
		}
		return u
	}
	pending := create()
	stale := put("never imported")
	queued := put("an import waits for this one")
	// An import of queued that runs tomorrow (the runner leaves it alone until then).
	var job *store.Job
	if err := e.DB.Update(func(tx *store.Tx) error {
		job = &store.Job{Type: migrate.JobImportRestore, OrganizationID: prj.OrganizationID, ProjectID: prj.ID,
			LockedResource: prj.ID, RunAfter: time.Now().Add(24 * time.Hour), Payload: []byte(`{"upload_id":"` + queued.ID + `"}`)}
		return scheduler.Enqueue(tx, job)
	}); err != nil {
		t.Fatal(err)
	}
	// The partial file a PUT leaves when the appliance dies under it.
	part := filepath.Join(dir, pending.ID+".123456.part")
	if err := os.WriteFile(part, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	sweep := func(wantExpired, wantFiles int) {
		t.Helper()
		res, err := e.Svc.Sweep(ctx)
		if err != nil || res.UploadsExpired != wantExpired || res.UploadFilesDeleted != wantFiles {
			t.Fatalf("sweep: %+v %v; want %d expired, %d files deleted", res, err, wantExpired, wantFiles)
		}
	}
	state := func(u *appliance.Upload) string { t.Helper(); return uploadRecord(t, e, u.ID).State }
	exists := func(path string) bool {
		t.Helper()
		_, err := os.Stat(path)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	staleFile, queuedFile := filepath.Join(dir, stale.ID+".dump"), filepath.Join(dir, queued.ID+".dump")

	// Nothing is due now, nor just past the pending upload's expiry (a PUT may still be streaming).
	sweep(0, 0)
	at(pending.ExpiresAt.Add(time.Minute))
	sweep(0, 0)
	if !exists(part) || state(pending) != migrate.UploadPending {
		t.Fatalf("within the grace: part %v, state %s", exists(part), state(pending))
	}

	// Past the grace the pending upload expires and its partial file is deleted.
	at(pending.ExpiresAt.Add(appliance.UploadPendingGrace))
	sweep(1, 1)
	if exists(part) || state(pending) != migrate.UploadExpired {
		t.Fatalf("past the grace: part %v, state %s", exists(part), state(pending))
	}
	if !exists(staleFile) || !exists(queuedFile) || state(stale) != migrate.UploadUploaded || state(queued) != migrate.UploadUploaded {
		t.Fatal("the sweep touched an uploaded dump within its retention")
	}

	// Just before the retention the dumps stay; at it the one never imported is deleted, and the one a
	// queued import names stays.
	at(base.Add(appliance.UploadRetention - time.Minute))
	sweep(0, 0)
	at(base.Add(appliance.UploadRetention))
	sweep(1, 1)
	if exists(staleFile) || state(stale) != migrate.UploadExpired {
		t.Fatalf("past the retention: file %v, state %s", exists(staleFile), state(stale))
	}
	if rec := uploadRecord(t, e, stale.ID); rec.SizeBytes != int64(len("never imported")) {
		t.Fatalf("expired upload %+v", rec)
	}
	if !exists(queuedFile) || state(queued) != migrate.UploadUploaded {
		t.Fatalf("the upload a queued import names: file %v, state %s", exists(queuedFile), state(queued))
	}
	if _, err := e.Svc.Migrate().CreateImport(ctx, p, prj.ID, &appliance.ImportRequest{Confirm: true, UploadID: stale.ID}); appliance.KindOf(err) != appliance.KindConflict {
		t.Fatalf("import of an expired upload: %v", err)
	}

	// Once that import ended (failed here), the next sweep deletes it too.
	if err := e.DB.Update(func(tx *store.Tx) error {
		j, err := store.Jobs.Get(tx, job.ID)
		if err != nil {
			return err
		}
		j.State = scheduler.StateFailed
		return store.Jobs.Put(tx, j)
	}); err != nil {
		t.Fatal(err)
	}
	sweep(1, 1)
	if exists(queuedFile) || state(queued) != migrate.UploadExpired {
		t.Fatalf("after its import ended: file %v, state %s", exists(queuedFile), state(queued))
	}
	sweep(0, 0)

	// A file of an expired upload left behind (a crash between the state change and the deletion) goes at
	// the next sweep; a file that is no upload's stays.
	other := filepath.Join(dir, "notes.txt")
	for _, f := range []string{staleFile, other} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sweep(0, 1)
	if exists(staleFile) || !exists(other) {
		t.Fatalf("left file: %v, unrelated file: %v", exists(staleFile), exists(other))
	}
}

// TestSweepPrunesSQLHistory: the sweep keeps a project's newest HistoryKeep console runs and none older
// than HistoryRetention; other projects' runs are counted apart.
func TestSweepPrunesSQLHistory(t *testing.T) {
	t.Parallel()
	svc, _, now := setup(t)
	db := svc.DB()
	old := now.Add(-studio.HistoryRetention - time.Hour)
	err := db.Update(func(tx *store.Tx) error {
		put := func(id, project string, at time.Time) error {
			return store.SQLHistory.Put(tx, &store.SQLHistoryEntry{ID: id, ProjectID: project, Query: "select 1", Success: true, CreatedAt: at})
		}
		for i := range studio.HistoryKeep + 5 { // IDs sort by creation: sqh_a0000 is the oldest
			if err := put(fmt.Sprintf("sqh_a%05d", i), "prj_a", *now); err != nil {
				return err
			}
		}
		if err := put("sqh_b00000", "prj_b", old); err != nil {
			return err
		}
		return put("sqh_b00001", "prj_b", *now)
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := svc.Sweep(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if res.SQLHistoryDeleted != 6 {
		t.Fatalf("deleted %d entries, want 6", res.SQLHistoryDeleted)
	}
	db.View(func(tx *store.Tx) error {
		for id, want := range map[string]bool{"sqh_a00000": false, "sqh_a00004": false, "sqh_a00005": true, fmt.Sprintf("sqh_a%05d", studio.HistoryKeep+4): true, "sqh_b00000": false, "sqh_b00001": true} {
			if _, err := store.SQLHistory.Get(tx, id); (err == nil) != want {
				t.Errorf("%s kept = %v, want %v", id, err == nil, want)
			}
		}
		return nil
	})
}

// TestSweepMasksSQLHistory: console runs an earlier version stored with their passwords in clear are
// rewritten masked by the sweep; masked and password-free ones are left as they are.
func TestSweepMasksSQLHistory(t *testing.T) {
	t.Parallel()
	svc, _, now := setup(t)
	db := svc.DB()
	entries := map[string]*store.SQLHistoryEntry{
		"sqh_clear": {ID: "sqh_clear", ProjectID: "prj_a", Query: "ALTER ROLE app PASSWORD 'Old-Clear-Secret'", Success: true, CreatedAt: *now},
		"sqh_error": {ID: "sqh_error", ProjectID: "prj_a", Query: "CREATE ROLE x PASSWORD Bare_Old_Secret", Error: `syntax error at or near "Bare_Old_Secret"`, CreatedAt: *now},
		"sqh_plain": {ID: "sqh_plain", ProjectID: "prj_a", Query: "select 1", Success: true, CreatedAt: *now},
	}
	if err := db.Update(func(tx *store.Tx) error {
		for _, h := range entries {
			if err := store.SQLHistory.Put(tx, h); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	db.View(func(tx *store.Tx) error {
		for id := range entries {
			h, err := store.SQLHistory.Get(tx, id)
			if err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			if strings.Contains(h.Query+h.Error, "Old") || (id == "sqh_plain") != (h.Query == "select 1") || !strings.Contains(h.Query, "PASSWORD") && id != "sqh_plain" {
				t.Errorf("%s after the sweep: %q / %q", id, h.Query, h.Error)
			}
		}
		return nil
	})
}
