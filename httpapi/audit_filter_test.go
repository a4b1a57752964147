package httpapi

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// TestAuditFilters: the audit listings filter by action prefix, actor and time range, and page with
// before/next_before; every page of a walk is newest first and together they are the unpaged answer.
func TestAuditFilters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	prj := b.project("alpha", "development")
	session := b.session("admin")
	me := b.do("GET", "/v1/me", session, nil)
	userID := me.json["principal"].(map[string]any)["user_id"].(string)
	for i := range 3 {
		for _, cred := range []string{b.adminKey, session} {
			if r := b.do("POST", "/v1/projects/"+prj.ID+"/approvals", cred, map[string]any{"action": "project.delete"}); r.status != http.StatusCreated {
				t.Fatalf("approval %d: %d %s", i, r.status, r.body)
			}
		}
	}
	for _, base := range []string{"/v1/organizations/" + b.org.ID + "/audit-events", "/v1/projects/" + prj.ID + "/audit-events"} {
		list := func(q url.Values) ([]map[string]any, string) {
			t.Helper()
			r := b.do("GET", base+"?"+q.Encode(), b.adminKey, nil)
			if r.status != http.StatusOK {
				t.Fatalf("%s?%s: %d %s", base, q.Encode(), r.status, r.body)
			}
			var out []map[string]any
			for _, e := range r.json["audit_events"].([]any) {
				out = append(out, e.(map[string]any))
			}
			return out, r.json["next_before"].(string)
		}
		ids := func(evs []map[string]any) []string {
			var out []string
			for _, e := range evs {
				out = append(out, e["id"].(string))
			}
			return out
		}
		all, next := list(url.Values{"limit": {"200"}})
		if next != "" || len(all) < 6 {
			t.Fatalf("%s: %d events, next_before %q", base, len(all), next)
		}

		approvals, _ := list(url.Values{"limit": {"200"}, "action_prefix": {"approval."}})
		if len(approvals) != 6 {
			t.Errorf("%s: %d approval events, want 6", base, len(approvals))
		}
		for _, e := range approvals {
			if !strings.HasPrefix(e["action"].(string), "approval.") {
				t.Errorf("action_prefix=approval. gave %v", e["action"])
			}
		}
		mine, _ := list(url.Values{"limit": {"200"}, "actor_id": {userID}, "action_prefix": {"approval."}})
		if len(mine) != 3 {
			t.Errorf("%s: %d approvals by the session's user, want 3", base, len(mine))
		}
		for _, e := range mine {
			if e["actor_id"] != userID {
				t.Errorf("actor_id=%s gave %v", userID, e["actor_id"])
			}
		}

		// Pages of 2 walk the same events as one page, none twice.
		var walked []string
		q := url.Values{"limit": {"2"}}
		for page := 0; ; page++ {
			evs, next := list(q)
			if len(evs) > 2 || page > len(all) {
				t.Fatalf("%s: page %d has %d events", base, page, len(evs))
			}
			walked = append(walked, ids(evs)...)
			if next == "" {
				break
			}
			if next != evs[len(evs)-1]["id"] {
				t.Fatalf("next_before %s is not the page's last event", next)
			}
			q.Set("before", next)
		}
		if !slices.Equal(walked, ids(all)) {
			t.Errorf("%s: paging walked %v, want %v", base, walked, ids(all))
		}

		// from and to split the events at one of them.
		at := all[len(all)/2]["created_at"].(string)
		newer, _ := list(url.Values{"limit": {"200"}, "from": {at}})
		older, _ := list(url.Values{"limit": {"200"}, "to": {at}})
		if len(newer) == 0 || len(newer)+len(older) != len(all) || !slices.Equal(append(ids(newer), ids(older)...), ids(all)) {
			t.Errorf("%s: from/to %s split %d events into %d and %d", base, at, len(all), len(newer), len(older))
		}
		between, _ := list(url.Values{"limit": {"200"}, "from": {all[len(all)-1]["created_at"].(string)}, "to": {all[0]["created_at"].(string)}})
		if len(between) != len(all)-countAt(all, all[0]["created_at"].(string)) {
			t.Errorf("%s: from the oldest to the newest: %d events of %d", base, len(between), len(all))
		}

		for _, bad := range []string{"from=yesterday", "to=2026-13-01T00:00:00Z", "from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z",
			"before=prj_1", "before=aud_x;y", "action_prefix=DROP", "actor_id=usr_1%27", "actor_id=" + strings.Repeat("a", 70)} {
			r := b.do("GET", base+"?"+bad, b.adminKey, nil)
			if r.status != http.StatusBadRequest {
				t.Errorf("%s?%s: %d %s", base, bad, r.status, r.body)
			}
			checkErrorShape(t, r)
		}
	}
}

// countAt counts the events created at the time at.
func countAt(evs []map[string]any, at string) int {
	n := 0
	for _, e := range evs {
		if e["created_at"] == at {
			n++
		}
	}
	return n
}
