package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/store"
)

// operatorSession adds a platform operator and returns its session token and user ID.
func (b *bundle) operatorSession(email string) (token, userID string) {
	b.t.Helper()
	added, err := b.svc.Tenancy().AddOperator(b.t.Context(), &api.AddOperatorRequest{Email: email})
	if err != nil {
		b.t.Fatal(err)
	}
	r := b.do("POST", "/v1/auth/sessions", "", map[string]any{"email": email, "password": added.Password})
	if r.status != http.StatusCreated {
		b.t.Fatalf("operator sign-in: %d %s", r.status, r.body)
	}
	return r.json["token"].(string), added.UserID
}

// TestPlansAndQuotasAreOperatorConfiguration: the plans are read by any signed-in caller and changed by
// operators only (bad input a 400 naming the field, nothing changed); a changed plan gives its projects
// its limits at once and an apply job per active server; a plan in use, or the free plan, is not deleted
// (409 naming a project); an organization's quota set by an operator holds at project create (403), shows
// in its usage and the operators' list, and goes back to the default; the configuration is in the store,
// read by a new service on it; everything is audited with the operator as the actor.
func TestPlansAndQuotasAreOperatorConfiguration(t *testing.T) {
	t.Parallel()
	b := setup(t)
	op, opID := b.operatorSession("plans-ops@example.com")
	owner := b.session("owner")

	r := b.do("GET", "/v1/plans", b.adminKey, nil)
	if r.status != http.StatusOK || len(r.json["plans"].([]any)) != 3 || r.json["plans"].([]any)[0].(map[string]any)["name"] != "free" {
		t.Fatalf("list plans with a key: %d %s", r.status, r.body)
	}
	if r := b.do("GET", "/v1/plans", op, nil); r.status != http.StatusOK {
		t.Fatalf("list plans as an operator: %d %s", r.status, r.body)
	}
	team := map[string]any{"max_connections": 40, "storage_limit_bytes": 2 << 30, "kv_memory_mb": 64, "previews_limit": 3,
		"ai_uses_per_month": 200, "memory_bytes": 1 << 30, "cpu_cores": 1}
	for _, cred := range []string{owner, b.adminKey} {
		for _, c := range []struct{ method, path string }{{"PUT", "/v1/plans/team"}, {"DELETE", "/v1/plans/pro"},
			{"GET", "/v1/organizations/" + b.org.ID + "/quota"}, {"PATCH", "/v1/organizations/" + b.org.ID + "/quota"}} {
			if r := b.do(c.method, c.path, cred, team); r.status != http.StatusForbidden {
				t.Fatalf("%s %s by a non-operator: %d %s", c.method, c.path, r.status, r.body)
			}
		}
	}
	for field, bad := range map[string]any{"max_connections": 0, "storage_limit_bytes": -1, "kv_memory_mb": 0, "memory_bytes": 1, "cpu_cores": 0, "previews_limit": -1} {
		body := map[string]any{}
		for k, v := range team {
			body[k] = v
		}
		body[field] = bad
		if r := b.do("PUT", "/v1/plans/team", op, body); r.status != http.StatusBadRequest || !strings.Contains(r.json["error"].(string), field) {
			t.Fatalf("PUT a plan with %s %v: %d %s", field, bad, r.status, r.body)
		}
	}
	if r := b.do("PUT", "/v1/plans/team", op, map[string]any{"max_connections": 40, "bogus": 1}); r.status != http.StatusBadRequest {
		t.Fatalf("PUT a plan with an unknown key: %d %s", r.status, r.body)
	}
	if r := b.do("PUT", "/v1/plans/Bad%20Name", op, team); r.status != http.StatusBadRequest || !strings.Contains(r.json["error"].(string), "name") {
		t.Fatalf("PUT a plan with a bad name: %d %s", r.status, r.body)
	}
	if r := b.do("GET", "/v1/plans", op, nil); len(r.json["plans"].([]any)) != 3 {
		t.Fatalf("bad input changed the plans: %s", r.body)
	}
	r = b.do("PUT", "/v1/plans/team", op, team)
	if r.status != http.StatusOK || r.json["created"] != true || r.json["plan"].(map[string]any)["max_connections"] != float64(40) {
		t.Fatalf("create a plan: %d %s", r.status, r.body)
	}

	// A project on the new plan; changing the plan changes its limits and queues the apply job.
	r = b.do("POST", "/v1/projects", b.adminKey, map[string]any{"name": "teamwork", "plan": "team"})
	if r.status != http.StatusAccepted {
		t.Fatalf("create a project on the new plan: %d %s", r.status, r.body)
	}
	prjID := r.json["project"].(map[string]any)["id"].(string)
	if err := b.db.Update(func(tx *store.Tx) error { // as if provisioned: active with a server
		p, err := store.Projects.Get(tx, prjID)
		if err != nil {
			return err
		}
		p.State, p.PrimaryInstanceID = "active", "ins_fixture"
		return store.Projects.Put(tx, p)
	}); err != nil {
		t.Fatal(err)
	}
	team["max_connections"], team["storage_limit_bytes"] = 60, 3<<30
	r = b.do("PUT", "/v1/plans/team", op, team)
	if r.status != http.StatusOK || r.json["created"] != false || len(r.json["jobs"].([]any)) != 1 {
		t.Fatalf("change the plan: %d %s", r.status, r.body)
	}
	if j := r.json["jobs"].([]any)[0].(map[string]any); j["type"] != "project.apply_plan" || j["project_id"] != prjID {
		t.Fatalf("the plan change's job: %v", j)
	}
	if r := b.do("GET", "/v1/projects/"+prjID, b.adminKey, nil); r.json["project"].(map[string]any)["max_connections"] != float64(60) ||
		r.json["project"].(map[string]any)["storage_limit_bytes"] != float64(3<<30) {
		t.Fatalf("the project after its plan changed: %s", r.body)
	}

	// Deleting: not a plan in use, not the free plan; an unused one goes.
	if r := b.do("DELETE", "/v1/plans/team", op, nil); r.status != http.StatusConflict || !strings.Contains(r.json["error"].(string), prjID) {
		t.Fatalf("delete a plan in use: %d %s", r.status, r.body)
	}
	if r := b.do("DELETE", "/v1/plans/free", op, nil); r.status != http.StatusConflict {
		t.Fatalf("delete the free plan: %d %s", r.status, r.body)
	}
	if r := b.do("DELETE", "/v1/plans/nope", op, nil); r.status != http.StatusNotFound {
		t.Fatalf("delete a plan that does not exist: %d %s", r.status, r.body)
	}
	if r := b.do("DELETE", "/v1/plans/scale", op, nil); r.status != http.StatusOK {
		t.Fatalf("delete an unused plan: %d %s", r.status, r.body)
	}
	if r := b.do("POST", "/v1/projects", b.adminKey, map[string]any{"name": "big", "plan": "scale"}); r.status != http.StatusBadRequest || !strings.Contains(r.json["error"].(string), "team") {
		t.Fatalf("create a project on a deleted plan: %d %s", r.status, r.body)
	}

	// The organization's quota: held at project create, shown in the usage and the operators' list.
	live := 1
	r = b.do("GET", "/v1/organizations/"+b.org.ID+"/quota", op, nil)
	if r.status != http.StatusOK || r.json["is_default"] != true || r.json["quota"].(map[string]any)["projects_limit"] != float64(20) {
		t.Fatalf("the default quota: %d %s", r.status, r.body)
	}
	for _, bad := range []map[string]any{{}, {"projects_limit": -1}, {"storage_limit_bytes": 0}, {"default": true, "projects_limit": 3}, {"projects_limit": "x"}} {
		if r := b.do("PATCH", "/v1/organizations/"+b.org.ID+"/quota", op, bad); r.status != http.StatusBadRequest {
			t.Fatalf("PATCH quota %v: %d %s", bad, r.status, r.body)
		}
	}
	if r := b.do("PATCH", "/v1/organizations/org_nope/quota", op, map[string]any{"projects_limit": 3}); r.status != http.StatusNotFound {
		t.Fatalf("PATCH the quota of no organization: %d %s", r.status, r.body)
	}
	r = b.do("PATCH", "/v1/organizations/"+b.org.ID+"/quota", op, map[string]any{"projects_limit": live, "storage_limit_bytes": 5 << 30})
	if r.status != http.StatusOK || r.json["is_default"] != false || r.json["quota"].(map[string]any)["projects_limit"] != float64(live) ||
		r.json["quota"].(map[string]any)["previews_limit"] != float64(50) {
		t.Fatalf("set the quota: %d %s", r.status, r.body)
	}
	if r := b.do("POST", "/v1/projects", b.adminKey, map[string]any{"name": "one-too-many"}); r.status != http.StatusForbidden || !strings.Contains(r.json["error"].(string), "project quota reached") {
		t.Fatalf("a project past the quota: %d %s", r.status, r.body)
	}
	if r := b.do("GET", "/v1/organizations/"+b.org.ID+"/usage", op, nil); r.status != http.StatusOK ||
		r.json["usage"].(map[string]any)["totals"].(map[string]any)["projects_limit"] != float64(live) ||
		r.json["usage"].(map[string]any)["totals"].(map[string]any)["storage_limit_bytes"] != float64(5<<30) {
		t.Fatalf("the operator reads the usage: %d %s", r.status, r.body)
	}
	if r := b.do("GET", "/v1/organizations", op, nil); r.json["organizations"].([]any)[0].(map[string]any)["quota"].(map[string]any)["projects_limit"] != float64(live) {
		t.Fatalf("the operators' list: %s", r.body)
	}

	// The configuration is in the store: a new service on it reads the same.
	if ps := b.svc.Tenancy().Plans(); len(ps) != 3 || ps[1].Name != "team" || ps[1].MaxConnections != 60 {
		t.Fatalf("plans in force: %+v", ps)
	}
	var recs []*store.Plan
	var quota *store.OrganizationQuota
	if err := b.db.View(func(tx *store.Tx) (err error) {
		if recs, err = store.Plans.All(tx, nil); err != nil {
			return err
		}
		quota, err = store.OrganizationQuotas.Get(tx, b.org.ID)
		return err
	}); err != nil || len(recs) != 3 || quota.ProjectsLimit != live {
		t.Fatalf("the stored plans %d and quota %+v: %v", len(recs), quota, err)
	}

	if r := b.do("PATCH", "/v1/organizations/"+b.org.ID+"/quota", op, map[string]any{"default": true}); r.status != http.StatusOK || r.json["is_default"] != true {
		t.Fatalf("back to the default quota: %d %s", r.status, r.body)
	}
	if r := b.do("POST", "/v1/projects", b.adminKey, map[string]any{"name": "fits-again"}); r.status != http.StatusAccepted {
		t.Fatalf("a project under the default quota: %d %s", r.status, r.body)
	}

	actions := map[string]int{}
	for _, ev := range b.auditEvents() {
		if ev.ActorID == opID {
			actions[ev.Action]++
		}
	}
	if actions["plan.put"] != 2 || actions["plan.delete"] != 1 || actions["organization.quota"] != 2 {
		t.Errorf("audit events by the operator: %v", actions)
	}
}
