// Package ui is the dashboard: a client of the public API built from ui/src with Vite into ui/dist, which
// is committed and embedded here, so go build needs no Node. TestBuildIsCurrent rebuilds it and fails
// when the committed output is stale.
package ui

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
)

//go:embed all:dist
var dist embed.FS

// CSP allows only the dashboard's own scripts, styles and API: no inline code, no third party.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; " +
	"connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// encodings are the precompressed variants the build writes next to each script and style sheet
// (vite.config.ts), in the order they are preferred: brotli is the smaller.
var encodings = []struct{ name, ext string }{{"br", ".br"}, {"gzip", ".gz"}}

// precompressed says whether name is a variant the build wrote for another file (served only as that
// file's encoding, never under its own name).
func precompressed(name string) bool {
	for _, e := range encodings {
		if strings.HasSuffix(name, e.ext) {
			return true
		}
	}
	return false
}

// accepts reports whether the Accept-Encoding header value allows coding (listed, or "*", with q > 0).
func accepts(header, coding string) bool {
	star := false
	for _, part := range strings.Split(header, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		q := 1.0
		if v, ok := strings.CutPrefix(strings.ReplaceAll(strings.TrimSpace(params), " ", ""), "q="); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				q = f
			}
		}
		switch strings.ToLower(strings.TrimSpace(name)) {
		case coding:
			return q > 0
		case "*":
			star = q > 0
		}
	}
	return star
}

// etag is a strong validator of content: its SHA-256, cut short.
func etag(content []byte) string {
	sum := sha256.Sum256(content)
	return `"` + hex.EncodeToString(sum[:12]) + `"`
}

// Handler serves the dashboard: its files, and index.html for every other path (the app's own routes).
// Hashed assets (/assets/…) are cached for a year as immutable; everything else is revalidated. A file the
// build precompressed is sent brotli- or gzip-encoded when the request accepts it (Vary: Accept-Encoding),
// each encoding with its own length and ETag.
func Handler() http.Handler {
	files, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err)
	}
	index, err := fs.ReadFile(files, "index.html")
	if err != nil {
		panic("ui/dist has no index.html: build the dashboard (cd ui && npm ci && npm run build)")
	}
	// The ETags of every file, computed once (the files are embedded: they never change).
	etags := map[string]string{}
	if err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(files, p)
		etags[p] = etag(b)
		return err
	}); err != nil {
		panic(err)
	}
	// serve sends the file name as it is: http.ServeContent never redirects (http.FileServer would, to
	// a path without a trailing slash or without index.html).
	serve := func(w http.ResponseWriter, r *http.Request, name string) {
		h := w.Header()
		file, coding := name, ""
		for _, e := range encodings {
			if _, ok := etags[name+e.ext]; ok {
				h.Set("Vary", "Accept-Encoding")
				if accepts(r.Header.Get("Accept-Encoding"), e.name) {
					file, coding = name+e.ext, e.name
					break
				}
			}
		}
		f, err := files.Open(file)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		defer f.Close()
		st, err := f.Stat()
		rs, ok := f.(io.ReadSeeker)
		if err != nil || !ok {
			http.NotFound(w, r)
			return
		}
		if coding != "" {
			h.Set("Content-Encoding", coding)
			// The type is the original file's (ServeContent would read it from the name's .br/.gz).
			if ct := mime.TypeByExtension(path.Ext(name)); ct != "" {
				h.Set("Content-Type", ct)
			}
			// ServeContent leaves an encoded answer without a length, and would cut ranges of the encoded
			// bytes: the encoded file is sent whole, with its length (a script is never fetched in ranges).
			h.Set("Content-Length", strconv.FormatInt(st.Size(), 10))
			r.Header.Del("Range")
		}
		h.Set("ETag", etags[file])
		http.ServeContent(w, r, name, st.ModTime(), rs)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		// A file is served under its own name only: one named otherwise (a trailing slash, dot segments, a
		// doubled slash) is a 404, never a redirect and never the file.
		exact := "/"+name == r.URL.Path
		if name == "assets" || strings.HasPrefix(name, "assets/") {
			if st, err := fs.Stat(files, name); err != nil || st.IsDir() || !exact || precompressed(name) {
				http.NotFound(w, r) // a missing asset is a 404, never the app's HTML
				return
			}
			h.Set("Cache-Control", "public, max-age=31536000, immutable")
			serve(w, r, name)
			return
		}
		h.Set("Cache-Control", "no-cache")
		if st, err := fs.Stat(files, name); name != "" && name != "index.html" && err == nil && !st.IsDir() {
			if !exact {
				http.NotFound(w, r)
				return
			}
			serve(w, r, name)
			return
		}
		h.Set("Content-Type", "text/html; charset=utf-8")
		w.Write(index)
	})
}

// apiPaths are served by the API, everything else by the dashboard.
func apiPath(p string) bool {
	return p == "/v1" || strings.HasPrefix(p, "/v1/") || p == "/healthz" || p == "/status" || p == "/metrics"
}

// Mount serves the API's paths with api and every other path with the dashboard.
func Mount(api http.Handler) http.Handler {
	dash := Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if apiPath(r.URL.Path) {
			api.ServeHTTP(w, r)
			return
		}
		dash.ServeHTTP(w, r)
	})
}
