package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/authz"
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
	box      *appliance.SecretBox
	env      *appliancetest.Env
	fakes    platformFakes // the integration providers' platforms (local fakes)
}

type setupOpts struct {
	limits RateLimits
	// instances runs the data plane and the job runner: projects made with b.provision are real
	// PostgreSQL instances.
	instances bool
	// http2 serves the API over TLS with HTTP/2 enabled, as browsers reach it (the bundle's client speaks
	// HTTP/2 and trusts the test certificate).
	http2 bool
	// billing is the organizations' billing provider (nil: billing off).
	billing appliance.BillingProvider
	// programRate is each service token's rate of program applications (zero: the default).
	programRate appliance.ProgramApplicationRate
}

// setup starts an appliance service with a bootstrapped organization and its admin key.
func setup(t testing.TB, opts ...setupOpts) *bundle {
	t.Helper()
	o := setupOpts{limits: RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}}
	if len(opts) > 0 {
		o = opts[0]
	}
	fakes := startPlatformFakes(t)
	e := appliancetest.New(t, appliancetest.Options{Instances: o.instances, Billing: o.billing, ProgramApplicationRate: o.programRate,
		IntegrationBaseURLs: fakes.baseURLs(), IntegrationProviders: fixtureProviders()})
	api := New(e.Svc, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Limits: o.limits, Lane: e.Lane})
	b := &bundle{t: t, env: e, svc: e.Svc, api: api, db: e.DB, adminKey: e.Bootstrap.APIKey, box: e.Box, fakes: fakes}
	// Every response of the server, whoever asked, is checked against the served document.
	ts := httptest.NewUnstartedServer(b.validating(api))
	b.ts = ts
	if o.http2 {
		ts.EnableHTTP2 = true
		ts.StartTLS()
	} else {
		ts.Start()
	}
	t.Cleanup(func() { api.Close(); ts.Close() })
	var err error
	e.DB.View(func(tx *store.Tx) error {
		b.org, err = store.Organizations.Get(tx, e.Bootstrap.OrganizationID)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// provision creates a project (on plan, or the default plan) through the API and waits until it is active
// (needs setupOpts.instances).
func (b *bundle) provision(name, environment string, plan ...string) *store.Project {
	b.t.Helper()
	body := map[string]any{"name": name, "environment": environment}
	if len(plan) > 0 {
		body["plan"] = plan[0]
	}
	r := b.do("POST", "/v1/projects", b.adminKey, body)
	if r.status != http.StatusAccepted {
		b.t.Fatalf("create project: %d %s", r.status, r.body)
	}
	job := b.env.WaitJob(b.t, r.json["job"].(map[string]any)["id"].(string))
	if job.State != "completed" {
		b.t.Fatalf("provision %s: %s %s", name, job.State, job.Error)
	}
	return b.env.Project(b.t, job.ProjectID)
}

// response is what a call returned.
type response struct {
	status int
	header http.Header
	body   []byte
	json   map[string]any
}

// do calls the API with an optional credential (sent as Bearer) and JSON body (a string is sent raw); the
// server's response is validated against the served OpenAPI document (bundle.validating).
func (b *bundle) do(method, path, cred string, body any) *response {
	b.t.Helper()
	var hdr http.Header
	if cred != "" {
		hdr = http.Header{"Authorization": {"Bearer " + cred}}
	}
	return b.call(b.t, method, path, hdr, body)
}

// call is do with the test to report to (a subtest's) and the request headers given in full (the
// credential, when any, is among them).
func (b *bundle) call(t testing.TB, method, path string, hdr http.Header, body any) *response {
	t.Helper()
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
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range hdr {
		req.Header[http.CanonicalHeaderKey(k)] = vs
	}
	resp, err := b.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := &response{status: resp.StatusCode, header: resp.Header}
	out.body, _ = io.ReadAll(resp.Body)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(out.body, &out.json); err != nil {
			t.Fatalf("%s %s: response is not a JSON object: %v\n%s", method, path, err, out.body)
		}
	}
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
	email, password := b.user(role)
	r := b.do("POST", "/v1/auth/sessions", "", map[string]any{"email": email, "password": password})
	if r.status != http.StatusCreated {
		b.t.Fatalf("sign in: %d %s", r.status, r.body)
	}
	return r.json["token"].(string)
}

// project stores the record of an active project in the organization, as if provisioned (no instance
// runs: API-layer tests need only the record; the appliance package's tests provision real instances).
func (b *bundle) project(name, environment string) *store.Project {
	b.t.Helper()
	now := time.Now().UTC()
	p := &store.Project{ID: ids.New("prj"), Name: name, Slug: name, OrganizationID: b.org.ID, Plan: "free",
		Environment: environment, State: "active", RuntimeStatus: "active", CreatedAt: now, UpdatedAt: now,
		DatabaseName: name, RoleName: name, PublicHost: "localhost", DirectPort: 15432, PooledPort: 16432,
		Credential: store.Credential{Username: name, Password: b.box.Seal([]byte("fixture-password")), CreatedAt: now}}
	if err := b.db.Update(func(tx *store.Tx) error { return store.Projects.Put(tx, p) }); err != nil {
		b.t.Fatal(err)
	}
	return p
}

// user creates a user with role in the bundle's organization (or a platform admin when role is
// "platform-admin") and returns its email and password.
func (b *bundle) user(role string) (email, password string) {
	b.t.Helper()
	email = strings.ReplaceAll(ids.New("u"), "_", "") + "@example.com"
	password = "correct horse battery staple"
	err := b.db.Update(func(tx *store.Tx) error {
		if role == "platform-admin" {
			_, err := b.svc.Identity().CreateUser(tx, email, "Admin", password, true)
			return err
		}
		_, err := b.svc.Identity().CreateUser(tx, email, "User", password, false, store.Membership{OrganizationID: b.org.ID, Role: role})
		return err
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return email, password
}

// rawKey stores an API key record directly, bypassing the API's rules (a project-scoped key may then carry
// organization scopes): it proves the HTTP layer refuses what the service would never mint.
func (b *bundle) rawKey(projectID string, scopes ...appliance.Scope) string {
	b.t.Helper()
	plain := "apl_live_" + ids.Secret(30)
	k := &store.APIKey{ID: ids.New("key"), Name: "raw test key", KeyPrefix: plain[:15], KeyHash: ids.Hash(plain),
		OrganizationID: b.org.ID, ProjectID: projectID, Source: "test", Scopes: scopeNames(scopes),
		CreatedAt: time.Now().UTC()}
	err := b.db.Update(func(tx *store.Tx) error {
		owner, err := store.Users.First(tx, store.UsersByEmail, appliance.BootstrapOwnerEmail)
		if err != nil {
			return err
		}
		k.CreatedByUserID = owner.ID // every key acts for a person; the owner may do everything
		return store.APIKeys.Put(tx, k)
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return plain
}

// keyRecord returns the stored record of a key given its plaintext (nil when there is none).
func (b *bundle) keyRecord(plain string) *store.APIKey {
	b.t.Helper()
	var k *store.APIKey
	err := b.db.View(func(tx *store.Tx) error {
		var err error
		k, err = store.APIKeys.First(tx, store.APIKeysByHash, ids.Hash(plain))
		return err
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		b.t.Fatal(err)
	}
	return k
}

// job stores a pending job record of the project (the scheduler, which enqueues real ones, is not wired
// into these tests).
func (b *bundle) job(projectID, typ string) *store.Job {
	b.t.Helper()
	now := time.Now().UTC()
	j := &store.Job{ID: ids.New("job"), Type: typ, State: "pending", OrganizationID: b.org.ID, ProjectID: projectID,
		MaxAttempts: 5, RunAfter: now, CreatedAt: now, UpdatedAt: now}
	if projectID != "" {
		if err := b.db.View(func(tx *store.Tx) error {
			p, err := store.Projects.Get(tx, projectID)
			if err == nil {
				j.OrganizationID = p.OrganizationID
			}
			return err
		}); err != nil {
			b.t.Fatal(err)
		}
	}
	if err := b.db.Update(func(tx *store.Tx) error { return store.Jobs.Put(tx, j) }); err != nil {
		b.t.Fatal(err)
	}
	return j
}

// otherOrg stores a second organization with the given slug and one project of its own.
func (b *bundle) otherOrg(slug string) (*store.Organization, *store.Project) {
	b.t.Helper()
	now := time.Now().UTC()
	org := &store.Organization{ID: ids.New("org"), Name: "Other " + slug, Slug: slug, BillingPlan: "none", CreatedAt: now, UpdatedAt: now}
	prj := &store.Project{ID: ids.New("prj"), Name: "theirs", Slug: "theirs", OrganizationID: org.ID, Plan: "free",
		Environment: "production", State: "active", RuntimeStatus: "active", CreatedAt: now, UpdatedAt: now}
	err := b.db.Update(func(tx *store.Tx) error {
		if err := store.Organizations.Put(tx, org); err != nil {
			return err
		}
		return store.Projects.Put(tx, prj)
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return org, prj
}

// auditEvents returns every stored audit event, oldest first.
func (b *bundle) auditEvents() []*store.AuditEvent {
	b.t.Helper()
	if err := b.svc.Studio().FlushLog(context.Background()); err != nil { // the studio's audit events are written after its answers
		b.t.Fatal(err)
	}
	var evs []*store.AuditEvent
	if err := b.db.View(func(tx *store.Tx) error {
		var err error
		evs, err = store.AuditEvents.All(tx, nil)
		return err
	}); err != nil {
		b.t.Fatal(err)
	}
	return evs
}

// actorOf is the audit actor (kind, id) a credential acts as; ("anonymous", "") for none.
func (b *bundle) actorOf(cred string) (kind, id string) {
	b.t.Helper()
	if cred == "" {
		return appliance.ActorAnonymous, ""
	}
	err := b.db.View(func(tx *store.Tx) error {
		if s, err := store.Sessions.First(tx, store.SessionsByHash, ids.Hash(cred)); err == nil {
			kind, id = appliance.ActorUser, s.UserID
			return nil
		}
		if st, err := store.ServiceTokens.First(tx, store.ServiceTokensByHash, ids.Hash(cred)); err == nil {
			kind, id = authz.ActorServiceToken, st.ID
			return nil
		}
		k, err := store.APIKeys.First(tx, store.APIKeysByHash, ids.Hash(cred))
		if err != nil {
			return err
		}
		kind, id = appliance.ActorAPIKey, k.ID
		return nil
	})
	if err != nil {
		b.t.Fatalf("actor of credential: %v", err)
	}
	return kind, id
}

func scopeNames(scopes []appliance.Scope) []string {
	out := make([]string, len(scopes))
	for i, s := range scopes {
		out[i] = string(s)
	}
	return out
}
