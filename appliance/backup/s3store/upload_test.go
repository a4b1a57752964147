package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/backup/s3store"
	"github.com/theappliance/appliance/appliance/backup/s3store/s3test"
)

// parts watches the parts a store sends: how many, the first bytes of each part 1 (its header, with the
// nonce prefix), and, when cancelAt is set, cancels the Put as part cancelAt goes (a connection lost
// with the part's answer: the store cannot tell whether the server got it).
type parts struct {
	mu       sync.Mutex
	sent     int
	headers  [][]byte
	cancelAt int
	cancel   context.CancelFunc
}

func (p *parts) RoundTrip(r *http.Request) (*http.Response, error) {
	q := r.URL.Query()
	if r.Method == http.MethodPut && q.Get("partNumber") != "" {
		p.mu.Lock()
		p.sent++
		if q.Get("partNumber") == "1" && r.Body != nil {
			h := make([]byte, 24)
			if _, err := io.ReadFull(r.Body, h); err == nil {
				p.headers = append(p.headers, h)
				r.Body = struct {
					io.Reader
					io.Closer
				}{io.MultiReader(bytes.NewReader(h), r.Body), r.Body}
			}
		}
		cancel := p.cancelAt != 0 && q.Get("partNumber") == strconv.Itoa(p.cancelAt)
		p.mu.Unlock()
		if cancel {
			p.cancel()
			resp, err := http.DefaultTransport.RoundTrip(r) // the server gets the part, the store never hears of it
			if err == nil {
				resp.Body.Close()
			}
			return nil, context.Canceled
		}
	}
	return http.DefaultTransport.RoundTrip(r)
}

// count is the number of parts sent since the last count.
func (p *parts) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.sent
	p.sent = 0
	return n
}

// cut yields data, then fails after n bytes.
type cut struct {
	data []byte
	n    int
}

func (c *cut) Read(p []byte) (int, error) {
	if c.n == 0 {
		return 0, errors.New("the writer died")
	}
	k := copy(p, c.data[:min(len(c.data), c.n)])
	c.data, c.n = c.data[k:], c.n-k
	return k, nil
}

// resumeSetup: a store of 5 MiB parts keeping its uploads' state, and the parts it sends watched.
func resumeSetup(t *testing.T) (*s3test.Server, s3store.Config, *parts) {
	srv := s3test.Start(t)
	cfg := srv.Config("backups")
	cfg.PartSize = 5 << 20
	cfg.UploadState = filepath.Join(t.TempDir(), "uploads")
	p := &parts{}
	cfg.Transport = p
	return srv, cfg, p
}

func records(t *testing.T, cfg s3store.Config) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(cfg.UploadState, "*.upload"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func incomplete(t *testing.T, srv *s3test.Server) []string {
	t.Helper()
	var out []string
	for u := range srv.Client().ListIncompleteUploads(context.Background(), srv.Bucket, "", true) {
		if u.Err != nil {
			t.Fatal(u.Err)
		}
		out = append(out, u.Key)
	}
	slices.Sort(out)
	return out
}

// absent: the object is neither got, stat'ed nor listed.
func absent(t *testing.T, b *s3store.Bucket, key string) {
	t.Helper()
	ctx := context.Background()
	if _, err := b.Stat(ctx, key); !errors.Is(err, backup.ErrNotExist) {
		t.Fatalf("stat %s: %v, want not exist", key, err)
	}
	if _, err := b.Get(ctx, key); !errors.Is(err, backup.ErrNotExist) {
		t.Fatalf("get %s: %v, want not exist", key, err)
	}
	l, err := b.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range l {
		if in.Key == key {
			t.Fatalf("%s is listed", key)
		}
	}
}

// An interrupted Put leaves no object but its upload and a state record; a later Put of the same
// content (by another store: the process was restarted) sends only the parts the server lacks.
func TestResumeUpload(t *testing.T) {
	srv, cfg, p := resumeSetup(t)
	ctx := context.Background()
	data := random(t, 18<<20) // incompressible: 4 parts of the stored form
	b := newBucket(t, cfg)
	// The reader fails once 11 MiB went in: parts 1 and 2 went up, part 3 was never whole.
	if _, err := b.Put(ctx, "p/x", &cut{data: data, n: 11 << 20}); err == nil || !strings.Contains(err.Error(), "the writer died") {
		t.Fatalf("put: %v", err)
	}
	if n := p.count(); n != 2 {
		t.Fatalf("%d parts sent before the reader failed, want 2", n)
	}
	absent(t, b, "p/x")
	if got := incomplete(t, srv); !slices.Equal(got, []string{"backups/p/x"}) {
		t.Fatalf("incomplete uploads %v", got)
	}
	if len(records(t, cfg)) != 1 {
		t.Fatalf("state records: %v", records(t, cfg))
	}
	b2 := newBucket(t, cfg)
	put(t, b2, "p/x", data)
	if n := p.count(); n != 2 {
		t.Fatalf("the resumed put sent %d parts, want 2 (parts 3 and 4)", n)
	}
	if got, err := get(newBucket(t, cfg), "p/x"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	if len(records(t, cfg)) != 0 || len(incomplete(t, srv)) != 0 {
		t.Fatalf("left: records %v, uploads %v", records(t, cfg), incomplete(t, srv))
	}

	// The Put ends while part 3 is sent and its answer never comes: part 3 is sent again, the same bytes.
	cctx, cancel := context.WithCancel(ctx)
	p.cancelAt, p.cancel = 3, cancel
	if _, err := b.Put(cctx, "p/y", bytes.NewReader(data)); !errors.Is(err, context.Canceled) {
		t.Fatalf("put: %v", err)
	}
	p.cancelAt = 0
	if n := p.count(); n != 3 {
		t.Fatalf("%d parts sent before the cancel, want 3", n)
	}
	absent(t, b, "p/y")
	put(t, newBucket(t, cfg), "p/y", data)
	if n := p.count(); n != 2 {
		t.Fatalf("the resumed put sent %d parts, want 2 (parts 3 and 4)", n)
	}
	if got, err := get(b, "p/y"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	if len(records(t, cfg)) != 0 || len(incomplete(t, srv)) != 0 {
		t.Fatalf("left: records %v, uploads %v", records(t, cfg), incomplete(t, srv))
	}
	// Every upload of the same content resumed under the nonce prefix it started with.
	if len(p.headers) != 2 || bytes.Equal(p.headers[0], p.headers[1]) {
		t.Fatalf("headers of the two objects: %x", p.headers)
	}
}

// storedNonce is the nonce prefix in the header of an object as the server keeps it.
func storedNonce(t *testing.T, srv *s3test.Server, name string) []byte {
	t.Helper()
	f, err := os.Open(srv.Path(name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := make([]byte, 24)
	if _, err := io.ReadFull(f, h); err != nil {
		t.Fatal(err)
	}
	return h[8:]
}

// A Put of other content after an interrupted one does not go on under the nonce prefix of the bytes
// already sent: the upload is aborted and the object sent whole under a new one, whether it differs from
// the first part, from a later confirmed part, or only from the part whose answer never came.
func TestResumeOtherContent(t *testing.T) {
	srv, cfg, p := resumeSetup(t)
	ctx := context.Background()
	a := random(t, 18<<20)
	for _, c := range []struct {
		name   string
		other  []byte
		cancel bool // interrupted while part 3 is sent (else by the reader, after part 2)
	}{
		{"all different", random(t, 18<<20), false},
		{"differs from part 2", append(bytes.Clone(a[:7<<20]), random(t, 11<<20)...), false},
		{"differs in the unconfirmed part 3", append(bytes.Clone(a[:12<<20]), random(t, 6<<20)...), true},
		{"smaller than a part", random(t, 1<<20), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := "p/" + strings.ReplaceAll(c.name, " ", "-")
			b := newBucket(t, cfg)
			p.count()
			p.headers = nil
			if c.cancel {
				cctx, cancel := context.WithCancel(ctx)
				p.cancelAt, p.cancel = 3, cancel
				if _, err := b.Put(cctx, key, bytes.NewReader(a)); !errors.Is(err, context.Canceled) {
					t.Fatalf("put: %v", err)
				}
				p.cancelAt = 0
			} else if _, err := b.Put(ctx, key, &cut{data: a, n: 11 << 20}); err == nil {
				t.Fatal("put succeeded")
			}
			p.count()
			if len(p.headers) != 1 {
				t.Fatalf("%d first parts sent", len(p.headers))
			}
			first := p.headers[0][8:]
			absent(t, b, key)
			put(t, newBucket(t, cfg), key, c.other)
			want := 4
			if len(c.other) < 5<<20 {
				want = 0 // one PUT
			}
			if n := p.count(); n != want {
				t.Fatalf("%d parts sent, want all %d", n, want)
			}
			if got := storedNonce(t, srv, "backups/"+key); bytes.Equal(got, first) {
				t.Fatalf("the object is stored under the interrupted upload's nonce prefix %x", got)
			}
			if got, err := get(b, key); err != nil || !bytes.Equal(got, c.other) {
				t.Fatalf("get: %d bytes, %v", len(got), err)
			}
			if len(records(t, cfg)) != 0 || len(incomplete(t, srv)) != 0 {
				t.Fatalf("left: records %v, uploads %v", records(t, cfg), incomplete(t, srv))
			}
		})
	}
}

// SweepUploads aborts the incomplete uploads under the prefix that no record names (AbandonAfter old)
// and those whose record is over a week old, leaves recorded ones and other prefixes' alone, and removes
// records whose uploads are gone.
func TestSweepUploads(t *testing.T) {
	srv, cfg, _ := resumeSetup(t)
	ctx := context.Background()
	core := minio.Core{Client: srv.Client()}
	orphan := func(name string) string {
		t.Helper()
		id, err := core.NewMultipartUpload(ctx, srv.Bucket, name, minio.PutObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	orphan("backups/p/orphan")
	orphan("elsewhere/x")
	// With the default bound (a day), a new orphan is left; a store without a state directory sweeps
	// nothing.
	if n, err := newBucket(t, cfg).SweepUploads(ctx); err != nil || n != 0 {
		t.Fatalf("sweep with the default bound: %d %v", n, err)
	}
	noState := cfg
	noState.UploadState, noState.AbandonAfter = "", -1
	if n, err := newBucket(t, noState).SweepUploads(ctx); err != nil || n != 0 {
		t.Fatalf("sweep without a state directory: %d %v", n, err)
	}
	cfg.AbandonAfter = -1 // any age
	b := newBucket(t, cfg)
	if _, err := b.Put(ctx, "p/recorded", &cut{data: random(t, 12<<20), n: 11 << 20}); err == nil {
		t.Fatal("put succeeded")
	}
	if n, err := b.SweepUploads(ctx); err != nil || n != 1 {
		t.Fatalf("sweep: %d aborted, %v; want 1", n, err)
	}
	if got := incomplete(t, srv); !slices.Equal(got, []string{"backups/p/recorded", "elsewhere/x"}) {
		t.Fatalf("after the sweep: %v", got)
	}
	if len(records(t, cfg)) != 1 {
		t.Fatalf("records %v", records(t, cfg))
	}
	// A record not resumed for over a week: its upload is aborted, the record removed.
	old := time.Now().Add(-8 * 24 * time.Hour)
	if err := os.Chtimes(records(t, cfg)[0], old, old); err != nil {
		t.Fatal(err)
	}
	if n, err := b.SweepUploads(ctx); err != nil || n != 1 {
		t.Fatalf("sweep of a stale record: %d aborted, %v; want 1", n, err)
	}
	if got := incomplete(t, srv); !slices.Equal(got, []string{"elsewhere/x"}) || len(records(t, cfg)) != 0 {
		t.Fatalf("after the sweep: uploads %v, records %v", got, records(t, cfg))
	}
	// A record whose upload is gone is removed.
	if _, err := b.Put(ctx, "p/gone", &cut{data: random(t, 12<<20), n: 11 << 20}); err == nil {
		t.Fatal("put succeeded")
	}
	for u := range srv.Client().ListIncompleteUploads(ctx, srv.Bucket, "backups/p/gone", true) {
		if err := core.AbortMultipartUpload(ctx, srv.Bucket, u.Key, u.UploadID); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := b.SweepUploads(ctx); err != nil || n != 0 || len(records(t, cfg)) != 0 {
		t.Fatalf("sweep: %d aborted, %v, records %v", n, err, records(t, cfg))
	}
	// DeleteAll of a prefix aborts its uploads and removes their records.
	if _, err := b.Put(ctx, "p/deleted", &cut{data: random(t, 12<<20), n: 11 << 20}); err == nil {
		t.Fatal("put succeeded")
	}
	if found, err := b.DeleteAll(ctx, "p/"); err != nil || !found {
		t.Fatalf("delete all: %v %v", found, err)
	}
	if got := incomplete(t, srv); !slices.Equal(got, []string{"elsewhere/x"}) || len(records(t, cfg)) != 0 {
		t.Fatalf("after delete all: uploads %v, records %v", got, records(t, cfg))
	}
}

// held yields data until n bytes went, tells it got there, and fails once released.
type held struct {
	cut
	reached, released chan struct{}
}

func (h *held) Read(p []byte) (int, error) {
	if h.n == 0 {
		close(h.reached)
		<-h.released
		return 0, errors.New("released")
	}
	return h.cut.Read(p)
}

// The server dies during a Put: once it is back, a Put of the same content resumes the upload.
func TestResumeAfterServerStopped(t *testing.T) {
	srv, cfg, p := resumeSetup(t)
	ctx := context.Background()
	data := random(t, 24<<20) // 5 parts
	b := newBucket(t, cfg)
	h := &held{cut: cut{data: data, n: 20 << 20}, reached: make(chan struct{}), released: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := b.Put(ctx, "p/x", h)
		done <- err
	}()
	<-h.reached
	srv.Stop()
	close(h.released)
	if err := <-done; err == nil {
		t.Fatal("a put during which the server died succeeded")
	}
	before := p.count()
	srv.Restart()
	absent(t, b, "p/x")
	put(t, b, "p/x", data)
	if n := p.count(); n == 0 || n >= 5 {
		t.Fatalf("the resumed put sent %d parts (%d before the server died), want fewer than 5", n, before)
	}
	if got, err := get(b, "p/x"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	if len(records(t, cfg)) != 0 || len(incomplete(t, srv)) != 0 {
		t.Fatalf("left: records %v, uploads %v", records(t, cfg), incomplete(t, srv))
	}
}
