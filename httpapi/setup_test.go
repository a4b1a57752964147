package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/store"
)

// bundle is the subject of an API test: a real store and service behind a real HTTP server.
type bundle struct {
	t        testing.TB
	svc      *appliance.Service
	api      *Server
	ts       *httptest.Server
	db       *store.DB
	org      *store.Organization
	adminKey string // every scope, organization-wide
}

type setupOpts struct {
	limits RateLimits
}

// setup starts an appliance service with a bootstrapped organization and its admin key.
func setup(t testing.TB, opts ...setupOpts) *bundle {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	box, err := appliance.OpenSecretBox(filepath.Join(dir, "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := appliance.New(appliance.Config{APIURL: "http://test", PublicHost: "localhost", Region: "local", Version: "test"}, db, box, log)
	o := setupOpts{limits: RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}}
	if len(opts) > 0 {
		o = opts[0]
	}
	api := New(svc, Options{Log: log, Limits: o.limits})
	ts := httptest.NewServer(api)
	t.Cleanup(func() { ts.Close(); api.Close() })
	boot, err := svc.EnsureBootstrap(t.Context(), filepath.Join(dir, "bootstrap.json"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{t: t, svc: svc, api: api, ts: ts, db: db, adminKey: boot.APIKey}
	db.View(func(tx *store.Tx) error {
		b.org, err = store.Organizations.Get(tx, boot.OrganizationID)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// response is what a call returned.
type response struct {
	status int
	header http.Header
	body   []byte
	json   map[string]any
}

// do calls the API with an optional credential (sent as Bearer) and JSON body (a string is sent raw),
// and validates the response against the served OpenAPI document.
func (b *bundle) do(method, path, cred string, body any) *response {
	b.t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	default:
		buf, err := json.Marshal(v)
		if err != nil {
			b.t.Fatal(err)
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, b.ts.URL+path, rd)
	if err != nil {
		b.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if cred != "" {
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	resp, err := b.ts.Client().Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	out := &response{status: resp.StatusCode, header: resp.Header}
	out.body, _ = io.ReadAll(resp.Body)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(out.body, &out.json); err != nil {
			b.t.Fatalf("%s %s: response is not a JSON object: %v\n%s", method, path, err, out.body)
		}
	}
	checkAgainstOpenAPI(b.t, b, req, out)
	return out
}

// key mints an API key in the bundle's organization with the given scopes, optionally project-scoped.
func (b *bundle) key(projectID string, scopes ...appliance.Scope) string {
	b.t.Helper()
	ss := make([]string, len(scopes))
	for i, s := range scopes {
		ss[i] = string(s)
	}
	r := b.do("POST", "/v1/organizations/"+b.org.ID+"/api-keys", b.adminKey,
		map[string]any{"name": "test key", "scopes": ss, "project_id": projectID})
	if r.status != http.StatusCreated {
		b.t.Fatalf("create key: %d %s", r.status, r.body)
	}
	return r.json["plaintext_api_key"].(string)
}

// session creates a user with role in the bundle's organization (or a platform admin when role is
// "platform-admin") and signs it in, returning the session token.
func (b *bundle) session(role string) string {
	b.t.Helper()
	email := strings.ReplaceAll(ids.New("u"), "_", "") + "@example.com"
	password := "correct horse battery staple"
	err := b.db.Update(func(tx *store.Tx) error {
		if role == "platform-admin" {
			_, err := b.svc.CreateUser(tx, email, "Admin", password, true)
			return err
		}
		_, err := b.svc.CreateUser(tx, email, "User", password, false, store.Membership{OrganizationID: b.org.ID, Role: role})
		return err
	})
	if err != nil {
		b.t.Fatal(err)
	}
	r := b.do("POST", "/v1/auth/sessions", "", map[string]any{"email": email, "password": password})
	if r.status != http.StatusCreated {
		b.t.Fatalf("sign in: %d %s", r.status, r.body)
	}
	return r.json["token"].(string)
}

// project stores a project record in the organization (the projects issue replaces this with real
// provisioning; for the core issue only the record matters).
func (b *bundle) project(name, environment string) *store.Project {
	b.t.Helper()
	now := time.Now().UTC()
	p := &store.Project{ID: ids.New("prj"), Name: name, Slug: name, OrganizationID: b.org.ID, Plan: "free",
		Environment: environment, State: "active", RuntimeStatus: "active", CreatedAt: now, UpdatedAt: now}
	if err := b.db.Update(func(tx *store.Tx) error { return store.Projects.Put(tx, p) }); err != nil {
		b.t.Fatal(err)
	}
	return p
}
