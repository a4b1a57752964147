package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/identity"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/observe"
	"github.com/theappliance/appliance/appliance/webhook"
	"github.com/theappliance/appliance/store"
)

// fixtures are real resources for every path parameter of the route table, so that a call with full
// rights reaches the handler (neither 401, 403 nor 404) and a refusal can only come from the credential.
type fixtures struct {
	b            *bundle
	prjA, prjB   *store.Project // two projects of the organization; path parameters name prjA's resources
	prjF         *store.Project // follows a source: the imports/follow routes act on it (see routeParams)
	ownerSession string         // a session of the organization's owner (for session-only routes)
	operator     string         // a platform operator's session (for the operators' routes)
	params       map[string]fixtureParam
	query        map[string]string                  // values of required query parameters
	routeQuery   map[string]map[string]string       // "METHOD /path" → values overriding query for that route
	routeParams  map[string]map[string]fixtureParam // "METHOD /path" → path parameters overriding params
	bodies       map[string]any                     // "METHOD /path" → body of a call that succeeds
	headers      map[string]http.Header             // "METHOD /path" → request headers a call needs
	signed       map[string]func() http.Header      // "METHOD /path" → headers made at each call (a signature now)
	claimToken   string                             // of the ephemeral database the claim route claims
	serviceToken string                             // a service token (the program applications' route)
	revokedToken string                             // a revoked service token
}

// header is the request's headers: the credential's, and those the route's fixture needs.
func (f *fixtures) header(rt Route, cred string) http.Header {
	h := bearer(cred)
	extra := f.headers[rt.Method+" "+rt.Path]
	if sign := f.signed[rt.Method+" "+rt.Path]; sign != nil {
		extra = sign()
	}
	for k, v := range extra {
		if h == nil {
			h = http.Header{}
		}
		h[k] = v
	}
	return h
}

// fixtureParam is a path parameter's value and the project its resource belongs to ("" for none).
type fixtureParam struct{ value, project string }

func newFixtures(b *bundle) *fixtures {
	b.t.Helper()
	f := &fixtures{b: b, prjA: b.provision("alpha", "development"), prjB: b.project("beta", "development")}
	// An extension at an older version: disabling and updating it are real operations.
	f.installOldExtension("hstore", "1.7")
	f.ownerSession = b.session("owner")
	f.operator = b.session("platform-admin")
	job := b.job(f.prjA.ID, "project.apply_plan")
	spare := b.keyRecord(b.key("", api.ScopeProjectsRead))
	login := b.do("POST", "/v1/cli/login/sessions", "", map[string]any{"device_name": "fixture"})
	if login.status != http.StatusCreated {
		b.t.Fatalf("start CLI login: %d %s", login.status, login.body)
	}
	email, password := b.user("member")
	var memberID string
	if err := b.db.View(func(tx *store.Tx) error {
		u, err := store.Users.First(tx, store.UsersByEmail, email)
		if err == nil {
			memberID = u.ID
		}
		return err
	}); err != nil {
		b.t.Fatal(err)
	}
	f.params = map[string]fixtureParam{
		"userID":        {value: memberID},
		"orgID":         {value: b.org.ID},
		"projectID":     {value: f.prjA.ID, project: f.prjA.ID},
		"jobID":         {value: job.ID, project: f.prjA.ID},
		"keyID":         {value: spare.ID},
		"sessionID":     {value: login.json["session_id"].(string)},
		"extensionName": {value: "hstore", project: f.prjA.ID},
	}
	// A running key-value store of prjA.
	kv := b.do("POST", "/v1/projects/"+f.prjA.ID+"/kv", b.adminKey, nil)
	if kv.status != http.StatusAccepted {
		b.t.Fatalf("create key-value store: %d %s", kv.status, kv.body)
	}
	if j := b.env.WaitJob(b.t, kv.json["job"].(map[string]any)["id"].(string)); j.State != "completed" {
		b.t.Fatalf("kv.create job %s: %s", j.State, j.Error)
	}
	rp := b.do("POST", "/v1/projects/"+f.prjA.ID+"/restore-points", b.adminKey, map[string]any{"label": "fixture"})
	if rp.status != http.StatusCreated {
		b.t.Fatalf("create restore point: %d %s", rp.status, rp.body)
	}
	f.params["restorePointID"] = fixtureParam{value: rp.json["restore_point"].(map[string]any)["id"].(string), project: f.prjA.ID}
	sq := b.do("POST", "/v1/projects/"+f.prjA.ID+"/saved-queries", b.adminKey, map[string]any{"name": "fixture", "sql": "SELECT 1"})
	if sq.status != http.StatusCreated {
		b.t.Fatalf("create saved query: %d %s", sq.status, sq.body)
	}
	f.params["queryID"] = fixtureParam{value: sq.json["saved_query"].(map[string]any)["id"].(string), project: f.prjA.ID}
	f.params["runID"] = fixtureParam{value: "fixture-run", project: f.prjA.ID}
	// Sign-up open (POST /v1/signup succeeds), a sign-up invite (operators'), and the organization's
	// referral code.
	if err := b.svc.Tenancy().SetSignupMode(api.SignupModeOpen); err != nil {
		b.t.Fatal(err)
	}
	if inv := b.do("POST", "/v1/signup-invites", f.operator, map[string]any{}); inv.status != http.StatusCreated {
		b.t.Fatalf("mint a sign-up invite: %d %s", inv.status, inv.body)
	} else {
		f.params["inviteID"] = fixtureParam{value: inv.json["signup_invite"].(map[string]any)["id"].(string)}
	}
	// An invite the organization's owner minted, for the organization's revoke route.
	var orgInviteID string
	if inv := b.do("POST", "/v1/organizations/"+b.org.ID+"/signup-invites", b.adminKey, map[string]any{}); inv.status != http.StatusCreated {
		b.t.Fatalf("mint an organization's sign-up invite: %d %s", inv.status, inv.body)
	} else {
		orgInviteID = inv.json["signup_invite"].(map[string]any)["id"].(string)
	}
	if rc := b.do("POST", "/v1/organizations/"+b.org.ID+"/referral-code", b.adminKey, map[string]any{}); rc.status != http.StatusOK {
		b.t.Fatalf("make the referral code: %d %s", rc.status, rc.body)
	}
	// A completed export of prjA, and a signed download URL for it (valid 15 minutes).
	ex := b.do("POST", "/v1/projects/"+f.prjA.ID+"/exports", b.adminKey, nil)
	if ex.status != http.StatusAccepted {
		b.t.Fatalf("create export: %d %s", ex.status, ex.body)
	}
	if j := b.env.WaitJob(b.t, ex.json["job"].(map[string]any)["id"].(string)); j.State != "completed" {
		b.t.Fatalf("export job %s: %s %s", j.State, j.Error, j.LastStderr)
	}
	exportID := ex.json["export_id"].(string)
	f.params["exportID"] = fixtureParam{value: exportID, project: f.prjA.ID}
	dl := b.do("GET", "/v1/projects/"+f.prjA.ID+"/exports/"+exportID+"/download", b.adminKey, nil)
	if dl.status != http.StatusOK {
		b.t.Fatalf("export download URL: %d %s", dl.status, dl.body)
	}
	dlURL, err := url.Parse(dl.json["download"].(map[string]any)["download_url"].(string))
	if err != nil {
		b.t.Fatal(err)
	}
	f.query = map[string]string{"poll_token": login.json["poll_token"].(string), "target_major": "16",
		"expires": dlURL.Query().Get("expires"), "sig": dlURL.Query().Get("sig")}
	// Two uploads of prjA: one holding prjA's export (for the import), one pending (for the PUT).
	f.routeQuery = map[string]map[string]string{"GET /v1/projects/{projectID}/events": {"follow": "false"}, "GET /v1/organizations/{orgID}/events": {"follow": "false"},
		"GET /v1/projects/{projectID}/logs/stream": {"follow": "false"}}
	for i, pending := range []bool{false, true} {
		up := b.do("POST", "/v1/projects/"+f.prjA.ID+"/imports/uploads", b.adminKey, nil)
		if up.status != http.StatusCreated {
			b.t.Fatalf("create upload: %d %s", up.status, up.body)
		}
		upURL, err := url.Parse(up.json["upload"].(map[string]any)["upload_url"].(string))
		if err != nil {
			b.t.Fatal(err)
		}
		if pending {
			f.params["uploadID"] = fixtureParam{value: up.json["upload"].(map[string]any)["id"].(string), project: f.prjA.ID}
			f.routeQuery["PUT /v1/uploads/imports/{uploadID}"] = map[string]string{"expires": upURL.Query().Get("expires"), "sig": upURL.Query().Get("sig")}
			continue
		}
		dump := b.do("GET", dlURL.RequestURI(), "", nil)
		if dump.status != http.StatusOK || len(dump.body) == 0 {
			b.t.Fatalf("download export %d: %d", i, dump.status)
		}
		if put := b.do("PUT", upURL.RequestURI(), "", string(dump.body)); put.status != http.StatusOK {
			b.t.Fatalf("upload: %d %s", put.status, put.body)
		}
	}
	// A source ready to be followed, and a third project the imports/preflight and follow routes act on
	// (an abort restores the project it acts on, which would stop prjA's server while later calls need it;
	// and prjA's server may be restarting from an earlier call when the preflight connects).
	src := b.env.StartSource(b.t, "logical")
	src.App(b.t, "shop", "CREATE TABLE items (id int PRIMARY KEY)", "INSERT INTO items SELECT generate_series(1, 10)")
	f.prjF = b.provision("follower", "development", "pro") // its plan allows the previews made on it below
	f.routeParams = map[string]map[string]fixtureParam{}
	f.routeParams["DELETE /v1/organizations/{orgID}/signup-invites/{inviteID}"] = map[string]fixtureParam{"inviteID": {value: orgInviteID}}
	// Invitations: one of the organization's (to withdraw), two to the owner session's user from another
	// organization (to accept and to decline).
	elsewhere, _ := b.otherOrg("fixture-elsewhere")
	invite := func(orgID, userID string) string {
		inv := &store.Invitation{ID: ids.New("inv"), OrganizationID: orgID, UserID: userID, Email: "invited@example.com", Role: "member",
			CreatedAt: time.Now(), ExpiresAt: time.Now().Add(identity.InvitationTTL)}
		if err := b.db.Update(func(tx *store.Tx) error { return store.Invitations.Put(tx, inv) }); err != nil {
			b.t.Fatal(err)
		}
		return inv.ID
	}
	var ownerID string
	if err := b.db.View(func(tx *store.Tx) error {
		sess, err := store.Sessions.First(tx, store.SessionsByHash, ids.Hash(f.ownerSession))
		if err == nil {
			ownerID = sess.UserID
		}
		return err
	}); err != nil {
		b.t.Fatal(err)
	}
	f.params["invitationID"] = fixtureParam{value: invite(b.org.ID, memberID)}
	// The operators' routes suspend and resume another organization, and delete a third with no project
	// (the fixtures' own organization must keep working for the other routes).
	suspendable, _ := b.otherOrg("fixture-suspendable")
	doomed := &store.Organization{ID: ids.New("org"), Name: "Doomed", Slug: "fixture-doomed", BillingPlan: "none", CreatedAt: time.Now(), UpdatedAt: time.Now()}
	if err := b.db.Update(func(tx *store.Tx) error { return store.Organizations.Put(tx, doomed) }); err != nil {
		b.t.Fatal(err)
	}
	f.routeParams["POST /v1/organizations/{orgID}/suspend"] = map[string]fixtureParam{"orgID": {value: suspendable.ID}}
	f.routeParams["POST /v1/organizations/{orgID}/resume"] = map[string]fixtureParam{"orgID": {value: suspendable.ID}}
	f.routeParams["DELETE /v1/organizations/{orgID}"] = map[string]fixtureParam{"orgID": {value: doomed.ID}}
	// The plans' routes make a plan of their own and delete one no fixture project is on.
	f.routeParams["PUT /v1/plans/{name}"] = map[string]fixtureParam{"name": {value: "fixture"}}
	f.routeParams["DELETE /v1/plans/{name}"] = map[string]fixtureParam{"name": {value: "scale"}}
	// Refusing a CLI login needs one still pending: authorizing the shared one (an earlier route) ends it.
	refusable := b.do("POST", "/v1/cli/login/sessions", "", map[string]any{"device_name": "fixture to refuse"})
	if refusable.status != http.StatusCreated {
		b.t.Fatalf("start CLI login: %d %s", refusable.status, refusable.body)
	}
	f.routeParams["POST /v1/cli/login/sessions/{sessionID}/refuse"] = map[string]fixtureParam{"sessionID": {value: refusable.json["session_id"].(string)}}
	f.routeParams["POST /v1/me/invitations/{invitationID}/accept"] = map[string]fixtureParam{"invitationID": {value: invite(elsewhere.ID, ownerID)}}
	f.routeParams["POST /v1/me/invitations/{invitationID}/decline"] = map[string]fixtureParam{"invitationID": {value: invite(elsewhere.ID, ownerID)}}
	for _, path := range []string{"preflight", "follow", "follow/status", "follow/cutover", "follow/abort"} {
		f.routeParams["POST /v1/projects/{projectID}/imports/"+path] = map[string]fixtureParam{"projectID": {value: f.prjF.ID, project: f.prjF.ID}}
	}
	// prjA has a running store; the create acts on prjF, which has none.
	f.routeParams["POST /v1/projects/{projectID}/kv"] = map[string]fixtureParam{"projectID": {value: f.prjF.ID, project: f.prjF.ID}}
	// A preview of prjA (empty: from a spare or initdb, no copy); previews are created on prjF, whose plan
	// allows two (the bound key's and the full-rights call).
	prv := b.preview(f.prjA.ID)
	f.params["previewID"] = fixtureParam{value: prv, project: f.prjA.ID}
	f.routeParams["POST /v1/projects/{projectID}/preview-databases"] = map[string]fixtureParam{"projectID": {value: f.prjF.ID, project: f.prjF.ID}}
	// Cutover requests: the create acts on prjF, for a preview of its own; prjA has an open request for prv
	// (the reject route's) and one for a second preview holding an extension the appliance does not offer
	// (the approve route's: its promotion fails and changes nothing, so prjA keeps its data).
	onF := fixtureParam{value: f.prjF.ID, project: f.prjF.ID}
	f.routeParams["POST /v1/projects/{projectID}/cutover-requests"] = map[string]fixtureParam{"projectID": onF}
	cutPreview := b.preview(f.prjF.ID)
	unpromotable := b.preview(f.prjA.ID)
	if err := b.env.AdminExec(b.t, unpromotable, "CREATE EXTENSION file_fdw"); err != nil {
		b.t.Fatal(err)
	}
	f.params["requestID"] = fixtureParam{value: b.cutoverRequest(f.prjA.ID, prv), project: f.prjA.ID}
	f.routeParams["POST /v1/projects/{projectID}/cutover-requests/{requestID}/approve"] = map[string]fixtureParam{
		"requestID": {value: b.cutoverRequest(f.prjA.ID, unpromotable), project: f.prjA.ID}}
	// Two ephemeral databases: one read and deleted with its claim token, one claimed.
	f.headers = map[string]http.Header{}
	for i, routes := range [][]string{{"GET /v1/ephemeral-databases/{projectID}", "DELETE /v1/ephemeral-databases/{projectID}"},
		{"POST /v1/ephemeral-databases/{projectID}/claim"}} {
		eph := b.do("POST", "/v1/ephemeral-databases", "", map[string]any{"name": fmt.Sprintf("fixture-%d", i)})
		if eph.status != http.StatusCreated {
			b.t.Fatalf("create ephemeral database: %d %s", eph.status, eph.body)
		}
		id := eph.json["ephemeral_database"].(map[string]any)["project_id"].(string)
		token := eph.json["claim_token"].(string)
		for _, rt := range routes {
			f.routeParams[rt] = map[string]fixtureParam{"projectID": {value: id}}
			f.headers[rt] = http.Header{"X-Service-Claim-Token": {token}}
		}
		if i == 1 {
			f.claimToken = token
		}
	}
	// A table of prjA for the studio's table routes, made by the project's role through the console.
	if r := b.do("POST", "/v1/projects/"+f.prjA.ID+"/sql", b.adminKey, map[string]any{"query": "CREATE TABLE fixture_rows (id serial PRIMARY KEY, note text, extra text); INSERT INTO fixture_rows (note) SELECT 'row' FROM generate_series(1, 10)"}); r.status != http.StatusOK {
		b.t.Fatalf("create the studio's table: %d %s", r.status, r.body)
	}
	// A database and a role of prjA made through their endpoints: the drop's and the password reset's.
	for _, r := range []struct{ path, name string }{{"/databases", "fixture_db"}, {"/roles", "fixture_role"}} {
		if res := b.do("POST", "/v1/projects/"+f.prjA.ID+r.path, b.adminKey, map[string]any{"name": r.name}); res.status != http.StatusCreated {
			b.t.Fatalf("create %s %s: %d %s", r.path, r.name, res.status, res.body)
		}
	}
	f.params["databaseName"] = fixtureParam{value: "fixture_db", project: f.prjA.ID}
	f.params["roleName"] = fixtureParam{value: "fixture_role", project: f.prjA.ID}
	f.params["schema"] = fixtureParam{value: "public", project: f.prjA.ID}
	f.params["table"] = fixtureParam{value: "fixture_rows", project: f.prjA.ID}
	f.params["column"] = fixtureParam{value: "extra", project: f.prjA.ID}
	// An alert of prjA and a statement its top-queries snapshots saw (the sampler's records).
	alertID, hash := b.observed(f.prjA)
	f.params["alertID"] = fixtureParam{value: alertID, project: f.prjA.ID}
	f.params["queryHash"] = fixtureParam{value: hash, project: f.prjA.ID}
	// A webhook endpoint on a receiver that accepts everything, and a delivery it took.
	b.env.StartWebhooks(b.t)
	receiver := b.env.Serve(b.t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	ep := b.do("POST", "/v1/organizations/"+b.org.ID+"/webhook-endpoints", b.adminKey, map[string]any{"url": receiver})
	if ep.status != http.StatusCreated {
		b.t.Fatalf("create webhook endpoint: %d %s", ep.status, ep.body)
	}
	endpointID := ep.json["webhook_endpoint"].(map[string]any)["id"].(string)
	f.params["endpointID"] = fixtureParam{value: endpointID}
	f.params["deliveryID"] = fixtureParam{value: b.deliveredTest(endpointID)}
	f.bodies = map[string]any{
		"PUT /v1/plans/{name}": map[string]any{"max_connections": 20, "storage_limit_bytes": 1 << 30, "kv_memory_mb": 32, "previews_limit": 2,
			"ai_uses_per_month": 10, "memory_bytes": 512 << 20, "cpu_cores": 0.5},
		"PATCH /v1/organizations/{orgID}/quota":                                   map[string]any{"projects_limit": 50},
		"POST /v1/organizations/{orgID}/webhook-endpoints":                        map[string]any{"url": receiver + "/another", "event_types": []string{"job.completed"}},
		"PATCH /v1/organizations/{orgID}/webhook-endpoints/{endpointID}":          map[string]any{"description": "fixture"},
		"POST /v1/projects/{projectID}/imports":                                   map[string]any{"confirm": true},
		"POST /v1/projects/{projectID}/imports/preflight":                         map[string]any{"source_url": src.URL("shop")},
		"POST /v1/projects/{projectID}/imports/follow":                            map[string]any{"source_url": src.URL("shop"), "confirm": true},
		"POST /v1/projects/{projectID}/imports/follow/cutover":                    map[string]any{"confirm": true},
		"POST /v1/auth/sessions":                                                  map[string]any{"email": email, "password": password},
		"POST /v1/cli/login/sessions":                                             map[string]any{},
		"PATCH /v1/organizations/{orgID}":                                         map[string]any{"billing_name": "Fixture Ltd"},
		"POST /v1/organizations":                                                  map[string]any{"name": "Fixture Customer"},
		"POST /v1/organizations/{orgID}/suspend":                                  map[string]any{"reason": "fixture"},
		"POST /v1/organizations/{orgID}/api-keys":                                 map[string]any{"name": "fixture", "scopes": []string{"projects:read"}},
		"POST /v1/projects/{projectID}/approvals":                                 map[string]any{"action": "project.delete"},
		"POST /v1/projects":                                                       map[string]any{"name": "fixture"},
		"POST /v1/organizations/{orgID}/members":                                  map[string]any{"email": "new-member@example.com", "role": "member"},
		"PATCH /v1/organizations/{orgID}/members/{userID}":                        map[string]any{"role": "admin"},
		"POST /v1/auth/password":                                                  map[string]any{"current_password": "correct horse battery staple", "new_password": "another correct horse battery"},
		"PATCH /v1/projects/{projectID}":                                          map[string]any{"name": "renamed"},
		"POST /v1/projects/{projectID}/extensions":                                map[string]any{"name": "citext"},
		"POST /v1/projects/{projectID}/backups":                                   map[string]any{"label": "fixture"},
		"POST /v1/projects/{projectID}/restore-points":                            map[string]any{"label": "fixture"},
		"POST /v1/projects/{projectID}/restores":                                  map[string]any{"backup_key": "fixture-no-such-backup"},
		"PUT /v1/projects/{projectID}/scheduled-backups/default":                  map[string]any{"cron_hour": 3, "cron_minute": 0, "is_active": true},
		"POST /v1/ephemeral-databases/{projectID}/claim":                          map[string]any{"claim_token": f.claimToken},
		"POST /v1/projects/{projectID}/preview-databases":                         map[string]any{"mode": "empty"},
		"POST /v1/preview-databases/{previewID}/extend":                           map[string]any{"ttl_hours": 48},
		"POST /v1/projects/{projectID}/cutover-requests":                          map[string]any{"preview_id": cutPreview, "customer_note": "fixture"},
		"POST /v1/projects/{projectID}/cutover-requests/{requestID}/reject":       map[string]any{"rejected_reason": "fixture"},
		"POST /v1/projects/{projectID}/sql":                                       map[string]any{"query": "SELECT 1"},
		"POST /v1/projects/{projectID}/databases":                                 map[string]any{"name": "fixture_new_db"},
		"POST /v1/projects/{projectID}/roles":                                     map[string]any{"name": "fixture_new_role"},
		"POST /v1/projects/{projectID}/saved-queries":                             map[string]any{"name": "another", "sql": "SELECT 2"},
		"PATCH /v1/projects/{projectID}/saved-queries/{queryID}":                  map[string]any{"sql": "SELECT 3"},
		"POST /v1/projects/{projectID}/tables/{schema}/{table}/rows":              map[string]any{"rows": []any{map[string]any{"note": "fixture"}}},
		"PATCH /v1/projects/{projectID}/tables/{schema}/{table}/rows":             map[string]any{"match": map[string]any{"id": 1}, "set": map[string]any{"note": "fixture"}},
		"DELETE /v1/projects/{projectID}/tables/{schema}/{table}/rows":            map[string]any{"match": map[string]any{"id": 2}},
		"POST /v1/projects/{projectID}/tables":                                    map[string]any{"name": "fixture_created", "columns": []any{map[string]any{"name": "id", "type": "int"}}},
		"POST /v1/projects/{projectID}/tables/{schema}/{table}/columns":           map[string]any{"name": "fixture_added", "type": "text"},
		"PATCH /v1/projects/{projectID}/tables/{schema}/{table}/columns/{column}": map[string]any{"default": map[string]any{"value": "x"}},
		"POST /v1/projects/{projectID}/tables/{schema}/{table}/csv":               "note\nfrom a CSV file\n",
	}
	f.stripeWebhook()
	f.programFixtures()
	f.integrationFixtures()
	return f
}

// programFixtures are the programs' routes': two service tokens (one revoked, one for the revoke route),
// the one the submissions use, and two received applications (one to approve, one to reject).
func (f *fixtures) programFixtures() {
	b := f.b
	mint := func(name string) (string, string) {
		r := b.do("POST", "/v1/service-tokens", f.operator, map[string]any{"name": name})
		if r.status != http.StatusCreated {
			b.t.Fatalf("mint service token: %d %s", r.status, r.body)
		}
		return r.json["service_token"].(map[string]any)["id"].(string), r.json["plaintext_token"].(string)
	}
	_, f.serviceToken = mint("fixture website")
	revokedID, revoked := mint("fixture revoked")
	if r := b.do("DELETE", "/v1/service-tokens/"+revokedID, f.operator, nil); r.status != http.StatusOK {
		b.t.Fatalf("revoke service token: %d %s", r.status, r.body)
	}
	f.revokedToken = revoked
	toRevoke, _ := mint("fixture to revoke")
	f.params["tokenID"] = fixtureParam{value: toRevoke}
	apply := func(email string) string {
		r := b.do("POST", "/v1/program-applications", f.serviceToken, programApplication(email))
		if r.status != http.StatusCreated {
			b.t.Fatalf("submit program application: %d %s", r.status, r.body)
		}
		return r.json["program_application"].(map[string]any)["id"].(string)
	}
	f.params["applicationID"] = fixtureParam{value: apply("approve-me@example.com")}
	f.routeParams["POST /v1/program-applications/{applicationID}/reject"] = map[string]fixtureParam{"applicationID": {value: apply("reject-me@example.com")}}
	f.bodies["POST /v1/program-applications"] = programApplication("matrix@example.com")
	f.bodies["POST /v1/program-applications/{applicationID}/approve"] = map[string]any{"percent_off": 25, "duration_months": 3}
	f.bodies["POST /v1/program-applications/{applicationID}/reject"] = map[string]any{"operator_note": "fixture"}
	f.bodies["POST /v1/service-tokens"] = map[string]any{"name": "fixture minted"}
	// The referrals' and sign-up's (the referral code itself is made with the fixtures above).
	f.bodies["PATCH /v1/organizations/{orgID}/referral-code"] = map[string]any{"discount_id": "co_fixture"}
	f.bodies["POST /v1/signup"] = map[string]any{"email": "fixture-signup@example.com", "password": "a long enough password",
		"organization_name": "Fixture sign-up"}
}

// programApplication is a valid submission from email.
func programApplication(email string) map[string]any {
	return map[string]any{"company_name": "Acme Robotics", "contact_name": "Ada Lovelace", "email": email, "segment": "robotics",
		"use_case": "Telemetry of our robot fleet.", "program": "startup", "team_size": 4}
}

// preview makes an empty preview of the project and returns its ID once it is active.
// observed files an alert and a statement text for prj, as the sampler would.
func (b *bundle) observed(prj *store.Project) (alertID, hash string) {
	b.t.Helper()
	alertID, hash = "alr_fixture", strings.Repeat("ab", 16)
	err := b.env.DB.Update(func(tx *store.Tx) error {
		if err := store.ProjectAlerts.Put(tx, &store.ProjectAlert{ID: alertID, ProjectID: prj.ID, OrganizationID: prj.OrganizationID,
			Kind: observe.AlertStorage, Severity: observe.SeverityWarning, Message: "storage at 85% of the limit", TriggeredAt: time.Now()}); err != nil {
			return err
		}
		return store.StatementTexts.Put(tx, &store.StatementText{ID: prj.ID + "/" + hash, ProjectID: prj.ID, Hash: hash, Query: "SELECT 1", LastSeen: time.Now()})
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return alertID, hash
}

func (b *bundle) preview(projectID string) string {
	b.t.Helper()
	r := b.do("POST", "/v1/projects/"+projectID+"/preview-databases", b.adminKey, map[string]any{"mode": "empty"})
	if r.status != http.StatusAccepted {
		b.t.Fatalf("create preview: %d %s", r.status, r.body)
	}
	if j := b.env.WaitJob(b.t, r.json["job"].(map[string]any)["id"].(string)); j.State != "completed" {
		b.t.Fatalf("preview.create job %s: %s", j.State, j.Error)
	}
	return r.json["preview"].(map[string]any)["id"].(string)
}

// cutoverRequest opens a cutover request for the project's preview and returns its ID.
func (b *bundle) cutoverRequest(projectID, previewID string) string {
	b.t.Helper()
	r := b.do("POST", "/v1/projects/"+projectID+"/cutover-requests", b.adminKey, map[string]any{"preview_id": previewID})
	if r.status != http.StatusCreated {
		b.t.Fatalf("request a cutover: %d %s", r.status, r.body)
	}
	return r.json["cutover_request"].(map[string]any)["id"].(string)
}

// deliveredTest sends a webhook.test to the endpoint and returns the delivery once it was delivered.
func (b *bundle) deliveredTest(endpointID string) string {
	b.t.Helper()
	r := b.do("POST", "/v1/organizations/"+b.org.ID+"/webhook-endpoints/"+endpointID+"/test", b.adminKey, nil)
	if r.status != http.StatusOK {
		b.t.Fatalf("test webhook endpoint: %d %s", r.status, r.body)
	}
	id := r.json["delivery"].(map[string]any)["id"].(string)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var d *store.WebhookDelivery
		if err := b.db.View(func(tx *store.Tx) (err error) { d, err = store.WebhookDeliveries.Get(tx, id); return err }); err != nil {
			b.t.Fatal(err)
		}
		if d.State == webhook.DeliveryDelivered {
			return id
		}
		if d.State == webhook.DeliveryFailed || time.Now().After(deadline) {
			b.t.Fatalf("test delivery %s: %s %s", id, d.State, d.LastError)
		}
	}
}

// installOldExtension creates an extension at an old version in prjA's database, as an admin would.
func (f *fixtures) installOldExtension(name, version string) {
	f.b.t.Helper()
	r := f.b.do("GET", "/v1/projects/"+f.prjA.ID+"/connections", f.b.adminKey, nil)
	if r.status != http.StatusOK {
		f.b.t.Fatalf("connections: %d %s", r.status, r.body)
	}
	// The project role may not create untrusted extensions; the admin connection may.
	if err := f.b.env.AdminExec(f.b.t, f.prjA.ID, "CREATE EXTENSION "+name+" VERSION '"+version+"'"); err != nil {
		f.b.t.Fatal(err)
	}
}

// unreachable are routes whose success needs something this machine cannot have; the walk expects their
// refusal (status) instead.
var unreachable = map[string]int{
	"POST /v1/projects/{projectID}/upgrade/major/confirm":  http.StatusConflict, // needs a second PostgreSQL major
	"POST /v1/projects/{projectID}/upgrade/major/rollback": http.StatusConflict,
	// A real restore stops prjA's server while the walk's later calls need it: the walk sends a backup key
	// that names no backup (400). TestOpenAPIResponsesConform restores for real, last, and checks the audit.
	"POST /v1/projects/{projectID}/restores": http.StatusBadRequest,
	// A single node has no other node to restore a project on (cmd's TestClusterNodeLoss: a cluster).
	"POST /v1/projects/{projectID}/restore-elsewhere": http.StatusConflict,
	// Nor a node to move a project to (cmd's TestClusterMove: a cluster).
	"POST /v1/projects/{projectID}/move": http.StatusConflict,
}

// path builds the URL of rt from the fixtures' path parameters and required query parameters.
func (f *fixtures) path(t testing.TB, rt Route) string {
	t.Helper()
	p := pathParam.ReplaceAllStringFunc(rt.Path, func(m string) string {
		name := m[1 : len(m)-1]
		fp, ok := f.param(rt, name)
		if !ok {
			t.Fatalf("no fixture for path parameter {%s} of %s %s: add a real resource to newFixtures", name, rt.Method, rt.Path)
		}
		return url.PathEscape(fp.value)
	})
	q := url.Values{}
	for _, prm := range rt.Query {
		if !prm.Required {
			if v, ok := f.routeQuery[rt.Method+" "+rt.Path][prm.Name]; ok { // e.g. follow=false: streams end
				q.Set(prm.Name, v)
			}
			continue
		}
		v, ok := f.routeQuery[rt.Method+" "+rt.Path][prm.Name]
		if !ok {
			v, ok = f.query[prm.Name]
		}
		if !ok {
			t.Fatalf("no fixture for required query parameter %s of %s %s", prm.Name, rt.Method, rt.Path)
		}
		q.Set(prm.Name, v)
	}
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	return p
}

// param is the fixture of rt's path parameter name.
func (f *fixtures) param(rt Route, name string) (fixtureParam, bool) {
	if fp, ok := f.routeParams[rt.Method+" "+rt.Path][name]; ok {
		return fp, true
	}
	fp, ok := f.params[name]
	return fp, ok
}

// body is what a successful call of rt sends (nil for routes without a body).
func (f *fixtures) body(rt Route) any {
	if b, ok := f.bodies[rt.Method+" "+rt.Path]; ok && (rt.Do.Body != nil || rt.RawBody != "") {
		return b
	}
	if rt.Do.Body == nil {
		return nil
	}
	return map[string]any{}
}

// fullRights is the credential with every right a route can ask for: the organization's admin key, or
// the owner's session for session-only routes ("" for public routes).
func (f *fixtures) fullRights(rt Route) string {
	switch rt.Auth {
	case Public:
		return ""
	case SessionOnly:
		if rt.Operator {
			return f.operator
		}
		return f.ownerSession
	case ServiceToken:
		return f.serviceToken
	}
	return f.b.adminKey
}

// projectOf is the project the resources named by rt's path parameters belong to ("" when none does).
func (f *fixtures) projectOf(rt Route) string {
	for _, m := range pathParam.FindAllStringSubmatch(rt.Path, -1) {
		if fp, _ := f.param(rt, m[1]); fp.project != "" {
			return fp.project
		}
	}
	return ""
}

func bearer(cred string) http.Header {
	if cred == "" {
		return nil
	}
	return http.Header{"Authorization": {"Bearer " + cred}}
}

// projectScopes are the scopes a project-scoped key may carry.
func projectScopes() []api.Scope {
	var out []api.Scope
	for _, s := range api.AllScopes {
		if !appliance.IsOrganizationScope(s) {
			out = append(out, s)
		}
	}
	return out
}

// TestScopeMatrix walks the route table: every authenticated route refuses a missing credential (401),
// a key lacking the route's scope (403), a key bound to another project (403), a project-scoped key on an
// organization route (403) and an API key on a session-only route (403), while the same call with full
// rights is not refused, so the credential is what each refusal is about.
func TestScopeMatrix(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{limits: RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}, instances: true,
		billing: stripeProvider(t)})
	f := newFixtures(b)

	lacking := map[api.Scope]string{} // scope → an organization-wide key with every other scope
	for _, s := range api.AllScopes {
		lacking[s] = b.key("", slices.DeleteFunc(slices.Clone(api.AllScopes), func(x api.Scope) bool { return x == s })...)
	}
	// Keys bound to a project: as the API mints them (project scopes only) and as stored records holding
	// every scope (the HTTP layer must not rely on the service never minting such a key).
	boundA, boundAll := b.key(f.prjA.ID, projectScopes()...), b.rawKey(f.prjA.ID, api.AllScopes...)
	boundB, boundBAll := b.key(f.prjB.ID, projectScopes()...), b.rawKey(f.prjB.ID, api.AllScopes...)
	boundTo := map[string]string{f.prjA.ID: boundA, f.prjF.ID: b.key(f.prjF.ID, projectScopes()...)}
	// A key a member minted through CLI login: refused wherever the member's role lacks the scope (the
	// admin-only actions within the member's scopes are walked by TestMemberKeysNeverExceedTheMember).
	memberKey := b.cliLoginKey(b.session(appliance.RoleMember))

	refused := func(t *testing.T, rt Route, what, cred string, status int, msg string) {
		t.Helper()
		r := b.call(t, rt.Method, f.path(t, rt), f.header(rt, cred), f.body(rt))
		if r.status != status {
			t.Errorf("%s: status %d, want %d\n%s", what, r.status, status, r.body)
			return
		}
		checkErrorShape(t, r)
		if got, _ := r.json["error"].(string); !strings.Contains(got, msg) {
			t.Errorf("%s: error %q does not say %q", what, got, msg)
		}
	}
	// allowed checks that cred is not refused; goneOK accepts 404 and 410 (a delete whose resource an
	// earlier allowed call of the same route deleted). It returns the status.
	allowed := func(t *testing.T, rt Route, what, cred string, goneOK bool) int {
		t.Helper()
		r := b.call(t, rt.Method, f.path(t, rt), f.header(rt, cred), f.body(rt))
		switch {
		case r.status == http.StatusUnauthorized || r.status == http.StatusForbidden:
			t.Errorf("%s: refused with %d, so the refusals above may not be about the credential\n%s", what, r.status, r.body)
		case goneOK && (r.status == http.StatusNotFound || r.status == http.StatusGone):
		case r.status == http.StatusNotFound || r.status == http.StatusMethodNotAllowed:
			t.Errorf("%s: %d: the fixtures do not name real resources\n%s", what, r.status, r.body)
		case r.status >= 500:
			t.Errorf("%s: %d\n%s", what, r.status, r.body)
		}
		return r.status
	}

	for _, rt := range deletesLast(b.api.Routes()) {
		// The jobs earlier calls started (a restart, a backup) end first: a refusal here must be about
		// the credential, not a server that is restarting.
		waitProjectJobs(t, b, f.prjA.ID)
		t.Run(rt.Method+" "+rt.Path, func(t *testing.T) {
			if rt.Auth == Public {
				allowed(t, rt, "public route without a credential", "", false)
				return
			}
			deleted := false // a delete by the bound key: the full-rights call may find the resource gone
			refused(t, rt, "no credential", "", http.StatusUnauthorized, "missing credentials")
			refused(t, rt, "unknown API key", "apl_live_doesnotexist", http.StatusUnauthorized, "invalid API key")
			refused(t, rt, "unknown session", "ses_doesnotexist", http.StatusUnauthorized, "invalid or expired session")
			refused(t, rt, "unknown service token", "svc_doesnotexist", http.StatusUnauthorized, "invalid service token")
			refused(t, rt, "revoked service token", f.revokedToken, http.StatusUnauthorized, "revoked")
			if rt.Auth == ServiceToken {
				// Nothing but a service token: the most privileged key and sessions are refused.
				refused(t, rt, "API key with every scope", b.adminKey, http.StatusForbidden, "service token")
				refused(t, rt, "the organization owner's session", b.session("owner"), http.StatusForbidden, "service token")
				refused(t, rt, "a platform operator's session", f.operator, http.StatusForbidden, "service token")
				allowed(t, rt, "a service token", f.fullRights(rt), false)
				return
			}
			refused(t, rt, "a service token", f.serviceToken, http.StatusForbidden, "only submits program applications")
			for _, sc := range rt.scopes() {
				refused(t, rt, "key with every scope but "+string(sc), lacking[sc], http.StatusForbidden, string(sc))
			}
			if rt.Auth == SessionOnly {
				refused(t, rt, "API key with every scope", b.adminKey, http.StatusForbidden, "session")
			}
			if rt.Operator {
				// A session of its own: the sign-out route may have ended the shared one.
				refused(t, rt, "the organization owner's session", b.session("owner"), http.StatusForbidden, "platform operators")
			}
			for _, sc := range rt.scopes() {
				if rt.Auth != SessionOnly && !appliance.RoleGrants(appliance.RoleMember, sc) {
					refused(t, rt, "key minted by a member", memberKey, http.StatusForbidden, string(sc))
					break
				}
			}
			if rt.OrgLevel {
				refused(t, rt, "key bound to a project (project scopes)", boundA, http.StatusForbidden, "")
				refused(t, rt, "key bound to a project (every scope)", boundAll, http.StatusForbidden, "restricted to project")
			}
			if prj := f.projectOf(rt); prj != "" && !rt.OrgLevel && rt.Auth != SessionOnly {
				refused(t, rt, "key bound to another project (project scopes)", boundB, http.StatusForbidden, "restricted to project")
				refused(t, rt, "key bound to another project (every scope)", boundBAll, http.StatusForbidden, "restricted to project")
				if rt.Scope == "" || !appliance.IsOrganizationScope(rt.Scope) {
					st := allowed(t, rt, "key bound to the route's project", boundTo[prj], false)
					deleted = rt.Method == http.MethodDelete && st >= 200 && st < 300
				}
			}
			allowed(t, rt, "full rights", f.fullRights(rt), deleted)
		})
	}
}
