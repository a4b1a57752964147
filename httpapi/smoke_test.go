package httpapi

import "testing"

func TestSmokeMe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do("GET", "/v1/me", b.adminKey, nil)
	if r.status != 200 {
		t.Fatalf("me: %d %s", r.status, r.body)
	}
	if r.json["organization"].(map[string]any)["id"] != b.org.ID {
		t.Fatalf("me: %s", r.body)
	}
	if r := b.do("GET", "/v1/me", "", nil); r.status != 401 || r.json["error"] == "" {
		t.Fatalf("no cred: %d %s", r.status, r.body)
	}
	if r := b.do("GET", "/v1/nope", "", nil); r.status != 404 || r.json["error"] == nil {
		t.Fatalf("unknown: %d %s", r.status, r.body)
	}
	if r := b.do("DELETE", "/v1/me", b.adminKey, nil); r.status != 405 {
		t.Fatalf("method: %d %s", r.status, r.body)
	}
	s := b.session("member")
	if r := b.do("GET", "/v1/me", s, nil); r.status != 200 {
		t.Fatalf("session me: %d %s", r.status, r.body)
	}
}
