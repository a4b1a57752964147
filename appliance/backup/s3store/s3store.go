// Package s3store keeps the backup store's objects in an S3-compatible bucket, compressed (zstd) and
// encrypted client-side (XChaCha20-Poly1305 in a chunked STREAM construction, see format.go): the bucket
// holder reads nothing, and an object changed, truncated or swapped in the bucket fails to read with an
// error naming it (ErrCorrupt) rather than yielding different bytes.
//
// The object "a/b" is stored as Prefix+"a/b". Sizes (Put's result, Stat and List) are plaintext sizes,
// as the backup.Store needs them (it writes restores' tar headers from List): each object's trailer
// carries its size, sealed, and Stat reads it with a ranged GET of the object's last bytes. List lists
// the bucket and reads the trailer of each object it has not seen (4×Parallel at a time; Put, Stat and
// List fill a cache of sizes by key and ETag), so a first List of many objects costs a request per object.
//
// Put streams: the stored form is produced while it is uploaded. An object that fits in one part
// (PartSize) is one PUT; a larger one is a multipart upload the store runs part by part (one part held in
// memory), which S3 makes visible only once completed: an upload that failed or was killed is never an
// object, and the backup store's manifests are written last. With UploadState, a failed upload is not
// aborted: a state record (upload ID, nonce prefix, each part's SHA-256 and ETag) lets a later Put of the
// same key resume it, sending only the parts the server lacks, as long as the object seals to the same
// bytes under the recorded nonce prefix; other content starts a new upload under a new nonce prefix
// (never other plaintext under nonces already used: upload.go says why). SweepUploads (run hourly by the
// appliance) aborts the incomplete uploads under Prefix nobody will resume (unrecorded ones older than
// AbandonAfter, recorded ones not resumed for a week), and DeleteAll of a prefix aborts those under it.
// Without UploadState, a failed upload is aborted; one whose abort failed waits for a sweep, DeleteAll or
// a bucket lifecycle rule (AbortIncompleteMultipartUpload).
//
// Bucket implements backup.Stager (stages are local directories under Spool, committed by uploading
// their files) but not backup.WALTransport: PostgreSQL's archive_command cannot upload to a bucket
// itself, so the appliance has to receive the WAL and Put it (issue 27's next step).
package s3store

import (
	"bytes"
	"context"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/theappliance/appliance/appliance/backup"
)

// Config says where the bucket is and how to reach it.
type Config struct {
	Endpoint  string // host[:port] of the S3 API; "" is s3.amazonaws.com
	Region    string // "" lets the client ask the bucket
	Bucket    string
	Prefix    string // put before every key ("" or ending in "/"; a "/" is added when missing)
	PathStyle bool   // path-style requests (endpoint/bucket/key) instead of virtual-hosted (bucket.endpoint/key)
	PlainHTTP bool   // HTTP instead of HTTPS (a server on loopback)
	// AccessKey and SecretKey: "" reads AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN).
	AccessKey, SecretKey string
	// DataKey seals every object (32 bytes). Losing it loses the objects.
	DataKey []byte
	// Spool is the local directory stages are made in (Stage); "" means no stages.
	Spool string
	// Chown gives a stage to the instances' OS user (nil: nothing to do).
	Chown func(path string) error
	// PartSize of multipart uploads (at least 5 MiB; 0 is 16 MiB): objects up to it are one PUT; at most
	// 10000 parts make an object.
	PartSize uint64
	// UploadState is the local directory where the state of unfinished multipart uploads is kept, for a
	// later Put of the same key to resume them (upload.go); "" means no resuming: a failed upload is
	// aborted. Only one store (one data key) should use it for a bucket and prefix, and only for keys
	// that are put again when a Put failed.
	UploadState string
	// AbandonAfter: SweepUploads aborts the incomplete uploads under Prefix that no state record names
	// once this old (0 is 24 hours; a negative duration, at any age).
	AbandonAfter time.Duration
	// Parallel is how many uploads a Commit runs at once (0 is 4); a List reads 4×Parallel trailers at once.
	Parallel int
	// Transport, when set, carries the requests (e.g. with a private CA).
	Transport http.RoundTripper
}

// Bucket is a backup.Objects in an S3-compatible bucket.
type Bucket struct {
	cfg    Config
	client *minio.Client
	aead   cipher.AEAD

	keyCheck     string // of DataKey, in upload records
	abandonAfter time.Duration

	mu    sync.Mutex
	sizes map[string]sized     // plaintext sizes by key, for the ETag they were read for
	locks map[string]*nameLock // by object name, while a Put of it runs
}

type nameLock struct {
	mu   sync.Mutex
	refs int
}

type sized struct {
	etag string
	size int64
}

var (
	_ backup.Objects = (*Bucket)(nil)
	_ backup.Stager  = (*Bucket)(nil)
)

const (
	defaultPartSize = 16 << 20
	minPartSize     = 5 << 20
	maxCachedSizes  = 1 << 17
)

// New checks the configuration and makes the client; it makes no request (Check does).
func New(cfg Config) (*Bucket, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("s3 store: no bucket")
	}
	if cfg.Endpoint == "" {
		cfg.Endpoint = "s3.amazonaws.com"
	}
	if strings.Contains(cfg.Endpoint, "/") {
		return nil, fmt.Errorf("s3 store: endpoint %q: host[:port] only (no scheme or path; PlainHTTP says http)", cfg.Endpoint)
	}
	if cfg.Prefix != "" && !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	if strings.HasPrefix(cfg.Prefix, "/") || strings.Contains(cfg.Prefix, "//") {
		return nil, fmt.Errorf("s3 store: invalid prefix %q", cfg.Prefix)
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = defaultPartSize
	}
	if cfg.PartSize < minPartSize {
		return nil, fmt.Errorf("s3 store: part size %d is below S3's minimum of 5 MiB", cfg.PartSize)
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 4
	}
	abandon := cfg.AbandonAfter
	switch {
	case abandon == 0:
		abandon = defaultAbandonAfter
	case abandon < 0:
		abandon = 0
	}
	aead, err := newAEAD(cfg.DataKey)
	if err != nil {
		return nil, fmt.Errorf("s3 store: %w", err)
	}
	var creds *credentials.Credentials
	switch {
	case cfg.AccessKey != "" && cfg.SecretKey != "":
		creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, "")
	case cfg.AccessKey == "" && cfg.SecretKey == "":
		if os.Getenv("AWS_ACCESS_KEY_ID") == "" || os.Getenv("AWS_SECRET_ACCESS_KEY") == "" {
			return nil, errors.New("s3 store: no credentials (give an access key and secret, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
		}
		creds = credentials.NewEnvAWS()
	default:
		return nil, errors.New("s3 store: an access key without a secret, or a secret without an access key")
	}
	lookup := minio.BucketLookupDNS
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{Creds: creds, Secure: !cfg.PlainHTTP, Region: cfg.Region,
		BucketLookup: lookup, Transport: cfg.Transport})
	if err != nil {
		return nil, fmt.Errorf("s3 store: %w", err)
	}
	return &Bucket{cfg: cfg, client: client, aead: aead, keyCheck: keyCheck(cfg.DataKey), abandonAfter: abandon,
		sizes: map[string]sized{}, locks: map[string]*nameLock{}}, nil
}

// String names the bucket for messages: s3://bucket/prefix at endpoint.
func (b *Bucket) String() string { return b.URL() + " at " + b.cfg.Endpoint }

// URL is the bucket and prefix as s3://bucket/prefix/ (s3://bucket/ without a prefix): what a tenant may
// be told of where the backups live, without the endpoint.
func (b *Bucket) URL() string { return "s3://" + b.cfg.Bucket + "/" + b.cfg.Prefix }

// Errors Check (and the other methods, wrapped) name; errors.Is tells them apart.
var (
	ErrNoSuchBucket = errors.New("the bucket does not exist")
	ErrAccessDenied = errors.New("access denied (check the access key and secret, and the bucket's policy)")
	ErrUnreachable  = errors.New("the endpoint is unreachable")
)

// explain adds what an S3 error means to it.
func explain(err error) error {
	if err == nil {
		return nil
	}
	resp := minio.ToErrorResponse(err)
	switch {
	case resp.Code == minio.NoSuchBucket:
		return fmt.Errorf("%w: %w", ErrNoSuchBucket, err)
	case resp.StatusCode == http.StatusForbidden || slices.Contains([]string{minio.AccessDenied, "InvalidAccessKeyId",
		"SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "InvalidSecurity",
		"XAdminUserNotFound", // versitygw's answer (404) to an unknown access key
	}, resp.Code):
		return fmt.Errorf("%w: %w (%s)", ErrAccessDenied, err, resp.Code)
	}
	var nerr net.Error
	if errors.As(err, &nerr) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	return err
}

func notFound(err error) bool {
	code := minio.ToErrorResponse(err).Code
	return code == minio.NoSuchKey || code == "NotFound"
}

func (b *Bucket) name(key string) string { return b.cfg.Prefix + key }

// Check tells whether the bucket is usable: it exists, and the credentials may put, get and delete an
// object (a probe under Prefix+".check/", which no key can name). Its errors name the bucket and wrap
// ErrNoSuchBucket, ErrAccessDenied or ErrUnreachable where that is the problem.
func (b *Bucket) Check(ctx context.Context) error {
	fail := func(what string, err error) error {
		return fmt.Errorf("backup store %s: %s: %w", b, what, explain(err))
	}
	// A listing rather than HEAD on the bucket: its error has a body that tells a missing bucket from
	// refused credentials.
	if err := b.listOne(ctx); err != nil {
		return fail("list the bucket", err)
	}
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return err
	}
	probe := ".check/" + hex.EncodeToString(r[:])
	want := []byte("probe " + probe)
	if _, err := b.put(ctx, probe, bytes.NewReader(want)); err != nil {
		return fail("put a probe object", err)
	}
	got, err := func() ([]byte, error) {
		rc, err := b.get(ctx, probe)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}()
	if err == nil && !bytes.Equal(got, want) {
		err = errors.New("it came back different")
	}
	if err != nil {
		b.client.RemoveObject(context.WithoutCancel(ctx), b.cfg.Bucket, b.name(probe), minio.RemoveObjectOptions{})
		return fail("get the probe object", err)
	}
	if err := b.client.RemoveObject(ctx, b.cfg.Bucket, b.name(probe), minio.RemoveObjectOptions{}); err != nil {
		return fail("delete the probe object", err)
	}
	return nil
}

func (b *Bucket) listOne(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for o := range b.client.ListObjects(ctx, b.cfg.Bucket, minio.ListObjectsOptions{Prefix: b.cfg.Prefix, MaxKeys: 1}) {
		return o.Err
	}
	return nil
}

// Put implements backup.Objects.
func (b *Bucket) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	if err := backup.CheckKey(key); err != nil {
		return 0, err
	}
	n, err := b.put(ctx, key, r)
	if err != nil {
		return 0, fmt.Errorf("put %s: %w", key, explain(err))
	}
	return n, nil
}

// put seals what r yields while uploading it: one PUT when it fits in a part, a multipart upload
// otherwise, resuming the recorded upload of the key if there is one (upload.go).
func (b *Bucket) put(ctx context.Context, key string, r io.Reader) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	name := b.name(key)
	defer b.lock(name)()
	rec, held, err := b.resumable(ctx, name)
	if err != nil {
		return 0, err
	}
	var h []byte
	if rec != nil {
		h, err = rec.header()
	} else {
		h, err = newHeader()
	}
	if err != nil {
		return 0, err
	}
	cr := &ctxReader{ctx: ctx, r: r}
	var size int64
	s := startSeal(func(w io.Writer) error {
		n, err := seal(w, cr, b.aead, key, h)
		size = n
		return err
	}, h)
	etag, err := b.upload(ctx, key, name, s, rec, held)
	serr := s.stop()
	switch {
	case cr.err != nil:
		return 0, cr.err // what the reader said rather than the upload's echo of it
	case err != nil:
		return 0, err
	case serr != nil:
		return 0, serr
	}
	b.remember(key, etag, size)
	return size, nil
}

// putOptions: the payload is not hashed into the request's signature (UNSIGNED-PAYLOAD; over plain HTTP
// it would otherwise be signed chunk by chunk, which halves the throughput): it is sealed, so a change in
// transit fails at read as any other (and HTTPS guards it on the way; a multipart upload's parts carry their SHA-256, upload.go).
func putOptions(partSize uint64) minio.PutObjectOptions {
	return minio.PutObjectOptions{ContentType: "application/octet-stream", PartSize: partSize, DisableContentSha256: true}
}

// ctxReader ends with the context, and keeps the error that ended it (not io.EOF).
type ctxReader struct {
	ctx context.Context
	r   io.Reader
	err error
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		c.err = err
		return 0, err
	}
	n, err := c.r.Read(p)
	if err != nil && err != io.EOF {
		c.err = err
	}
	return n, err
}

func (b *Bucket) remember(key, etag string, size int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.sizes) >= maxCachedSizes {
		clear(b.sizes)
	}
	b.sizes[key] = sized{etag: etag, size: size}
}

func (b *Bucket) cached(key, etag string) (int64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sizes[key]
	return s.size, ok && etag != "" && s.etag == etag
}

func (b *Bucket) forget(keys ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range keys {
		delete(b.sizes, k)
	}
}

// Get implements backup.Objects. The reader fails (ErrCorrupt, naming the object) at the first chunk that
// does not authenticate, and at the end when the object was cut.
func (b *Bucket) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := backup.CheckKey(key); err != nil {
		return nil, err
	}
	return b.get(ctx, key)
}

func (b *Bucket) get(ctx context.Context, key string) (io.ReadCloser, error) {
	body, _, _, err := minio.Core{Client: b.client}.GetObject(ctx, b.cfg.Bucket, b.name(key), minio.GetObjectOptions{})
	if notFound(err) {
		return nil, fmt.Errorf("get %s: %w", key, backup.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, explain(err))
	}
	return open(body, b.aead, key), nil
}

// Stat implements backup.Objects: the size comes from the object's trailer (one ranged GET).
func (b *Bucket) Stat(ctx context.Context, key string) (backup.Info, error) {
	if err := backup.CheckKey(key); err != nil {
		return backup.Info{}, err
	}
	in, _, err := b.stat(ctx, key)
	return in, err
}

func (b *Bucket) stat(ctx context.Context, key string) (backup.Info, string, error) {
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(0, -trailerSize); err != nil {
		return backup.Info{}, "", err
	}
	body, oi, h, err := minio.Core{Client: b.client}.GetObject(ctx, b.cfg.Bucket, b.name(key), opts)
	if notFound(err) {
		return backup.Info{}, "", fmt.Errorf("stat %s: %w", key, backup.ErrNotExist)
	}
	if err != nil {
		return backup.Info{}, "", fmt.Errorf("stat %s: %w", key, explain(err))
	}
	defer body.Close()
	trailer, err := io.ReadAll(io.LimitReader(body, trailerSize+1))
	if err != nil {
		return backup.Info{}, "", fmt.Errorf("stat %s: %w", key, explain(err))
	}
	stored, err := totalSize(h.Get("Content-Range"), int64(len(trailer)))
	if err != nil {
		return backup.Info{}, "", fmt.Errorf("stat %s: %w", key, err)
	}
	size, err := openTrailer(b.aead, key, trailer, stored)
	if err != nil {
		return backup.Info{}, "", fmt.Errorf("stat %s: %w", key, err)
	}
	b.remember(key, oi.ETag, size)
	return backup.Info{Key: key, Size: size, ModTime: oi.LastModified}, oi.ETag, nil
}

// totalSize reads the object's size from a Content-Range ("bytes 10-57/58"); without one the whole object
// came (it is shorter than the range asked for).
func totalSize(cr string, got int64) (int64, error) {
	if cr == "" {
		return got, nil
	}
	_, total, ok := strings.Cut(cr, "/")
	n, err := strconv.ParseInt(total, 10, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("an unreadable Content-Range %q", cr)
	}
	return n, nil
}

// List implements backup.Objects: keys under Prefix that CheckKey refuses (a Check's probe, what others
// put in the bucket) are left out.
func (b *Bucket) List(ctx context.Context, prefix string) ([]backup.Info, error) {
	if err := backup.CheckPrefix(prefix); err != nil {
		return nil, err
	}
	objs, err := b.list(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", prefix, explain(err))
	}
	out := []backup.Info{}
	var todo []int
	for _, o := range objs {
		key := strings.TrimPrefix(o.Key, b.cfg.Prefix)
		if backup.CheckKey(key) != nil {
			continue
		}
		size, ok := b.cached(key, o.ETag)
		if !ok {
			todo = append(todo, len(out))
		}
		out = append(out, backup.Info{Key: key, Size: size, ModTime: o.LastModified})
	}
	gone := make([]bool, len(out))
	err = b.each(ctx, 4*b.cfg.Parallel, len(todo), func(ctx context.Context, i int) error {
		in, _, err := b.stat(ctx, out[todo[i]].Key)
		if errors.Is(err, backup.ErrNotExist) { // deleted since the listing
			gone[todo[i]] = true
			return nil
		}
		if err != nil {
			return err
		}
		out[todo[i]].Size = in.Size
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", prefix, err)
	}
	kept := out[:0]
	for i, in := range out {
		if !gone[i] {
			kept = append(kept, in)
		}
	}
	out = kept
	slices.SortFunc(out, func(a, b backup.Info) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// list lists every object whose stored name starts with Prefix+prefix.
func (b *Bucket) list(ctx context.Context, prefix string) ([]minio.ObjectInfo, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out []minio.ObjectInfo
	for o := range b.client.ListObjects(ctx, b.cfg.Bucket, minio.ListObjectsOptions{Prefix: b.name(prefix), Recursive: true}) {
		if o.Err != nil {
			return nil, o.Err
		}
		if strings.HasSuffix(o.Key, "/") { // a directory marker some servers show
			continue
		}
		out = append(out, o)
	}
	return out, nil
}

// each runs f for 0..n-1, parallel at a time, and returns the first error (the others stop).
func (b *Bucket) each(ctx context.Context, parallel, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range min(n, parallel) {
		wg.Go(func() {
			for i := range next {
				if err := f(ctx, i); err != nil {
					errs <- err
					cancel()
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	if err, ok := <-errs; ok {
		return err
	}
	return ctx.Err()
}

// Delete implements backup.Objects (one request per thousand keys).
func (b *Bucket) Delete(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if err := backup.CheckKey(k); err != nil {
			return err
		}
	}
	b.forget(keys...)
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = b.name(k)
	}
	if err := b.remove(ctx, names); err != nil {
		return fmt.Errorf("delete: %w", explain(err))
	}
	return nil
}

func (b *Bucket) remove(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return nil
	}
	ch := make(chan minio.ObjectInfo, len(names))
	for _, n := range names {
		ch <- minio.ObjectInfo{Key: n}
	}
	close(ch)
	for e := range b.client.RemoveObjects(ctx, b.cfg.Bucket, ch, minio.RemoveObjectsOptions{}) {
		if e.Err != nil && !notFound(e.Err) {
			return fmt.Errorf("%s: %w", strings.TrimPrefix(e.ObjectName, b.cfg.Prefix), e.Err)
		}
	}
	return nil
}

// DeleteAll implements backup.Objects: the objects under the prefix (those List leaves out too), the
// incomplete multipart uploads under it, and, for a prefix ending in "/", its stages and those below it.
func (b *Bucket) DeleteAll(ctx context.Context, prefix string) (bool, error) {
	if prefix == "" {
		return false, errors.New("delete all: empty prefix")
	}
	if err := backup.CheckPrefix(prefix); err != nil {
		return false, err
	}
	fail := func(err error) error { return fmt.Errorf("delete all of %q: %w", prefix, explain(err)) }
	objs, err := b.list(ctx, prefix)
	if err != nil {
		return false, fail(err)
	}
	names := make([]string, len(objs))
	for i, o := range objs {
		names[i] = o.Key
		b.forget(strings.TrimPrefix(o.Key, b.cfg.Prefix))
	}
	if err := b.remove(ctx, names); err != nil {
		return true, fail(err)
	}
	found := len(names) > 0
	if up, err := b.abortUnder(ctx, prefix); err != nil {
		return found || up, fail(err)
	} else if up {
		found = true
	}
	if dir, ok := strings.CutSuffix(prefix, "/"); ok && b.cfg.Spool != "" {
		for _, p := range []string{b.stagePath(dir), b.stagesPath(dir)} {
			if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
				continue
			} else if err != nil {
				return found, fail(err)
			}
			found = true
			if err := os.RemoveAll(p); err != nil {
				return found, fail(err)
			}
		}
	}
	return found, nil
}

// stagesPath is the local directory under which the stages of prefixes below the directory prefix dir
// ("a/b") live; stagePath is the stage of dir itself: <Spool>/stages/a/b.stage.
func (b *Bucket) stagesPath(dir string) string {
	return filepath.Join(b.cfg.Spool, "stages", filepath.FromSlash(dir))
}

func (b *Bucket) stagePath(dir string) string { return b.stagesPath(dir) + ".stage" }

func dirPrefix(prefix string) (string, error) {
	dir, ok := strings.CutSuffix(prefix, "/")
	if !ok || backup.CheckKey(dir) != nil {
		return "", fmt.Errorf("invalid directory prefix %q (a key followed by /)", prefix)
	}
	return dir, nil
}

// Stage implements backup.Stager: <Spool>/stages/<prefix without its "/">.stage, emptied, mode 0700 and
// given to the instances' OS user; the directories above it are mode 0711.
func (b *Bucket) Stage(_ context.Context, prefix string) (string, error) {
	dir, err := dirPrefix(prefix)
	if err != nil {
		return "", err
	}
	if b.cfg.Spool == "" {
		return "", errors.New("stage: this s3 store has no local spool directory")
	}
	st := b.stagePath(dir)
	if err := mkdir(b.cfg.Spool, 0o711); err != nil {
		return "", fmt.Errorf("stage %q: %w", prefix, err)
	}
	p := b.cfg.Spool
	for _, seg := range append([]string{"stages"}, strings.Split(path.Dir(dir), "/")...) {
		if seg == "." {
			continue
		}
		p = filepath.Join(p, seg)
		if err := mkdir(p, 0o711); err != nil {
			return "", fmt.Errorf("stage %q: %w", prefix, err)
		}
	}
	if err := os.RemoveAll(st); err != nil {
		return "", fmt.Errorf("stage %q: %w", prefix, err)
	}
	if err := os.Mkdir(st, 0o700); err != nil {
		return "", fmt.Errorf("stage %q: %w", prefix, err)
	}
	if b.cfg.Chown != nil {
		if err := b.cfg.Chown(st); err != nil {
			return "", fmt.Errorf("stage %q: %w", prefix, err)
		}
	}
	return st, nil
}

func mkdir(p string, mode os.FileMode) error {
	if err := os.MkdirAll(p, mode); err != nil {
		return err
	}
	return os.Chmod(p, mode) // the umask may have taken bits away
}

// Commit implements backup.Stager: every regular file below the stage is put as prefix+<its relative
// path> (Parallel at a time), then the stage is removed. Only regular files and directories may be in
// the stage. Objects under the prefix that the stage does not have stay: remove them first (DeleteAll).
// When Commit fails, the stage stays for another Commit or Unstage.
func (b *Bucket) Commit(ctx context.Context, prefix string) error {
	dir, err := dirPrefix(prefix)
	if err != nil {
		return err
	}
	st := b.stagePath(dir)
	var files []string
	err = filepath.WalkDir(st, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			return nil
		}
		if !e.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", p)
		}
		rel, err := filepath.Rel(st, p)
		if err != nil {
			return err
		}
		if backup.CheckKey(filepath.ToSlash(rel)) != nil {
			return fmt.Errorf("%s: a name that cannot be an object key", p)
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return fmt.Errorf("commit %q: %w", prefix, err)
	}
	err = b.each(ctx, b.cfg.Parallel, len(files), func(ctx context.Context, i int) error {
		f, err := os.Open(filepath.Join(st, filepath.FromSlash(files[i])))
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = b.Put(ctx, prefix+files[i], f)
		return err
	})
	if err != nil {
		return fmt.Errorf("commit %q: %w", prefix, err)
	}
	return os.RemoveAll(st)
}

// Unstage implements backup.Stager.
func (b *Bucket) Unstage(_ context.Context, prefix string) error {
	dir, err := dirPrefix(prefix)
	if err != nil {
		return err
	}
	if b.cfg.Spool == "" {
		return nil
	}
	return os.RemoveAll(b.stagePath(dir))
}
