package appliance_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/exports"
	"github.com/theappliance/appliance/httpapi"
)

// TestBucketExportDownloadOverHTTP: an export that lives only in the bucket (its cached file deleted)
// downloads through its signed URL from the API served as up serves it (TLS, HTTP/2 and HTTP/1.1). Whole,
// the bytes are the bucket's object opened (sha256; a dump pg_restore lists) and the file is cached again;
// one range gets that range's bytes (206) and leaves nothing behind (no cached file, no half-written
// one); a download the client cancels midway leaves nothing behind either.
func TestBucketExportDownloadOverHTTP(t *testing.T) {
	t.Parallel()
	e, p, _, bs := bucketEnvWith(t, appliancetest.Options{Instances: true})
	ctx := t.Context()
	prj := provision(t, e, p, "downloaded from a bucket", "development")
	marker := padForDump(t, e, prj) // about 0.7 MB of dump: more than the range and the cut below
	exportID := exportDone(t, e, p, prj)
	// The dump is the bucket's object, opened (decrypted and authenticated).
	r, err := bs.GetExport(ctx, prj.ID, exportID)
	if err != nil {
		t.Fatal(err)
	}
	dump, err := io.ReadAll(r)
	r.Close()
	if err != nil || len(dump) < 256<<10 {
		t.Fatalf("the export's object: %d bytes (%v)", len(dump), err)
	}
	sum := sha256.Sum256(dump)
	dir := exports.Dir(e.Dir, prj.ID)
	file := filepath.Join(dir, exportID+".dump")
	if cached, err := os.ReadFile(file); err != nil || !bytes.Equal(cached, dump) {
		t.Fatalf("the export's cached file: %d bytes of %d (%v)", len(cached), len(dump), err)
	}
	evict := func(t *testing.T) {
		t.Helper()
		if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	// nothingLeft: the export is not cached, and no copy of it is being written.
	nothingLeft := func(t *testing.T, what string) {
		t.Helper()
		left, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) != 0 {
			t.Fatalf("%s left %v in the exports' directory", what, left)
		}
	}

	// The API as up serves it, behind a handler that tells when each download's handler has returned (so
	// that what it leaves is checked after it ended) and, for the cancelled download, holds its response
	// after its first bytes until the client has gone: the cut then falls midway whatever the buffers.
	api := httpapi.New(e.Svc, httpapi.Options{Log: slog.New(slog.DiscardHandler), Lane: e.Lane,
		Limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}})
	served := make(chan struct{}, 1)
	const holdAt = 64 << 10
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/downloads/exports/") {
			api.ServeHTTP(w, r)
			return
		}
		if r.Header.Get("X-Test-Hold") != "" {
			w = &holdingWriter{ResponseWriter: w, ctx: r.Context(), at: holdAt}
		}
		api.ServeHTTP(w, r)
		served <- struct{}{}
	})
	base := serveTLS(t, e, h)
	t.Cleanup(api.Close)
	waitServed := func(t *testing.T) {
		t.Helper()
		select {
		case <-served:
		case <-time.After(time.Minute):
			t.Fatal("the download's handler did not return within a minute")
		}
	}
	pgRestore, err := e.Bin.Path("pg_restore")
	if err != nil {
		t.Fatal(err)
	}

	for _, h2 := range []bool{true, false} {
		t.Run(map[bool]string{true: "HTTP/2", false: "HTTP/1.1"}[h2], func(t *testing.T) {
			client := tlsClient(t, e, h2)
			get := func(ctx context.Context, header http.Header) *http.Response {
				t.Helper()
				dl, err := e.Svc.Exports().Download(ctx, p, prj.ID, exportID)
				if err != nil {
					t.Fatal(err)
				}
				u, err := url.Parse(dl.Download.DownloadURL)
				if err != nil {
					t.Fatal(err)
				}
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+u.Path+"?"+u.RawQuery, nil)
				if err != nil {
					t.Fatal(err)
				}
				for k, v := range header {
					req.Header[k] = v
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				checkProto(t, resp, h2)
				return resp
			}

			// Whole: the dump's bytes, with its length; cached again once read.
			evict(t)
			resp := get(ctx, nil)
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			waitServed(t)
			if err != nil || resp.StatusCode != http.StatusOK || resp.ContentLength != int64(len(dump)) || sha256.Sum256(body) != sum {
				t.Fatalf("GET: %d, %d bytes of %d (length %d; %v); equal to the bucket's object: %v", resp.StatusCode, len(body),
					len(dump), resp.ContentLength, err, sha256.Sum256(body) == sum)
			}
			got := filepath.Join(t.TempDir(), "downloaded.dump")
			if err := os.WriteFile(got, body, 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(pgRestore, "--list", got).CombinedOutput(); err != nil || !strings.Contains(string(out), marker) {
				t.Fatalf("pg_restore --list of the download: %v\n%s", err, out)
			}
			if cached, err := os.ReadFile(file); err != nil || !bytes.Equal(cached, dump) {
				t.Fatalf("the downloaded export is not cached again: %d bytes (%v)", len(cached), err)
			}

			// One range: its bytes (206), and nothing cached or half-written.
			evict(t)
			const from, to = 100_000, 199_999
			resp = get(ctx, http.Header{"Range": {fmt.Sprintf("bytes=%d-%d", from, to)}})
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			waitServed(t)
			if err != nil || resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, dump[from:to+1]) ||
				resp.Header.Get("Content-Range") != fmt.Sprintf("bytes %d-%d/%d", from, to, len(dump)) {
				t.Fatalf("GET of a range: %d %q, %d bytes (%v); the range's bytes: %v", resp.StatusCode, resp.Header.Get("Content-Range"),
					len(body), err, bytes.Equal(body, dump[from:to+1]))
			}
			nothingLeft(t, "a range")

			// Cancelled midway: nothing cached or half-written.
			evict(t)
			cctx, cancel := context.WithCancel(ctx)
			resp = get(cctx, http.Header{"X-Test-Hold": {"1"}})
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Length") != strconv.Itoa(len(dump)) {
				t.Fatalf("GET to cancel: %d, length %s", resp.StatusCode, resp.Header.Get("Content-Length"))
			}
			head := make([]byte, holdAt/2)
			if _, err := io.ReadFull(resp.Body, head); err != nil || !bytes.Equal(head, dump[:len(head)]) {
				t.Fatalf("the first bytes of the download to cancel: %v", err)
			}
			cancel()
			resp.Body.Close()
			waitServed(t)
			nothingLeft(t, "a cancelled download")
		})
	}
}

// holdingWriter passes the first at bytes of a response on (flushed), then holds the rest until ctx ends
// (the client went away) and fails.
type holdingWriter struct {
	http.ResponseWriter
	ctx     context.Context
	at, n   int
	flushed bool
}

func (w *holdingWriter) Write(p []byte) (int, error) {
	if w.n+len(p) <= w.at {
		n, err := w.ResponseWriter.Write(p)
		w.n += n
		return n, err
	}
	n, err := w.ResponseWriter.Write(p[:w.at-w.n])
	w.n += n
	if err != nil {
		return n, err
	}
	if !w.flushed {
		w.flushed = true
		if err := http.NewResponseController(w.ResponseWriter).Flush(); err != nil {
			return n, err
		}
	}
	<-w.ctx.Done()
	return n, w.ctx.Err()
}

func (w *holdingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
