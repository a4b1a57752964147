package s3store

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"strings"
	"testing"
)

func sealBytes(t *testing.T, key string, plain []byte) []byte {
	t.Helper()
	aead, err := newAEAD([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	h, err := newHeader()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	n, err := seal(&out, bytes.NewReader(plain), aead, key, h)
	if err != nil || n != int64(len(plain)) {
		t.Fatalf("seal: %d %v", n, err)
	}
	return out.Bytes()
}

func openBytes(t *testing.T, key string, stored []byte) ([]byte, error) {
	t.Helper()
	aead, err := newAEAD([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	r := open(io.NopCloser(bytes.NewReader(stored)), aead, key)
	defer r.Close()
	return io.ReadAll(r)
}

func random(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// Round trips across chunk boundaries; the trailer's size is what Stat reports.
func TestSealOpen(t *testing.T) {
	aead, _ := newAEAD([]byte(strings.Repeat("k", 32)))
	for _, n := range []int{0, 1, 100, chunkSize - 1, chunkSize, chunkSize + 1, 3*chunkSize + 17} {
		plain := random(t, n)
		stored := sealBytes(t, "p/x", plain)
		got, err := openBytes(t, "p/x", stored)
		if err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("%d bytes: got %d bytes, %v", n, len(got), err)
		}
		size, err := openTrailer(aead, "p/x", stored[len(stored)-trailerSize:], int64(len(stored)))
		if err != nil || size != int64(n) {
			t.Fatalf("%d bytes: trailer says %d, %v", n, size, err)
		}
	}
	// Compressible data is stored smaller.
	plain := bytes.Repeat([]byte("a row of a table; "), 100000)
	if stored := sealBytes(t, "p/x", plain); len(stored) > len(plain)/10 {
		t.Errorf("%d bytes stored as %d", len(plain), len(stored))
	}
}

// No change to the stored form yields other bytes: every single-byte flip, every truncation, a chunk
// dropped, two chunks swapped, another key, another object's chunk.
func TestTamperedNeverOpens(t *testing.T) {
	plain := random(t, 3*chunkSize+100)
	stored := sealBytes(t, "p/x", plain)
	check := func(what string, b []byte, key string) {
		t.Helper()
		got, err := openBytes(t, key, b)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: %v, want ErrCorrupt", what, err)
		}
		if !strings.Contains(err.Error(), key) {
			t.Fatalf("%s: %v does not name the object", what, err)
		}
		if !bytes.HasPrefix(plain, got) {
			t.Fatalf("%s: yielded bytes that are not the object's", what)
		}
	}
	for i := 0; i < len(stored); i += 997 {
		b := bytes.Clone(stored)
		b[i] ^= 0x40
		check("flip", b, "p/x")
	}
	for _, i := range []int{headerSize + sealedChunk - 1, len(stored) - 1, len(stored) - trailerSize} {
		b := bytes.Clone(stored)
		b[i] ^= 1
		check("flip", b, "p/x")
	}
	for n := 0; n < len(stored); n += 4099 {
		check("truncate", stored[:n], "p/x")
	}
	for _, n := range []int{headerSize, headerSize + sealedChunk, headerSize + 2*sealedChunk, len(stored) - trailerSize, len(stored) - 1} {
		check("truncate", stored[:n], "p/x")
	}
	c := func(i int) []byte { return stored[headerSize+i*sealedChunk : headerSize+(i+1)*sealedChunk] }
	dropped := append(append(append(bytes.Clone(stored[:headerSize]), c(0)...), c(2)...), stored[headerSize+3*sealedChunk:]...)
	check("a chunk dropped", dropped, "p/x")
	swapped := append(append(append(bytes.Clone(stored[:headerSize]), c(1)...), c(0)...), stored[headerSize+2*sealedChunk:]...)
	check("chunks swapped", swapped, "p/x")
	check("another key", stored, "p/y")
	other := sealBytes(t, "p/x", plain) // the same key and bytes, another nonce prefix
	mixed := append(append(bytes.Clone(stored[:headerSize+sealedChunk]), other[headerSize+sealedChunk:headerSize+2*sealedChunk]...), stored[headerSize+2*sealedChunk:]...)
	check("another object's chunk", mixed, "p/x")
	check("appended", append(bytes.Clone(stored), 0), "p/x")
}

// The stored form is a function of the key, the header and the plaintext (a resumed upload re-encodes
// its object to the same bytes); reseal turns it into the same object under another nonce prefix, of
// the same size and sharing no chunk with it.
func TestSealDeterministicReseal(t *testing.T) {
	aead, _ := newAEAD([]byte(strings.Repeat("k", 32)))
	plain := append(random(t, 200<<10), bytes.Repeat([]byte("compressible "), 50000)...)
	h, _ := newHeader()
	var a, b bytes.Buffer
	if _, err := seal(&a, bytes.NewReader(plain), aead, "p/x", h); err != nil {
		t.Fatal(err)
	}
	if _, err := seal(&b, io.MultiReader(bytes.NewReader(plain[:1000]), bytes.NewReader(plain[1000:])), aead, "p/x", h); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("the same plaintext under the same header sealed to different bytes")
	}
	h2, _ := newHeader()
	var c bytes.Buffer
	n, err := reseal(&c, bytes.NewReader(a.Bytes()), aead, "p/x", h2)
	if err != nil || n != int64(len(plain)) || c.Len() != a.Len() {
		t.Fatalf("reseal: %d %v, %d bytes for %d", n, err, c.Len(), a.Len())
	}
	if bytes.Equal(c.Bytes()[headerSize:headerSize+sealedChunk], a.Bytes()[headerSize:headerSize+sealedChunk]) {
		t.Fatal("resealed under the same nonces")
	}
	if got, err := openBytes(t, "p/x", c.Bytes()); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("open the resealed object: %d bytes, %v", len(got), err)
	}
	// A stored form cut short does not reseal.
	if _, err := reseal(io.Discard, bytes.NewReader(a.Bytes()[:a.Len()-5]), aead, "p/x", h2); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reseal of a truncated object: %v", err)
	}
}
