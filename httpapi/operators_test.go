package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/theappliance/appliance/api"
)

// TestOperatorsManageOrganizations: a platform operator (made as root does, with no organization) signs
// in and creates, lists, suspends, resumes and deletes organizations; an organization's owner and its keys
// are refused those routes (403). A suspension refuses the organization's live API key and sessions at
// once (the key's cached principal included) with the reason, and a sign-in into it, while the operator's
// own session keeps working; the resume lets them in again. Bad input changes nothing.
func TestOperatorsManageOrganizations(t *testing.T) {
	t.Parallel()
	b := setup(t)
	added, err := b.svc.Tenancy().AddOperator(t.Context(), &api.AddOperatorRequest{Email: "Ops@Example.com", Name: "Olga"})
	if err != nil || !added.Created || added.Password == "" || added.Email != "ops@example.com" {
		t.Fatalf("add operator: %+v %v", added, err)
	}
	again, err := b.svc.Tenancy().AddOperator(t.Context(), &api.AddOperatorRequest{Email: "ops@example.com"})
	if err != nil || again.Created || again.Password != "" || again.UserID != added.UserID {
		t.Fatalf("add the same operator again: %+v %v", again, err)
	}
	r := b.do("POST", "/v1/auth/sessions", "", map[string]any{"email": "ops@example.com", "password": added.Password})
	if r.status != http.StatusCreated || r.json["organization_id"] != "" {
		t.Fatalf("operator sign-in: %d %s", r.status, r.body)
	}
	op := r.json["token"].(string)
	if me := b.do("GET", "/v1/me", op, nil); me.status != http.StatusOK || me.json["principal"].(map[string]any)["is_admin"] != true || me.json["organization"] != nil {
		t.Fatalf("operator /v1/me: %d %s", me.status, me.body)
	}

	// Refused to everyone else: the owner's session, an admin key.
	owner := b.session("owner")
	for _, cred := range []string{owner, b.adminKey} {
		for _, c := range []struct{ method, path string }{{"GET", "/v1/organizations"}, {"POST", "/v1/organizations"},
			{"POST", "/v1/organizations/" + b.org.ID + "/suspend"}, {"POST", "/v1/organizations/" + b.org.ID + "/resume"}, {"DELETE", "/v1/organizations/" + b.org.ID}} {
			if r := b.do(c.method, c.path, cred, map[string]any{"name": "x", "reason": "x"}); r.status != http.StatusForbidden {
				t.Fatalf("%s %s by a non-operator: %d %s", c.method, c.path, r.status, r.body)
			}
		}
	}

	// Create, with a new owner who signs in with the password shown once; bad input and a taken slug.
	r = b.do("POST", "/v1/organizations", op, map[string]any{"name": "Acme Corp", "owner_email": "dana@acme.example"})
	if r.status != http.StatusCreated || r.json["initial_password"] == "" {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	acme := r.json["organization"].(map[string]any)
	if acme["slug"] != "acme-corp" {
		t.Fatalf("slug from the name: %v", acme["slug"])
	}
	dana := b.do("POST", "/v1/auth/sessions", "", map[string]any{"email": "dana@acme.example", "password": r.json["initial_password"]})
	if dana.status != http.StatusCreated || dana.json["organization_id"] != acme["id"] || dana.json["role"] != "owner" {
		t.Fatalf("the new owner signs in: %d %s", dana.status, dana.body)
	}
	for _, bad := range []map[string]any{{"name": ""}, {"name": "x", "slug": "Bad Slug"}, {"name": "x", "owner_email": "not an email"}} {
		if r := b.do("POST", "/v1/organizations", op, bad); r.status != http.StatusBadRequest {
			t.Fatalf("create %v: %d %s", bad, r.status, r.body)
		}
	}
	if r := b.do("POST", "/v1/organizations", op, map[string]any{"name": "Again", "slug": "acme-corp"}); r.status != http.StatusConflict {
		t.Fatalf("a taken slug: %d %s", r.status, r.body)
	}
	list := b.do("GET", "/v1/organizations", op, nil)
	if list.status != http.StatusOK || len(list.json["organizations"].([]any)) != 2 {
		t.Fatalf("list: %d %s", list.status, list.body)
	}

	// Suspend the bundle's organization: its key (used, so cached) and sessions are refused at once.
	b.project("kept", "development")
	if r := b.do("GET", "/v1/projects", b.adminKey, nil); r.status != http.StatusOK {
		t.Fatalf("the key before the suspension: %d %s", r.status, r.body)
	}
	if r := b.do("POST", "/v1/organizations/"+b.org.ID+"/suspend", op, map[string]any{"reason": "  "}); r.status != http.StatusBadRequest {
		t.Fatalf("suspend without a reason: %d %s", r.status, r.body)
	}
	r = b.do("POST", "/v1/organizations/"+b.org.ID+"/suspend", op, map[string]any{"reason": "unpaid invoice"})
	if r.status != http.StatusOK || r.json["organization"].(map[string]any)["suspended_reason"] != "unpaid invoice" || len(r.json["jobs"].([]any)) != 1 {
		t.Fatalf("suspend: %d %s", r.status, r.body)
	}
	if job := r.json["jobs"].([]any)[0].(map[string]any); job["type"] != "project.stop" {
		t.Fatalf("suspend's job: %v", job)
	}
	for name, cred := range map[string]string{"API key": b.adminKey, "owner session": owner} {
		r := b.do("GET", "/v1/projects", cred, nil)
		if r.status != http.StatusForbidden || r.json["error"] != "organization suspended: unpaid invoice" {
			t.Fatalf("%s of a suspended organization: %d %s", name, r.status, r.body)
		}
	}
	if r := b.do("POST", "/v1/organizations/"+b.org.ID+"/suspend", op, map[string]any{"reason": "again"}); r.status != http.StatusConflict {
		t.Fatalf("suspend twice: %d %s", r.status, r.body)
	}
	if r := b.do("GET", "/v1/organizations/"+b.org.ID, op, nil); r.status != http.StatusOK || r.json["organization"].(map[string]any)["suspended_at"] == nil {
		t.Fatalf("the operator reads the suspended organization: %d %s", r.status, r.body)
	}
	if r := b.do("GET", "/v1/organizations/"+acme["id"].(string), dana.json["token"].(string), nil); r.status != http.StatusOK {
		t.Fatalf("another organization's owner during the suspension: %d %s", r.status, r.body)
	}

	// Resume: the same key and session work again.
	r = b.do("POST", "/v1/organizations/"+b.org.ID+"/resume", op, nil)
	if r.status != http.StatusOK || r.json["organization"].(map[string]any)["suspended_at"] != nil {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	for name, cred := range map[string]string{"API key": b.adminKey, "owner session": owner} {
		if r := b.do("GET", "/v1/projects", cred, nil); r.status != http.StatusOK {
			t.Fatalf("%s after the resume: %d %s", name, r.status, r.body)
		}
	}
	if r := b.do("POST", "/v1/organizations/"+b.org.ID+"/resume", op, nil); r.status != http.StatusConflict {
		t.Fatalf("resume a running organization: %d %s", r.status, r.body)
	}

	// Delete: refused while projects are left; Acme (none) goes, its owner's session with it.
	if r := b.do("DELETE", "/v1/organizations/"+b.org.ID, op, nil); r.status != http.StatusConflict || !strings.Contains(r.json["error"].(string), "delete them first") {
		t.Fatalf("delete an organization with projects: %d %s", r.status, r.body)
	}
	if r := b.do("DELETE", "/v1/organizations/"+acme["id"].(string), op, nil); r.status != http.StatusOK || r.json["removed_members"] != float64(1) {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := b.do("GET", "/v1/me", dana.json["token"].(string), nil); r.status != http.StatusUnauthorized {
		t.Fatalf("a session of a deleted organization: %d %s", r.status, r.body)
	}
	// Audited, each naming the operator.
	actions := map[string]bool{}
	for _, ev := range b.auditEvents() {
		if ev.ActorID == added.UserID {
			actions[ev.Action] = true
		}
	}
	for _, a := range []string{"organization.create", "organization.suspend", "organization.resume", "organization.delete"} {
		if !actions[a] {
			t.Errorf("no %s audit event by the operator: %v", a, actions)
		}
	}
}
