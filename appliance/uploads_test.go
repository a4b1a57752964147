package appliance_test

import (
	"bytes"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/migrate"
	"github.com/theappliance/appliance/store"
)

// TestUploadLimits: one PUT per upload URL at a time; a Content-Length over what is left is refused
// before anything is written; the project's waiting dumps count against its limit together; a project
// holds at most MaxPendingUploads unused upload URLs. Before, three concurrent PUTs to one URL wrote
// 559 MB, and the limit held per request only.
func TestUploadLimits(t *testing.T) {
	t.Parallel()
	e, p := keyEnv(t, appliancetest.Options{Instances: true, ImportUploadLimit: func() int64 { return 1000 }})
	prj := provision(t, e, p, "uploads", "development")
	type upload struct{ id, expires, sig string }
	newUpload := func() upload {
		t.Helper()
		res, err := e.Svc.Migrate().CreateUpload(t.Context(), p, prj.ID)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(res.Upload.UploadURL)
		return upload{res.Upload.ID, u.Query().Get("expires"), u.Query().Get("sig")}
	}
	put := func(u upload, declared int64, body io.Reader) error {
		_, err := e.Svc.Migrate().ReceiveUpload(t.Context(), u.id, u.expires, u.sig, declared, body)
		return err
	}
	dir := filepath.Join(e.Dir, "backups", prj.ID, "imports")

	// A second PUT while the first is being received: 409 at once.
	a := newUpload()
	pr, pw := io.Pipe()
	first := make(chan error, 1)
	go func() { first <- put(a, -1, pr) }()
	pw.Write(bytes.Repeat([]byte("x"), 100)) // returns once the first PUT is reading
	if err := put(a, 10, strings.NewReader("0123456789")); appliance.KindOf(err) != appliance.KindConflict || !strings.Contains(err.Error(), "being received") {
		t.Fatalf("concurrent PUT: %v", err)
	}
	pw.Write(bytes.Repeat([]byte("x"), 500))
	pw.Close()
	if err := <-first; err != nil {
		t.Fatalf("first PUT: %v", err)
	}

	// 600 bytes wait for their import: 400 are left for the project's other uploads.
	b := newUpload()
	if err := put(b, 500, strings.NewReader(strings.Repeat("y", 500))); appliance.KindOf(err) != appliance.KindTooLarge {
		t.Fatalf("declared over what is left: %v", err)
	}
	if err := put(b, -1, strings.NewReader(strings.Repeat("y", 401))); appliance.KindOf(err) != appliance.KindTooLarge {
		t.Fatalf("streamed over what is left: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("refused uploads left files: %v", entries)
	}
	if err := put(b, 400, strings.NewReader(strings.Repeat("y", 400))); err != nil {
		t.Fatalf("what is left: %v", err)
	}

	// Unused upload URLs are capped.
	for i := 0; i < migrate.MaxPendingUploads; i++ {
		newUpload()
	}
	_, err := e.Svc.Migrate().CreateUpload(t.Context(), p, prj.ID)
	wantRetryAfter(t, err, migrate.UploadTTL) // when the oldest unused URL expires
}

// TestUploadTotalUnderConcurrency: uploads received at once cannot together pass the project's limit.
// Before, a PUT counted the dumps stored when it began and the bytes in flight: once another upload of
// the project was stored (its bytes no longer in flight, not in the count read earlier) both together
// passed the limit. Now a PUT reserves its share (its Content-Length, or all that is left) before it
// reads a byte.
func TestUploadTotalUnderConcurrency(t *testing.T) {
	t.Parallel()
	e, p := keyEnv(t, appliancetest.Options{Instances: true, ImportUploadLimit: func() int64 { return 1000 }})
	prj := provision(t, e, p, "raceuploads", "development")
	newUpload := func() (id, expires, sig string) {
		t.Helper()
		res, err := e.Svc.Migrate().CreateUpload(t.Context(), p, prj.ID)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(res.Upload.UploadURL)
		return res.Upload.ID, u.Query().Get("expires"), u.Query().Get("sig")
	}
	start := func(declared int64) (*io.PipeReader, *io.PipeWriter, chan error) {
		id, exp, sig := newUpload()
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			_, err := e.Svc.Migrate().ReceiveUpload(t.Context(), id, exp, sig, declared, pr)
			pr.CloseWithError(io.ErrClosedPipe) // a writer still waiting gives up
			done <- err
		}()
		return pr, pw, done
	}
	_, pwA, doneA := start(-1)
	pwA.Write(bytes.Repeat([]byte("a"), 600)) // returns once A is reading
	_, pwB, doneB := start(-1)
	wroteB := make(chan error, 1)
	go func() { _, err := pwB.Write(bytes.Repeat([]byte("b"), 100)); wroteB <- err }()
	var errB error
	select {
	case <-wroteB: // B is reading while A is: A stored, then B goes on
		pwA.Close()
		if err := <-doneA; err != nil {
			t.Fatalf("A: %v", err)
		}
		pwB.Write(bytes.Repeat([]byte("b"), 350))
		pwB.Close()
		errB = <-doneB
	case errB = <-doneB: // refused before reading
		pwA.Close()
		if err := <-doneA; err != nil {
			t.Fatalf("A: %v", err)
		}
	}
	if appliance.KindOf(errB) != appliance.KindTooLarge {
		t.Errorf("B, received while A held the rest of the limit: %v, want too large", errB)
	}
	var total int64
	if err := e.DB.View(func(tx *store.Tx) error {
		ups, err := store.Uploads.All(tx, func(u *store.Upload) bool { return u.ProjectID == prj.ID && u.State == migrate.UploadUploaded })
		for _, u := range ups {
			total += u.SizeBytes
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if total > 1000 {
		t.Errorf("the project's stored uploads hold %d bytes, over its limit of 1000", total)
	}
	// Once A is stored, what is left is for the next upload.
	id, exp, sig := newUpload()
	if _, err := e.Svc.Migrate().ReceiveUpload(t.Context(), id, exp, sig, 400, strings.NewReader(strings.Repeat("c", 400))); err != nil {
		t.Fatalf("what is left after A: %v", err)
	}
}
