package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
)

// TestSQLEveryStatementsResult: POST .../sql answers every statement's result in results (result is the
// last one's, as before), with the caps (max_rows) shared by the statements and each one's types named.
func TestSQLEveryStatementsResult(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{instances: true})
	prj := b.provision("every", "development")
	path := "/v1/projects/" + prj.ID + "/sql"
	r := b.do("POST", path, b.adminKey, map[string]any{"query": "CREATE TYPE mood AS ENUM ('ok'); SELECT 'ok'::mood AS m; SELECT g FROM generate_series(1, 3) g; SELECT 'x' AS b, 2 AS c"})
	if r.status != http.StatusOK {
		t.Fatalf("run: %d %s", r.status, r.body)
	}
	results, _ := r.json["results"].([]any)
	if len(results) != 4 {
		t.Fatalf("results: %s", r.body)
	}
	res := func(i int) map[string]any { return results[i].(map[string]any) }
	if res(0)["command"] != "CREATE TYPE" || res(1)["column_types"].([]any)[0] != "mood" || res(2)["row_count"].(float64) != 3 ||
		len(res(2)["rows"].([]any)) != 3 || res(3)["rows"].([]any)[0].(map[string]any)["b"] != "x" {
		t.Fatalf("results: %s", r.body)
	}
	last := r.json["result"].(map[string]any)
	if last["statements"].(float64) != 4 || last["rows"].([]any)[0].(map[string]any)["c"].(float64) != 2 {
		t.Fatalf("result: %s", r.body)
	}

	// max_rows bounds the rows of all the statements together.
	r = b.do("POST", path, b.adminKey, map[string]any{"query": "SELECT g FROM generate_series(1, 3) g; SELECT g FROM generate_series(1, 3) g", "max_rows": 5})
	results, _ = r.json["results"].([]any)
	if r.status != http.StatusOK || len(results) != 2 || len(res(0)["rows"].([]any)) != 3 || res(0)["truncated"] != false ||
		len(res(1)["rows"].([]any)) != 2 || res(1)["truncated"] != true || res(1)["row_count"].(float64) != 3 {
		t.Fatalf("max_rows 5: %d %s", r.status, r.body)
	}
	// 50,000 rows fit when asked for.
	r = b.do("POST", path, b.adminKey, map[string]any{"query": "SELECT g, md5(g::text) AS h FROM generate_series(1, 50000) g", "max_rows": 50000})
	if r.status != http.StatusOK || len(r.json["result"].(map[string]any)["rows"].([]any)) != 50000 || r.json["result"].(map[string]any)["truncated"] != false {
		t.Fatalf("50,000 rows: %d %.300s", r.status, r.body)
	}
	for _, bad := range []map[string]any{{"query": "SELECT 1", "max_rows": api.MaxQueryBytes}, {"query": "SELECT 1", "max_rows": -1},
		{"query": "SELECT 1", "run_id": "no spaces"}, {"query": "SELECT 1", "run_id": strings.Repeat("x", 65)}} {
		if r := b.do("POST", path, b.adminKey, bad); r.status != http.StatusBadRequest || r.json["error"] == nil {
			t.Errorf("%v: %d %s", bad, r.status, r.body)
		}
	}
}

// TestSQLCancel: a run named with run_id is cancelled by POST .../sql/runs/{runID}/cancel (its statement
// ends with a clear 400, sqlstate 57014, and the session stays usable); only callers who may see its
// project can cancel it: another project's key gets 403 on this project's path and cancels nothing on its own.
func TestSQLCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{instances: true})
	prj := b.provision("cancel", "development")
	other := b.project("other", "development")
	otherKey := b.key(other.ID, api.ScopeProjectsRead, api.ScopeProjectsWrite)
	readKey := b.key(prj.ID, api.ScopeProjectsRead)
	path := "/v1/projects/" + prj.ID + "/sql"
	running := func() int {
		n := 0
		if err := b.env.Svc.AdminQueryRow(t.Context(), prj.ID, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%cancel-marker */%' AND pid <> pg_backend_pid()", nil, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	done := make(chan *response, 1)
	started := time.Now()
	go func() {
		done <- b.call(t, "POST", path, http.Header{"Authorization": {"Bearer " + b.adminKey}},
			map[string]any{"query": "SELECT 1; SELECT pg_sleep(30) /* cancel-marker */", "run_id": "run-1"})
	}()
	for deadline := time.Now().Add(15 * time.Second); running() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the statement never started")
		}
	}
	if r := b.do("POST", path, b.adminKey, map[string]any{"query": "SELECT 1", "run_id": "run-1"}); r.status != http.StatusConflict {
		t.Errorf("a second run-1: %d %s", r.status, r.body)
	}
	if r := b.do("POST", path+"/runs/run-1/cancel", otherKey, nil); r.status != http.StatusForbidden {
		t.Errorf("another project's key on this project: %d %s", r.status, r.body)
	}
	// On its own project the ID names no run of this one (it waits for a run-1 of its own project).
	if r := b.do("POST", "/v1/projects/"+other.ID+"/sql/runs/run-1/cancel", otherKey, nil); r.status != http.StatusOK {
		t.Errorf("another project's key on its own project: %d %s", r.status, r.body)
	}
	if r := b.do("POST", path+"/runs/run-1/cancel", readKey, nil); r.status != http.StatusForbidden {
		t.Errorf("a read-only key: %d %s", r.status, r.body)
	}
	if running() != 1 {
		t.Fatal("a refused cancel cancelled the statement")
	}
	if r := b.do("POST", path+"/runs/run-1/cancel", b.adminKey, nil); r.status != http.StatusOK || r.json["cancelled"] != true {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	r := <-done
	if r.status != http.StatusBadRequest || r.json["sqlstate"] != "57014" || !strings.Contains(r.json["error"].(string), "cancelled") {
		t.Fatalf("the cancelled run: %d %s", r.status, r.body)
	}
	t.Logf("the cancelled run answered after %v", time.Since(started))
	if r := b.do("POST", path+"/runs/run-1/cancel", b.adminKey, nil); r.status != http.StatusOK || r.json["cancelled"] != false {
		t.Errorf("cancel after the end: %d %s", r.status, r.body)
	}
	if r := b.do("POST", path+"/runs/bad%20id/cancel", b.adminKey, nil); r.status != http.StatusBadRequest {
		t.Errorf("bad run ID: %d %s", r.status, r.body)
	}
	if r := b.do("POST", path, b.adminKey, map[string]any{"query": "SELECT 2 AS two", "run_id": "run-1"}); r.status != http.StatusOK {
		t.Errorf("run after the cancel: %d %s", r.status, r.body)
	}

	// A cancel that comes before its run (the client clicked Cancel while its POST waited for a session):
	// the run ends at once, and none of its text ran.
	if r := b.do("POST", path+"/runs/run-2/cancel", b.adminKey, nil); r.status != http.StatusOK || r.json["cancelled"] != true {
		t.Fatalf("cancel before the run: %d %s", r.status, r.body)
	}
	r = b.do("POST", path, b.adminKey, map[string]any{"query": "CREATE TABLE early_cancel (v int); SELECT pg_sleep(30)", "run_id": "run-2"})
	if r.status != http.StatusBadRequest || r.json["sqlstate"] != "57014" || !strings.Contains(r.json["error"].(string), "before it started") {
		t.Fatalf("the run cancelled before it started: %d %s", r.status, r.body)
	}
	var tables int
	if err := b.env.Svc.AdminQueryRow(t.Context(), prj.ID, "SELECT count(*) FROM pg_class WHERE relname = 'early_cancel'", nil, &tables); err != nil || tables != 0 {
		t.Fatalf("the cancelled run's table: %d %v", tables, err)
	}
	if r := b.do("POST", path, b.adminKey, map[string]any{"query": "SELECT 3 AS three", "run_id": "run-2"}); r.status != http.StatusOK {
		t.Errorf("a later run of the ID: %d %s", r.status, r.body)
	}
}

// TestSavedQueries: a project's saved queries are created, listed, read, renamed and deleted; members of
// the organization see them; another project's key neither sees nor changes them; bad input is a JSON 4xx
// that changes nothing; a project keeps at most api.MaxSavedQueries.
func TestSavedQueries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	prj := b.project("saved", "development")
	other := b.project("other", "development")
	otherKey := b.key(other.ID, api.ScopeProjectsRead, api.ScopeProjectsWrite)
	readKey := b.key(prj.ID, api.ScopeProjectsRead)
	member := b.session("member")
	base := "/v1/projects/" + prj.ID + "/saved-queries"

	r := b.do("POST", base, b.adminKey, map[string]any{"name": " Top customers ", "sql": "SELECT 1"})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	sq := r.json["saved_query"].(map[string]any)
	id := sq["id"].(string)
	if sq["name"] != "Top customers" || sq["sql"] != "SELECT 1" || sq["created_by"] == "" || sq["project_id"] != prj.ID {
		t.Fatalf("created: %s", r.body)
	}
	one := base + "/" + id
	for _, c := range []struct {
		body any
		want int
	}{
		{map[string]any{"name": "top CUSTOMERS", "sql": "SELECT 2"}, http.StatusConflict},
		{map[string]any{"name": "", "sql": "SELECT 2"}, http.StatusBadRequest},
		{map[string]any{"name": strings.Repeat("n", 101), "sql": "SELECT 2"}, http.StatusBadRequest},
		{map[string]any{"name": "x"}, http.StatusBadRequest},
		{map[string]any{"name": "x", "sql": " "}, http.StatusBadRequest},
		{map[string]any{"name": "x", "sql": strings.Repeat("s", api.MaxQueryBytes+1)}, http.StatusRequestEntityTooLarge},
		{`{"name": 1}`, http.StatusBadRequest},
	} {
		if r := b.do("POST", base, b.adminKey, c.body); r.status != c.want || r.json["error"] == nil {
			t.Errorf("create %.80v: %d %.200s, want %d", c.body, r.status, r.body, c.want)
		}
	}
	if r := b.do("GET", base, member, nil); r.status != http.StatusOK || len(r.json["saved_queries"].([]any)) != 1 {
		t.Fatalf("a member's list: %d %s", r.status, r.body)
	}
	if r := b.do("GET", one, readKey, nil); r.status != http.StatusOK || r.json["saved_query"].(map[string]any)["sql"] != "SELECT 1" {
		t.Errorf("get: %d %s", r.status, r.body)
	}
	// Another project's key: 403 on this project, 404 for this query under its own project.
	for _, c := range []struct{ method, path string }{{"GET", base}, {"GET", one}, {"PATCH", one}, {"DELETE", one}, {"POST", base}} {
		var body any
		if c.method == "PATCH" || c.method == "POST" {
			body = map[string]any{"name": "stolen", "sql": "SELECT 3"}
		}
		if r := b.do(c.method, c.path, otherKey, body); r.status != http.StatusForbidden {
			t.Errorf("another project's key %s %s: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	otherOne := "/v1/projects/" + other.ID + "/saved-queries/" + id
	for _, m := range []string{"GET", "PATCH", "DELETE"} {
		var body any
		if m == "PATCH" {
			body = map[string]any{"name": "stolen"}
		}
		if r := b.do(m, otherOne, otherKey, body); r.status != http.StatusNotFound {
			t.Errorf("%s through another project: %d %s", m, r.status, r.body)
		}
	}
	if r := b.do("PATCH", one, readKey, map[string]any{"name": "read only"}); r.status != http.StatusForbidden {
		t.Errorf("a read-only key renames: %d %s", r.status, r.body)
	}
	if r := b.do("PATCH", one, b.adminKey, map[string]any{}); r.status != http.StatusBadRequest {
		t.Errorf("empty patch: %d %s", r.status, r.body)
	}
	r = b.do("PATCH", one, member, map[string]any{"name": "Renamed"})
	if r.status != http.StatusOK || r.json["saved_query"].(map[string]any)["name"] != "Renamed" || r.json["saved_query"].(map[string]any)["sql"] != "SELECT 1" {
		t.Fatalf("rename: %d %s", r.status, r.body)
	}
	if r := b.do("PATCH", one, member, map[string]any{"sql": "SELECT 42"}); r.status != http.StatusOK || r.json["saved_query"].(map[string]any)["sql"] != "SELECT 42" {
		t.Fatalf("change sql: %d %s", r.status, r.body)
	}
	if r := b.do("GET", one, b.adminKey, nil); r.json["saved_query"].(map[string]any)["name"] != "Renamed" {
		t.Errorf("after the refused changes: %s", r.body)
	}

	// The limit per project.
	for i := 1; i < api.MaxSavedQueries; i++ {
		if r := b.do("POST", base, b.adminKey, map[string]any{"name": fmt.Sprintf("q%03d", i), "sql": "SELECT 1"}); r.status != http.StatusCreated {
			t.Fatalf("create %d: %d %s", i, r.status, r.body)
		}
	}
	if r := b.do("POST", base, b.adminKey, map[string]any{"name": "one too many", "sql": "SELECT 1"}); r.status != http.StatusConflict || r.json["error"] == nil {
		t.Errorf("past the limit: %d %s", r.status, r.body)
	}

	if r := b.do("DELETE", one, b.adminKey, nil); r.status != http.StatusOK || r.json["saved_query"].(map[string]any)["id"] != id {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := b.do("GET", one, b.adminKey, nil); r.status != http.StatusNotFound || r.json["error"] == nil {
		t.Errorf("after delete: %d %s", r.status, r.body)
	}
}
