package appliance_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/integrations"
	"github.com/theappliance/appliance/appliance/integrations/autha/authatest"
	"github.com/theappliance/appliance/appliance/integrations/authb/authbtest"
	"github.com/theappliance/appliance/appliance/integrations/authc/authctest"
	"github.com/theappliance/appliance/appliance/integrations/deployb/deploybtest"
	"github.com/theappliance/appliance/appliance/integrations/edgec/edgectest"
	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// waitIntegrationJobs waits for every job of type typ of the project (the first skip of them left out) and
// fails unless each completed; it returns how many there are.
func waitIntegrationJobs(t *testing.T, e *appliancetest.Env, projectID, typ string, skip ...int) int {
	t.Helper()
	jobs := integrationJobs(t, e, projectID, typ)
	if len(skip) > 0 {
		jobs = jobs[skip[0]:]
	}
	for _, j := range jobs {
		if j := e.WaitJob(t, j.ID); j.State != scheduler.StateCompleted {
			t.Fatalf("%s job %s: %s: %s", typ, j.ID, j.State, j.Error)
		}
	}
	return len(jobs)
}

// receive delivers a webhook and fails unless it is received.
func receive(t *testing.T, e *appliancetest.Env, name, projectID string, h http.Header, body []byte) {
	t.Helper()
	if r, err := e.Svc.Integrations().Receive(t.Context(), name, projectID, h, bytes.NewReader(body)); err != nil || !r.Received {
		t.Fatalf("%s webhook: %v", name, err)
	}
}

// refused delivers a webhook that must be refused as unsigned (401) and enqueue nothing.
func refused(t *testing.T, e *appliancetest.Env, name, projectID string, h http.Header, body []byte) {
	t.Helper()
	before := len(integrationJobs(t, e, projectID, integrations.JobUserEvent)) + len(integrationJobs(t, e, projectID, integrations.JobDeploy))
	_, err := e.Svc.Integrations().Receive(t.Context(), name, projectID, h, bytes.NewReader(body))
	if apperr.KindOf(err) != apperr.KindUnauthenticated {
		t.Fatalf("a badly signed %s webhook: %v", name, err)
	}
	if after := len(integrationJobs(t, e, projectID, integrations.JobUserEvent)) + len(integrationJobs(t, e, projectID, integrations.JobDeploy)); after != before {
		t.Fatalf("a badly signed %s webhook enqueued a job", name)
	}
}

// syncedRows are the rows of a synced users' table, id → email ("" for null), read as the project's role.
func syncedRows(t *testing.T, c *pgx.Conn, table string) map[string]string {
	t.Helper()
	rows, err := c.Query(t.Context(), "SELECT id, coalesce(email, '') FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var id, email string
		if err := rows.Scan(&id, &email); err != nil {
			t.Fatal(err)
		}
		out[id] = email
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestIntegrationProviders drives the real deploy_b, edge_c, auth_a, auth_b and auth_c providers
// (appliance.IntegrationProviders) against their local fakes through the integrations area, on one
// project: deploy_b's variables arrive for the production context, a signed branch deploy notification
// makes the branch's preview database and sets the branch's values, a redelivery does nothing again;
// edge_c's Hyperdrive refuses the appliance's loopback host with a clear error, its worker_secret mode
// sets the script's secrets; auth_a backfills more users than a page into auth_sync.users (read as the
// project's role), then Svix-signed events delivered shuffled converge to the last change of each user;
// auth_b's log stream (a bearer) and auth_c's Directory Sync events (t=,v1=) become rows of their own
// tables; badly signed webhooks are 401 and change nothing.
func TestIntegrationProviders(t *testing.T) {
	t.Parallel()
	netlify, cloudflare := deploybtest.Start(t), edgectest.Start(t)
	clerk := authatest.New(t, "sk_test_clerk")
	auth0 := authbtest.New(t, "tenant.eu.auth0.com", "m2m-client", "m2m-secret")
	workos := authctest.New(t, "sk_test_workos")
	e, p := keyEnv(t, appliancetest.Options{Instances: true, IntegrationBaseURLs: map[string]string{provider.DeployB: netlify.URL(),
		provider.EdgeC: cloudflare.URL(), provider.AuthA: clerk.URL, provider.AuthB: auth0.URL, provider.AuthC: workos.URL}})
	prj := provision(t, e, p, "stack", "development")
	svc := e.Svc.Integrations()
	conns, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}

	// deploy_b: the production context's values.
	const jws = "netlify-jws-secret"
	cb, err := svc.ConnectDeployB(t.Context(), p, prj.ID, &api.ConnectDeployBRequest{SiteID: netlify.SiteID, Token: netlify.Token, WebhookSecret: jws})
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, cb.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("deploy_b sync: %s", j.Error)
	}
	pooled, okP := netlify.Value("DATABASE_URL", "production", "")
	direct, okD := netlify.Value("DIRECT_URL", "production", "")
	if !okP || !okD || withCA(pooled, e) != conns.Connections.PooledURL || withCA(direct, e) != conns.Connections.DirectURL {
		t.Fatalf("deploy_b production values %q %q; the project's %q %q", pooled, direct, conns.Connections.PooledURL, conns.Connections.DirectURL)
	}
	if i := integrationOfProvider(t, e, p, prj.ID, provider.DeployB); i.State != api.IntegrationActive || strings.Join(i.Pushed, ",") != "DATABASE_URL,DIRECT_URL" {
		t.Fatalf("deploy_b after connect: %+v", i)
	}
	// A branch deploy: its preview database and the branch's values; the redelivery does nothing again.
	h, body := deploybtest.Notification(jws, deploybtest.Deploy{ID: "dpl_1", SiteID: netlify.SiteID, State: "building", Branch: "feature-x", Context: "branch-deploy"})
	bad, _ := deploybtest.Notification("another secret", deploybtest.Deploy{ID: "dpl_2", SiteID: netlify.SiteID, State: "building", Branch: "evil", Context: "branch-deploy"})
	refused(t, e, provider.DeployB, prj.ID, bad, body)
	receive(t, e, provider.DeployB, prj.ID, h, body)
	receive(t, e, provider.DeployB, prj.ID, h, body)
	if n := waitIntegrationJobs(t, e, prj.ID, integrations.JobDeploy); n != 1 {
		t.Fatalf("%d deploy jobs for one notification delivered twice", n)
	}
	i := integrationOfProvider(t, e, p, prj.ID, provider.DeployB)
	if len(i.Previews) != 1 || i.Previews[0].Branch != "feature-x" {
		t.Fatalf("deploy_b previews: %+v", i.Previews)
	}
	pc, err := e.Svc.Previews().Connections(t.Context(), p, i.Previews[0].PreviewID)
	if err != nil {
		t.Fatal(err)
	}
	branchDirect, ok := netlify.Value("DIRECT_URL", "branch", "feature-x")
	if !ok || withCA(branchDirect, e) != pc.Connections.DirectURL {
		t.Fatalf("the branch's DIRECT_URL %q, its preview's %q", branchDirect, pc.Connections.DirectURL)
	}
	bc := connect(t, withCA(branchDirect, e))
	if n := scalar[int32](t, bc, "SELECT 1"); n != 1 {
		t.Fatal("the branch's URL does not connect")
	}
	bc.Close(t.Context())
	if v, _ := netlify.Value("DATABASE_URL", "production", ""); v != pooled {
		t.Fatalf("the branch deploy changed production's value: %q", v)
	}
	// The branch's preview lives a week after its last deployment: made so, and extended by the next
	// deployment (the same preview, a day later on the service's clock).
	prv := previewOf(t, e, p, prj.ID, i.Previews[0].PreviewID)
	if d := prv.TTLExpiresAt.Sub(prv.CreatedAt); d < (integrations.BranchPreviewTTLHours-1)*time.Hour {
		t.Fatalf("the branch's preview expires %s after its creation; want %dh", d, integrations.BranchPreviewTTLHours)
	}
	later := time.Now().Add(24 * time.Hour)
	e.Clock.Set(func() time.Time { return later })
	h2, body2 := deploybtest.Notification(jws, deploybtest.Deploy{ID: "dpl_1", SiteID: netlify.SiteID, State: "ready", Branch: "feature-x", Context: "branch-deploy"})
	receive(t, e, provider.DeployB, prj.ID, h2, body2)
	waitIntegrationJobs(t, e, prj.ID, integrations.JobDeploy)
	e.Clock.Set(time.Now)
	if i2 := integrationOfProvider(t, e, p, prj.ID, provider.DeployB); len(i2.Previews) != 1 || i2.Previews[0].PreviewID != i.Previews[0].PreviewID {
		t.Fatalf("the branch's second deployment: previews %+v, want the same %s", i2.Previews, i.Previews[0].PreviewID)
	}
	if again := previewOf(t, e, p, prj.ID, i.Previews[0].PreviewID); !again.TTLExpiresAt.After(prv.TTLExpiresAt.Add(23 * time.Hour)) {
		t.Fatalf("the branch's next deployment left its preview's expiry at %s (was %s)", again.TTLExpiresAt, prv.TTLExpiresAt)
	}
	// A branch whose preview cannot be made (the plan allows one preview, which feature-x has): that
	// branch records why, the integration stays active, and feature-x keeps its preview.
	if err := e.DB.Update(func(tx *store.Tx) error {
		plan, err := store.Plans.Get(tx, prj.Plan)
		if err != nil {
			return err
		}
		plan.PreviewsLimit = 1
		return store.Plans.Put(tx, plan)
	}); err != nil {
		t.Fatal(err)
	}
	h3, body3 := deploybtest.Notification(jws, deploybtest.Deploy{ID: "dpl_3", SiteID: netlify.SiteID, State: "building", Branch: "feature-y", Context: "branch-deploy"})
	receive(t, e, provider.DeployB, prj.ID, h3, body3)
	jobs := integrationJobs(t, e, prj.ID, integrations.JobDeploy)
	if j := e.WaitJob(t, jobs[len(jobs)-1].ID); j.State != scheduler.StateFailed || !strings.Contains(j.Error, "preview quota") {
		t.Fatalf("the deployment of a branch over the previews limit: %s: %s", j.State, j.Error)
	}
	i3 := integrationOfProvider(t, e, p, prj.ID, provider.DeployB)
	if i3.State != api.IntegrationActive || len(i3.Previews) != 2 || i3.Previews[0].Branch != "feature-x" || i3.Previews[0].PreviewID == "" ||
		i3.Previews[1].Branch != "feature-y" || i3.Previews[1].PreviewID != "" || !strings.Contains(i3.Previews[1].Error, "preview quota") {
		t.Fatalf("after a branch over the limit: %+v", i3)
	}

	// edge_c: Hyperdrive cannot reach a loopback host (a clear error, not retried); worker_secret can.
	ce, err := svc.ConnectEdgeC(t.Context(), p, prj.ID, &api.ConnectEdgeCRequest{AccountID: cloudflare.AccountID, APIToken: cloudflare.Token})
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, ce.Job.ID); j.State != scheduler.StateFailed || j.Attempts != 1 || !strings.Contains(j.Error, "public host name") {
		t.Fatalf("hyperdrive with a loopback host: %s after %d attempts: %s", j.State, j.Attempts, j.Error)
	}
	if i := integrationOfProvider(t, e, p, prj.ID, provider.EdgeC); i.State != api.IntegrationError || !strings.Contains(i.LastError, "worker_secret") {
		t.Fatalf("edge_c after hyperdrive: %+v", i)
	}
	ce, err = svc.ConnectEdgeC(t.Context(), p, prj.ID, &api.ConnectEdgeCRequest{AccountID: cloudflare.AccountID, APIToken: cloudflare.Token,
		Config: json.RawMessage(`{"mode":"worker_secret","script":"my-worker"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, ce.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("edge_c worker_secret: %s", j.Error)
	}
	if s := cloudflare.Secrets("my-worker"); withCA(s["DATABASE_URL"], e) != conns.Connections.PooledURL || withCA(s["DIRECT_URL"], e) != conns.Connections.DirectURL {
		t.Fatalf("the worker's secrets: %v", s)
	}

	// auth_a: a backfill of more users than a page, read as the project's role.
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const nUsers = 230 // Clerk's page is 100
	for k := range nUsers {
		clerk.Put(authatest.User{ID: fmt.Sprintf("user_%03d", k), Email: fmt.Sprintf("u%d@example.com", k), CreatedAt: t0, UpdatedAt: t0})
	}
	const whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	ca, err := svc.ConnectAuthA(t.Context(), p, prj.ID, &api.ConnectAuthARequest{SecretKey: "sk_test_clerk", WebhookSecret: whsec})
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, ca.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("auth_a backfill: %s", j.Error)
	}
	app := connect(t, conns.Connections.DirectURL)
	defer app.Close(t.Context())
	if role := scalar[string](t, app, "SELECT current_user"); role != prj.RoleName {
		t.Fatalf("connected as %s, not the project's role", role)
	}
	if rows := syncedRows(t, app, "auth_sync.users"); len(rows) != nUsers || rows["user_229"] != "u229@example.com" {
		t.Fatalf("auth_a backfilled %d rows", len(rows))
	}
	// Histories of a few users, delivered shuffled (each signed by the standardwebhooks library at the
	// appliance's clock): the table converges to each user's last change.
	type delivery struct {
		id   string
		body []byte
	}
	var ds []delivery
	want := map[string]string{}
	for k := range 6 {
		id := fmt.Sprintf("user_%03d", k)
		for v := 1; v <= 4; v++ {
			at := t0.Add(time.Duration(v) * time.Minute)
			u := authatest.User{ID: id, Email: fmt.Sprintf("u%d.v%d@example.com", k, v), CreatedAt: t0, UpdatedAt: at}
			typ := "user.updated"
			if k%3 == 0 && v == 4 {
				typ = "user.deleted" // the last change of users 0 and 3 deletes them
			}
			ds = append(ds, delivery{fmt.Sprintf("msg_%s_%d", id, v), authatest.EventBody(typ, u, at)})
			want[id] = u.Email
			if typ == "user.deleted" {
				want[id] = ""
			}
		}
	}
	rand.New(rand.NewPCG(30, 1)).Shuffle(len(ds), func(a, b int) { ds[a], ds[b] = ds[b], ds[a] })
	refused(t, e, provider.AuthA, prj.ID, authatest.Sign(t, "whsec_b3RoZXIgc2VjcmV0IG90aGVyIHNlY3JldA==", "msg_bad", e.Clock.Now(), ds[0].body), ds[0].body)
	for _, d := range ds {
		receive(t, e, provider.AuthA, prj.ID, authatest.Sign(t, whsec, d.id, e.Clock.Now(), d.body), d.body)
	}
	receive(t, e, provider.AuthA, prj.ID, authatest.Sign(t, whsec, ds[0].id, e.Clock.Now(), ds[0].body), ds[0].body) // a redelivery
	if n := waitIntegrationJobs(t, e, prj.ID, integrations.JobUserEvent); n != len(ds) {
		t.Fatalf("%d user event jobs for %d events", n, len(ds))
	}
	rows := syncedRows(t, app, "auth_sync.users")
	for id, email := range want {
		got, present := rows[id]
		if email == "" && present || email != "" && got != email {
			t.Errorf("%s: %q (present %v), want %q", id, got, present, email)
		}
	}
	if len(rows) != nUsers-2 {
		t.Fatalf("%d rows after two deletions", len(rows))
	}

	// auth_b: credentials by PUT (the client credentials grant at the tenant), a table of its own; a log
	// stream delivery with its bearer: a signup (read afresh from the API) and a deletion.
	syncs := len(integrationJobs(t, e, prj.ID, integrations.JobSync)) // edge_c's failed one among them
	old := authbtest.User{ID: "auth0|old", Email: "old@example.com", CreatedAt: t0, UpdatedAt: t0}
	auth0.Put(old)
	if _, err := svc.Put(t.Context(), p, prj.ID, provider.AuthB, &api.PutIntegrationRequest{Config: json.RawMessage(`{"table":"auth0_users"}`),
		Credentials: &api.IntegrationCredentials{ExternalID: auth0.Domain, ClientID: "m2m-client", ClientSecret: "m2m-secret", WebhookSecret: "stream-token"}}); err != nil {
		t.Fatal(err)
	}
	syncs += waitIntegrationJobs(t, e, prj.ID, integrations.JobSync, syncs)
	if rows := syncedRows(t, app, "auth_sync.auth0_users"); len(rows) != 1 || rows["auth0|old"] != "old@example.com" {
		t.Fatalf("auth_b backfill: %v", rows)
	}
	fresh := authbtest.User{ID: "auth0|new", Email: "new@example.com", CreatedAt: t0.Add(time.Hour), UpdatedAt: t0.Add(time.Hour)}
	auth0.Put(fresh)
	auth0.Delete(old.ID)
	batch := authbtest.LogBatch(authbtest.SignupLog("log_1", fresh, t0.Add(time.Hour)), authbtest.DeletionLog("log_2", old.ID, t0.Add(2*time.Hour)))
	refused(t, e, provider.AuthB, prj.ID, authbtest.Headers("not-the-token"), batch)
	receive(t, e, provider.AuthB, prj.ID, authbtest.Headers("stream-token"), batch)
	waitIntegrationJobs(t, e, prj.ID, integrations.JobUserEvent)
	if rows := syncedRows(t, app, "auth_sync.auth0_users"); len(rows) != 1 || rows["auth0|new"] != "new@example.com" {
		t.Fatalf("auth_b after the log stream: %v", rows)
	}

	// auth_c: credentials by PUT, Directory Sync events signed t=,v1=.
	const dir = "directory_01"
	w1 := authctest.User{ID: "directory_user_1", Directory: dir, Email: "w1@example.com", CreatedAt: t0, UpdatedAt: t0}
	w2 := authctest.User{ID: "directory_user_2", Directory: dir, Email: "w2@example.com", CreatedAt: t0, UpdatedAt: t0}
	workos.Put(w1)
	workos.Put(w2)
	if _, err := svc.Put(t.Context(), p, prj.ID, provider.AuthC, &api.PutIntegrationRequest{Config: json.RawMessage(`{"schema":"directory","table":"people"}`),
		Credentials: &api.IntegrationCredentials{Token: "sk_test_workos", ExternalID: dir, WebhookSecret: "workos-secret"}}); err != nil {
		t.Fatal(err)
	}
	waitIntegrationJobs(t, e, prj.ID, integrations.JobSync, syncs)
	if rows := syncedRows(t, app, "directory.people"); len(rows) != 2 {
		t.Fatalf("auth_c backfill: %v", rows)
	}
	w1.Email, w1.UpdatedAt = "w1.new@example.com", t0.Add(time.Hour)
	upd := authctest.EventBody("event_1", "dsync.user.updated", w1, t0.Add(time.Hour))
	del := authctest.EventBody("event_2", "dsync.user.deleted", w2, t0.Add(time.Hour))
	forged := authctest.Sign("workos-secret", e.Clock.Now(), upd)
	refused(t, e, provider.AuthC, prj.ID, forged, del) // a signature of another body
	refused(t, e, provider.AuthC, prj.ID, authctest.Sign("workos-secret", e.Clock.Now().Add(-10*time.Minute), upd), upd)
	receive(t, e, provider.AuthC, prj.ID, authctest.Sign("workos-secret", e.Clock.Now(), upd), upd)
	receive(t, e, provider.AuthC, prj.ID, authctest.Sign("workos-secret", e.Clock.Now(), del), del)
	waitIntegrationJobs(t, e, prj.ID, integrations.JobUserEvent)
	if rows := syncedRows(t, app, "directory.people"); len(rows) != 1 || rows["directory_user_1"] != "w1.new@example.com" {
		t.Fatalf("auth_c after its events: %v", rows)
	}
	for _, name := range []string{provider.AuthA, provider.AuthB, provider.AuthC, provider.DeployB} {
		if i := integrationOfProvider(t, e, p, prj.ID, name); i.State != api.IntegrationActive {
			t.Errorf("%s: %+v", name, i)
		}
	}
}

// previewOf reads one preview database of a project.
func previewOf(t *testing.T, e *appliancetest.Env, p *appliance.Principal, projectID, id string) *api.PreviewDatabase {
	t.Helper()
	l, err := e.Svc.Previews().List(t.Context(), p, projectID)
	if err != nil {
		t.Fatal(err)
	}
	for _, prv := range l.PreviewDatabases {
		if prv.ID == id {
			return prv
		}
	}
	t.Fatalf("preview %s is not among its project's", id)
	return nil
}
