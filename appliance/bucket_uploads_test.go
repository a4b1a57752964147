package appliance_test

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/exports"
	"github.com/theappliance/appliance/appliance/migrate"
	"github.com/theappliance/appliance/httpapi"
)

// TestBucketUploads: with a bucket as the backup store, an uploaded dump is an object of the bucket,
// sealed, stored before the PUT is answered; its local file is an entry of the same cache as the exports'
// (one bound: the upload evicts the older export); the usage counts it once; an import whose dump's file
// is gone reads it from the bucket and restores it, then deletes the object; a PUT the bucket cannot take
// is refused and keeps nothing; expiry and the project's deletion delete the objects.
func TestBucketUploads(t *testing.T) {
	t.Parallel()
	const bound = 1 << 20
	e, p, srv, bs := bucketEnvWith(t, appliancetest.Options{Instances: true, BackupCache: bound})
	ctx := t.Context()
	prj := provision(t, e, p, "uploaded to a bucket", "development")
	marker := padForDump(t, e, prj) // one dump fits in the cache's bound, two do not
	exportID := exportDone(t, e, p, prj)
	exportFile := filepath.Join(exports.Dir(e.Dir, prj.ID), exportID+".dump")
	dump, err := os.ReadFile(exportFile)
	if err != nil {
		t.Fatal(err)
	}
	if n := int64(len(dump)); n <= bound/2 || n > bound || !bytes.Contains(dump, []byte(marker)) {
		t.Fatalf("the dump has %d bytes (the test needs one between %d and %d naming %s in the clear)", n, bound/2, bound, marker)
	}
	exists := func(path string) bool {
		t.Helper()
		_, err := os.Stat(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		return err == nil
	}
	object := func(id string) string { return srv.Path("appliance/" + prj.ID + "/imports/" + id + ".dump") }
	importDir := migrate.ImportDir(e.Dir, prj.ID)
	// upload PUTs the dump to a new upload's signed URL.
	upload := func() (id string, err error) {
		t.Helper()
		up, err := e.Svc.Migrate().CreateUpload(ctx, p, prj.ID)
		if err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(up.Upload.UploadURL)
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.Svc.Migrate().ReceiveUpload(ctx, up.Upload.ID, u.Query().Get("expires"), u.Query().Get("sig"), int64(len(dump)), bytes.NewReader(dump))
		return up.Upload.ID, err
	}

	// The upload is an object of the bucket, sealed, holding the dump; its file is cached, and the
	// export's, used before it, is evicted: one bound for both.
	a, err := upload()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(object(a))
	if err != nil {
		t.Fatalf("the upload's object: %v", err)
	}
	if bytes.Contains(raw, []byte(marker)) || bytes.Contains(raw, dump[:64]) {
		t.Fatal("the upload's object in the bucket holds the dump in the clear")
	}
	r, err := bs.GetUpload(ctx, prj.ID, a)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(stored, dump) {
		t.Fatalf("the object opened: %d bytes (%v), the dump has %d", len(stored), err, len(dump))
	}
	fileA := filepath.Join(importDir, a+".dump")
	if rec := uploadRecord(t, e, a); rec.State != migrate.UploadUploaded || !rec.InBucket || rec.Path != fileA {
		t.Fatalf("the uploaded record: %+v", rec)
	}
	if !exists(fileA) || exists(exportFile) {
		t.Fatalf("after the upload: its file cached %v, the older export's cached %v (want evicted)", exists(fileA), exists(exportFile))
	}

	// The usage counts what the bucket holds (the upload among it) once: not its cached file again.
	if usage, inBucket := stableUsage(t, e, p, bs, prj); usage != inBucket || usage < 2*int64(len(dump)) {
		t.Fatalf("usage counts %d bytes of backups; the bucket holds %d (of which %d are the export and the upload, the upload also cached)",
			usage, inBucket, 2*len(dump))
	}

	// Its file gone (evicted), the import reads the dump from the bucket and restores it; then the upload
	// is consumed, and its object and its file are deleted.
	if err := e.AdminExec(t, prj.ID, "DROP TABLE "+marker); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(fileA); err != nil {
		t.Fatal(err)
	}
	imp, err := e.Svc.Migrate().CreateImport(ctx, p, prj.ID, &appliance.ImportRequest{Confirm: true, UploadID: a})
	if j := runJob(t, e, imp, err); j.Type != migrate.JobImportRestore {
		t.Fatalf("job type %s", j.Type)
	}
	if n := targetInt(t, e, prj, "SELECT count(*) FROM public."+marker+" WHERE note = 'in the dump'"); n != 1 {
		t.Fatalf("the import from the bucket restored %d rows of %s", n, marker)
	}
	if rec := uploadRecord(t, e, a); rec.State != migrate.UploadConsumed || rec.InBucket {
		t.Fatalf("the imported upload: %+v", rec)
	}
	if exists(object(a)) {
		t.Error("the consumed upload's object is still in the bucket")
	}
	if left, err := os.ReadDir(importDir); err != nil || len(left) != 0 {
		t.Fatalf("files left after the import: %v %v", left, err)
	}

	// A PUT the bucket cannot take is refused (503) and keeps nothing: the upload stays pending.
	srv.Stop()
	b, err := upload()
	srv.Restart()
	if appliance.KindOf(err) != appliance.KindUnavailable {
		t.Fatalf("upload with the bucket down: %v", err)
	}
	if rec := uploadRecord(t, e, b); rec.State != migrate.UploadPending || rec.InBucket {
		t.Fatalf("the upload refused: %+v", rec)
	}
	if left, err := os.ReadDir(importDir); err != nil || len(left) != 0 {
		t.Fatalf("files left by the refused upload: %v %v", left, err)
	}

	// Never imported: past its retention the sweep expires it and deletes its object and its file.
	c, err := upload()
	if err != nil {
		t.Fatal(err)
	}
	if !exists(object(c)) || !exists(filepath.Join(importDir, c+".dump")) {
		t.Fatal("the second upload is not in the bucket and the cache")
	}
	now := time.Now()
	e.Clock.Set(func() time.Time { return now.Add(appliance.UploadRetention + time.Hour) })
	sw, err := e.Svc.Sweep(ctx)
	e.Clock.Set(time.Now)
	if err != nil || sw.UploadObjects != 1 {
		t.Fatalf("sweep: %+v %v", sw, err)
	}
	if rec := uploadRecord(t, e, c); rec.State != migrate.UploadExpired || rec.InBucket {
		t.Fatalf("the expired upload: %+v", rec)
	}
	if exists(object(c)) || exists(filepath.Join(importDir, c+".dump")) {
		t.Error("the expired upload's object or file is still there")
	}

	// Deleting the project deletes its uploads' objects.
	d, err := upload()
	if err != nil {
		t.Fatal(err)
	}
	if !exists(object(d)) {
		t.Fatal("the third upload is not in the bucket")
	}
	del, err := e.Svc.DeleteProject(ctx, p, prj.ID, "")
	runJob(t, e, del, err)
	if exists(object(d)) {
		t.Error("the deleted project's upload is still in the bucket")
	}
	if _, err := bs.GetUpload(ctx, prj.ID, d); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the deleted project's upload opened from the bucket: %v", err)
	}
}

// TestBucketUploadOverHTTP: the signed PUT of an import's dump, from the API served as up serves it (TLS,
// HTTP/2 and HTTP/1.1), stores it as the bucket's object (sealed; opened, the dump's bytes) before it
// answers, and the upload is then uploaded, in the bucket.
func TestBucketUploadOverHTTP(t *testing.T) {
	t.Parallel()
	e, p, _, bs := bucketEnvWith(t, appliancetest.Options{Instances: true})
	ctx := t.Context()
	prj := provision(t, e, p, "uploaded over http", "development")
	exportID := exportDone(t, e, p, prj)
	dump, err := os.ReadFile(filepath.Join(exports.Dir(e.Dir, prj.ID), exportID+".dump"))
	if err != nil {
		t.Fatal(err)
	}
	h := httpapi.New(e.Svc, httpapi.Options{Log: slog.New(slog.DiscardHandler), Lane: e.Lane,
		Limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}})
	t.Cleanup(h.Close)
	base := serveTLS(t, e, h)
	for _, h2 := range []bool{true, false} {
		t.Run(map[bool]string{true: "HTTP/2", false: "HTTP/1.1"}[h2], func(t *testing.T) {
			up, err := e.Svc.Migrate().CreateUpload(ctx, p, prj.ID)
			if err != nil {
				t.Fatal(err)
			}
			u, err := url.Parse(up.Upload.UploadURL)
			if err != nil {
				t.Fatal(err)
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+u.RequestURI(), bytes.NewReader(dump))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/octet-stream")
			resp, err := tlsClient(t, e, h2).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			checkProto(t, resp, h2)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("PUT: %d %s", resp.StatusCode, body)
			}
			r, err := bs.GetUpload(ctx, prj.ID, up.Upload.ID)
			if err != nil {
				t.Fatalf("the upload's object: %v", err)
			}
			stored, err := io.ReadAll(r)
			r.Close()
			if err != nil || !bytes.Equal(stored, dump) {
				t.Fatalf("the object opened: %d bytes (%v), the dump has %d", len(stored), err, len(dump))
			}
			if rec := uploadRecord(t, e, up.Upload.ID); rec.State != migrate.UploadUploaded || !rec.InBucket || rec.SizeBytes != int64(len(dump)) {
				t.Fatalf("the upload's record: %+v", rec)
			}
		})
	}
}
