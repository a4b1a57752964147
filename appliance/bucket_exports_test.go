package appliance_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/exports"
	"github.com/theappliance/appliance/appliance/migrate"
	"github.com/theappliance/appliance/httpapi"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// TestBucketExports: with a bucket as the backup store, an export is an object of the bucket, sealed (a
// table's name, in the clear in the dump's table of contents, is nowhere in the stored object), stored
// before the export is completed; its local file is a cache entry: downloads through the signed URL
// (the service's and the API's) return the dump, also once the local file is gone (streamed from the
// bucket and cached again); the cache's bound evicts the least recently used; the usage counts an export
// once; expiry and the project's deletion delete the objects.
func TestBucketExports(t *testing.T) {
	t.Parallel()
	const bound = 1 << 20
	e, p, srv, bs := bucketEnvWith(t, appliancetest.Options{Instances: true, BackupCache: bound})
	ctx := t.Context()
	prj := provision(t, e, p, "exported to a bucket", "development")
	marker := padForDump(t, e, prj) // one export fits in the cache's bound, two do not
	api := httpapi.New(e.Svc, httpapi.Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Lane: e.Lane,
		Limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}})
	ts := httptest.NewServer(api)
	t.Cleanup(func() { api.Close(); ts.Close() })

	export := func() (id, file string, dump []byte) {
		t.Helper()
		id = exportDone(t, e, p, prj)
		file = filepath.Join(exports.Dir(e.Dir, prj.ID), id+".dump")
		dump, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("the new export's local file: %v", err)
		}
		if !bytes.Contains(dump, []byte(marker)) {
			t.Fatalf("the dump does not name the table %s in the clear: the sealing check below would prove nothing", marker)
		}
		return id, file, dump
	}
	signed := func(id string) (expires, sig string, u *url.URL) {
		t.Helper()
		dl, err := e.Svc.Exports().Download(ctx, p, prj.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		u, err = url.Parse(dl.Download.DownloadURL)
		if err != nil {
			t.Fatal(err)
		}
		return u.Query().Get("expires"), u.Query().Get("sig"), u
	}
	// download reads an export through the service's signed-URL check and tells whether it came from the
	// local file (an *os.File) or the bucket.
	download := func(id string) (body []byte, local bool) {
		t.Helper()
		expires, sig, _ := signed(id)
		f, err := e.Svc.Exports().OpenDownload(ctx, id, expires, sig)
		if err != nil {
			t.Fatal(err)
		}
		_, local = f.ReadCloser.(*os.File)
		body, err = io.ReadAll(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatalf("download %s: %v", id, err)
		}
		return body, local
	}
	// get downloads an export through the API's public route.
	get := func(id string) []byte {
		t.Helper()
		_, _, u := signed(id)
		resp, err := http.Get(ts.URL + u.Path + "?" + u.RawQuery)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK || resp.ContentLength != int64(len(body)) {
			t.Fatalf("GET %s: %d, %d bytes of %d (%v)", u.Path, resp.StatusCode, len(body), resp.ContentLength, err)
		}
		return body
	}
	exists := func(path string) bool {
		t.Helper()
		_, err := os.Stat(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		return err == nil
	}
	object := func(id string) string { return srv.Path("appliance/" + prj.ID + "/exports/" + id + ".dump") }

	// The export is an object of the bucket, sealed, holding the dump.
	a, fileA, dumpA := export()
	if n := int64(len(dumpA)); n <= bound/2 || n > bound {
		t.Fatalf("the dump has %d bytes: the test needs one between %d and %d", n, bound/2, bound)
	}
	raw, err := os.ReadFile(object(a))
	if err != nil {
		t.Fatalf("the export's object: %v", err)
	}
	if bytes.Contains(raw, []byte(marker)) || bytes.Contains(raw, dumpA[:64]) {
		t.Fatal("the export's object in the bucket holds the dump in the clear")
	}
	r, err := bs.GetExport(ctx, prj.ID, a)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(stored, dumpA) {
		t.Fatalf("the object opened: %d bytes (%v), the dump has %d", len(stored), err, len(dumpA))
	}

	// Cached: the download reads the local file, through the service and through the API.
	if body, local := download(a); !local || !bytes.Equal(body, dumpA) {
		t.Fatalf("cached download: local %v, %d bytes of %d", local, len(body), len(dumpA))
	}
	if body := get(a); !bytes.Equal(body, dumpA) {
		t.Fatalf("GET of the cached export: %d bytes of %d", len(body), len(dumpA))
	}

	// Its local file gone: the download streams the object (a dump pg_restore reads) and caches it again.
	if err := os.Remove(fileA); err != nil {
		t.Fatal(err)
	}
	body, local := download(a)
	if local || !bytes.Equal(body, dumpA) {
		t.Fatalf("download of an evicted export: local %v, %d bytes of %d", local, len(body), len(dumpA))
	}
	got := filepath.Join(t.TempDir(), "downloaded.dump")
	if err := os.WriteFile(got, body, 0o600); err != nil {
		t.Fatal(err)
	}
	pgRestore, err := e.Bin.Path("pg_restore")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(pgRestore, "--list", got).CombinedOutput(); err != nil || !strings.Contains(string(out), marker) {
		t.Fatalf("pg_restore --list of the download from the bucket: %v\n%s", err, out)
	}
	if cached, err := os.ReadFile(fileA); err != nil || !bytes.Equal(cached, dumpA) {
		t.Fatalf("the export read from the bucket is not cached again: %d bytes (%v)", len(cached), err)
	}
	if err := os.Remove(fileA); err != nil {
		t.Fatal(err)
	}
	if body := get(a); !bytes.Equal(body, dumpA) { // the API streams it, with its length
		t.Fatalf("GET of an evicted export: %d bytes of %d", len(body), len(dumpA))
	}
	if !exists(fileA) {
		t.Fatal("the export streamed by the API is not cached again")
	}

	// A second export: together they pass the bound, so the least recently used (the first) is evicted;
	// downloading the first again caches it and evicts the second.
	b, fileB, dumpB := export()
	if exists(fileA) || !exists(fileB) {
		t.Fatalf("after a second export: first cached %v (want evicted), second cached %v", exists(fileA), exists(fileB))
	}
	if body, local := download(a); local || !bytes.Equal(body, dumpA) {
		t.Fatalf("download of the evicted first export: local %v, %d bytes of %d", local, len(body), len(dumpA))
	}
	if !exists(fileA) || exists(fileB) {
		t.Fatalf("after downloading the first: first cached %v, second cached %v (want evicted)", exists(fileA), exists(fileB))
	}
	if body, local := download(b); local || !bytes.Equal(body, dumpB) {
		t.Fatalf("download of the evicted second export: local %v, %d bytes of %d", local, len(body), len(dumpB))
	}

	// The usage counts what the bucket holds (the exports among it) once: not their cached files again.
	if usage, inBucket := stableUsage(t, e, p, bs, prj); usage != inBucket || usage < int64(len(dumpA)+len(dumpB)) {
		t.Fatalf("usage counts %d bytes of backups; the bucket holds %d (of which %d are the exports, one of them also cached)",
			usage, inBucket, len(dumpA)+len(dumpB))
	}

	// Past their expiry the sweep deletes the objects and the files.
	now := time.Now()
	e.Clock.Set(func() time.Time { return now.Add(exports.TTL + time.Hour) })
	if n, err := e.Svc.Exports().Sweep(ctx); err != nil || n != 2 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	e.Clock.Set(time.Now)
	for _, id := range []string{a, b} {
		if exists(object(id)) {
			t.Errorf("the expired export %s is still in the bucket", id)
		}
		if _, err := bs.GetExport(ctx, prj.ID, id); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the expired export %s opened from the bucket: %v", id, err)
		}
	}
	if exists(fileA) || exists(fileB) {
		t.Error("an expired export's file is still cached")
	}

	// Deleting the project deletes its exports' objects.
	c, _, _ := export()
	if !exists(object(c)) {
		t.Fatal("the third export is not in the bucket")
	}
	del, err := e.Svc.DeleteProject(ctx, p, prj.ID, "")
	runJob(t, e, del, err)
	if exists(object(c)) {
		t.Error("the deleted project's export is still in the bucket")
	}
	if _, err := bs.GetExport(ctx, prj.ID, c); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the deleted project's export opened from the bucket: %v", err)
	}
}

// TestBucketExportsCacheNone: with a cache of nothing (up --backup-cache-mb 0), an export's local file is
// deleted once it is in the bucket, and a download streams it from the bucket without keeping it; an
// uploaded dump likewise, which its import reads from the bucket.
func TestBucketExportsCacheNone(t *testing.T) {
	t.Parallel()
	e, p, _, _ := bucketEnvWith(t, appliancetest.Options{Instances: true, BackupCache: -1})
	ctx := t.Context()
	prj := provision(t, e, p, "exported uncached", "development")
	res, err := e.Svc.Exports().Create(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, res.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("export job %s: %s", j.State, j.Error)
	}
	file := filepath.Join(exports.Dir(e.Dir, prj.ID), res.ExportID+".dump")
	if _, err := os.Stat(file); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the export's local file with no cache: %v", err)
	}
	list, err := e.Svc.Exports().List(ctx, p, prj.ID)
	if err != nil || len(list.Exports) != 1 {
		t.Fatalf("list: %+v %v", list, err)
	}
	dl, err := e.Svc.Exports().Download(ctx, p, prj.ID, res.ExportID)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(dl.Download.DownloadURL)
	if err != nil {
		t.Fatal(err)
	}
	f, err := e.Svc.Exports().OpenDownload(ctx, res.ExportID, u.Query().Get("expires"), u.Query().Get("sig"))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(f)
	f.Close()
	if err != nil || int64(len(body)) != list.Exports[0].SizeBytes || !bytes.HasPrefix(body, []byte("PGDMP")) {
		t.Fatalf("download from the bucket: %d bytes of %d (%v)", len(body), list.Exports[0].SizeBytes, err)
	}
	if _, err := os.Stat(file); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the export downloaded with no cache was kept: %v", err)
	}
	if entries, err := os.ReadDir(exports.Dir(e.Dir, prj.ID)); err != nil || len(entries) != 0 {
		t.Fatalf("the exports directory holds %v (%v)", entries, err)
	}

	// The dump uploaded back for an import: its file is not kept either once it is in the bucket; the
	// import copies it from the bucket, restores it, and keeps nothing.
	up, err := e.Svc.Migrate().CreateUpload(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	uu, err := url.Parse(up.Upload.UploadURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Svc.Migrate().ReceiveUpload(ctx, up.Upload.ID, uu.Query().Get("expires"), uu.Query().Get("sig"), -1, bytes.NewReader(body)); err != nil {
		t.Fatal(err)
	}
	importDir := migrate.ImportDir(e.Dir, prj.ID)
	if entries, err := os.ReadDir(importDir); err != nil || len(entries) != 0 {
		t.Fatalf("with no cache, the imports directory holds %v after the upload (%v)", entries, err)
	}
	imp, err := e.Svc.Migrate().CreateImport(ctx, p, prj.ID, &appliance.ImportRequest{Confirm: true})
	runJob(t, e, imp, err)
	if rec := uploadRecord(t, e, up.Upload.ID); rec.State != migrate.UploadConsumed || rec.InBucket {
		t.Fatalf("the imported upload: %+v", rec)
	}
	if entries, err := os.ReadDir(importDir); err != nil || len(entries) != 0 {
		t.Fatalf("with no cache, the imports directory holds %v after the import (%v)", entries, err)
	}
}

// padForDump makes a table named by the returned marker, holding one row 'in the dump', and about 1.3 MB
// of random hex, which pg_dump's compression makes a dump of 0.6 to 0.8 MB: one fits in a cache of 1 MiB,
// two do not.
func padForDump(t *testing.T, e *appliancetest.Env, prj *store.Project) (marker string) {
	t.Helper()
	marker = fmt.Sprintf("marker_%d", time.Now().UnixNano())
	if err := e.AdminExec(t, prj.ID, "CREATE TABLE "+marker+" (note text); INSERT INTO "+marker+" VALUES ('in the dump'); "+
		"CREATE TABLE padding AS SELECT md5(random()::text) || md5(random()::text) AS h FROM generate_series(1, 20000)"); err != nil {
		t.Fatal(err)
	}
	return marker
}

// exportDone exports the project's database and returns the export's id once its job completed.
func exportDone(t *testing.T, e *appliancetest.Env, p *appliance.Principal, prj *store.Project) string {
	t.Helper()
	res, err := e.Svc.Exports().Create(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, res.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("export job %s: %s\nstderr: %s", j.State, j.Error, j.LastStderr)
	}
	return res.ExportID
}

// stableUsage is the organization's backups_storage_bytes with the project's size in the bucket, read
// between two equal sizes of the bucket (WAL keeps arriving).
func stableUsage(t *testing.T, e *appliancetest.Env, p *appliance.Principal, bs *backup.Store, prj *store.Project) (usage, inBucket int64) {
	t.Helper()
	for range 10 {
		before, err := bs.ProjectSize(t.Context(), prj.ID)
		if err != nil {
			t.Fatal(err)
		}
		u, err := e.Svc.OrganizationUsage(t.Context(), p, prj.OrganizationID)
		if err != nil {
			t.Fatal(err)
		}
		after, err := bs.ProjectSize(t.Context(), prj.ID)
		if err != nil {
			t.Fatal(err)
		}
		if before == after {
			return u.Usage.Totals.BackupsStorageBytes, after
		}
	}
	t.Fatal("the bucket's size of the project changed during each of 10 readings of the usage")
	return 0, 0
}

// TestBucketExportFailsWhenTheBucketStaysDown: an export whose object cannot be stored (the S3 server is
// down through every attempt) ends failed, naming the backup store, rather than running forever; it is
// never listed completed.
func TestBucketExportFailsWhenTheBucketStaysDown(t *testing.T) {
	t.Parallel()
	e, p, srv, _ := bucketEnvWith(t, appliancetest.Options{Instances: true})
	ctx := t.Context()
	prj := provision(t, e, p, "exported while down", "development")
	srv.Stop()
	res, err := e.Svc.Exports().Create(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, res.Job.ID); j.State != scheduler.StateFailed || !strings.Contains(j.Error, "backup store") {
		t.Fatalf("export job with the bucket down: %s, %q", j.State, j.Error)
	}
	list, err := e.Svc.Exports().List(ctx, p, prj.ID)
	if err != nil || len(list.Exports) != 1 {
		t.Fatalf("list: %+v %v", list, err)
	}
	if x := list.Exports[0]; x.State != exports.StateFailed {
		t.Fatalf("the export after its job failed: %+v", x)
	}
}
