package httpapi

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/theappliance/appliance/store"
)

// TestSignInToAnswerAnInvitation: a user who belongs to no organization could not sign in, so could not
// accept an invitation. Now one holding a pending invitation signs in to a session of no organization,
// which reads /v1/me, answers its invitations and signs out, and is refused every other route; accepting
// moves the session into the organization it joined. Another user's invitation stays out of its reach.
func TestSignInToAnswerAnInvitation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const password = "correct horse battery staple"
	var lone, other *store.User
	if err := b.db.Update(func(tx *store.Tx) (err error) {
		if lone, err = b.svc.Identity().CreateUser(tx, "lone@example.com", "Lone", password, false); err != nil {
			return err
		}
		other, err = b.svc.Identity().CreateUser(tx, "other@example.com", "Other", password, false)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	signIn := func() *response {
		return b.do("POST", "/v1/auth/sessions", "", map[string]any{"email": lone.Email, "password": password})
	}
	if r := signIn(); r.status != http.StatusForbidden || !strings.Contains(string(r.body), "no organization") {
		t.Fatalf("sign in without an organization or an invitation: %d %s", r.status, r.body)
	}
	invite := func(email string) string {
		r := b.do("POST", "/v1/organizations/"+b.org.ID+"/members", b.adminKey, map[string]any{"email": email, "role": "member"})
		if r.status != http.StatusCreated {
			t.Fatalf("invite %s: %d %s", email, r.status, r.body)
		}
		return r.json["invitation"].(map[string]any)["id"].(string)
	}
	mine, theirs := invite(lone.Email), invite(other.Email)

	r := signIn()
	if r.status != http.StatusCreated || r.json["organization_id"] != "" {
		t.Fatalf("sign in with a pending invitation: %d %s", r.status, r.body)
	}
	session := r.json["token"].(string)

	// Every route but the few marked Unaffiliated refuses the session, whatever it asks (the refusal comes
	// before the path's resources are looked up, so any IDs do).
	param := regexp.MustCompile(`\{[^}]+\}`)
	allowed := map[string]bool{}
	for _, rt := range b.api.Routes() {
		if rt.Auth == Public {
			continue
		}
		name := rt.Method + " " + rt.Path
		if rt.Unaffiliated {
			allowed[name] = true
			continue
		}
		t.Run(name, func(t *testing.T) {
			r := b.call(t, rt.Method, param.ReplaceAllString(rt.Path, "x_1"), bearer(session), map[string]any{})
			want := "belongs to no organization"
			if rt.Auth == ServiceToken { // refuses every session, whatever its organization
				want = "takes a service token"
			}
			if r.status != http.StatusForbidden || !strings.Contains(string(r.body), want) {
				t.Fatalf("a session of no organization: %d %s", r.status, r.body)
			}
			checkErrorShape(t, r)
		})
	}
	want := []string{"GET /v1/me", "DELETE /v1/auth/sessions/current", "GET /v1/me/invitations",
		"POST /v1/me/invitations/{invitationID}/accept", "POST /v1/me/invitations/{invitationID}/decline"}
	if len(allowed) != len(want) {
		t.Errorf("routes open to a session of no organization: %v, want %v", allowed, want)
	}
	for _, w := range want {
		if !allowed[w] {
			t.Errorf("%s is not open to a session of no organization", w)
		}
	}

	if r := b.do("GET", "/v1/me", session, nil); r.status != http.StatusOK || r.json["organization"] != nil || !strings.Contains(string(r.body), lone.ID) {
		t.Errorf("me: %d %s", r.status, r.body)
	}
	if r := b.do("GET", "/v1/me/invitations", session, nil); r.status != http.StatusOK || len(r.json["invitations"].([]any)) != 1 ||
		!strings.Contains(string(r.body), mine) || strings.Contains(string(r.body), theirs) {
		t.Errorf("my invitations: %d %s", r.status, r.body)
	}
	for _, action := range []string{"accept", "decline"} {
		if r := b.do("POST", "/v1/me/invitations/"+theirs+"/"+action, session, nil); r.status != http.StatusNotFound {
			t.Errorf("%s another user's invitation: %d %s", action, r.status, r.body)
		}
	}
	if r := b.do("GET", "/v1/me/invitations", "", nil); r.status != http.StatusUnauthorized {
		t.Errorf("invitations without a session: %d %s", r.status, r.body)
	}

	// Accepting moves the session into the organization: the same token now works as a member's.
	if r := b.do("POST", "/v1/me/invitations/"+mine+"/accept", session, nil); r.status != http.StatusOK {
		t.Fatalf("accept: %d %s", r.status, r.body)
	}
	if r := b.do("GET", "/v1/me", session, nil); r.status != http.StatusOK || !strings.Contains(string(r.body), b.org.ID) {
		t.Errorf("me after accepting: %d %s", r.status, r.body)
	}
	if r := b.do("GET", "/v1/projects", session, nil); r.status != http.StatusOK {
		t.Errorf("projects after accepting: %d %s", r.status, r.body)
	}
	if r := b.do("GET", "/v1/organizations/"+b.org.ID+"/members", session, nil); r.status != http.StatusOK || !strings.Contains(string(r.body), lone.ID) {
		t.Errorf("members after accepting: %d %s", r.status, r.body)
	}
	// The other user's invitation is untouched.
	if r := b.do("GET", "/v1/organizations/"+b.org.ID+"/invitations", b.adminKey, nil); r.status != http.StatusOK || !strings.Contains(string(r.body), theirs) {
		t.Errorf("the other invitation: %d %s", r.status, r.body)
	}
}
