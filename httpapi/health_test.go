package httpapi

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/store"
)

// TestHealthzWhenTheStoreRefusesWrites: a metadata store that refuses writes (here a real bbolt file opened
// read-only, so every write transaction fails as a full disk's would) makes /healthz answer 503 with a
// JSON error and /status down, naming the refusal in the disk component (docs/api-decisions.md "Storage
// limits held, ephemeral bounds, disk reserve"); reads of the store still work, so only the write probe
// can tell.
func TestHealthzWhenTheStoreRefusesWrites(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "appliance.db")
	rw, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := store.OpenWith(path, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	box, err := appliance.OpenSecretBox(filepath.Join(dir, "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// A reserve of 1 byte: the file system's free space is not what is short here.
	svc := appliance.New(appliance.Config{DataDir: dir, DiskReserve: 1}, appliance.Deps{DB: db, Box: box, Log: log})
	svc.Probe.Register("disk", svc.Storage().DiskHealth)
	if d := svc.Storage().CheckDisk(); d.WriteErr == nil || d.Low {
		t.Fatalf("the write probe of a read-only store: %+v", d)
	}
	api := New(svc, Options{Log: log, MetricsToken: "s3cret-token"})
	ts := httptest.NewServer(api)
	t.Cleanup(func() { api.Close(); ts.Close() })

	get := func(path string, hdr http.Header) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, ts.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header = hdr
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatalf("GET %s: %d, not JSON: %v", path, resp.StatusCode, err)
		}
		return resp.StatusCode, body
	}
	code, body := get("/healthz", nil)
	if msg, _ := body["error"].(string); code != http.StatusServiceUnavailable || !strings.Contains(msg, "refuses writes") {
		t.Fatalf("/healthz while the store refuses writes: %d %v", code, body)
	}
	for _, hdr := range []http.Header{nil, {"Authorization": {"Bearer s3cret-token"}}} {
		code, body = get("/status", hdr)
		if code != http.StatusOK || body["status"] != appliance.StatusDown {
			t.Fatalf("/status while the store refuses writes (%v): %d %v", hdr, code, body)
		}
		var disk map[string]any
		for _, c := range body["components"].([]any) {
			if c := c.(map[string]any); c["name"] == "disk" {
				disk = c
			}
		}
		if disk == nil || disk["status"] != appliance.StatusDown {
			t.Fatalf("/status's disk component: %v", body)
		}
		if msg := disk["message"].(string); hdr != nil && !strings.Contains(msg, "refuses writes") {
			t.Fatalf("the operator's /status does not say the store refuses writes: %q", msg)
		}
	}
}
