package httpapi

import (
	"net/http"
	"slices"
	"testing"
)

// TestCachedKeyFollowsChanges: through the API, a key used a moment ago (so its principal is cached and
// its last use recorded) carries its creator's new role on the very next request and is refused on the
// very next request after its revocation.
func TestCachedKeyFollowsChanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	session := b.session("admin")
	me := b.do("GET", "/v1/me", session, nil)
	userID, _ := me.json["principal"].(map[string]any)["user_id"].(string)
	created := b.do("POST", "/v1/organizations/"+b.org.ID+"/api-keys", session,
		map[string]any{"name": "cached", "scopes": []string{"projects:read", "api_keys:read", "api_keys:write"}})
	if created.status != http.StatusCreated || userID == "" {
		t.Fatalf("create key: %d %s (user %q)", created.status, created.body, userID)
	}
	key := created.json["plaintext_api_key"].(string)
	keyID := created.json["api_key"].(map[string]any)["id"].(string)
	scopes := func() []string {
		t.Helper()
		r := b.do("GET", "/v1/me", key, nil)
		if r.status != http.StatusOK {
			t.Fatalf("me: %d %s", r.status, r.body)
		}
		var out []string
		for _, s := range r.json["principal"].(map[string]any)["scopes"].([]any) {
			out = append(out, s.(string))
		}
		return out
	}
	for range 3 {
		if s := scopes(); !slices.Contains(s, "api_keys:write") {
			t.Fatalf("an admin's key: scopes %v", s)
		}
	}
	if r := b.do("PATCH", "/v1/organizations/"+b.org.ID+"/members/"+userID, b.adminKey, map[string]any{"role": "member"}); r.status != http.StatusOK {
		t.Fatalf("demote: %d %s", r.status, r.body)
	}
	if s := scopes(); slices.Contains(s, "api_keys:write") || !slices.Contains(s, "api_keys:read") {
		t.Fatalf("the demoted creator's key: scopes %v", s)
	}
	scopes()
	if r := b.do("DELETE", "/v1/organizations/"+b.org.ID+"/api-keys/"+keyID, b.adminKey, nil); r.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	if r := b.do("GET", "/v1/me", key, nil); r.status != http.StatusUnauthorized || r.json["error"] != "API key has been revoked" {
		t.Fatalf("the revoked key: %d %s", r.status, r.body)
	}
}
