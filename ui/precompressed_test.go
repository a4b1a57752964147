package ui

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
)

// TestPrecompressed: every script and style sheet of the build has a gzip and a brotli variant whose
// bytes decompress to the file's; each is smaller than the file.
func TestPrecompressed(t *testing.T) {
	names, _ := fs.Glob(dist, "dist/assets/*")
	n := 0
	for _, name := range names {
		if !strings.HasSuffix(name, ".js") && !strings.HasSuffix(name, ".css") {
			continue
		}
		n++
		orig, _ := fs.ReadFile(dist, name)
		for ext, open := range map[string]func(io.Reader) (io.Reader, error){
			".gz": func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) },
			".br": func(r io.Reader) (io.Reader, error) { return brotli.NewReader(r), nil },
		} {
			packed, err := fs.ReadFile(dist, name+ext)
			if err != nil {
				t.Errorf("%s has no %s variant: %v", name, ext, err)
				continue
			}
			r, err := open(bytes.NewReader(packed))
			if err != nil {
				t.Fatalf("%s%s: %v", name, ext, err)
			}
			plain, err := io.ReadAll(r)
			if err != nil || !bytes.Equal(plain, orig) {
				t.Errorf("%s%s does not decompress to %s (%v)", name, ext, name, err)
			}
			if len(packed) >= len(orig) && len(orig) > 1000 {
				t.Errorf("%s%s is %d bytes, the file %d", name, ext, len(packed), len(orig))
			}
		}
	}
	if n < 3 {
		t.Fatalf("%d scripts and style sheets in dist/assets", n)
	}
}

// TestServingEncoded: a script is sent brotli-encoded to a browser that accepts br, gzip-encoded to one
// that accepts only gzip, and as it is otherwise; each with its own Content-Length and ETag, the type of
// the script, Vary: Accept-Encoding, and a 304 for its ETag. The variants are not served by their own names.
func TestServingEncoded(t *testing.T) {
	h := Handler()
	js := asset(t, ".js")
	orig, _ := fs.ReadFile(dist, "dist"+js)
	fetch := func(accept, ifNoneMatch string) *http.Response {
		req := httptest.NewRequest("GET", js, nil)
		if accept != "" {
			req.Header.Set("Accept-Encoding", accept)
		}
		if ifNoneMatch != "" {
			req.Header.Set("If-None-Match", ifNoneMatch)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Result()
	}
	etags := map[string]bool{}
	for _, tc := range []struct{ accept, coding, file string }{
		{"gzip, deflate, br, zstd", "br", js + ".br"},
		{"gzip;q=1.0, br;q=0", "gzip", js + ".gz"},
		{"gzip", "gzip", js + ".gz"},
		{"*", "br", js + ".br"},
		{"", "", js},
		{"identity", "", js},
		{"br;q=0, gzip;q=0", "", js},
	} {
		r := fetch(tc.accept, "")
		b, _ := io.ReadAll(r.Body)
		want, _ := fs.ReadFile(dist, "dist"+tc.file)
		if r.StatusCode != 200 || r.Header.Get("Content-Encoding") != tc.coding || !bytes.Equal(b, want) ||
			r.Header.Get("Content-Length") != strconv.Itoa(len(want)) || !strings.Contains(r.Header.Get("Content-Type"), "javascript") ||
			r.Header.Get("Vary") != "Accept-Encoding" || r.Header.Get("Cache-Control") != "public, max-age=31536000, immutable" {
			t.Errorf("Accept-Encoding %q: %d %v (%d bytes, want %s: %d)", tc.accept, r.StatusCode, r.Header, len(b), tc.file, len(want))
		}
		etag := r.Header.Get("ETag")
		if etag == "" {
			t.Errorf("Accept-Encoding %q: no ETag", tc.accept)
		}
		etags[tc.coding+" "+etag] = true
		if nm := fetch(tc.accept, etag); nm.StatusCode != http.StatusNotModified {
			t.Errorf("Accept-Encoding %q, If-None-Match its ETag: %d", tc.accept, nm.StatusCode)
		}
	}
	if len(etags) != 3 {
		t.Errorf("ETags: %v, want one per encoding", etags)
	}
	if len(orig) < 1000 {
		t.Fatalf("the script is %d bytes", len(orig))
	}
	for _, p := range []string{js + ".gz", js + ".br"} {
		if r := get(t, h, "GET", p); r.StatusCode != 404 {
			t.Errorf("%s: %d, want 404", p, r.StatusCode)
		}
	}
	// The sizes the browser downloads (go test -v shows them).
	for _, coding := range []string{"", "gzip", "br"} {
		r := fetch(coding, "")
		t.Logf("%s %q: %s bytes", js, coding, r.Header.Get("Content-Length"))
	}
}
