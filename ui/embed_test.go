package ui

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

// asset is the path of the entry script (ext ".js") or style sheet (".css") index.html loads.
func asset(t *testing.T, ext string) string {
	t.Helper()
	html, _ := fs.ReadFile(dist, "dist/index.html")
	m := regexp.MustCompile(`"(/assets/index-[^"]+` + regexp.QuoteMeta(ext) + `)"`).FindStringSubmatch(string(html))
	if m == nil {
		t.Fatalf("index.html loads no /assets/index-*%s", ext)
	}
	return m[1]
}

func TestServing(t *testing.T) {
	h := Handler()
	index := get(t, h, "GET", "/")
	html := body(t, index)
	if index.StatusCode != 200 || !strings.HasPrefix(index.Header.Get("Content-Type"), "text/html") || !strings.Contains(html, `<div id="app">`) {
		t.Fatalf("index: %d %v", index.StatusCode, index.Header)
	}
	for _, r := range []*http.Response{index, get(t, h, "GET", "/projects/prj_123"), get(t, h, "GET", "/cli/login/cli_1")} {
		if r.Header.Get("Content-Security-Policy") != CSP || r.Header.Get("Cache-Control") != "no-cache" ||
			r.Header.Get("X-Frame-Options") != "DENY" || r.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("headers: %v", r.Header)
		}
	}
	if r := get(t, h, "GET", "/projects/prj_123"); body(t, r) != html {
		t.Error("an app route does not get index.html (SPA fallback)")
	}
	js := get(t, h, "GET", asset(t, ".js"))
	if js.StatusCode != 200 || js.Header.Get("Cache-Control") != "public, max-age=31536000, immutable" ||
		!strings.Contains(js.Header.Get("Content-Type"), "javascript") {
		t.Errorf("hashed asset: %d %v", js.StatusCode, js.Header)
	}
	for _, p := range []string{"/assets/index-nothere.js", "/assets/", "/assets"} {
		if r := get(t, h, "GET", p); r.StatusCode != 404 {
			t.Errorf("%s: %d, want 404 (never the app's HTML)", p, r.StatusCode)
		}
	}
	if r := get(t, h, "GET", "/favicon.svg"); r.StatusCode != 200 || r.Header.Get("Content-Type") != "image/svg+xml" {
		t.Errorf("favicon: %d %v", r.StatusCode, r.Header)
	}
	if r := get(t, h, "GET", "/index.html"); r.StatusCode != 200 || body(t, r) != html {
		t.Errorf("/index.html: %d (never a redirect)", r.StatusCode)
	}
	// A file's name made unclean (a trailing slash, dot segments, a doubled slash) is a 404, never a
	// redirect to the clean one: net/http's file server answered /favicon.svg/ with a 301.
	for _, p := range []string{"/favicon.svg/", asset(t, ".js") + "/", "/./favicon.svg", "/x/../favicon.svg", "//favicon.svg", "/assets//" + strings.TrimPrefix(asset(t, ".js"), "/assets/")} {
		if r := get(t, h, "GET", p); r.StatusCode != 404 || r.Header.Get("Location") != "" {
			t.Errorf("%s: %d (Location %q), want 404", p, r.StatusCode, r.Header.Get("Location"))
		}
	}
	if r := get(t, h, "GET", "/projects/prj_123/"); r.StatusCode != 200 || body(t, r) != html {
		t.Errorf("an app route with a trailing slash: %d, want the app's HTML", r.StatusCode)
	}
	if r := get(t, h, "POST", "/"); r.StatusCode != 405 {
		t.Errorf("POST: %d", r.StatusCode)
	}
}

// TestNoInlineOrThirdParty: the CSP forbids inline scripts and styles and other origins; the build has none.
func TestNoInlineOrThirdParty(t *testing.T) {
	html, _ := fs.ReadFile(dist, "dist/index.html")
	for _, tag := range regexp.MustCompile(`<script[^>]*>`).FindAllString(string(html), -1) {
		if !strings.Contains(tag, `src="/assets/`) {
			t.Errorf("inline or foreign script: %s", tag)
		}
	}
	if strings.Contains(string(html), "<style") || strings.Contains(string(html), " style=") {
		t.Error("inline style in index.html")
	}
	fs.WalkDir(dist, "dist", func(p string, d fs.DirEntry, err error) error {
		if d.IsDir() || strings.HasSuffix(p, ".svg") {
			return nil
		}
		b, _ := fs.ReadFile(dist, p)
		for _, u := range regexp.MustCompile(`https?://[a-zA-Z0-9.-]+`).FindAllString(string(b), -1) {
			if !strings.HasPrefix(u, "http://www.w3.org") {
				t.Errorf("%s refers to %s", p, u)
			}
		}
		return nil
	})
}

func TestMount(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(299) })
	h := Mount(api)
	for p, want := range map[string]int{"/v1/me": 299, "/v1": 299, "/healthz": 299, "/status": 299, "/metrics": 299, "/": 200, "/projects": 200, "/v1x": 200} {
		if r := get(t, h, "GET", p); r.StatusCode != want {
			t.Errorf("%s: %d, want %d", p, r.StatusCode, want)
		}
	}
}

// TestBuildIsCurrent rebuilds the dashboard from its sources (npm ci, vite build) and compares the result
// with the committed ui/dist: a change to ui/src without a rebuild fails here.
func TestBuildIsCurrent(t *testing.T) {
	npm, err := exec.LookPath("npm")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("npm is not installed: %v", err)
		}
		t.Skip("npm is not installed")
	}
	// The dashboard's types come from the generated client next to it: ../clients/typescript/src.
	root := t.TempDir()
	work := filepath.Join(root, "ui")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(root, "clients", "typescript", "src"), os.DirFS(filepath.Join("..", "clients", "typescript", "src"))); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"package.json", "package-lock.json", "tsconfig.json", "vite.config.ts", "index.html", "src", "public"} {
		if err := os.CopyFS(filepath.Join(work, name), os.DirFS(name)); err != nil {
			if err := copyFile(name, filepath.Join(work, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(npm, args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "NO_UPDATE_NOTIFIER=1", "npm_config_fund=false", "npm_config_audit=false")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("ci", "--no-audit", "--no-fund")
	run("run", "typecheck")
	run("run", "build")
	want := tree(t, os.DirFS(filepath.Join(work, "dist")))
	got := tree(t, os.DirFS("dist"))
	for name, b := range want {
		if got[name] != b {
			t.Errorf("ui/dist/%s is stale or missing: run (cd ui && npm ci && npm run build) and commit ui/dist", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("ui/dist/%s is not built from the sources any more: rebuild and commit ui/dist", name)
		}
	}
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}

func tree(t *testing.T, fsys fs.FS) map[string]string {
	out := map[string]string{}
	fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if !d.IsDir() {
			b, _ := fs.ReadFile(fsys, p)
			out[p] = string(b)
		}
		return nil
	})
	return out
}
