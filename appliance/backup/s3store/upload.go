package s3store

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
)

// Resumable multipart uploads.
//
// An object whose stored form is larger than PartSize is a multipart upload that this file runs itself, one
// part after the other (minio-go's Core calls; the next part is sealed and hashed while one is sent). With
// Config.UploadState set, each upload has a state record there (<UploadState>/<hash of bucket and
// name>.upload, JSON lines): its upload ID, the nonce prefix of its header, the part size, a check of the
// data key, then one line before each part is sent (its number, size and SHA-256) and one once the server
// confirmed it (with its ETag). Each line is synced before what it records happens. A failed upload (the
// bucket unreachable, the context ended, the reader failed, the process killed) is not aborted: its record
// stays, and a later Put of the same key resumes it.
//
// A resuming Put first asks the server for the upload's parts (ListObjectParts): an upload the server no
// longer has is forgotten and the Put starts over. Otherwise it seals the source again under the recorded
// nonce prefix (the stored form is a function of the data key, the header and the plaintext) and compares
// each part with the record: a part whose SHA-256 and size are the recorded ones and that the server holds
// with the recorded ETag is not sent again; one the server lacks is sent again (the same bytes). At the
// first part that differs (another content under the same key), the upload is aborted and the object is
// sealed again under a NEW nonce prefix and uploaded whole. It must not go on under the old prefix: the
// bytes already sent (the parts recorded, including one whose answer never came) are XChaCha20 keystream
// XORed with the old plaintext, so sending other plaintext under the same nonces would give the bucket's
// holder the XOR of the two plaintexts (and Poly1305 keys used twice would let them forge chunks). Only a
// stored form that agrees byte for byte with everything ever sent under a prefix may continue under it.
// The source is read once: the parts compared are kept in a temporary file beside the records until no
// recorded part is left to compare, and a restart re-seals the stored form read so far plus the rest
// (reseal: the same compressed stream under the new prefix) rather than reading the source again.
//
// Nothing of an unfinished upload is visible as an object: only CompleteMultipartUpload makes the object,
// after every part was sent and the sealer ended without an error. SweepUploads aborts the incomplete
// uploads under Prefix that nobody will resume: those without a record once AbandonAfter old (an
// upload a killed process had not recorded yet, or another store's), and recorded ones not resumed for
// resumeWindow; and it removes records whose uploads the server no longer has. DeleteAll of a prefix aborts
// the uploads under it and removes their records. Without UploadState, a failed upload is aborted (when
// the server can be told).

const (
	defaultAbandonAfter = 24 * time.Hour
	// resumeWindow is how long a recorded upload waits for a Put of its key to resume it before
	// SweepUploads aborts it (a key nobody puts again: an export that failed, a removed stage).
	resumeWindow = 7 * 24 * time.Hour
	recordSuffix = ".upload"
)

// partRecord is a part of an upload: sent (ETag empty: no answer yet) or confirmed.
type partRecord struct {
	N    int    `json:"n"`
	Size int    `json:"size"`
	Hash string `json:"sha256"` // hex, of the part's stored bytes
	ETag string `json:"etag,omitempty"`
}

// recordHead is a record's first line.
type recordHead struct {
	Bucket   string `json:"bucket"`
	Name     string `json:"name"` // the object's name in the bucket (Prefix + key)
	UploadID string `json:"upload_id"`
	Nonce    string `json:"nonce_prefix"` // hex
	PartSize uint64 `json:"part_size"`
	KeyCheck string `json:"key_check"` // keyCheck of the data key the parts are sealed with
}

// recordLine is each line after the first.
type recordLine struct {
	Sending *partRecord `json:"sending,omitempty"`
	Part    *partRecord `json:"part,omitempty"`
}

// uploadRecord is an upload's state; path "" for a store without UploadState (kept in memory only).
type uploadRecord struct {
	recordHead
	parts   []partRecord // confirmed, numbered 1..len(parts)
	sending *partRecord  // sent after them, unconfirmed
	path    string
	f       *os.File // open for appending while the upload runs
	modTime time.Time
}

// known is what the record says of part n, or nil.
func (r *uploadRecord) known(n int) *partRecord {
	if n <= len(r.parts) {
		return &r.parts[n-1]
	}
	if r.sending != nil && r.sending.N == n {
		return r.sending
	}
	return nil
}

// lastKnown is the number of the last part the record names.
func (r *uploadRecord) lastKnown() int {
	if r.sending != nil && r.sending.N > len(r.parts) {
		return r.sending.N
	}
	return len(r.parts)
}

func (r *uploadRecord) header() ([]byte, error) {
	p, err := hex.DecodeString(r.Nonce)
	if err != nil || len(p) != prefixSize {
		return nil, fmt.Errorf("upload record %s: an invalid nonce prefix", r.path)
	}
	h := make([]byte, headerSize)
	copy(h, magic)
	h[4] = version
	copy(h[8:], p)
	return h, nil
}

func (r *uploadRecord) apply(l recordLine) {
	switch {
	case l.Part != nil && l.Part.N >= 1 && l.Part.N <= len(r.parts): // sent again (the server had lost it)
		r.parts[l.Part.N-1] = *l.Part
	case l.Part != nil && l.Part.N == len(r.parts)+1:
		r.parts = append(r.parts, *l.Part)
		if r.sending != nil && r.sending.N <= l.Part.N {
			r.sending = nil
		}
	case l.Sending != nil && l.Sending.N == len(r.parts)+1:
		r.sending = l.Sending
	}
}

// add records l (synced to disk before it returns).
func (r *uploadRecord) add(l recordLine) error {
	r.apply(l)
	if r.f == nil {
		return nil
	}
	data, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if _, err := r.f.Write(append(data, '\n')); err != nil {
		return fmt.Errorf("upload record: %w", err)
	}
	if err := r.f.Sync(); err != nil {
		return fmt.Errorf("upload record: %w", err)
	}
	return nil
}

func (r *uploadRecord) close() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}

// write writes the whole record anew (a new file renamed over the old one) and keeps it open for
// appending.
func (r *uploadRecord) write() error {
	r.close()
	if r.path == "" {
		return nil
	}
	dir := filepath.Dir(r.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("upload record: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.Encode(r.recordHead)
	for i := range r.parts {
		enc.Encode(recordLine{Part: &r.parts[i]})
	}
	if r.sending != nil {
		enc.Encode(recordLine{Sending: r.sending})
	}
	tmp, err := os.CreateTemp(dir, ".record-*")
	if err != nil {
		return fmt.Errorf("upload record: %w", err)
	}
	_, err = tmp.Write(buf.Bytes())
	if err == nil {
		err = tmp.Sync()
	}
	if err == nil {
		err = os.Rename(tmp.Name(), r.path)
	}
	if err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("upload record: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	r.f = tmp // the same file, now at r.path, positioned at its end
	return nil
}

// readRecord reads the record at path; a torn last line (a process killed while writing it) is left out.
func readRecord(path string) (*uploadRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(f)
	r := &uploadRecord{path: path, modTime: fi.ModTime()}
	if !sc.Scan() {
		return nil, fmt.Errorf("upload record %s: empty", path)
	}
	if err := json.Unmarshal(sc.Bytes(), &r.recordHead); err != nil || r.UploadID == "" || r.Name == "" {
		return nil, fmt.Errorf("upload record %s: an unreadable first line", path)
	}
	for sc.Scan() {
		var l recordLine
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			break
		}
		r.apply(l)
	}
	return r, nil
}

// keyCheck tells data keys apart in records without saying anything of them.
func keyCheck(dataKey []byte) string {
	m := hmac.New(sha256.New, dataKey)
	m.Write([]byte("appliance s3store upload record"))
	return hex.EncodeToString(m.Sum(nil)[:8])
}

func (b *Bucket) recordPath(name string) string {
	sum := sha256.Sum256([]byte(b.cfg.Bucket + "\x00" + name))
	return filepath.Join(b.cfg.UploadState, hex.EncodeToString(sum[:16])+recordSuffix)
}

// removeRecord removes r's file if it is still r's upload's record.
func (b *Bucket) removeRecord(r *uploadRecord) {
	r.close()
	if r.path == "" {
		return
	}
	if cur, err := readRecord(r.path); err == nil && cur.UploadID != r.UploadID {
		return
	}
	os.Remove(r.path)
}

// records reads the records of this bucket whose objects' names start with Prefix+prefix, by name.
func (b *Bucket) records(prefix string) (map[string]*uploadRecord, error) {
	out := map[string]*uploadRecord{}
	if b.cfg.UploadState == "" {
		return out, nil
	}
	ents, err := os.ReadDir(b.cfg.UploadState)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), recordSuffix) {
			// A temporary file (.record-*, .compared-*) a killed process left.
			if fi, err := e.Info(); err == nil && strings.HasPrefix(e.Name(), ".") && time.Since(fi.ModTime()) > defaultAbandonAfter {
				os.Remove(filepath.Join(b.cfg.UploadState, e.Name()))
			}
			continue
		}
		p := filepath.Join(b.cfg.UploadState, e.Name())
		r, err := readRecord(p)
		if err != nil {
			os.Remove(p) // no upload ID to resume: its upload is an orphan for SweepUploads
			continue
		}
		if r.Bucket == b.cfg.Bucket && strings.HasPrefix(r.Name, b.name(prefix)) && p == b.recordPath(r.Name) {
			out[r.Name] = r
		}
	}
	return out, nil
}

// lock serializes the Puts of an object in this store and marks it busy for SweepUploads.
func (b *Bucket) lock(name string) (unlock func()) {
	b.mu.Lock()
	l := b.locks[name]
	if l == nil {
		l = &nameLock{}
		b.locks[name] = l
	}
	l.refs++
	b.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		b.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(b.locks, name)
		}
		b.mu.Unlock()
	}
}

func (b *Bucket) busy(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.locks[name] != nil
}

func trimETag(s string) string { return strings.Trim(s, "\"") }

func noSuchUpload(err error) bool { return minio.ToErrorResponse(err).Code == minio.NoSuchUpload }

// abort aborts an upload; one the server no longer has is not an error.
func (b *Bucket) abort(ctx context.Context, name, uploadID string) error {
	err := minio.Core{Client: b.client}.AbortMultipartUpload(ctx, b.cfg.Bucket, name, uploadID)
	if err != nil && !noSuchUpload(err) && !notFound(err) {
		return err
	}
	return nil
}

// dropUpload aborts r's upload (as well as it can: one that stays is SweepUploads') and removes its record.
func (b *Bucket) dropUpload(ctx context.Context, r *uploadRecord) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	b.abort(ctx, r.Name, r.UploadID)
	b.removeRecord(r)
}

// resumable is the recorded upload of name that a Put may resume, with the parts the server holds of it;
// nil when there is none (a record the server's upload is gone from, or made for another data key or part
// size, is dropped).
func (b *Bucket) resumable(ctx context.Context, name string) (*uploadRecord, map[int]minio.ObjectPart, error) {
	if b.cfg.UploadState == "" {
		return nil, nil, nil
	}
	r, err := readRecord(b.recordPath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		os.Remove(b.recordPath(name))
		return nil, nil, nil
	}
	if _, herr := r.header(); herr != nil || r.Bucket != b.cfg.Bucket || r.Name != name || r.KeyCheck != b.keyCheck || r.PartSize != b.cfg.PartSize {
		b.dropUpload(ctx, r)
		return nil, nil, nil
	}
	parts := map[int]minio.ObjectPart{}
	core := minio.Core{Client: b.client}
	for marker := 0; ; {
		res, err := core.ListObjectParts(ctx, b.cfg.Bucket, name, r.UploadID, marker, 1000)
		if noSuchUpload(err) || notFound(err) {
			b.removeRecord(r)
			return nil, nil, nil
		}
		if err != nil {
			return nil, nil, err
		}
		for _, p := range res.ObjectParts {
			parts[p.PartNumber] = p
		}
		if !res.IsTruncated || res.NextPartNumberMarker <= marker {
			break
		}
		marker = res.NextPartNumberMarker
	}
	if err := r.write(); err != nil { // compacted, and open for the lines to come
		return nil, nil, err
	}
	return r, parts, nil
}

// sealed is a stored form being produced: read r; done says how the producer ended.
type sealed struct {
	r    *io.PipeReader
	h    []byte
	done chan error
	err  error
	got  bool
}

func startSeal(f func(w io.Writer) error, h []byte) *sealed {
	pr, pw := io.Pipe()
	s := &sealed{r: pr, h: h, done: make(chan error, 1)}
	go func() {
		err := f(pw)
		pw.CloseWithError(err)
		s.done <- err
	}()
	return s
}

// wait is how the producer ended (once r gave io.EOF, it has).
func (s *sealed) wait() error {
	if !s.got {
		s.err, s.got = <-s.done, true
	}
	return s.err
}

// stop makes a producer still writing return, and waits for it.
func (s *sealed) stop() error {
	s.r.CloseWithError(errors.New("the upload ended"))
	return s.wait()
}

// part is a part of a stored form read by a partReader: data, the SHA-256 of it, whether the stored form
// ends with it, or the error that ended the reading.
type part struct {
	data []byte
	sum  [sha256.Size]byte
	last bool
	err  error
}

// partReader cuts a stored form in parts of PartSize, reading (and hashing) the next part while the one
// before is sent: two part buffers in all. The first part's buffer grows with what comes, so that a small
// object costs no more than its size.
type partReader struct {
	out  chan *part
	free chan []byte
	done chan struct{}
	stop sync.Once
}

func (b *Bucket) readParts(r io.Reader) *partReader {
	pr := &partReader{out: make(chan *part), free: make(chan []byte, 2), done: make(chan struct{})}
	go func() {
		br := bufio.NewReaderSize(r, 64<<10)
		size, bufs := int(b.cfg.PartSize), 0
		for {
			var buf []byte
			select {
			case buf = <-pr.free:
			default:
				if bufs < 2 {
					bufs++
					break
				}
				select {
				case buf = <-pr.free:
				case <-pr.done:
					return
				}
			}
			p := &part{}
			p.data, p.last, p.err = readPart(br, buf, size)
			if p.err == nil {
				p.sum = sha256.Sum256(p.data)
			}
			select {
			case pr.out <- p:
			case <-pr.done:
				return
			}
			if p.last || p.err != nil {
				return
			}
		}
	}()
	return pr
}

// next is the next part (not to be called after the last one or an error).
func (pr *partReader) next() *part { return <-pr.out }

// release gives a part's buffer back for a later part.
func (pr *partReader) release(p *part) {
	select {
	case pr.free <- p.data[:0]:
	default:
	}
}

// close stops the reading.
func (pr *partReader) close() { pr.stop.Do(func() { close(pr.done) }) }

// rest reads the parts after the last one next returned, as one stream.
func (pr *partReader) rest() io.Reader { return &restReader{pr: pr} }

type restReader struct {
	pr  *partReader
	cur *part
	off int
}

func (r *restReader) Read(b []byte) (int, error) {
	for r.cur == nil || r.off == len(r.cur.data) {
		if r.cur != nil {
			if r.cur.last {
				return 0, io.EOF
			}
			r.pr.release(r.cur)
		}
		r.cur, r.off = r.pr.next(), 0
		if r.cur.err != nil {
			return 0, r.cur.err
		}
	}
	n := copy(b, r.cur.data[r.off:])
	r.off += n
	return n, nil
}

// readPart reads up to size bytes into buf (grown as they come) and tells whether the stored form ends
// with them. Only br's io.EOF is the end: an error the producer ended with is an error.
func readPart(br *bufio.Reader, buf []byte, size int) ([]byte, bool, error) {
	buf = buf[:0]
	for len(buf) < size {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(max(cap(buf), 256<<10), size-len(buf)))
		}
		n, err := br.Read(buf[len(buf):min(cap(buf), size)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, true, nil
		}
		if err != nil {
			return buf, false, err
		}
	}
	if _, err := br.Peek(1); err == io.EOF {
		return buf, true, nil
	} else if err != nil {
		return buf, false, err
	}
	return buf, false, nil
}

// upload stores s (the stored form of key, under the header s.h) as the object name: one PUT when it fits
// in a part, else a multipart upload, resuming rec (s.h is then rec's header) whose parts the server holds
// are held. It returns the object's ETag.
func (b *Bucket) upload(ctx context.Context, key, name string, s *sealed, rec *uploadRecord, held map[int]minio.ObjectPart) (string, error) {
	pr := b.readParts(s.r)
	defer pr.close()
	first := pr.next()
	if first.err != nil {
		return "", first.err
	}
	if !first.last {
		return b.multipart(ctx, key, name, s, pr, first, rec, held)
	}
	if err := s.wait(); err != nil {
		return "", err
	}
	body := first.data
	if rec != nil {
		// Smaller than the upload recorded under this name, so not its bytes: not under its nonce prefix.
		b.dropUpload(ctx, rec)
		h, err := newHeader()
		if err != nil {
			return "", err
		}
		var out bytes.Buffer
		if _, err := reseal(&out, bytes.NewReader(body), b.aead, key, h); err != nil {
			return "", err
		}
		body = out.Bytes()
	}
	info, err := b.client.PutObject(ctx, b.cfg.Bucket, name, bytes.NewReader(body), int64(len(body)), putOptions(b.cfg.PartSize))
	return info.ETag, err
}

// multipart uploads s in parts, the first of which is first, the rest to come from pr.
func (b *Bucket) multipart(ctx context.Context, key, name string, s *sealed, pr *partReader, first *part,
	rec *uploadRecord, held map[int]minio.ObjectPart) (etag string, err error) {
	core := minio.Core{Client: b.client}
	if rec == nil {
		id, err := core.NewMultipartUpload(ctx, b.cfg.Bucket, name, putOptions(b.cfg.PartSize))
		if err != nil {
			return "", err
		}
		rec = &uploadRecord{recordHead: recordHead{Bucket: b.cfg.Bucket, Name: name, UploadID: id, Nonce: hex.EncodeToString(s.h[8:]),
			PartSize: b.cfg.PartSize, KeyCheck: b.keyCheck}}
		if b.cfg.UploadState != "" {
			rec.path = b.recordPath(name)
		}
		if err := rec.write(); err != nil {
			b.dropUpload(ctx, rec)
			return "", err
		}
	}
	defer func() {
		switch {
		case err == nil:
			b.removeRecord(rec)
		case rec.path == "": // nothing to resume from
			b.dropUpload(ctx, rec)
		default:
			rec.close()
		}
	}()
	// The parts compared with the record, kept until no later part may differ from it.
	var compared *os.File
	defer func() {
		if compared != nil {
			compared.Close()
			os.Remove(compared.Name())
		}
	}()
	if rec.lastKnown() > 0 {
		if compared, err = os.CreateTemp(b.cfg.UploadState, ".compared-*"); err != nil {
			return "", err
		}
	}
	for i, p := 1, first; ; i++ {
		if i > 1 {
			if p = pr.next(); p.err != nil {
				return "", p.err
			}
		}
		if p.last {
			if err := s.wait(); err != nil { // the stored form ended whole
				return "", err
			}
		}
		send := true
		if old := rec.known(i); old != nil {
			if old.Size != len(p.data) || old.Hash != hex.EncodeToString(p.sum[:]) {
				// Other bytes than were sent under this nonce prefix: start again under a new one (see
				// the top of this file).
				if _, err := compared.Seek(0, io.SeekStart); err != nil {
					return "", err
				}
				var rest io.Reader = eofReader{}
				if !p.last {
					rest = pr.rest()
				}
				return b.restart(ctx, key, name, rec, io.MultiReader(compared, bytes.NewReader(p.data), rest))
			}
			if _, err := compared.Write(p.data); err != nil {
				return "", err
			}
			if h, ok := held[i]; ok && old.ETag != "" && trimETag(h.ETag) == old.ETag && int(h.Size) == len(p.data) {
				send = false // the server has it
			}
		} else if compared != nil {
			compared.Close()
			os.Remove(compared.Name())
			compared = nil
		}
		if send {
			if err := b.sendPart(ctx, rec, i, p.data, p.sum); err != nil {
				return "", err
			}
		}
		if p.last {
			break
		}
		pr.release(p)
	}
	parts := make([]minio.CompletePart, len(rec.parts))
	for i, p := range rec.parts {
		parts[i] = minio.CompletePart{PartNumber: p.N, ETag: p.ETag}
	}
	info, err := core.CompleteMultipartUpload(ctx, b.cfg.Bucket, name, rec.UploadID, parts, putOptions(b.cfg.PartSize))
	if err != nil {
		return "", err
	}
	return info.ETag, nil
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// sendPart records that part i is about to be sent (before any of its bytes leave), sends it and records
// the server's ETag. The part's SHA-256 is its request's signed payload hash (x-amz-content-sha256),
// which the server checks: the digest the record compares parts by costs nothing more.
func (b *Bucket) sendPart(ctx context.Context, rec *uploadRecord, i int, part []byte, sum [sha256.Size]byte) error {
	p := partRecord{N: i, Size: len(part), Hash: hex.EncodeToString(sum[:])}
	if err := rec.add(recordLine{Sending: &p}); err != nil {
		return err
	}
	got, err := minio.Core{Client: b.client}.PutObjectPart(ctx, b.cfg.Bucket, rec.Name, rec.UploadID, i, bytes.NewReader(part), int64(len(part)),
		// DisableContentSha256: no chunked signing of the body over plain HTTP, the hash given instead.
		minio.PutObjectPartOptions{Sha256Hex: p.Hash, DisableContentSha256: true})
	if err != nil {
		return fmt.Errorf("part %d: %w", i, err)
	}
	p.ETag = trimETag(got.ETag)
	return rec.add(recordLine{Part: &p})
}

// restart aborts rec's upload and uploads old (the whole stored form of key under rec's header, the bytes
// compared so far and the rest) again under a new nonce prefix.
func (b *Bucket) restart(ctx context.Context, key, name string, rec *uploadRecord, old io.Reader) (string, error) {
	b.dropUpload(ctx, rec)
	h, err := newHeader()
	if err != nil {
		return "", err
	}
	s := startSeal(func(w io.Writer) error {
		_, err := reseal(w, old, b.aead, key, h)
		return err
	}, h)
	etag, err := b.upload(ctx, key, name, s, nil, nil)
	if serr := s.stop(); err == nil {
		err = serr
	}
	return etag, err
}

// incompleteUploads lists the incomplete multipart uploads whose objects' names start with Prefix+prefix.
func (b *Bucket) incompleteUploads(ctx context.Context, prefix string) ([]minio.ObjectMultipartInfo, error) {
	core := minio.Core{Client: b.client}
	var out []minio.ObjectMultipartInfo
	keyMarker, idMarker := "", ""
	for {
		res, err := core.ListMultipartUploads(ctx, b.cfg.Bucket, b.name(prefix), keyMarker, idMarker, "", 1000)
		if err != nil {
			return nil, err
		}
		out = append(out, res.Uploads...)
		if !res.IsTruncated || (res.NextKeyMarker == keyMarker && res.NextUploadIDMarker == idMarker) {
			return out, nil
		}
		keyMarker, idMarker = res.NextKeyMarker, res.NextUploadIDMarker
	}
}

// abortUnder aborts the incomplete uploads under Prefix+prefix and removes their records (DeleteAll); it
// tells whether there were any.
func (b *Bucket) abortUnder(ctx context.Context, prefix string) (bool, error) {
	recs, err := b.records(prefix)
	if err != nil {
		return false, err
	}
	ups, err := b.incompleteUploads(ctx, prefix)
	if err != nil {
		return false, err
	}
	for _, u := range ups {
		if err := b.abort(ctx, u.Key, u.UploadID); err != nil {
			return true, err
		}
	}
	for _, r := range recs {
		b.removeRecord(r)
	}
	return len(ups) > 0, nil
}

// SweepUploads aborts the incomplete multipart uploads under Prefix that no Put will resume: those no
// state record names once AbandonAfter old, and those whose record was not resumed for a week; it
// removes the records whose uploads the server no longer has. Uploads of a Put in progress are left
// alone. It returns how many uploads it aborted. A store without UploadState does nothing: the uploads
// it sees may be recorded by a store that has one.
func (b *Bucket) SweepUploads(ctx context.Context) (int, error) {
	if b.cfg.UploadState == "" {
		return 0, nil
	}
	fail := func(err error) error { return fmt.Errorf("sweep the incomplete uploads of %s: %w", b, explain(err)) }
	// The records first: a record made after this reading is of an upload the listing may show, not the
	// other way round (an upload listed without its record is left alone until AbandonAfter old).
	recs, err := b.records("")
	if err != nil {
		return 0, fail(err)
	}
	ups, err := b.incompleteUploads(ctx, "")
	if err != nil {
		return 0, fail(err)
	}
	now := time.Now()
	live := map[string]bool{} // upload IDs of records kept
	aborted := 0
	for _, u := range ups {
		if b.busy(u.Key) {
			continue
		}
		r := recs[u.Key]
		recorded := r != nil && r.UploadID == u.UploadID
		if recorded && now.Sub(r.modTime) < resumeWindow {
			live[r.UploadID] = true
			continue
		}
		if !recorded && now.Sub(u.Initiated) < b.abandonAfter {
			continue
		}
		if err := b.abort(ctx, u.Key, u.UploadID); err != nil {
			return aborted, fail(err)
		}
		aborted++
	}
	for name, r := range recs {
		if !live[r.UploadID] && !b.busy(name) {
			b.removeRecord(r)
		}
	}
	return aborted, nil
}
