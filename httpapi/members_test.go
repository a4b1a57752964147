package httpapi

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/identity"
	"github.com/theappliance/appliance/store"
)

// cliLoginKey mints a key the way `appliance login` does: a device login started without credentials,
// authorized by session, then polled for the key.
func (b *bundle) cliLoginKey(session string) string {
	b.t.Helper()
	start := b.do("POST", "/v1/cli/login/sessions", "", map[string]any{"device_name": "laptop"})
	if start.status != http.StatusCreated {
		b.t.Fatalf("start CLI login: %d %s", start.status, start.body)
	}
	login := "/v1/cli/login/sessions/" + start.json["session_id"].(string)
	if r := b.do("POST", login+"/authorize", session, nil); r.status != http.StatusOK {
		b.t.Fatalf("authorize CLI login: %d %s", r.status, r.body)
	}
	r := b.do("GET", login+"?poll_token="+start.json["poll_token"].(string), "", nil)
	key, _ := r.json["plaintext_api_key"].(string)
	if r.status != http.StatusOK || key == "" {
		b.t.Fatalf("poll CLI login: %d %s", r.status, r.body)
	}
	return key
}

// TestMemberKeysNeverExceedTheMember walks the route table with a member's session and the key that
// member minted through CLI login: wherever the session is refused (403), the key is refused too. The
// admin-only actions of spec §Authentication 6 must be among the routes compared.
func TestMemberKeysNeverExceedTheMember(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{instances: true})
	f := newFixtures(b)
	session := b.session("member")
	key := b.cliLoginKey(session)

	compared := map[string]bool{}
	for _, rt := range deletesLast(b.api.Routes()) {
		if rt.Auth != Authenticated {
			continue
		}
		waitProjectJobs(t, b, f.prjA.ID)
		name := rt.Method + " " + rt.Path
		t.Run(name, func(t *testing.T) {
			path, body := f.path(t, rt), f.body(rt)
			if r := b.call(t, rt.Method, path, bearer(session), body); r.status != http.StatusForbidden {
				return // the member may do it (the call was made; the key's is not, to change nothing twice)
			}
			compared[name] = true
			r := b.call(t, rt.Method, path, bearer(key), body)
			if r.status != http.StatusForbidden {
				t.Fatalf("the member's session is refused, the key the member minted is not: %d\n%s", r.status, r.body)
			}
			checkErrorShape(t, r)
		})
	}
	for _, name := range []string{
		"POST /v1/projects", "DELETE /v1/projects/{projectID}", "POST /v1/projects/{projectID}/restores",
		"POST /v1/organizations/{orgID}/api-keys", "DELETE /v1/organizations/{orgID}/api-keys/{keyID}",
		"POST /v1/projects/{projectID}/approvals", "POST /v1/organizations/{orgID}/members",
		"PATCH /v1/organizations/{orgID}/members/{userID}", "DELETE /v1/organizations/{orgID}/members/{userID}",
		"POST /v1/projects/{projectID}/imports", "PATCH /v1/organizations/{orgID}",
		"PUT /v1/projects/{projectID}/scheduled-backups/default", "DELETE /v1/projects/{projectID}/databases/{databaseName}",
	} {
		if !compared[name] {
			t.Errorf("%s: the member's session was not refused, so the walk did not compare the key there", name)
		}
	}
}

// TestKeysActWithTheirCreatorsCurrentRole follows one person through the members API: added as a
// member, their CLI key is refused admin-only actions; promoted, the same key may do them; demoted, it
// may not again; removed, the key and their sessions stop working and the key shows as revoked.
func TestKeysActWithTheirCreatorsCurrentRole(t *testing.T) {
	t.Parallel()
	b := setup(t)
	org := "/v1/organizations/" + b.org.ID
	add := b.do("POST", org+"/members", b.adminKey, map[string]any{"email": "Dana@Example.com", "name": "Dana Müller", "role": "member"})
	if add.status != http.StatusCreated {
		t.Fatalf("add member: %d %s", add.status, add.body)
	}
	member := add.json["member"].(map[string]any)
	uid, password := member["user_id"].(string), add.json["initial_password"].(string)
	if member["email"] != "dana@example.com" || member["role"] != "member" || len(password) < 12 {
		t.Fatalf("added member: %s", add.body)
	}
	signIn := b.do("POST", "/v1/auth/sessions", "", map[string]any{"email": "dana@example.com", "password": password})
	if signIn.status != http.StatusCreated {
		t.Fatalf("the new member signs in with the generated password: %d %s", signIn.status, signIn.body)
	}
	session := signIn.json["token"].(string)
	key := b.cliLoginKey(session)

	createProject := func() *response { return b.do("POST", "/v1/projects", key, map[string]any{"name": "by-dana"}) }
	setRole := func(role string) {
		t.Helper()
		if r := b.do("PATCH", org+"/members/"+uid, b.adminKey, map[string]any{"role": role}); r.status != http.StatusOK {
			t.Fatalf("set role %s: %d %s", role, r.status, r.body)
		}
	}
	if r := createProject(); r.status != http.StatusForbidden || !strings.Contains(r.text(), "admin role") {
		t.Fatalf("a member's key creates a project: %d %s", r.status, r.body)
	}
	// The CLI key got the member's scopes: api_keys:write is not among them, whatever the role becomes.
	createKey := b.do("POST", org+"/api-keys", key, map[string]any{"name": "minted", "scopes": []string{"projects:read"}})
	if createKey.status != http.StatusForbidden || !strings.Contains(createKey.text(), "api_keys:write") {
		t.Fatalf("a member's key creates a key: %d %s", createKey.status, createKey.body)
	}
	setRole("admin")
	if r := createProject(); r.status != http.StatusAccepted {
		t.Fatalf("promoted to admin, the same key creates a project: %d %s", r.status, r.body)
	}
	minted := b.do("POST", org+"/api-keys", session, map[string]any{"name": "ops", "scopes": []string{"api_keys:write", "api_keys:read"}})
	if minted.status != http.StatusCreated {
		t.Fatalf("as admin, Dana mints a key that may mint keys: %d %s", minted.status, minted.body)
	}
	opsKey := minted.json["plaintext_api_key"].(string)
	setRole("member")
	if r := createProject(); r.status != http.StatusForbidden {
		t.Fatalf("demoted again, the key still creates projects: %d %s", r.status, r.body)
	}
	r := b.do("POST", org+"/api-keys", opsKey, map[string]any{"name": "escalate", "scopes": []string{"projects:read"}})
	if r.status != http.StatusForbidden || !strings.Contains(r.text(), "its creator's organization role member does not grant") {
		t.Fatalf("the key Dana minted as admin still mints keys after her demotion: %d %s", r.status, r.body)
	}

	rm := b.do("DELETE", org+"/members/"+uid, b.adminKey, nil)
	if rm.status != http.StatusOK || len(rm.json["revoked_api_key_ids"].([]any)) != 2 {
		t.Fatalf("remove member (their CLI key and the key they minted are revoked): %d %s", rm.status, rm.body)
	}
	for what, cred := range map[string]string{"key": key, "session": session} {
		if r := b.do("GET", "/v1/projects", cred, nil); r.status != http.StatusUnauthorized {
			t.Errorf("the removed member's %s still works: %d %s", what, r.status, r.body)
		}
	}
	list := b.do("GET", org+"/members", b.adminKey, nil)
	for _, m := range list.json["members"].([]any) {
		if m.(map[string]any)["user_id"] == uid {
			t.Errorf("removed member still listed: %s", list.body)
		}
	}
}

// TestMembersRules is the members API's table: who may change whom, and the organization never losing
// its last owner.
func TestMembersRules(t *testing.T) {
	t.Parallel()
	b := setup(t)
	org := "/v1/organizations/" + b.org.ID
	owner, admin, member := b.session("owner"), b.session("admin"), b.session("member")
	ownerID := func() string { // the bootstrap owner
		r := b.do("GET", org+"/members", b.adminKey, nil)
		for _, m := range r.json["members"].([]any) {
			if m := m.(map[string]any); m["email"] == appliance.BootstrapOwnerEmail {
				return m["user_id"].(string)
			}
		}
		t.Fatalf("no bootstrap owner listed: %s", r.body)
		return ""
	}
	add := func(cred, email, role string) *response {
		return b.do("POST", org+"/members", cred, map[string]any{"email": email, "role": role, "password": "correct horse battery staple"})
	}
	if r := add(admin, "m1@example.com", "member"); r.status != http.StatusCreated || r.json["initial_password"] != "" {
		t.Fatalf("an admin adds a member with a chosen password: %d %s", r.status, r.body)
	}
	if r := add(owner, "o2@example.com", "owner"); r.status != http.StatusCreated {
		t.Fatalf("an owner adds an owner: %d %s", r.status, r.body)
	}
	steps := []struct {
		name string
		r    func() *response
		want int
		msg  string
	}{
		{"a member adds a member", func() *response { return add(member, "m2@example.com", "member") }, 403, "organizations:write"},
		{"an admin adds an owner", func() *response { return add(admin, "m3@example.com", "owner") }, 403, "only an owner"},
		{"the same email twice", func() *response { return add(admin, "m1@example.com", "member") }, 409, "already a member"},
		{"an unknown role", func() *response { return add(b.adminKey, "m4@example.com", "root") }, 400, "role"},
		{"a short password", func() *response {
			return b.do("POST", org+"/members", b.adminKey, map[string]any{"email": "m5@example.com", "role": "member", "password": "short"})
		}, 400, "password"},
		{"a bad email", func() *response { return add(b.adminKey, "not an email", "member") }, 400, "email"},
		{"a name with a newline", func() *response {
			return b.do("POST", org+"/members", b.adminKey, map[string]any{"email": "m6@example.com", "role": "member", "name": "a\nb"})
		}, 400, "control characters"},
		{"an admin demotes the owner", func() *response {
			return b.do("PATCH", org+"/members/"+ownerID(), admin, map[string]any{"role": "member"})
		}, 403, "only an owner"},
		{"the last owner demoted", func() *response {
			return b.do("PATCH", org+"/members/"+ownerID(), b.adminKey, map[string]any{"role": "admin"})
		}, 409, "last owner"},
		{"the last owner removed", func() *response { return b.do("DELETE", org+"/members/"+ownerID(), b.adminKey, nil) }, 409, "last owner"},
		{"a member of another organization", func() *response {
			other, _ := b.otherOrg("elsewhere")
			return b.do("GET", "/v1/organizations/"+other.ID+"/members", admin, nil)
		}, 404, "not found"},
	}
	// The session-made owner and the owner it added are more owners: the last-owner steps need the bootstrap owner alone.
	for _, m := range b.do("GET", org+"/members", b.adminKey, nil).json["members"].([]any) {
		if m := m.(map[string]any); m["role"] == "owner" && m["user_id"] != ownerID() {
			if r := b.do("DELETE", org+"/members/"+m["user_id"].(string), b.adminKey, nil); r.status != http.StatusOK {
				t.Fatalf("remove second owner: %d %s", r.status, r.body)
			}
		}
	}
	before := len(b.auditEvents())
	for _, s := range steps {
		r := s.r()
		if r.status != s.want || !strings.Contains(r.text(), s.msg) {
			t.Errorf("%s: %d %s, want %d saying %q", s.name, r.status, r.body, s.want, s.msg)
		}
		checkErrorShape(t, r)
	}
	if after := len(b.auditEvents()); after != before {
		t.Errorf("refused member changes wrote %d audit events", after-before)
	}
}

// TestChangePassword: the current password is checked, the new one works and the old one does not, and
// the user's other sessions end while the one that changed it goes on.
func TestChangePassword(t *testing.T) {
	t.Parallel()
	b := setup(t)
	email, password := b.user("member")
	signIn := func(pw string) *response {
		return b.do("POST", "/v1/auth/sessions", "", map[string]any{"email": email, "password": pw})
	}
	s1, s2 := signIn(password).json["token"].(string), signIn(password).json["token"].(string)
	change := func(cur, next string) *response {
		return b.do("POST", "/v1/auth/password", s1, map[string]any{"current_password": cur, "new_password": next})
	}
	if r := change("wrong password!", "a much longer passphrase"); r.status != http.StatusForbidden {
		t.Fatalf("wrong current password: %d %s", r.status, r.body)
	}
	if r := change(password, strings.Repeat("x", 73)); r.status != http.StatusBadRequest {
		t.Fatalf("73-byte password: %d %s", r.status, r.body)
	}
	r := change(password, "a much longer passphrase")
	if r.status != http.StatusOK || r.json["sessions_revoked"] != float64(1) {
		t.Fatalf("change: %d %s", r.status, r.body)
	}
	if r := b.do("GET", "/v1/me", s2, nil); r.status != http.StatusUnauthorized {
		t.Errorf("the other session survived the change: %d", r.status)
	}
	if r := b.do("GET", "/v1/me", s1, nil); r.status != http.StatusOK {
		t.Errorf("the changing session ended: %d", r.status)
	}
	if r := signIn(password); r.status != http.StatusUnauthorized {
		t.Errorf("old password still signs in: %d", r.status)
	}
	if r := signIn("a much longer passphrase"); r.status != http.StatusCreated {
		t.Errorf("new password does not sign in: %d %s", r.status, r.body)
	}
}

// TestDisplayText: names and labels count characters, refuse control characters everywhere, slugs keep
// or transliterate letters, and a name that would make a reserved PostgreSQL role is refused up front.
func TestDisplayText(t *testing.T) {
	t.Parallel()
	b := setup(t)
	org := "/v1/organizations/" + b.org.ID
	prj := b.project("texts", "development")
	ue := strings.Repeat("ü", 32) // 64 bytes, 32 characters
	cases := []struct {
		name, method, path string
		body               map[string]any
		want               int
		msg                string
	}{
		{"project name of 32 ü", "POST", "/v1/projects", map[string]any{"name": ue}, 202, ""},
		{"project name of 64 ü", "POST", "/v1/projects", map[string]any{"name": ue + ue}, 400, "1 to 63 characters"},
		{"project name with NUL", "POST", "/v1/projects", map[string]any{"name": "a\x00b"}, 400, "control characters"},
		{"project name pg_monitor", "POST", "/v1/projects", map[string]any{"name": "pg_monitor"}, 400, "reserves names starting with pg_"},
		{"project name PG Stats", "POST", "/v1/projects", map[string]any{"name": "PG Stats"}, 400, "pg_"},
		{"project name pg (its rotation role pg_alt)", "POST", "/v1/projects", map[string]any{"name": "pg"}, 400, "pg_alt"},
		{"project name _pg", "POST", "/v1/projects", map[string]any{"name": "_pg"}, 400, "pg_alt"},
		{"project name PG!", "POST", "/v1/projects", map[string]any{"name": "PG!"}, 400, "reserves names starting with pg_"},
		{"project name pgx", "POST", "/v1/projects", map[string]any{"name": "pgx"}, 202, ""},
		{"ephemeral database name pg", "POST", "/v1/ephemeral-databases", map[string]any{"name": "pg"}, 400, "pg_alt"},
		{"project rename with newline", "PATCH", "/v1/projects/" + prj.ID, map[string]any{"name": "a\nb"}, 400, "control characters"},
		{"organization name with tab", "PATCH", org, map[string]any{"name": "a\tb"}, 400, "control characters"},
		{"billing name with NUL", "PATCH", org, map[string]any{"billing_name": "x\x00"}, 400, "control characters"},
		{"key name of 100 ü", "POST", org + "/api-keys", map[string]any{"name": strings.Repeat("ü", 100), "scopes": []string{"projects:read"}}, 201, ""},
		{"key name with newline", "POST", org + "/api-keys", map[string]any{"name": "ci\nkey", "scopes": []string{"projects:read"}}, 400, "control characters"},
		{"backup label with newline", "POST", "/v1/projects/" + prj.ID + "/backups", map[string]any{"label": "a\nb"}, 400, "control characters"},
		{"restore point label with NUL", "POST", "/v1/projects/" + prj.ID + "/restore-points", map[string]any{"label": "a\x00b"}, 400, "control characters"},
		{"CLI login device name with newline", "POST", "/v1/cli/login/sessions", map[string]any{"device_name": "lap\ntop"}, 400, "control characters"},
		{"restore time not RFC 3339", "POST", "/v1/projects/" + prj.ID + "/restores", map[string]any{"restore_time": "yesterday"}, 400, "such as 2026-01-31T12:00:00Z"},
	}
	for _, c := range cases {
		r := b.do(c.method, c.path, b.adminKey, c.body)
		if r.status != c.want || !strings.Contains(r.text(), c.msg) {
			t.Errorf("%s: %d %s, want %d saying %q", c.name, r.status, r.body, c.want, c.msg)
		}
		if strings.Contains(r.text(), "2006-01-02") {
			t.Errorf("%s: the error shows Go's time layout: %s", c.name, r.body)
		}
	}
	for name, slug := range map[string]string{"Café Zürich": "cafe-zurich", "Straße Ø": "strasse-o", "東京 shop": "東京-shop"} {
		r := b.do("POST", "/v1/projects", b.adminKey, map[string]any{"name": name})
		if r.status != http.StatusAccepted {
			t.Fatalf("create %q: %d %s", name, r.status, r.body)
		}
		if got := r.json["project"].(map[string]any)["slug"]; got != slug {
			t.Errorf("slug of %q: %v, want %s", name, got, slug)
		}
	}
}

func (r *response) text() string { return string(r.body) }

// TestBackupScheduleNeedsAdmin: changing the backup schedule or its retention (which deletes backups)
// needs the organization admin role, like restores; members may read it. Before, a member could set
// retention to one day.
func TestBackupScheduleNeedsAdmin(t *testing.T) {
	t.Parallel()
	b := setup(t)
	prj := b.project("sched", "production")
	v := vars{"prj": prj.ID, "member": b.session("member"), "adminSession": b.session("admin"), "admin": b.adminKey}
	memberKey := b.cliLoginKey(v["member"])
	v["memberKey"] = memberKey
	path := "/v1/projects/$prj/scheduled-backups/default"
	oneDay := map[string]any{"cron_hour": 3, "cron_minute": 0, "is_active": true, "retention_days": 1}
	run(t, b, v, []scenario{
		{name: "a member sets retention to one day", method: "PUT", path: path, cred: "$member", body: oneDay, status: 403,
			want: map[string]any{"error": "changing the backup schedule or its retention requires the organization admin role"}},
		{name: "a member's key", method: "PUT", path: path, cred: "$memberKey", body: oneDay, status: 403},
		{name: "a member turns the schedule off", method: "PUT", path: path, cred: "$member", body: map[string]any{"cron_hour": 3, "cron_minute": 0, "is_active": false}, status: 403},
		{name: "nothing changed", method: "GET", path: "/v1/projects/$prj/scheduled-backups", cred: "$member", status: 200, want: map[string]any{"scheduled_backups": arrayLen(0)}},
		{name: "an admin session", method: "PUT", path: path, cred: "$adminSession", body: oneDay, status: 200, want: map[string]any{"scheduled_backup.retention_days": float64(1)}},
		{name: "an admin's key", method: "PUT", path: path, cred: "$admin", body: map[string]any{"cron_hour": 4, "cron_minute": 0, "is_active": true, "retention_days": 14}, status: 200},
	})
}

// TestInviteExistingUser: an organization admin adding the email of another organization's user does
// not add them: it invites them, and until they accept signed in the organization learns neither their
// ID nor their name (not from the answer, the member list, the invitations or the audit trail). Before,
// the user was added at once, without consent, and the answer named their ID and name.
func TestInviteExistingUser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other, _ := b.otherOrg("elsewhere")
	tenant := func(email string) (id, session string) {
		var u *store.User
		if err := b.db.Update(func(tx *store.Tx) (err error) {
			u, err = b.svc.Identity().CreateUser(tx, email, "Secret Name "+email, "correct horse battery staple", false, store.Membership{OrganizationID: other.ID, Role: "owner"})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		r := b.do("POST", "/v1/auth/sessions", "", map[string]any{"email": email, "password": "correct horse battery staple"})
		if r.status != http.StatusCreated {
			t.Fatalf("sign in %s: %d %s", email, r.status, r.body)
		}
		return u.ID, r.json["token"].(string)
	}
	eveID, eve := tenant("eve@elsewhere.example")
	frankID, frank := tenant("frank@elsewhere.example")
	v := vars{"org": b.org.ID, "admin": b.adminKey, "adminSession": b.session("admin"), "member": b.session("member"),
		"eve": eve, "eveID": eveID, "frank": frank, "frankID": frankID}
	org := "/v1/organizations/$org"
	secrets := []string{"$eveID", "Secret Name"}
	run(t, b, v, []scenario{
		{name: "add another tenant's user", method: "POST", path: org + "/members", cred: "$adminSession",
			body: map[string]any{"email": "Eve@Elsewhere.example", "role": "admin"}, status: 201,
			want: map[string]any{"member.user_id": "", "member.name": "", "member.email": "eve@elsewhere.example", "member.role": "admin",
				"initial_password": "", "invitation.id": hasPrefix("inv_"), "invitation.email": "eve@elsewhere.example", "invitation.role": "admin",
				"invitation.organization_id": "$org", "invitation.expires_at": timeIn(identity.InvitationTTL)},
			save: map[string]string{"inv": "invitation.id"}, hide: secrets},
		{name: "invited twice", method: "POST", path: org + "/members", cred: "$admin", body: map[string]any{"email": "eve@elsewhere.example", "role": "member"}, status: 409,
			want: map[string]any{"error": "eve@elsewhere.example is already invited to this organization"}},
		{name: "not a member yet", method: "GET", path: org + "/members", cred: "$admin", status: 200, hide: secrets},
		{name: "the organization's invitations", method: "GET", path: org + "/invitations", cred: "$member", status: 200,
			want: map[string]any{"invitations": arrayLen(1), "invitations.0.id": "$inv", "invitations.0.email": "eve@elsewhere.example"}, hide: secrets},
		{name: "the audit trail", method: "GET", path: org + "/audit-events", cred: "$admin", status: 200, hide: secrets},
		{name: "the invited user's invitations", method: "GET", path: "/v1/me/invitations", cred: "$eve", status: 200,
			want: map[string]any{"invitations": arrayLen(1), "invitations.0.id": "$inv", "invitations.0.role": "admin", "invitations.0.organization_name": b.org.Name}},
		{name: "someone else's invitations", method: "GET", path: "/v1/me/invitations", cred: "$frank", status: 200, want: map[string]any{"invitations": arrayLen(0)}},
		{name: "someone else accepts", method: "POST", path: "/v1/me/invitations/$inv/accept", cred: "$frank", status: 404},
		{name: "a member of the inviting organization accepts", method: "POST", path: "/v1/me/invitations/$inv/accept", cred: "$member", status: 404},
		{name: "accepted with an API key", method: "POST", path: "/v1/me/invitations/$inv/accept", cred: "$admin", status: 403},
		{name: "the invited user accepts", method: "POST", path: "/v1/me/invitations/$inv/accept", cred: "$eve", status: 200,
			want: map[string]any{"member.user_id": "$eveID", "member.role": "admin", "member.email": "eve@elsewhere.example"}},
		{name: "a member now", method: "GET", path: org + "/members", cred: "$admin", status: 200, check: func(t *testing.T, v vars, r *response) {
			if !strings.Contains(string(r.body), v["eveID"]) {
				t.Errorf("the accepted user is not listed: %s", r.body)
			}
		}},
		{name: "no longer pending", method: "GET", path: org + "/invitations", cred: "$admin", status: 200, want: map[string]any{"invitations": arrayLen(0)}},
		{name: "accepted twice", method: "POST", path: "/v1/me/invitations/$inv/accept", cred: "$eve", status: 404},
		{name: "signs in to the organization", method: "POST", path: "/v1/auth/sessions", body: map[string]any{"email": "eve@elsewhere.example", "password": "correct horse battery staple", "organization_id": "$org"}, status: 201,
			want: map[string]any{"role": "admin", "organization_id": "$org"}},

		{name: "invite a second user", method: "POST", path: org + "/members", cred: "$admin", body: map[string]any{"email": "frank@elsewhere.example", "role": "member"}, status: 201,
			save: map[string]string{"inv2": "invitation.id"}, hide: []string{"$frankID"}},
		{name: "a member withdraws it", method: "DELETE", path: org + "/invitations/$inv2", cred: "$member", status: 403},
		{name: "another organization's invitation", method: "DELETE", path: "/v1/organizations/" + other.ID + "/invitations/$inv2", cred: "$admin", status: 404},
		{name: "an admin withdraws it", method: "DELETE", path: org + "/invitations/$inv2", cred: "$adminSession", status: 200, want: map[string]any{"deleted": true}},
		{name: "withdrawn: gone for its user", method: "GET", path: "/v1/me/invitations", cred: "$frank", status: 200, want: map[string]any{"invitations": arrayLen(0)}},
		{name: "invite again", method: "POST", path: org + "/members", cred: "$admin", body: map[string]any{"email": "frank@elsewhere.example", "role": "member"}, status: 201,
			save: map[string]string{"inv3": "invitation.id"}},
	})
	// The user declines: the invitation is gone, and the organization's audit trail does not name them.
	if r := b.do("POST", "/v1/me/invitations/"+v["inv3"]+"/decline", frank, nil); r.status != http.StatusOK {
		t.Fatalf("decline: %d %s", r.status, r.body)
	}
	if r := b.do("GET", "/v1/organizations/"+b.org.ID+"/audit-events?limit=200", b.adminKey, nil); strings.Contains(string(r.body), frankID) {
		t.Errorf("the organization's audit trail names the user who declined: %s", r.body)
	}
	if r := b.do("GET", "/v1/organizations/"+b.org.ID+"/invitations", b.adminKey, nil); r.status != http.StatusOK || len(r.json["invitations"].([]any)) != 0 {
		t.Errorf("after decline: %d %s", r.status, r.body)
	}
	// An expired invitation is refused (410) and not listed.
	r := b.do("POST", "/v1/organizations/"+b.org.ID+"/members", b.adminKey, map[string]any{"email": "frank@elsewhere.example", "role": "member"})
	if r.status != http.StatusCreated {
		t.Fatalf("invite: %d %s", r.status, r.body)
	}
	inv := r.json["invitation"].(map[string]any)["id"].(string)
	moveClock(b, identity.InvitationTTL+time.Minute)
	signIn := b.do("POST", "/v1/auth/sessions", "", map[string]any{"email": "frank@elsewhere.example", "password": "correct horse battery staple"})
	if signIn.status != http.StatusCreated {
		t.Fatalf("sign in: %d %s", signIn.status, signIn.body)
	}
	frank = signIn.json["token"].(string)
	if r := b.do("POST", "/v1/me/invitations/"+inv+"/accept", frank, nil); r.status != http.StatusGone {
		t.Errorf("accept an expired invitation: %d %s", r.status, r.body)
	}
	if r := b.do("GET", "/v1/me/invitations", frank, nil); r.status != http.StatusOK || len(r.json["invitations"].([]any)) != 0 {
		t.Errorf("an expired invitation is listed: %d %s", r.status, r.body)
	}
}
