package s3store_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/backup/backuptest"
	"github.com/theappliance/appliance/appliance/backup/s3store"
	"github.com/theappliance/appliance/appliance/backup/s3store/s3test"
	"github.com/theappliance/appliance/appliance/testtools"
)

func TestMain(m *testing.M) { testtools.Main(m, testtools.Versitygw) }

func newBucket(t testing.TB, cfg s3store.Config) *s3store.Bucket {
	t.Helper()
	b, err := s3store.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var prefixes atomic.Int64

// setup starts a server and opens a store on a prefix of its bucket.
func setup(t *testing.T) (*s3store.Bucket, *s3test.Server, s3store.Config) {
	srv := s3test.Start(t)
	cfg := srv.Config("backups")
	cfg.Spool = t.TempDir()
	return newBucket(t, cfg), srv, cfg
}

func TestObjects(t *testing.T) {
	srv := s3test.Start(t)
	backuptest.TestObjects(t, func(t *testing.T) backup.Objects {
		cfg := srv.Config(fmt.Sprintf("t%d/", prefixes.Add(1)))
		cfg.Spool = t.TempDir()
		return newBucket(t, cfg)
	})
}

func random(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func put(t *testing.T, o backup.Objects, key string, data []byte) {
	t.Helper()
	if n, err := o.Put(context.Background(), key, bytes.NewReader(data)); err != nil || n != int64(len(data)) {
		t.Fatalf("put %s: %d %v", key, n, err)
	}
}

func get(o backup.Objects, key string) ([]byte, error) {
	r, err := o.Get(context.Background(), key)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// What the bucket holds is neither the plaintext nor readable as it: compressed and sealed.
func TestStoredSealed(t *testing.T) {
	b, srv, _ := setup(t)
	plain := bytes.Repeat([]byte("SELECT secret FROM a_table; "), 10000)
	put(t, b, "p/x", plain)
	stored, err := os.ReadFile(srv.Path("backups/p/x"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(stored, []byte("secret")) || len(stored) >= len(plain)/10 {
		t.Fatalf("stored %d bytes for %d, plaintext visible: %v", len(stored), len(plain), bytes.Contains(stored, []byte("secret")))
	}
	if got, err := get(b, "p/x"); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	// A large object (several parts) round-trips, with its plaintext size in Stat and List.
	big := random(t, 13<<20)
	cfg := srv.Config("backups")
	cfg.PartSize = 5 << 20
	small := newBucket(t, cfg)
	put(t, small, "p/big", big)
	if got, err := get(b, "p/big"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("get big: %d bytes, %v", len(got), err)
	}
	fresh := newBucket(t, cfg) // no sizes cached
	if in, err := fresh.Stat(context.Background(), "p/big"); err != nil || in.Size != int64(len(big)) {
		t.Fatalf("stat big: %+v %v", in, err)
	}
	if l, err := fresh.List(context.Background(), "p/"); err != nil || len(l) != 2 || l[0].Size != int64(len(big)) || l[1].Size != int64(len(plain)) {
		t.Fatalf("list: %+v %v", l, err)
	}
}

// readFails reads the object and wants a failure that names it and ErrCorrupt, having yielded no byte
// that is not the original's.
func readFails(t *testing.T, b backup.Objects, key string, orig []byte) {
	t.Helper()
	got, err := get(b, key)
	if !errors.Is(err, s3store.ErrCorrupt) || !strings.Contains(err.Error(), key) {
		t.Fatalf("get %s: %v, want ErrCorrupt naming it", key, err)
	}
	if !bytes.HasPrefix(orig, got) {
		t.Fatalf("get %s yielded other bytes before failing", key)
	}
}

// Objects changed in the bucket's storage never read back as other bytes.
func TestTamperedObjects(t *testing.T) {
	b, srv, _ := setup(t)
	a, c := random(t, 300<<10), random(t, 200<<10)
	reset := func() {
		put(t, b, "p/a", a)
		put(t, b, "p/c", c)
	}
	file := func(key string) string { return srv.Path("backups/" + key) }
	edit := func(key string, f func([]byte) []byte) {
		t.Helper()
		data, err := os.ReadFile(file(key))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file(key), f(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	reset()
	edit("p/a", func(d []byte) []byte { d[len(d)/2] ^= 1; return d })
	readFails(t, b, "p/a", a)

	reset()
	edit("p/a", func(d []byte) []byte { return d[:len(d)-100] })
	readFails(t, b, "p/a", a)
	if _, err := newBucket(t, srv.Config("backups")).Stat(context.Background(), "p/a"); !errors.Is(err, s3store.ErrCorrupt) {
		t.Fatalf("stat of a truncated object: %v", err)
	}

	reset()
	edit("p/a", func(d []byte) []byte { return d[:len(d)/2] })
	readFails(t, b, "p/a", a)

	// Two objects' contents swapped: each is refused under the other's key.
	reset()
	da, _ := os.ReadFile(file("p/a"))
	dc, _ := os.ReadFile(file("p/c"))
	edit("p/a", func([]byte) []byte { return dc })
	edit("p/c", func([]byte) []byte { return da })
	readFails(t, b, "p/a", a)
	readFails(t, b, "p/c", c)
	fresh := newBucket(t, srv.Config("backups"))
	if _, err := fresh.List(context.Background(), "p/"); !errors.Is(err, s3store.ErrCorrupt) ||
		(!strings.Contains(err.Error(), "p/a") && !strings.Contains(err.Error(), "p/c")) {
		t.Fatalf("list of swapped objects: %v", err)
	}
	reset()
	if got, err := get(b, "p/a"); err != nil || !bytes.Equal(got, a) {
		t.Fatalf("get after putting it again: %v", err)
	}
}

func TestWrongDataKey(t *testing.T) {
	b, _, cfg := setup(t)
	data := random(t, 100<<10)
	put(t, b, "p/a", data)
	cfg.DataKey = bytes.Repeat([]byte("x"), 32)
	other := newBucket(t, cfg)
	readFails(t, other, "p/a", data)
	if _, err := other.Stat(context.Background(), "p/a"); !errors.Is(err, s3store.ErrCorrupt) {
		t.Fatalf("stat with another key: %v", err)
	}
	if _, err := other.List(context.Background(), "p/"); !errors.Is(err, s3store.ErrCorrupt) {
		t.Fatalf("list with another key: %v", err)
	}
	cfg.DataKey = []byte("short")
	if _, err := s3store.New(cfg); err == nil || !strings.Contains(err.Error(), "32 bytes") {
		t.Fatalf("a short data key: %v", err)
	}
}

// failAfter yields n random bytes, then fails.
type failAfter struct{ n int }

func (f *failAfter) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("the writer died")
	}
	k := min(len(p), f.n)
	rand.Read(p[:k])
	f.n -= k
	return k, nil
}

// Without UploadState, a multipart Put whose reader fails is aborted: no object, no incomplete upload,
// the reader's error.
func TestFailedMultipartPutAborted(t *testing.T) {
	srv := s3test.Start(t)
	cfg := srv.Config("backups")
	cfg.PartSize = 5 << 20
	b := newBucket(t, cfg)
	ctx := context.Background()
	if _, err := b.Put(ctx, "p/x", &failAfter{n: 12 << 20}); err == nil || !strings.Contains(err.Error(), "the writer died") {
		t.Fatalf("put: %v", err)
	}
	if _, err := b.Stat(ctx, "p/x"); !errors.Is(err, backup.ErrNotExist) {
		t.Fatalf("stat after a failed put: %v", err)
	}
	for u := range srv.Client().ListIncompleteUploads(ctx, srv.Bucket, "", true) {
		t.Errorf("left: the upload of %s", u.Key)
	}
}

// gate yields n random bytes, then tells it got there and blocks until released.
type gate struct {
	n        int
	reached  chan struct{}
	released chan struct{}
}

func (g *gate) Read(p []byte) (int, error) {
	if g.n == 0 {
		close(g.reached)
		<-g.released
		return 0, errors.New("released")
	}
	k := min(len(p), g.n)
	rand.Read(p[:k])
	g.n -= k
	return k, nil
}

// The server dies during a multipart Put: the Put fails, nothing of it is visible once the server is
// back, a later Put succeeds, and DeleteAll removes the upload it left behind.
func TestServerStoppedDuringPut(t *testing.T) {
	srv := s3test.Start(t)
	cfg := srv.Config("backups")
	cfg.PartSize = 5 << 20
	b := newBucket(t, cfg)
	ctx := context.Background()
	put(t, b, "p/wal/old", []byte("old"))
	// Once the reader gave 20 MiB (incompressible), the pipe being synchronous, at least two parts
	// went up.
	g := &gate{n: 20 << 20, reached: make(chan struct{}), released: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := b.Put(ctx, "p/wal/new", g)
		done <- err
	}()
	<-g.reached
	srv.Stop()
	close(g.released)
	if err := <-done; err == nil {
		t.Fatal("a put during which the server died succeeded")
	}
	srv.Restart()
	if _, err := b.Get(ctx, "p/wal/new"); !errors.Is(err, backup.ErrNotExist) {
		t.Fatalf("get after the failed put: %v", err)
	}
	if l, err := b.List(ctx, ""); err != nil || len(l) != 1 || l[0].Key != "p/wal/old" {
		t.Fatalf("list after the failed put: %+v %v", l, err)
	}
	var left []string
	for u := range srv.Client().ListIncompleteUploads(ctx, srv.Bucket, "backups/", true) {
		left = append(left, u.Key)
	}
	if !slices.Equal(left, []string{"backups/p/wal/new"}) {
		t.Fatalf("incomplete uploads: %v (the server died before the store could abort it)", left)
	}
	data := random(t, 12<<20)
	put(t, b, "p/wal/new", data)
	if got, err := get(b, "p/wal/new"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get after a later put: %v", err)
	}
	if found, err := b.DeleteAll(ctx, "p/"); err != nil || !found {
		t.Fatalf("delete all: %v %v", found, err)
	}
	for u := range srv.Client().ListIncompleteUploads(ctx, srv.Bucket, "backups/", true) {
		t.Errorf("left after delete all: %s", u.Key)
	}
	if l, err := b.List(ctx, ""); err != nil || len(l) != 0 {
		t.Fatalf("list after delete all: %+v %v", l, err)
	}
}

// A stage is a local directory, invisible until committed; Commit uploads its files as the objects under
// the prefix and removes it; DeleteAll of the prefix removes an uncommitted stage.
func TestStageCommit(t *testing.T) {
	b, _, cfg := setup(t)
	ctx := context.Background()
	var chowned []string
	cfg.Chown = func(p string) error { chowned = append(chowned, p); return nil }
	b = newBucket(t, cfg)
	st, err := b.Stage(ctx, "p/base/k1/")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(st, cfg.Spool) || !slices.Equal(chowned, []string{st}) {
		t.Fatalf("stage %s, given to the instances' user: %v", st, chowned)
	}
	if fi, err := os.Stat(st); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("stage mode: %v %v", fi.Mode(), err)
	}
	files := map[string][]byte{"backup_label": []byte("label"), "global/pg_control": random(t, 8192), "base/1/1259": random(t, 300<<10)}
	for i := range 40 {
		files[fmt.Sprintf("base/1/%d", 2000+i)] = random(t, i*1000)
	}
	if err := os.MkdirAll(filepath.Join(st, "pg_wal", "archive_status"), 0o700); err != nil {
		t.Fatal(err)
	}
	for f, data := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(st, f)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(st, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if l, err := b.List(ctx, "p/"); err != nil || len(l) != 0 {
		t.Fatalf("a stage is listed: %+v %v", l, err)
	}
	if err := b.Commit(ctx, "p/base/k1/"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(st); !os.IsNotExist(err) {
		t.Fatalf("the stage is left: %v", err)
	}
	l, err := newBucket(t, cfg).List(ctx, "p/base/k1/")
	if err != nil || len(l) != len(files) {
		t.Fatalf("after commit: %d objects, %v", len(l), err)
	}
	for _, in := range l {
		data, ok := files[strings.TrimPrefix(in.Key, "p/base/k1/")]
		if !ok || in.Size != int64(len(data)) {
			t.Fatalf("%s: size %d, want %d (%v)", in.Key, in.Size, len(data), ok)
		}
		if got, err := get(b, in.Key); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("get %s: %v", in.Key, err)
		}
	}
	// A stage over a leftover one starts empty; DeleteAll removes it (and those of deeper prefixes).
	st, err = b.Stage(ctx, "p/base/k2/")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(st, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if st2, err := b.Stage(ctx, "p/base/k2/"); err != nil || st2 != st {
		t.Fatal(st2, err)
	}
	if ents, _ := os.ReadDir(st); len(ents) != 0 {
		t.Fatalf("a new stage holds %v", ents)
	}
	if found, err := b.DeleteAll(ctx, "p/"); err != nil || !found {
		t.Fatalf("delete all: %v %v", found, err)
	}
	if _, err := os.Stat(st); !os.IsNotExist(err) {
		t.Fatalf("the stage is left: %v", err)
	}
	if l, err := b.List(ctx, ""); err != nil || len(l) != 0 {
		t.Fatalf("after delete all: %+v %v", l, err)
	}
	// A stage with something that is not a regular file does not commit.
	st, err = b.Stage(ctx, "p/base/k3/")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(st, "link")); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(ctx, "p/base/k3/"); err == nil {
		t.Fatal("a stage with a symlink committed")
	}
	if err := b.Unstage(ctx, "p/base/k3/"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"p/base/k1", "", "../x/", "p/../"} {
		if _, err := b.Stage(ctx, bad); err == nil {
			t.Errorf("stage %q accepted", bad)
		}
	}
}

// Check names the problem: a missing bucket, credentials that do not work, an endpoint nobody answers.
func TestCheck(t *testing.T) {
	b, srv, cfg := setup(t)
	ctx := context.Background()
	if err := b.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err := srv.Client().ListObjects(ctx, srv.Bucket, minio.ListObjectsOptions{Recursive: true}), error(nil); err == nil {
		for o := range l {
			t.Errorf("Check left %s", o.Key)
		}
	}
	for _, c := range []struct {
		name string
		edit func(*s3store.Config)
		want error
		says string
	}{
		{"missing bucket", func(c *s3store.Config) { c.Bucket = "nosuchbucket" }, s3store.ErrNoSuchBucket, "s3://nosuchbucket/"},
		{"wrong secret", func(c *s3store.Config) { c.SecretKey = "wrong-secret-0123" }, s3store.ErrAccessDenied, "access denied"},
		{"unknown access key", func(c *s3store.Config) { c.AccessKey = "nobody" }, s3store.ErrAccessDenied, "access denied"},
		{"nobody listening", func(c *s3store.Config) { c.Endpoint = "127.0.0.1:1" }, s3store.ErrUnreachable, "unreachable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := cfg
			c.edit(&cfg)
			err := newBucket(t, cfg).Check(ctx)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("check: %v, want %v saying %q", err, c.want, c.says)
			}
			t.Log(err)
		})
	}
	// Without credentials given, the environment's.
	cfg.AccessKey, cfg.SecretKey = "", ""
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	if _, err := s3store.New(cfg); err == nil || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
		t.Fatalf("no credentials: %v", err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	if err := newBucket(t, cfg).Check(ctx); err != nil {
		t.Fatalf("credentials from the environment: %v", err)
	}
}

// rangedGets counts the ranged GETs (trailer reads) a store makes.
type rangedGets struct{ n atomic.Int64 }

func (c *rangedGets) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && r.Header.Get("Range") != "" {
		c.n.Add(1)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// List reads the trailer of an object once: Put and the first List remember its size for its ETag.
func TestListSizesCached(t *testing.T) {
	srv := s3test.Start(t)
	cfg := srv.Config("backups")
	c := &rangedGets{}
	cfg.Transport = c
	b := newBucket(t, cfg)
	ctx := context.Background()
	for _, k := range []string{"p/wal/1", "p/wal/2", "p/wal/3"} {
		put(t, b, k, []byte(k))
	}
	if l, err := b.List(ctx, "p/"); err != nil || len(l) != 3 || c.n.Load() != 0 {
		t.Fatalf("list after puts: %d objects, %v, %d trailer reads", len(l), err, c.n.Load())
	}
	c2 := &rangedGets{}
	cfg.Transport = c2
	fresh := newBucket(t, cfg)
	for range 2 {
		if l, err := fresh.List(ctx, "p/"); err != nil || len(l) != 3 || l[0].Size != 7 || c2.n.Load() != 3 {
			t.Fatalf("list by another store: %+v, %v, %d trailer reads", l, err, c2.n.Load())
		}
	}
	put(t, b, "p/wal/2", []byte("replaced")) // another ETag
	if l, err := fresh.List(ctx, "p/"); err != nil || len(l) != 3 || l[1].Size != 8 || c2.n.Load() != 4 {
		t.Fatalf("list after a replace: %+v, %v, %d trailer reads", l, err, c2.n.Load())
	}
}

// The project-level backup.Store works on a bucket: a base backup staged, committed and complete with
// its manifest, read back as a tar with the right sizes, its size and the project's, WAL pruned, the
// project removed; a tampered file fails the tar naming it.
func TestBackupStoreOnBucket(t *testing.T) {
	b, srv, _ := setup(t)
	s := backup.New(b)
	ctx := context.Background()
	dir, err := s.StageBackup(ctx, "prj_a", "k1")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"backup_label":      []byte("START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\nSTART TIMELINE: 1\n"),
		"global/pg_control": random(t, 8192),
		"base/1/1259":       bytes.Repeat([]byte("tuple "), 50000),
	}
	for f, data := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "pg_wal", "archive_status"), 0o700); err != nil {
		t.Fatal(err)
	}
	m, err := s.CommitBackup(ctx, "prj_a", "k1", dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, data := range files {
		total += int64(len(data))
	}
	if m.Files != len(files) || m.SizeBytes != total || m.StartSegment != "000000010000000000000002" {
		t.Fatalf("manifest %+v", m)
	}
	if n, err := s.BackupSize(ctx, "prj_a", "k1"); err != nil || n != total {
		t.Fatalf("backup size %d %v, want %d", n, err, total)
	}
	if tl, seg, err := s.BackupStart(ctx, "prj_a", "k1"); err != nil || tl != 1 || seg != "000000010000000000000002" {
		t.Fatalf("backup start %d %s %v", tl, seg, err)
	}
	readTar := func() (map[string][]byte, error) {
		var buf bytes.Buffer
		if err := s.WriteBackupTar(ctx, "prj_a", "k1", &buf); err != nil {
			return nil, err
		}
		got := map[string][]byte{}
		tr := tar.NewReader(&buf)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return got, nil
			}
			if err != nil {
				return nil, err
			}
			if h.Typeflag == tar.TypeReg {
				if got[h.Name], err = io.ReadAll(tr); err != nil {
					return nil, err
				}
			}
		}
	}
	got, err := readTar()
	if err != nil || len(got) != len(files) {
		t.Fatalf("tar: %d files, %v", len(got), err)
	}
	for f, data := range files {
		if !bytes.Equal(got[f], data) {
			t.Fatalf("tar: %s differs", f)
		}
	}
	for _, seg := range []string{"000000010000000000000001", "000000010000000000000002", "000000010000000000000003"} {
		put(t, b, "prj_a/wal/"+seg, []byte(seg))
	}
	if n, err := s.PruneWAL(ctx, "prj_a", "", "000000010000000000000002"); err != nil || n != 1 {
		t.Fatalf("prune: %d %v", n, err)
	}
	if n, err := s.ProjectSize(ctx, "prj_a"); err != nil || n <= total {
		t.Fatalf("project size %d %v", n, err)
	}
	stored := srv.Path("backups/prj_a/base/k1/base/1/1259")
	data, err := os.ReadFile(stored)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 1
	if err := os.WriteFile(stored, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readTar(); !errors.Is(err, s3store.ErrCorrupt) || !strings.Contains(err.Error(), "prj_a/base/k1/base/1/1259") {
		t.Fatalf("tar of a tampered backup: %v", err)
	}
	if found, err := s.RemoveProject(ctx, "prj_a"); err != nil || !found {
		t.Fatalf("remove project: %v %v", found, err)
	}
	if l, err := b.List(ctx, ""); err != nil || len(l) != 0 {
		t.Fatalf("after remove project: %+v %v", l, err)
	}
}

// The server dies while an object is read: the read fails as unreachable, not as a corrupt object.
func TestServerStoppedDuringGet(t *testing.T) {
	b, srv, _ := setup(t)
	data := random(t, 48<<20)
	put(t, b, "p/big", data)
	r, err := b.Get(context.Background(), "p/big")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := io.ReadFull(r, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	_, err = io.Copy(io.Discard, r)
	if err == nil || errors.Is(err, s3store.ErrCorrupt) || !strings.Contains(err.Error(), "p/big") {
		t.Fatalf("read after the server died: %v, want an error naming the object that is not ErrCorrupt", err)
	}
	t.Log(err)
}

// deleteOnStat deletes an object from the bucket as a store is about to read its trailer.
type deleteOnStat struct {
	srv  *s3test.Server
	name string
	once sync.Once
}

func (d *deleteOnStat) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && r.Header.Get("Range") != "" && strings.HasSuffix(r.URL.Path, "/"+d.name) {
		d.once.Do(func() {
			if err := d.srv.Client().RemoveObject(r.Context(), d.srv.Bucket, d.name, minio.RemoveObjectOptions{}); err != nil {
				panic(err)
			}
		})
	}
	return http.DefaultTransport.RoundTrip(r)
}

// An object deleted between List's listing and its reading of the object's trailer is not listed (and
// fails nothing): a List concurrent with a prune.
func TestListDeletedMeanwhile(t *testing.T) {
	srv := s3test.Start(t)
	cfg := srv.Config("backups")
	put(t, newBucket(t, cfg), "p/a", []byte("a"))
	put(t, newBucket(t, cfg), "p/b", []byte("b"))
	cfg.Transport = &deleteOnStat{srv: srv, name: "backups/p/a"}
	if l, err := newBucket(t, cfg).List(context.Background(), "p/"); err != nil || len(l) != 1 || l[0].Key != "p/b" {
		t.Fatalf("list: %+v %v", l, err)
	}
}
