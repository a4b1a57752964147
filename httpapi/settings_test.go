package httpapi

import (
	"net/http"
	"strings"
	"testing"
)

// TestTimeoutsWithinPostgresRange: a timeout PostgreSQL would refuse (more than 2147483647 ms, about
// 24.8 days) is refused at the API with 400 and changes nothing; "25d" was accepted before, and the
// server then ran 0 while the API showed 25d, and the next restart failed.
func TestTimeoutsWithinPostgresRange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	prj := b.project("timeouts", "development")
	path := "/v1/projects/" + prj.ID
	for _, v := range []string{"25d", "999999999d", "2147484s", "35792min", "597h"} {
		for _, field := range []string{"statement_timeout", "idle_transaction_timeout"} {
			r := b.do("PATCH", path, b.adminKey, map[string]any{field: v})
			if r.status != http.StatusBadRequest || !strings.Contains(r.text(), "more than PostgreSQL allows") {
				t.Errorf("%s=%s: %d %s", field, v, r.status, r.body)
			}
		}
	}
	if r := b.do("GET", path, b.adminKey, nil); r.json["project"].(map[string]any)["statement_timeout"] != prj.StatementTimeout {
		t.Errorf("a refused patch changed the project: %s", r.body)
	}
	for _, v := range []string{"24d", "999999999", "2147483s", "596h", "0"} {
		if r := b.do("PATCH", path, b.adminKey, map[string]any{"statement_timeout": v}); r.status != http.StatusOK {
			t.Errorf("statement_timeout=%s: %d %s", v, r.status, r.body)
		}
	}
}
