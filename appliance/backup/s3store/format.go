package s3store

import (
	"bytes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/crypto/chacha20poly1305"
)

// The stored form of an object (version 1): the plaintext compressed with zstd, the compressed stream cut
// in chunks of chunkSize bytes, each sealed with XChaCha20-Poly1305 (the STREAM construction):
//
//	header   "APLO" | version 1 | 3 zero bytes | 16-byte random nonce prefix            (headerSize)
//	chunk i  seal(nonce(prefix, i, 0), ≤chunkSize bytes of the zstd stream)               (≤ chunkSize+16)
//	trailer  the header again | seal(nonce(prefix, n, 1), plaintext size, 8 bytes BE)    (trailerSize)
//
// nonce(prefix, i, last) = prefix | i as 7 bytes big-endian | last; the associated data of every seal is
// the header followed by the object's key. Every chunk but the last data chunk is full, so the stored
// size tells the number n of data chunks. A reader that reaches the end has checked every chunk in
// order and the trailer, sealed as the last one under n: a flipped byte, a truncation (even at a chunk
// boundary), chunks reordered or swapped in from another object, and an object stored under another key
// all fail to authenticate. The trailer carries the plaintext size where a ranged read of the object's
// last trailerSize bytes finds it (Stat and List).
const (
	magic       = "APLO"
	version     = 1
	prefixSize  = 16
	headerSize  = 4 + 1 + 3 + prefixSize
	chunkSize   = 64 << 10
	sealedChunk = chunkSize + chacha20poly1305.Overhead
	trailerSize = headerSize + 8 + chacha20poly1305.Overhead
	minStored   = headerSize + trailerSize
)

// ErrCorrupt is what reading an object that does not authenticate returns (wrapped, with the object's
// key): it was changed, truncated or mixed with another object in the bucket, or sealed with another
// data key.
var ErrCorrupt = errors.New("the object does not authenticate (tampered with, truncated, or sealed with another data key)")

func nonce(prefix []byte, i uint64, last bool) []byte {
	n := make([]byte, chacha20poly1305.NonceSizeX)
	copy(n, prefix)
	var ctr [8]byte
	binary.BigEndian.PutUint64(ctr[:], i)
	copy(n[prefixSize:], ctr[1:])
	if last {
		n[len(n)-1] = 1
	}
	return n
}

// newHeader makes an object's header with a fresh nonce prefix.
func newHeader() ([]byte, error) {
	h := make([]byte, headerSize)
	copy(h, magic)
	h[4] = version
	if _, err := rand.Read(h[8:]); err != nil {
		return nil, err
	}
	return h, nil
}

func checkHeader(h []byte) error {
	if len(h) != headerSize || string(h[:4]) != magic {
		return fmt.Errorf("%w: not an object of this store", ErrCorrupt)
	}
	if h[4] != version || h[5] != 0 || h[6] != 0 || h[7] != 0 {
		return fmt.Errorf("%w: unknown format version %d", ErrCorrupt, h[4])
	}
	return nil
}

func associated(header []byte, key string) []byte {
	return append(append(make([]byte, 0, len(header)+len(key)), header...), key...)
}

// dataChunks is the number of data chunks of an object of stored size n.
func dataChunks(n int64) (uint64, error) {
	if n < minStored {
		return 0, fmt.Errorf("%w: %d bytes is too short", ErrCorrupt, n)
	}
	body := n - minStored
	c := body / sealedChunk
	if r := body % sealedChunk; r != 0 {
		if r <= chacha20poly1305.Overhead {
			return 0, fmt.Errorf("%w: a chunk of %d bytes", ErrCorrupt, r)
		}
		c++
	}
	return uint64(c), nil
}

// openTrailer reads the plaintext size from an object's trailer, given its stored size.
func openTrailer(aead cipher.AEAD, key string, trailer []byte, stored int64) (int64, error) {
	if len(trailer) != trailerSize {
		return 0, fmt.Errorf("%w: a trailer of %d bytes", ErrCorrupt, len(trailer))
	}
	h := trailer[:headerSize]
	if err := checkHeader(h); err != nil {
		return 0, err
	}
	n, err := dataChunks(stored)
	if err != nil {
		return 0, err
	}
	size, err := aead.Open(nil, nonce(h[8:], n, true), trailer[headerSize:], associated(h, key))
	if err != nil {
		return 0, fmt.Errorf("%w: its trailer", ErrCorrupt)
	}
	v := binary.BigEndian.Uint64(size)
	if v > 1<<62 {
		return 0, fmt.Errorf("%w: a size of %d", ErrCorrupt, v)
	}
	return int64(v), nil
}

// sealer is the writing end: the compressed stream goes in, the stored form comes out to w.
type sealer struct {
	w      io.Writer
	aead   cipher.AEAD
	header []byte
	ad     []byte
	buf    []byte
	out    []byte
	n      uint64 // data chunks written
}

// newSealer writes the header h (newHeader's, or a resumed upload's: see upload.go) and returns the
// sealer of what follows it.
func newSealer(w io.Writer, aead cipher.AEAD, key string, h []byte) (*sealer, error) {
	if err := checkHeader(h); err != nil {
		return nil, err
	}
	if _, err := w.Write(h); err != nil {
		return nil, err
	}
	return &sealer{w: w, aead: aead, header: h, ad: associated(h, key), buf: make([]byte, 0, chunkSize),
		out: make([]byte, 0, sealedChunk)}, nil
}

func (s *sealer) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		k := copy(s.buf[len(s.buf):chunkSize], p)
		s.buf = s.buf[:len(s.buf)+k]
		p, written = p[k:], written+k
		if len(s.buf) == chunkSize {
			if err := s.flush(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

func (s *sealer) flush() error {
	s.out = s.aead.Seal(s.out[:0], nonce(s.header[8:], s.n, false), s.buf, s.ad)
	s.n++
	s.buf = s.buf[:0]
	_, err := s.w.Write(s.out)
	return err
}

// finish writes the last data chunk and the trailer with the plaintext size.
func (s *sealer) finish(size int64) error {
	if len(s.buf) > 0 {
		if err := s.flush(); err != nil {
			return err
		}
	}
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], uint64(size))
	t := append(bytes.Clone(s.header), s.aead.Seal(nil, nonce(s.header[8:], s.n, true), v[:], s.ad)...)
	_, err := s.w.Write(t)
	return err
}

// opener is the reading end: the stored form comes in from r, the compressed stream comes out. It
// returns io.EOF only once the trailer authenticated.
type opener struct {
	r     io.Reader
	aead  cipher.AEAD
	key   string
	h     []byte
	ad    []byte
	buf   []byte // stored bytes read, not yet opened
	plain []byte // the last chunk opened
	out   []byte // opened bytes not yet returned
	n     uint64
	size  int64 // from the trailer, once read
	done  bool
	err   error
}

func newOpener(r io.Reader, aead cipher.AEAD, key string) *opener {
	return &opener{r: r, aead: aead, key: key, buf: make([]byte, 0, sealedChunk+trailerSize), plain: make([]byte, 0, chunkSize)}
}

func (o *opener) Read(p []byte) (int, error) {
	for len(o.out) == 0 {
		if o.err != nil {
			return 0, o.err
		}
		if o.done {
			return 0, io.EOF
		}
		o.err = o.next()
	}
	n := copy(p, o.out)
	o.out = o.out[n:]
	return n, nil
}

// next opens the next chunk (or the trailer) into out.
func (o *opener) next() error {
	if o.h == nil {
		h := make([]byte, 0, headerSize)
		eof, err := fill(o.r, &h)
		if err != nil {
			return err
		}
		if eof {
			return fmt.Errorf("%w: truncated header", ErrCorrupt)
		}
		if err := checkHeader(h); err != nil {
			return err
		}
		o.h, o.ad = h, associated(h, o.key)
	}
	// Keep a trailer's worth of bytes beyond a full chunk: what is left at the end is the trailer.
	eof, err := fill(o.r, &o.buf)
	if err != nil {
		return err
	}
	if !eof { // a full chunk, and more after it
		plain, oerr := o.aead.Open(o.plain[:0], nonce(o.h[8:], o.n, false), o.buf[:sealedChunk], o.ad)
		if oerr != nil {
			return fmt.Errorf("%w: chunk %d", ErrCorrupt, o.n)
		}
		o.n++
		o.out = plain
		o.buf = o.buf[:copy(o.buf, o.buf[sealedChunk:])]
		return nil
	}
	// The end: the last data chunk (if any), then the trailer.
	if len(o.buf) < trailerSize {
		return fmt.Errorf("%w: truncated", ErrCorrupt)
	}
	last, trailer := o.buf[:len(o.buf)-trailerSize], o.buf[len(o.buf)-trailerSize:]
	var plain []byte
	if len(last) > 0 {
		var oerr error
		if plain, oerr = o.aead.Open(o.plain[:0], nonce(o.h[8:], o.n, false), last, o.ad); oerr != nil {
			return fmt.Errorf("%w: chunk %d", ErrCorrupt, o.n)
		}
		o.n++
	}
	if !bytes.Equal(trailer[:headerSize], o.h) {
		return fmt.Errorf("%w: its trailer", ErrCorrupt)
	}
	size, oerr := o.aead.Open(nil, nonce(o.h[8:], o.n, true), trailer[headerSize:], o.ad)
	if oerr != nil {
		return fmt.Errorf("%w: its trailer", ErrCorrupt)
	}
	o.size = int64(binary.BigEndian.Uint64(size))
	o.out, o.done, o.buf = plain, true, nil
	return nil
}

// fill reads into buf up to its capacity, and tells whether r ended first. Only r's io.EOF is the end:
// a body cut short (io.ErrUnexpectedEOF from the transport) is an error, not a truncated object.
func fill(r io.Reader, buf *[]byte) (eof bool, err error) {
	b := *buf
	defer func() { *buf = b }()
	for len(b) < cap(b) {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
	return false, nil
}

var (
	encoders = sync.Pool{New: func() any {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithZeroFrames(true), zstd.WithEncoderLevel(zstd.SpeedFastest))
		if err != nil {
			panic(err) // only for invalid options
		}
		return e
	}}
	decoders = sync.Pool{New: func() any {
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
		if err != nil {
			panic(err)
		}
		return d
	}}
)

// seal writes the stored form of what r yields to w (closing neither) under the header h and returns the
// plaintext size. The output is a function of the key, h and the plaintext (zstd's encoder gives the same
// output for the same input from the same code version), which is what lets an upload resume (upload.go).
func seal(w io.Writer, r io.Reader, aead cipher.AEAD, key string, h []byte) (int64, error) {
	s, err := newSealer(w, aead, key, h)
	if err != nil {
		return 0, err
	}
	enc := encoders.Get().(*zstd.Encoder)
	enc.Reset(s)
	n, err := io.Copy(enc, r)
	if cerr := enc.Close(); err == nil {
		err = cerr
	}
	encoders.Put(enc)
	if err != nil {
		return n, err
	}
	return n, s.finish(n)
}

// reseal writes to w the stored form that old (a stored form of the object key) becomes under the
// header h: the same compressed stream, sealed under h's nonce prefix (so of the same size); it returns
// the plaintext size. An upload that may not go on under its nonce prefix starts again with it (upload.go).
func reseal(w io.Writer, old io.Reader, aead cipher.AEAD, key string, h []byte) (int64, error) {
	s, err := newSealer(w, aead, key, h)
	if err != nil {
		return 0, err
	}
	op := newOpener(old, aead, key)
	if _, err := io.Copy(s, op); err != nil {
		return 0, err
	}
	return op.size, s.finish(op.size)
}

// plainReader yields an object's plaintext from its stored form; any failure is an error naming the
// object, ErrCorrupt when it does not authenticate.
type plainReader struct {
	key  string
	body io.ReadCloser
	op   *opener
	dec  *zstd.Decoder
	n    int64
	err  error
}

func open(body io.ReadCloser, aead cipher.AEAD, key string) *plainReader {
	op := newOpener(body, aead, key)
	dec := decoders.Get().(*zstd.Decoder)
	r := &plainReader{key: key, body: body, op: op, dec: dec}
	if err := dec.Reset(op); err != nil {
		r.fail(err)
	}
	return r
}

func (r *plainReader) fail(err error) error {
	if r.op.err != nil { // what the stored form (or its transport) said is the cause, whatever zstd made of it
		err = r.op.err
	}
	r.err = fmt.Errorf("get %s: %w", r.key, explain(err))
	return r.err
}

func (r *plainReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	n, err := r.dec.Read(p)
	r.n += int64(n)
	if err == nil {
		return n, nil
	}
	if !errors.Is(err, io.EOF) {
		return n, r.fail(err)
	}
	// zstd saw the end of its frames: the stored form must end there too, authenticated, and the size
	// must be the trailer's.
	if k, err := io.Copy(io.Discard, r.op); err != nil {
		return n, r.fail(err)
	} else if k != 0 {
		return n, r.fail(fmt.Errorf("%w: %d bytes after the compressed stream", ErrCorrupt, k))
	}
	if r.n != r.op.size {
		return n, r.fail(fmt.Errorf("%w: %d bytes, its trailer says %d", ErrCorrupt, r.n, r.op.size))
	}
	r.err = io.EOF
	return n, io.EOF
}

func (r *plainReader) Close() error {
	if r.dec != nil {
		r.dec.Reset(bytes.NewReader(nil))
		decoders.Put(r.dec)
		r.dec = nil
	}
	return r.body.Close()
}

// newAEAD checks a data key.
func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != chacha20poly1305.KeySize {
		return nil, fmt.Errorf("the data key must be %d bytes, not %d", chacha20poly1305.KeySize, len(key))
	}
	return chacha20poly1305.NewX(key)
}
