// Package ui is the dashboard: a client of the public API built from ui/src with Vite into ui/dist, which
// is committed and embedded here, so go build needs no Node. TestBuildIsCurrent rebuilds it and fails
// when the committed output is stale.
package ui

import (
	"embed"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed all:dist
var dist embed.FS

// CSP allows only the dashboard's own scripts, styles and API: no inline code, no third party.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; " +
	"connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Handler serves the dashboard: its files, and index.html for every other path (the app's own routes).
// Hashed assets (/assets/…) are cached for a year as immutable; everything else is revalidated.
func Handler() http.Handler {
	files, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err)
	}
	index, err := fs.ReadFile(files, "index.html")
	if err != nil {
		panic("ui/dist has no index.html: build the dashboard (cd ui && npm ci && npm run build)")
	}
	// serve sends the file name as it is: http.ServeContent never redirects (http.FileServer would, to
	// a path without a trailing slash or without index.html).
	serve := func(w http.ResponseWriter, r *http.Request, name string) {
		f, err := files.Open(name)
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
			if st, err := fs.Stat(files, name); err != nil || st.IsDir() || !exact {
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
