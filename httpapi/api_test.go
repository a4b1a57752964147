package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/identity"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/store"
)

// Scenario tables for every endpoint of the route table (see scenario_test.go for the runner). Each
// table runs in order against its own bundle; every successful mutating row is also checked for its audit
// event, and every error row for the {"error": ...} shape.

// find returns the element of the list at path whose id is id (nil when absent).
func find(r *response, path, id string) map[string]any {
	list, _ := lookup(r.json, path)
	a, _ := list.([]any)
	for _, e := range a {
		if m, _ := e.(map[string]any); m["id"] == id {
			return m
		}
	}
	return nil
}

// moveClock makes the service's clock run d ahead of the real one.
func moveClock(b *bundle, d time.Duration) {
	b.env.Clock.Set(func() time.Time { return time.Now().Add(d) })
}

// newestFirst checks that the list at path is ordered newest first (by created_at, then id).
func newestFirst(path string) func(t *testing.T, v vars, r *response) {
	return func(t *testing.T, v vars, r *response) {
		t.Helper()
		list, _ := lookup(r.json, path)
		a, _ := list.([]any)
		for i := 1; i < len(a); i++ {
			prev, cur := a[i-1].(map[string]any), a[i].(map[string]any)
			pt, _ := time.Parse(time.RFC3339Nano, prev["created_at"].(string))
			ct, _ := time.Parse(time.RFC3339Nano, cur["created_at"].(string))
			if ct.After(pt) || cur["id"].(string) >= prev["id"].(string) {
				t.Fatalf("%s is not newest first at %d: %s then %s", path, i, jsonOf(prev), jsonOf(cur))
			}
		}
	}
}

func TestIdentityAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	prj := b.project("alpha", "development")
	email, password := b.user("member")
	v := vars{
		"org": b.org.ID, "admin": b.adminKey, "prj": prj.ID, "email": email, "password": password,
		"prjKey": b.key(prj.ID, api.ScopeProjectsRead),
		"member": b.session("member"), "padmin": b.session("platform-admin"),
	}
	run(t, b, v, []scenario{
		{name: "me with an organization key", method: "GET", path: "/v1/me", cred: "$admin", status: 200,
			want: map[string]any{"organization.id": "$org", "organization.slug": "default", "organization.billing_plan": "none",
				"principal.auth_source": "api_key", "principal.organization_id": "$org", "principal.is_admin": false,
				"principal.scopes": arrayLen(10), "principal.user_id": nonEmpty},
			hide: []string{"$admin"}},
		{name: "me with X-API-Key", method: "GET", path: "/v1/me", header: http.Header{"X-API-Key": {"$admin"}}, status: 200,
			want: map[string]any{"principal.auth_source": "api_key"}},
		{name: "me with a lowercase bearer scheme", method: "GET", path: "/v1/me", header: http.Header{"Authorization": {"bearer $admin"}}, status: 200,
			want: map[string]any{"principal.auth_source": "api_key"}},
		{name: "me with another scheme", method: "GET", path: "/v1/me", header: http.Header{"Authorization": {"Basic $admin"}}, status: 401},
		{name: "me without credentials", method: "GET", path: "/v1/me", status: 401,
			check: func(t *testing.T, v vars, r *response) {
				if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("401 without a Bearer challenge: %v", r.header)
				}
			}},
		{name: "me with an unknown key", method: "GET", path: "/v1/me", cred: "apl_live_aaaaaaaaaaaaaaaaaaaaaaaa", status: 401},
		{name: "me with a token of no known form", method: "GET", path: "/v1/me", cred: "hello", status: 401},
		{name: "me with a member session", method: "GET", path: "/v1/me", cred: "$member", status: 200,
			want: map[string]any{"organization.id": "$org", "principal.auth_source": "session", "principal.organization_id": "$org",
				"principal.idp_organization_id": "$org", "principal.idp_organization_slug": "default",
				"principal.idp_organization_role": "member", "principal.is_admin": false,
				"principal.scopes": notContains("api_keys:write"), "principal.user_id": nonEmpty,
				"user.email": nonEmpty, "user.name": "User", "user.id": nonEmpty}},
		{name: "me with a platform admin session", method: "GET", path: "/v1/me", cred: "$padmin", status: 200,
			want: map[string]any{"organization": nil, "principal.is_admin": true, "principal.organization_id": "",
				"principal.auth_source": "session", "principal.scopes": arrayLen(10), "user.name": "Admin", "user.email": nonEmpty}},
		{name: "me with a project-scoped key", method: "GET", path: "/v1/me", cred: "$prjKey", status: 200,
			want: map[string]any{"organization.id": "$org", "organization.slug": "default", "principal.project_id": "$prj",
				"principal.scopes": []any{"projects:read"}, "organization.billing_plan": "", "organization.billing_status": ""}},

		{name: "sign in with a wrong password", method: "POST", path: "/v1/auth/sessions", body: map[string]any{"email": "$email", "password": "wrong password, surely"},
			status: 401, want: map[string]any{"error": "invalid email or password"}},
		{name: "sign in with an unknown email", method: "POST", path: "/v1/auth/sessions", body: map[string]any{"email": "nobody@example.com", "password": "$password"},
			status: 401, want: map[string]any{"error": "invalid email or password"}},
		{name: "sign in without a password", method: "POST", path: "/v1/auth/sessions", body: map[string]any{"email": "$email"}, status: 400},
		{name: "sign in to an organization the user is not in", method: "POST", path: "/v1/auth/sessions",
			body: map[string]any{"email": "$email", "password": "$password", "organization_id": "org_elsewhere"}, status: 403},
		{name: "sign in", method: "POST", path: "/v1/auth/sessions", body: map[string]any{"email": "$email", "password": "$password"}, status: 201,
			want: map[string]any{"token": hasPrefix("ses_"), "user_id": nonEmpty, "organization_id": "$org", "role": "member",
				"expires_at": timeIn(identity.SessionTTL)},
			save: map[string]string{"fresh": "token"}},
		{name: "the new session works", method: "GET", path: "/v1/me", cred: "$fresh", status: 200,
			want: map[string]any{"principal.auth_source": "session", "principal.idp_organization_role": "member"}},
		{name: "sign in with the email in capitals", method: "POST", path: "/v1/auth/sessions",
			body: map[string]any{"email": strings.ToUpper(email), "password": "$password"}, status: 201},
	})
	// Only the token's hash is stored.
	assertNotStored(t, b, v["fresh"], v["member"], v["padmin"])
}

func TestSessionExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	v := vars{"member": b.session("member")}
	run(t, b, v, []scenario{
		{name: "a fresh session", method: "GET", path: "/v1/me", cred: "$member", status: 200},
		{name: "after its lifetime", method: "GET", path: "/v1/me", cred: "$member", status: 401,
			before: func(t *testing.T, v vars) { moveClock(b, identity.SessionTTL+time.Minute) },
			want:   map[string]any{"error": "invalid or expired session"}},
	})
}

func TestOrganizationsAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other, _ := b.otherOrg("taken-slug")
	b.project("alpha", "development")
	b.project("beta", "production")
	gone := b.project("gone", "development")
	deleted := time.Now().UTC()
	gone.DeletedAt = &deleted
	if err := b.db.Update(func(tx *store.Tx) error { return store.Projects.Put(tx, gone) }); err != nil {
		t.Fatal(err)
	}
	v := vars{"org": b.org.ID, "other": other.ID, "admin": b.adminKey, "member": b.session("member"),
		"adminSession": b.session("admin"), "padmin": b.session("platform-admin"),
		"readOnly": b.key("", api.ScopeOrganizationsRead)}
	org := "/v1/organizations/$org"
	long := strings.Repeat("x", 101)
	run(t, b, v, []scenario{
		{name: "get", method: "GET", path: org, cred: "$admin", status: 200,
			want: map[string]any{"organization.id": "$org", "organization.name": "Default organization", "organization.slug": "default",
				"organization.billing_plan": "none", "organization.created_at": timeIn(0), "organization.suspended_at": nil}},
		{name: "get by a member", method: "GET", path: org, cred: "$member", status: 200},
		{name: "get by a platform admin", method: "GET", path: org, cred: "$padmin", status: 200, want: map[string]any{"organization.id": "$org"}},
		{name: "get another organization", method: "GET", path: "/v1/organizations/$other", cred: "$admin", status: 404},
		{name: "get an unknown organization", method: "GET", path: "/v1/organizations/org_nope", cred: "$admin", status: 404},
		{name: "get by a platform admin, unknown", method: "GET", path: "/v1/organizations/org_nope", cred: "$padmin", status: 404},

		{name: "patch with an empty object", method: "PATCH", path: org, cred: "$admin", body: map[string]any{}, status: 200,
			want: map[string]any{"organization.name": "Default organization"}, noAudit: "nothing changed"},
		{name: "patch with an empty body", method: "PATCH", path: org, cred: "$admin", body: "", status: 200, noAudit: "nothing changed"},
		{name: "patch the name", method: "PATCH", path: org, cred: "$admin", body: map[string]any{"name": "  Acme  "}, status: 200,
			want: map[string]any{"organization.name": "Acme", "organization.updated_at": timeIn(0)}},
		{name: "patch an empty name", method: "PATCH", path: org, cred: "$admin", body: map[string]any{"name": ""}, status: 400},
		{name: "patch a blank name", method: "PATCH", path: org, cred: "$admin", body: map[string]any{"name": "   "}, status: 400},
		{name: "patch a long name", method: "PATCH", path: org, cred: "$admin", body: map[string]any{"name": long}, status: 400},
		{name: "patch a name of the wrong type", method: "PATCH", path: org, cred: "$admin", body: map[string]any{"name": 5}, status: 400,
			want: map[string]any{"error": "field name must be of type string"}},
		{name: "patch a slug with spaces", method: "PATCH", path: org, cred: "$admin", body: map[string]any{"slug": "Bad Slug"}, status: 400},
		{name: "patch a short slug", method: "PATCH", path: org, cred: "$admin", body: map[string]any{"slug": "ab"}, status: 400},
		{name: "patch a slug with a leading dash", method: "PATCH", path: org, cred: "$admin", body: map[string]any{"slug": "-acme"}, status: 400},
		{name: "patch a taken slug", method: "PATCH", path: org, cred: "$admin", body: map[string]any{"slug": "taken-slug"}, status: 409},
		{name: "patch the slug", method: "PATCH", path: org, cred: "$admin", body: map[string]any{"slug": "acme-co"}, status: 200,
			want: map[string]any{"organization.slug": "acme-co"}},
		{name: "patch the slug it has", method: "PATCH", path: org, cred: "$admin", body: map[string]any{"slug": "acme-co"}, status: 200, noAudit: "nothing changed"},
		{name: "patch an invalid billing email", method: "PATCH", path: org, cred: "$admin", body: map[string]any{"billing_email": "not-an-email"}, status: 400},
		{name: "patch a billing email with a display name", method: "PATCH", path: org, cred: "$admin", body: map[string]any{"billing_email": "Acme <billing@acme.test>"}, status: 400},
		{name: "patch the billing email", method: "PATCH", path: org, cred: "$admin", body: map[string]any{"billing_email": "billing@acme.test"}, status: 200,
			want: map[string]any{"organization.billing_email": "billing@acme.test"}},
		{name: "clear the billing email", method: "PATCH", path: org, cred: "$admin", body: map[string]any{"billing_email": ""}, status: 200,
			want: map[string]any{"organization.billing_email": ""}},
		{name: "patch a long billing name", method: "PATCH", path: org, cred: "$admin", body: map[string]any{"billing_name": strings.Repeat("x", 201)}, status: 400},
		{name: "patch the billing name", method: "PATCH", path: org, cred: "$adminSession", body: map[string]any{"billing_name": "Acme Ltd"}, status: 200,
			want: map[string]any{"organization.billing_name": "Acme Ltd"}},
		{name: "patch a field customers may not set", method: "PATCH", path: org, cred: "$admin", body: map[string]any{"billing_plan": "pro"}, status: 400,
			want: map[string]any{"error": `unknown field "billing_plan"`}},
		{name: "patch a field in other letter case", method: "PATCH", path: org, cred: "$admin", body: map[string]any{"Name": "Sneaky"}, status: 400},
		{name: "patch with several fields, one invalid", method: "PATCH", path: org, cred: "$admin", body: map[string]any{"name": "Fine", "slug": "NO"}, status: 400},
		{name: "the invalid patch changed nothing", method: "GET", path: org, cred: "$admin", status: 200,
			want: map[string]any{"organization.name": "Acme", "organization.slug": "acme-co", "organization.billing_name": "Acme Ltd"}},
		{name: "patch another organization", method: "PATCH", path: "/v1/organizations/$other", cred: "$admin", body: map[string]any{"name": "Mine"}, status: 404},
		{name: "patch by a member", method: "PATCH", path: org, cred: "$member", body: map[string]any{"name": "Members"}, status: 403},
		{name: "patch with a read-only key", method: "PATCH", path: org, cred: "$readOnly", body: map[string]any{"name": "Readers"}, status: 403},

		{name: "usage", method: "GET", path: org + "/usage", cred: "$admin", status: 200,
			want: map[string]any{"usage.totals.projects": 2, "usage.totals.projects_limit": appliance.DefaultOrganizationQuota.ProjectsLimit,
				"usage.totals.previews_limit": appliance.DefaultOrganizationQuota.PreviewsLimit, "usage.totals.storage_bytes": 0,
				"usage.totals.job_success_rate_7d": 1, "usage.totals.webhook_delivery_rate_7d": 1,
				"usage.projects": arrayLen(2), "usage.projects.0.project_id": nonEmpty, "usage.storage_history": arrayLen(0)}},
		{name: "usage of another organization", method: "GET", path: "/v1/organizations/$other/usage", cred: "$admin", status: 404},
		{name: "usage of another organization by a platform admin", method: "GET", path: "/v1/organizations/$other/usage", cred: "$padmin", status: 200,
			want: map[string]any{"usage.totals.projects": 1}},
	})
}

func TestAPIKeysAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	prj := b.project("alpha", "development")
	_, theirs := b.otherOrg("other")
	preview, gone := b.project("alpha_preview", "development"), b.project("gone", "development")
	preview.PreviewOf = prj.ID
	now := time.Now()
	gone.DeletedAt = &now
	if err := b.db.Update(func(tx *store.Tx) error {
		return errors.Join(store.Projects.Put(tx, preview), store.Projects.Put(tx, gone))
	}); err != nil {
		t.Fatal(err)
	}
	v := vars{"org": b.org.ID, "admin": b.adminKey, "prj": prj.ID, "theirs": theirs.ID, "preview": preview.ID, "gone": gone.ID,
		"member": b.session("member"), "adminSession": b.session("admin"), "owner": b.session("owner"),
		"keyWriter": b.key("", api.ScopeAPIKeysWrite)}
	keys := "/v1/organizations/$org/api-keys"
	create := func(body map[string]any) map[string]any {
		if _, ok := body["name"]; !ok {
			body["name"] = "ci"
		}
		return body
	}
	run(t, b, v, []scenario{
		{name: "list", method: "GET", path: keys, cred: "$admin", status: 200,
			want: map[string]any{"api_keys": arrayLen(2), "api_keys.1.source": "bootstrap", "api_keys.1.is_active": true,
				"api_keys.1.key_hash": absent, "api_keys.1.plaintext_api_key": absent, "api_keys.0.source": "api_key"},
			hide: []string{"$admin"}},
		{name: "create", method: "POST", path: keys, cred: "$admin", body: create(map[string]any{"scopes": []string{"projects:read", "jobs:read", "projects:read"}}),
			status: 201,
			want: map[string]any{"plaintext_api_key": hasPrefix("apl_live_"), "api_key.id": hasPrefix("key_"), "api_key.name": "ci",
				"api_key.key_prefix": prefixOf("ciKey"), "api_key.scopes": []any{"projects:read", "jobs:read"},
				"api_key.is_active": true, "api_key.organization_id": "$org", "api_key.project_id": "", "api_key.source": "api_key",
				"api_key.created_at": timeIn(0), "api_key.expires_at": nil, "api_key.last_used_at": nil, "api_key.revoked_at": nil,
				"api_key.key_hash": absent},
			save: map[string]string{"ciKey": "plaintext_api_key", "ciKeyID": "api_key.id"},
			check: func(t *testing.T, v vars, r *response) {
				k := b.keyRecord(v["ciKey"])
				sum := sha256.Sum256([]byte(v["ciKey"]))
				if k == nil || k.KeyHash == v["ciKey"] || k.KeyHash != hex.EncodeToString(sum[:]) {
					t.Fatalf("stored key hash is not the SHA-256 of the plaintext: %+v", k)
				}
				if len(k.KeyPrefix) >= len(v["ciKey"]) {
					t.Fatalf("key_prefix %q reveals the whole key", k.KeyPrefix)
				}
			}},
		{name: "list shows the key, never its plaintext", method: "GET", path: keys, cred: "$admin", status: 200,
			want: map[string]any{"api_keys": arrayLen(3), "api_keys.0.id": "$ciKeyID", "api_keys.0.last_used_at": nil},
			hide: []string{"$ciKey"}},
		{name: "the created key works", method: "GET", path: "/v1/me", cred: "$ciKey", status: 200,
			want: map[string]any{"principal.scopes": []any{"projects:read", "jobs:read"}}},
		{name: "its use is recorded", method: "GET", path: keys, cred: "$admin", status: 200,
			check: func(t *testing.T, v vars, r *response) {
				k := find(r, "api_keys", v["ciKeyID"])
				if msg := timeIn(0)(v, k["last_used_at"], true); msg != "" {
					t.Fatalf("last_used_at: %s", msg)
				}
			}},
		{name: "it holds only its scopes", method: "GET", path: keys, cred: "$ciKey", status: 403},

		{name: "create a project-scoped key", method: "POST", path: keys, cred: "$admin",
			body: create(map[string]any{"scopes": []string{"projects:read", "backups:write"}, "project_id": "$prj"}), status: 201,
			want: map[string]any{"api_key.project_id": "$prj"}, save: map[string]string{"prjKey": "plaintext_api_key"}},
		{name: "the project-scoped key acts on its project", method: "GET", path: "/v1/projects/$prj/audit-events", cred: "$prjKey", status: 200,
			want: map[string]any{"audit_events.0.action": "api_key.create", "audit_events.0.project_id": "$prj"}},
		{name: "project-scoped with organizations:read", method: "POST", path: keys, cred: "$admin",
			body: create(map[string]any{"scopes": []string{"projects:read", "organizations:read"}, "project_id": "$prj"}), status: 400},
		{name: "project-scoped with organizations:write", method: "POST", path: keys, cred: "$admin",
			body: create(map[string]any{"scopes": []string{"organizations:write"}, "project_id": "$prj"}), status: 400},
		{name: "project-scoped with api_keys:read", method: "POST", path: keys, cred: "$admin",
			body: create(map[string]any{"scopes": []string{"api_keys:read"}, "project_id": "$prj"}), status: 400},
		{name: "project-scoped with api_keys:write", method: "POST", path: keys, cred: "$admin",
			body: create(map[string]any{"scopes": []string{"api_keys:write"}, "project_id": "$prj"}), status: 400},
		{name: "scoped to another organization's project", method: "POST", path: keys, cred: "$admin",
			body: create(map[string]any{"scopes": []string{"projects:read"}, "project_id": "$theirs"}), status: 400},
		{name: "bound to a preview database", method: "POST", path: keys, cred: "$admin",
			body: create(map[string]any{"scopes": []string{"projects:read"}, "project_id": "$preview"}), status: 400,
			want: map[string]any{"error": "project_id $preview is not a project of this organization"}},
		{name: "bound to a deleted project", method: "POST", path: keys, cred: "$admin",
			body: create(map[string]any{"scopes": []string{"projects:read"}, "project_id": "$gone"}), status: 400},
		{name: "scoped to an unknown project", method: "POST", path: keys, cred: "$admin",
			body: create(map[string]any{"scopes": []string{"projects:read"}, "project_id": "prj_nope"}), status: 400},
		{name: "an unknown scope", method: "POST", path: keys, cred: "$admin", body: create(map[string]any{"scopes": []string{"projects:admin"}}), status: 400},
		{name: "no scopes", method: "POST", path: keys, cred: "$admin", body: create(map[string]any{"scopes": []string{}}), status: 400},
		{name: "scopes missing", method: "POST", path: keys, cred: "$admin", body: map[string]any{"name": "ci"}, status: 400,
			want: map[string]any{"error": "field scopes is required"}},
		{name: "name missing", method: "POST", path: keys, cred: "$admin", body: map[string]any{"scopes": []string{"projects:read"}}, status: 400,
			want: map[string]any{"error": "field name is required"}},
		{name: "a blank name", method: "POST", path: keys, cred: "$admin", body: create(map[string]any{"name": "  ", "scopes": []string{"projects:read"}}), status: 400},
		{name: "a long name", method: "POST", path: keys, cred: "$admin", body: create(map[string]any{"name": strings.Repeat("k", 101), "scopes": []string{"projects:read"}}), status: 400},
		{name: "scopes of the wrong type", method: "POST", path: keys, cred: "$admin", body: create(map[string]any{"scopes": "projects:read"}), status: 400},
		{name: "a negative expiry", method: "POST", path: keys, cred: "$admin", body: create(map[string]any{"scopes": []string{"projects:read"}, "expires_in_days": -1}), status: 400},
		{name: "an expiry too far", method: "POST", path: keys, cred: "$admin", body: create(map[string]any{"scopes": []string{"projects:read"}, "expires_in_days": 3651}), status: 400},
		{name: "an unknown field", method: "POST", path: keys, cred: "$admin", body: create(map[string]any{"scopes": []string{"projects:read"}, "admin": true}), status: 400},
		{name: "with an expiry", method: "POST", path: keys, cred: "$admin", body: create(map[string]any{"scopes": []string{"projects:read"}, "expires_in_days": 30}), status: 201,
			want: map[string]any{"api_key.expires_at": timeIn(30 * 24 * time.Hour), "api_key.is_active": true}},
		{name: "a key cannot grant a scope it lacks", method: "POST", path: keys, cred: "$keyWriter", body: create(map[string]any{"scopes": []string{"projects:write"}}), status: 403},
		{name: "a key grants a scope it holds", method: "POST", path: keys, cred: "$keyWriter", body: create(map[string]any{"scopes": []string{"api_keys:write"}}), status: 201},
		{name: "by a member session", method: "POST", path: keys, cred: "$member", body: create(map[string]any{"scopes": []string{"projects:read"}}), status: 403,
			want: map[string]any{"error": says("organization role member does not grant")}},
		{name: "by an admin session", method: "POST", path: keys, cred: "$adminSession", body: create(map[string]any{"scopes": []string{"projects:read"}}), status: 201,
			want: map[string]any{"api_key.source": "session", "api_key.created_by_user_id": nonEmpty}},
		{name: "by the owner session", method: "POST", path: keys, cred: "$owner", body: create(map[string]any{"scopes": scopeNames(api.AllScopes)}), status: 201},
		{name: "create in another organization", method: "POST", path: "/v1/organizations/org_other/api-keys", cred: "$admin",
			body: create(map[string]any{"scopes": []string{"projects:read"}}), status: 404},
		{name: "list by a member (api_keys:read)", method: "GET", path: keys, cred: "$member", status: 200},
		{name: "list another organization", method: "GET", path: "/v1/organizations/org_other/api-keys", cred: "$admin", status: 404},

		{name: "revoke by a member", method: "DELETE", path: keys + "/$ciKeyID", cred: "$member", status: 403},
		{name: "revoke an unknown key", method: "DELETE", path: keys + "/key_nope", cred: "$admin", status: 404},
		{name: "revoke through another organization", method: "DELETE", path: "/v1/organizations/org_other/api-keys/$ciKeyID", cred: "$admin", status: 404},
		{name: "revoke", method: "DELETE", path: keys + "/$ciKeyID", cred: "$admin", status: 200, want: map[string]any{"revoked": true}},
		{name: "revoke again", method: "DELETE", path: keys + "/$ciKeyID", cred: "$admin", status: 200, want: map[string]any{"revoked": false},
			noAudit: "the key was revoked already"},
		{name: "the revoked key is refused", method: "GET", path: "/v1/me", cred: "$ciKey", status: 401,
			want: map[string]any{"error": "API key has been revoked"}},
		{name: "the list shows it revoked", method: "GET", path: keys, cred: "$admin", status: 200,
			check: func(t *testing.T, v vars, r *response) {
				k := find(r, "api_keys", v["ciKeyID"])
				if k["is_active"] != false || k["revoked_at"] == nil {
					t.Fatalf("revoked key listed as %s", jsonOf(k))
				}
			}},
		{name: "revoke by an admin session", method: "DELETE", path: keys + "/$ciKeyID", cred: "$adminSession", status: 200,
			want: map[string]any{"revoked": false}, noAudit: "the key was revoked already"},
	})
	assertNotStored(t, b, v["ciKey"], v["prjKey"], v["admin"])
}

func TestAPIKeyExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	v := vars{"org": b.org.ID, "admin": b.adminKey}
	keys := "/v1/organizations/$org/api-keys"
	run(t, b, v, []scenario{
		{name: "create a key for a day", method: "POST", path: keys, cred: "$admin",
			body: map[string]any{"name": "short", "scopes": []string{"projects:read"}, "expires_in_days": 1}, status: 201,
			save: map[string]string{"short": "plaintext_api_key", "shortID": "api_key.id"}},
		{name: "it works that day", method: "GET", path: "/v1/me", cred: "$short", status: 200},
		{name: "it is refused the day after", method: "GET", path: "/v1/me", cred: "$short", status: 401,
			before: func(t *testing.T, v vars) { moveClock(b, 25*time.Hour) },
			want:   map[string]any{"error": "API key has expired"}},
		{name: "the list shows it inactive", method: "GET", path: keys, cred: "$admin", status: 200,
			check: func(t *testing.T, v vars, r *response) {
				if k := find(r, "api_keys", v["shortID"]); k["is_active"] != false || k["revoked_at"] != nil {
					t.Fatalf("expired key listed as %s", jsonOf(k))
				}
			}},
	})
}

func TestAuditAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	prjA, prjB := b.project("alpha", "development"), b.project("beta", "development")
	_, theirs := b.otherOrg("other")
	_, adminKeyID := b.actorOf(b.adminKey)
	v := vars{"org": b.org.ID, "admin": b.adminKey, "adminKeyID": adminKeyID, "prjA": prjA.ID, "prjB": prjB.ID, "theirs": theirs.ID,
		"member": b.session("member"), "boundB": b.key(prjB.ID, api.ScopeProjectsRead),
		"noOrgRead": b.key("", api.ScopeProjectsRead), "boundA": b.key(prjA.ID, api.ScopeProjectsRead)}
	// So far: bootstrap, a sign-in and three keys (one on each project). Then 30 changes of the
	// organization and an approval on each project.
	for i := range 30 {
		if r := b.do("PATCH", "/v1/organizations/"+b.org.ID, b.adminKey, map[string]any{"billing_name": "n" + strconv.Itoa(i)}); r.status != 200 {
			t.Fatalf("patch: %d %s", r.status, r.body)
		}
	}
	for _, p := range []string{prjA.ID, prjB.ID} {
		if r := b.do("POST", "/v1/projects/"+p+"/approvals", b.adminKey, map[string]any{"action": "project.delete"}); r.status != 201 {
			t.Fatalf("approval: %d %s", r.status, r.body)
		}
	}
	orgEvents, prjEvents := "/v1/organizations/$org/audit-events", "/v1/projects/$prjA/audit-events"
	onlyProject := func(id string) func(t *testing.T, v vars, r *response) {
		return func(t *testing.T, v vars, r *response) {
			newestFirst("audit_events")(t, v, r)
			a, _ := r.json["audit_events"].([]any)
			for _, e := range a {
				if e.(map[string]any)["project_id"] != v[id] {
					t.Fatalf("audit of $%s shows %s", id, jsonOf(e))
				}
			}
		}
	}
	run(t, b, v, []scenario{
		{name: "organization events, default limit", method: "GET", path: orgEvents, cred: "$admin", status: 200,
			want: map[string]any{"audit_events": arrayLen(25), "audit_events.0.action": "approval.create", "audit_events.0.project_id": "$prjB",
				"audit_events.0.actor_kind": "api_key", "audit_events.0.actor_id": "$adminKeyID", "audit_events.0.organization_id": "$org",
				"audit_events.0.created_at": timeIn(0), "audit_events.0.id": hasPrefix("aud_"), "audit_events.0.metadata.action": "project.delete",
				"audit_events.24.action": "organization.update"},
			check: newestFirst("audit_events")},
		{name: "organization events, limit 5", method: "GET", path: orgEvents + "?limit=5", cred: "$admin", status: 200,
			want: map[string]any{"audit_events": arrayLen(5)}, check: newestFirst("audit_events")},
		{name: "organization events, limit 200", method: "GET", path: orgEvents + "?limit=200", cred: "$admin", status: 200,
			check: func(t *testing.T, v vars, r *response) {
				a := r.json["audit_events"].([]any)
				if len(a) != 37 || a[len(a)-1].(map[string]any)["action"] != "organization.bootstrap" {
					t.Fatalf("want every event down to the bootstrap, got %d", len(a))
				}
				newestFirst("audit_events")(t, v, r)
			}},
		{name: "limit 0", method: "GET", path: orgEvents + "?limit=0", cred: "$admin", status: 400},
		{name: "limit 201", method: "GET", path: orgEvents + "?limit=201", cred: "$admin", status: 400},
		{name: "limit -1", method: "GET", path: orgEvents + "?limit=-1", cred: "$admin", status: 400},
		{name: "limit abc", method: "GET", path: orgEvents + "?limit=abc", cred: "$admin", status: 400,
			want: map[string]any{"error": "query parameter limit must be an integer"}},
		{name: "organization events by a member", method: "GET", path: orgEvents, cred: "$member", status: 200},
		{name: "organization events without organizations:read", method: "GET", path: orgEvents, cred: "$noOrgRead", status: 403},
		{name: "another organization's events", method: "GET", path: "/v1/organizations/org_other/audit-events", cred: "$admin", status: 404},

		{name: "project events", method: "GET", path: prjEvents, cred: "$admin", status: 200,
			want:  map[string]any{"audit_events": arrayLen(2), "audit_events.0.action": "approval.create", "audit_events.1.action": "api_key.create"},
			check: onlyProject("prjA")},
		{name: "the other project's events", method: "GET", path: "/v1/projects/$prjB/audit-events", cred: "$boundB", status: 200,
			want: map[string]any{"audit_events": arrayLen(2)}, check: onlyProject("prjB")},
		{name: "project events, limit 1", method: "GET", path: prjEvents + "?limit=1", cred: "$admin", status: 200, want: map[string]any{"audit_events": arrayLen(1)}},
		{name: "project events, limit 0", method: "GET", path: prjEvents + "?limit=0", cred: "$admin", status: 400},
		{name: "project events, limit 201", method: "GET", path: prjEvents + "?limit=201", cred: "$admin", status: 400},
		{name: "project events, limit abc", method: "GET", path: prjEvents + "?limit=abc", cred: "$admin", status: 400},
		{name: "project events with a key bound to another project", method: "GET", path: prjEvents, cred: "$boundB", status: 403},
		{name: "another organization's project", method: "GET", path: "/v1/projects/$theirs/audit-events", cred: "$admin", status: 404},
		{name: "an unknown project", method: "GET", path: "/v1/projects/prj_nope/audit-events", cred: "$admin", status: 404},
	})
}

func TestJobsAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	prjA, prjB, empty := b.project("alpha", "development"), b.project("beta", "development"), b.project("empty", "development")
	j1, j2, j3 := b.job(prjA.ID, "project.provision"), b.job(prjA.ID, "backup.create"), b.job(prjA.ID, "project.apply_plan")
	jB := b.job(prjB.ID, "project.provision")
	_, theirs := b.otherOrg("other")
	theirJob := b.job(theirs.ID, "project.provision")
	v := vars{"admin": b.adminKey, "prjA": prjA.ID, "prjB": prjB.ID, "empty": empty.ID, "theirs": theirs.ID,
		"j1": j1.ID, "j2": j2.ID, "j3": j3.ID, "jB": jB.ID, "theirJob": theirJob.ID,
		"boundA": b.key(prjA.ID, api.ScopeJobsRead), "boundB": b.key(prjB.ID, api.ScopeJobsRead),
		"noJobs": b.key("", api.ScopeProjectsRead), "member": b.session("member")}
	jobs := "/v1/projects/$prjA/jobs"
	run(t, b, v, []scenario{
		{name: "a job", method: "GET", path: "/v1/jobs/$j1", cred: "$admin", status: 200,
			want: map[string]any{"job.id": "$j1", "job.type": "project.provision", "job.state": "pending", "job.project_id": "$prjA",
				"job.result": nil, "job.attempts": 0, "job.max_attempts": 5, "job.last_exit_code": nil, "job.created_at": timeIn(0),
				"job.payload": absent}},
		{name: "a job by a member session", method: "GET", path: "/v1/jobs/$j1", cred: "$member", status: 200},
		{name: "a job with a key bound to its project", method: "GET", path: "/v1/jobs/$j1", cred: "$boundA", status: 200},
		{name: "a job with a key bound to another project", method: "GET", path: "/v1/jobs/$j1", cred: "$boundB", status: 403,
			want: map[string]any{"error": "this API key is restricted to project $prjB"}},
		{name: "a job without jobs:read", method: "GET", path: "/v1/jobs/$j1", cred: "$noJobs", status: 403},
		{name: "an unknown job", method: "GET", path: "/v1/jobs/job_nope", cred: "$admin", status: 404},
		{name: "another organization's job", method: "GET", path: "/v1/jobs/$theirJob", cred: "$admin", status: 404},

		{name: "a project's jobs", method: "GET", path: jobs, cred: "$admin", status: 200,
			want: map[string]any{"jobs": arrayLen(3), "jobs.0.id": "$j3", "jobs.1.id": "$j2", "jobs.2.id": "$j1"}, check: newestFirst("jobs")},
		{name: "limit 2", method: "GET", path: jobs + "?limit=2", cred: "$admin", status: 200, want: map[string]any{"jobs": arrayLen(2), "jobs.0.id": "$j3"}},
		{name: "limit 200", method: "GET", path: jobs + "?limit=200", cred: "$admin", status: 200, want: map[string]any{"jobs": arrayLen(3)}},
		{name: "limit 0", method: "GET", path: jobs + "?limit=0", cred: "$admin", status: 400},
		{name: "limit 201", method: "GET", path: jobs + "?limit=201", cred: "$admin", status: 400},
		{name: "limit abc", method: "GET", path: jobs + "?limit=abc", cred: "$admin", status: 400},
		{name: "a project without jobs", method: "GET", path: "/v1/projects/$empty/jobs", cred: "$admin", status: 200, want: map[string]any{"jobs": arrayLen(0)}},
		{name: "with a key bound to the project", method: "GET", path: jobs, cred: "$boundA", status: 200, want: map[string]any{"jobs": arrayLen(3)}},
		{name: "with a key bound to another project", method: "GET", path: jobs, cred: "$boundB", status: 403},
		{name: "another organization's project", method: "GET", path: "/v1/projects/$theirs/jobs", cred: "$admin", status: 404},
	})
}

func TestApprovalsAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	prjA, prjB := b.project("alpha", "production"), b.project("beta", "production")
	_, theirs := b.otherOrg("other")
	v := vars{"admin": b.adminKey, "prjA": prjA.ID, "theirs": theirs.ID,
		"member": b.session("member"), "adminSession": b.session("admin"), "owner": b.session("owner"), "padmin": b.session("platform-admin"),
		"boundA": b.key(prjA.ID, api.ScopeProjectsWrite), "boundB": b.key(prjB.ID, api.ScopeProjectsWrite),
		"readOnly": b.key("", api.ScopeProjectsRead)}
	approvals := "/v1/projects/$prjA/approvals"
	del := map[string]any{"action": "project.delete"}
	var tokens []string
	saveToken := func(t *testing.T, v vars, r *response) {
		tok := r.json["approval"].(map[string]any)["token"].(string)
		tokens = append(tokens, tok)
		err := b.db.View(func(tx *store.Tx) error {
			a, err := store.Approvals.First(tx, store.ApprovalsByHash, ids.Hash(tok))
			if err == nil && (a.ProjectID != v["prjA"] || a.UsedAt != nil) {
				t.Errorf("stored approval %+v", a)
			}
			return err
		})
		if err != nil {
			t.Fatalf("approval not stored by its token's hash: %v", err)
		}
	}
	run(t, b, v, []scenario{
		{name: "mint", method: "POST", path: approvals, cred: "$admin", body: del, status: 201,
			want: map[string]any{"approval.id": hasPrefix("apr_"), "approval.action": "project.delete", "approval.token": hasPrefix("apr_"),
				"approval.expires_at": timeIn(appliance.ApprovalTTL)},
			check: saveToken},
		{name: "an unknown action", method: "POST", path: approvals, cred: "$admin", body: map[string]any{"action": "project.explode"}, status: 400},
		{name: "no action", method: "POST", path: approvals, cred: "$admin", body: map[string]any{}, status: 400},
		{name: "an action of the wrong type", method: "POST", path: approvals, cred: "$admin", body: map[string]any{"action": true}, status: 400},
		{name: "an unknown field", method: "POST", path: approvals, cred: "$admin", body: map[string]any{"action": "project.delete", "ttl": 60}, status: 400},
		{name: "by a member session", method: "POST", path: approvals, cred: "$member", body: del, status: 403,
			want: map[string]any{"error": "approving a project deletion requires the organization admin role"}},
		{name: "by an admin session", method: "POST", path: approvals, cred: "$adminSession", body: del, status: 201, check: saveToken},
		{name: "by the owner session", method: "POST", path: approvals, cred: "$owner", body: del, status: 201, check: saveToken},
		{name: "by a platform admin", method: "POST", path: approvals, cred: "$padmin", body: del, status: 201, check: saveToken},
		{name: "with a key bound to the project", method: "POST", path: approvals, cred: "$boundA", body: del, status: 201, check: saveToken},
		{name: "with a key bound to another project", method: "POST", path: approvals, cred: "$boundB", body: del, status: 403},
		{name: "without projects:write", method: "POST", path: approvals, cred: "$readOnly", body: del, status: 403},
		{name: "on another organization's project", method: "POST", path: "/v1/projects/$theirs/approvals", cred: "$admin", body: del, status: 404},
		{name: "on an unknown project", method: "POST", path: "/v1/projects/prj_nope/approvals", cred: "$admin", body: del, status: 404},
	})
	if len(slices.Compact(slices.Sorted(slices.Values(tokens)))) != 5 {
		t.Errorf("approval tokens are not distinct: %v", tokens)
	}
	assertNotStored(t, b, tokens...)
}

func TestCLILoginAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	v := vars{"org": b.org.ID, "admin": b.adminKey, "owner": b.session("owner"), "member": b.session("member"),
		"padmin": b.session("platform-admin")}
	start, sess := "/v1/cli/login/sessions", "/v1/cli/login/sessions/"
	memberScopes := []any{"projects:read", "projects:write", "credentials:read", "backups:read", "backups:write", "jobs:read", "organizations:read", "api_keys:read"}
	run(t, b, v, []scenario{
		{name: "start without a body", method: "POST", path: start, status: 201,
			want: map[string]any{"session_id": hasPrefix("cli_"), "poll_token": hasPrefix("clp_"), "state": "pending", "expires_at": timeIn(identity.CLILoginTTL)},
			save: map[string]string{"s1": "session_id", "p1": "poll_token"}},
		{name: "start with an empty object", method: "POST", path: start, body: map[string]any{}, status: 201},
		{name: "start with a device and scopes", method: "POST", path: start,
			body:   map[string]any{"device_name": "laptop", "key_name": "ci", "scopes": []string{"projects:read", "api_keys:write"}, "key_expires_in_days": 30},
			status: 201, save: map[string]string{"s2": "session_id", "p2": "poll_token"}},
		{name: "start asking for a scope a member lacks", method: "POST", path: start, body: map[string]any{"scopes": []string{"api_keys:write"}},
			status: 201, save: map[string]string{"s3": "session_id"}},
		{name: "start with an unknown field", method: "POST", path: start, body: map[string]any{"device": "laptop"}, status: 400},
		{name: "start with an unknown scope", method: "POST", path: start, body: map[string]any{"scopes": []string{"everything"}}, status: 400},
		{name: "start with a long key expiry", method: "POST", path: start, body: map[string]any{"key_expires_in_days": 3651}, status: 400},
		{name: "start with a long device name", method: "POST", path: start, body: map[string]any{"device_name": strings.Repeat("d", 101)}, status: 400},
		{name: "start with a null body", method: "POST", path: start, body: "null", status: 400},

		{name: "poll with a wrong token", method: "GET", path: sess + "$s1?poll_token=clp_wrong", status: 404},
		{name: "poll with another session's token", method: "GET", path: sess + "$s1?poll_token=$p2", status: 404},
		{name: "poll without a token", method: "GET", path: sess + "$s1", status: 400, want: map[string]any{"error": "query parameter poll_token is required"}},
		{name: "poll an unknown session", method: "GET", path: sess + "cli_nope?poll_token=$p1", status: 404},
		{name: "poll while pending", method: "GET", path: sess + "$s1?poll_token=$p1", status: 200,
			want: map[string]any{"session_id": "$s1", "state": "pending", "plaintext_api_key": "", "authorized_at": nil, "organization_id": ""}},

		{name: "details with an API key", method: "GET", path: sess + "$s1/details", cred: "$admin", status: 403},
		{name: "authorize with an API key", method: "POST", path: sess + "$s1/authorize", cred: "$admin", status: 403},
		{name: "details for a member", method: "GET", path: sess + "$s1/details", cred: "$member", status: 200,
			want: map[string]any{"session_id": "$s1", "state": "pending", "source": "cli", "device_name": "", "key_name": "CLI",
				"scopes": memberScopes, "key_expires_at": timeIn(90 * 24 * time.Hour), "expires_at": timeIn(identity.CLILoginTTL)}},
		{name: "details for the owner", method: "GET", path: sess + "$s1/details", cred: "$owner", status: 200,
			want: map[string]any{"scopes": arrayLen(10)}},
		{name: "details of an unknown session", method: "GET", path: sess + "cli_nope/details", cred: "$owner", status: 404},
		{name: "authorize an unknown session", method: "POST", path: sess + "cli_nope/authorize", cred: "$owner", status: 404},
		{name: "authorize by a platform admin in no organization", method: "POST", path: sess + "$s1/authorize", cred: "$padmin", status: 403},
		{name: "authorize by the owner", method: "POST", path: sess + "$s1/authorize", cred: "$owner", status: 200,
			want: map[string]any{"session_id": "$s1", "state": "authorized", "plaintext_api_key": "", "authorized_at": timeIn(0),
				"organization_id": "$org", "organization_name": "Default organization", "organization_slug": "default"}},
		{name: "authorize twice", method: "POST", path: sess + "$s1/authorize", cred: "$owner", status: 409},
		{name: "the first poll after authorization carries the key", method: "GET", path: sess + "$s1?poll_token=$p1", status: 200,
			want: map[string]any{"state": "completed", "plaintext_api_key": hasPrefix("apl_live_"), "organization_id": "$org",
				"organization_name": "Default organization", "authorized_at": notNull},
			save: map[string]string{"cliKey": "plaintext_api_key"}},
		{name: "the second poll does not", method: "GET", path: sess + "$s1?poll_token=$p1", status: 200,
			want: map[string]any{"state": "completed", "plaintext_api_key": ""}, hide: []string{"$cliKey"}},
		{name: "the device's key works", method: "GET", path: "/v1/me", cred: "$cliKey", status: 200,
			want: map[string]any{"principal.auth_source": "api_key", "principal.organization_id": "$org", "principal.scopes": arrayLen(10)},
			check: func(t *testing.T, v vars, r *response) {
				k := b.keyRecord(v["cliKey"])
				if k.Source != "cli" || k.Name != "CLI" || k.ExpiresAt == nil || k.ExpiresAt.Sub(time.Now()) < 89*24*time.Hour {
					t.Fatalf("minted key %+v", k)
				}
			}},
		{name: "the key's delivery is audited", method: "GET", path: "/v1/organizations/$org/audit-events?limit=2", cred: "$owner", status: 200,
			want: map[string]any{"audit_events.0.action": "cli_login.complete", "audit_events.0.actor_kind": "anonymous",
				"audit_events.0.metadata.session_id": "$s1", "audit_events.1.action": "cli_login.authorize", "audit_events.1.actor_kind": "user"}},
		{name: "authorize after completion", method: "POST", path: sess + "$s1/authorize", cred: "$owner", status: 409},
		{name: "details after completion", method: "GET", path: sess + "$s1/details", cred: "$owner", status: 200, want: map[string]any{"state": "completed"}},

		{name: "details of the device login for a member", method: "GET", path: sess + "$s2/details", cred: "$member", status: 200,
			want: map[string]any{"device_name": "laptop", "key_name": "ci", "scopes": []any{"projects:read"}, "key_expires_at": timeIn(30 * 24 * time.Hour)}},
		{name: "authorize by a member", method: "POST", path: sess + "$s2/authorize", cred: "$member", status: 200, want: map[string]any{"state": "authorized"}},
		{name: "poll the member's login", method: "GET", path: sess + "$s2?poll_token=$p2", status: 200,
			want: map[string]any{"state": "completed", "plaintext_api_key": hasPrefix("apl_live_")}, save: map[string]string{"memberKey": "plaintext_api_key"}},
		{name: "the member's device holds only the member's scopes", method: "GET", path: "/v1/me", cred: "$memberKey", status: 200,
			want: map[string]any{"principal.scopes": []any{"projects:read"}}},
		{name: "authorize by a member holding none of the scopes asked for", method: "POST", path: sess + "$s3/authorize", cred: "$member", status: 403},
	})
	assertNotStored(t, b, v["cliKey"], v["memberKey"], v["p1"], v["p2"])
}

func TestCLILoginExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	v := vars{"owner": b.session("owner"), "org": b.org.ID}
	start, sess := "/v1/cli/login/sessions", "/v1/cli/login/sessions/"
	run(t, b, v, []scenario{
		{name: "start one left pending", method: "POST", path: start, status: 201, save: map[string]string{"s1": "session_id", "p1": "poll_token"}},
		{name: "start one authorized but never polled", method: "POST", path: start, status: 201, save: map[string]string{"s2": "session_id", "p2": "poll_token"}},
		{name: "authorize the second", method: "POST", path: sess + "$s2/authorize", cred: "$owner", status: 200},
		{name: "poll after the login's lifetime", method: "GET", path: sess + "$s1?poll_token=$p1", status: 200,
			before: func(t *testing.T, v vars) { moveClock(b, identity.CLILoginTTL+time.Minute) },
			want:   map[string]any{"state": "expired", "plaintext_api_key": ""}},
		{name: "details after the login's lifetime", method: "GET", path: sess + "$s1/details", cred: "$owner", status: 200,
			want: map[string]any{"state": "expired"}},
		{name: "authorize after the login's lifetime", method: "POST", path: sess + "$s1/authorize", cred: "$owner", status: 410},
		{name: "an authorized login not collected in time", method: "GET", path: sess + "$s2?poll_token=$p2", status: 200,
			want: map[string]any{"state": "expired", "plaintext_api_key": ""}},
		{name: "its key, which nobody holds, is revoked", method: "GET", path: "/v1/organizations/$org/api-keys", cred: "$owner", status: 200,
			want: map[string]any{"api_keys.0.source": "cli", "api_keys.0.is_active": false, "api_keys.0.revoked_at": notNull}},
		{name: "and the revocation audited", method: "GET", path: "/v1/organizations/$org/audit-events?limit=1", cred: "$owner", status: 200,
			want: map[string]any{"audit_events.0.action": "api_key.revoke", "audit_events.0.actor_kind": "system", "audit_events.0.metadata.session_id": "$s2"}},
	})
}

func TestHealthAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	component := func(name, status string) func(t *testing.T, v vars, r *response) {
		return func(t *testing.T, v vars, r *response) {
			a, _ := r.json["components"].([]any)
			for _, c := range a {
				if c := c.(map[string]any); c["name"] == name {
					if c["status"] != status || c["message"] == "" {
						t.Fatalf("component %s: %s", name, jsonOf(c))
					}
					return
				}
			}
			t.Fatalf("no component %s in %s", name, r.body)
		}
	}
	run(t, b, vars{"admin": b.adminKey}, []scenario{
		{name: "healthz", method: "GET", path: "/healthz", status: 200, want: map[string]any{"service": "appliance", "status": "ok"}},
		{name: "healthz with a credential", method: "GET", path: "/healthz", cred: "$admin", status: 200},
		{name: "status", method: "GET", path: "/status", status: 200,
			want: map[string]any{"service": "appliance", "status": "operational", "components": arrayLen(1), "regions": []any{map[string]any{"region": "local", "status": "operational"}},
				"generated_at": timeIn(0), "updated_at": timeIn(0)},
			check: component("store", "operational")},
		{name: "status with a degraded component", method: "GET", path: "/status", status: 200,
			before: func(t *testing.T, v vars) {
				b.svc.Probe.Register("kv", func(context.Context) (string, string) { return api.StatusDegraded, "1 of 2 stores answer" })
			},
			want: map[string]any{"status": "degraded", "components": arrayLen(2), "regions.0.status": "degraded"}, check: component("kv", "degraded")},
		{name: "status with a component down", method: "GET", path: "/status", status: 200,
			before: func(t *testing.T, v vars) {
				b.svc.Probe.Register("postgres", func(context.Context) (string, string) { return api.StatusDown, "no instance answers" })
			},
			want: map[string]any{"status": "down", "components": arrayLen(3)}, check: component("postgres", "down")},
		{name: "the OpenAPI document", method: "GET", path: "/v1/openapi.json", status: 200, want: map[string]any{"openapi": hasPrefix("3.1"), "paths": notNull}},
	})
}

func TestRoutingAndDecodingErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	v := vars{"org": b.org.ID, "admin": b.adminKey}
	org, keys := "/v1/organizations/$org", "/v1/organizations/$org/api-keys"
	allow := func(want string) func(t *testing.T, v vars, r *response) {
		return func(t *testing.T, v vars, r *response) {
			if got := r.header.Get("Allow"); got != want {
				t.Fatalf("Allow %q, want %q", got, want)
			}
		}
	}
	huge := `{"name": "` + strings.Repeat("a", maxBody) + `"}`
	run(t, b, v, []scenario{
		{name: "an unknown route", method: "GET", path: "/v1/nope", status: 404, want: map[string]any{"error": "no such endpoint: GET /v1/nope"}},
		{name: "an unknown route with a credential", method: "GET", path: "/v1/nope", cred: "$admin", status: 404},
		{name: "an unknown route outside /v1", method: "GET", path: "/nope", status: 404},
		{name: "below a known route", method: "GET", path: "/v1/me/more", cred: "$admin", status: 404},
		{name: "a wrong method", method: "DELETE", path: "/v1/me", cred: "$admin", status: 405, check: allow("GET")},
		{name: "a wrong method without a credential", method: "PUT", path: org, status: 405, check: allow("GET, PATCH, DELETE")},
		{name: "a wrong method on a public route", method: "POST", path: "/healthz", status: 405, check: allow("GET")},
		{name: "malformed JSON", method: "PATCH", path: org, cred: "$admin", body: `{"name": `, status: 400,
			want: map[string]any{"error": "request body must be a JSON object"}},
		{name: "a JSON array", method: "PATCH", path: org, cred: "$admin", body: `[]`, status: 400},
		{name: "a JSON string", method: "PATCH", path: org, cred: "$admin", body: `"name"`, status: 400},
		{name: "JSON null", method: "PATCH", path: org, cred: "$admin", body: `null`, status: 400},
		{name: "two JSON objects", method: "PATCH", path: org, cred: "$admin", body: `{} {}`, status: 400},
		{name: "trailing garbage", method: "PATCH", path: org, cred: "$admin", body: `{"name": "x"} x`, status: 400},
		{name: "a body over 1 MiB", method: "PATCH", path: org, cred: "$admin", body: huge, status: 413,
			want: map[string]any{"error": "request body exceeds 1048576 bytes"}},
		{name: "a body of exactly 1 MiB is read", method: "PATCH", path: org, cred: "$admin",
			body: `{"billing_name": "` + strings.Repeat("a", maxBody-len(`{"billing_name": ""}`)) + `"}`, status: 400,
			want: map[string]any{"error": "billing_name must be at most 200 characters"}},
		{name: "a field of the wrong type", method: "POST", path: keys, cred: "$admin", body: map[string]any{"name": "x", "scopes": []any{1}}, status: 400},
		{name: "a required field null", method: "POST", path: keys, cred: "$admin", body: map[string]any{"name": nil, "scopes": []string{"projects:read"}}, status: 400,
			want: map[string]any{"error": "field name is required"}},
		{name: "an optional field null", method: "PATCH", path: org, cred: "$admin", body: `{"billing_name": null}`, status: 400,
			want: map[string]any{"error": "field billing_name must not be null: leave it out to keep its current or default value"}},
		{name: "JSON sent as text/plain", method: "PATCH", path: org, cred: "$admin", body: `{"billing_name": "x"}`, header: http.Header{"Content-Type": {"text/plain"}}, status: 415,
			want: map[string]any{"error": "the request body must be JSON, sent with Content-Type: application/json"}},
		{name: "the body is checked after the credential", method: "PATCH", path: org, body: `{`, status: 401},
		{name: "a body-less read with a body", method: "GET", path: "/v1/me", cred: "$admin", body: `{"a": 1}`, status: 400,
			want: map[string]any{"error": "this endpoint takes no request body: send none, or {}"}},
		{name: "a body-less read with malformed JSON", method: "GET", path: "/v1/me", cred: "$admin", body: `{`, status: 400},
		{name: "a body-less write with malformed JSON", method: "DELETE", path: keys + "/key_none", cred: "$admin", body: `{"reason": `, status: 400},
		{name: "a body-less write with a JSON array", method: "DELETE", path: keys + "/key_none", cred: "$admin", body: `[]`, status: 400},
		{name: "a body-less write with {} as text/plain", method: "DELETE", path: keys + "/key_none", cred: "$admin", body: `{}`, header: http.Header{"Content-Type": {"text/plain"}}, status: 415},
		{name: "a body-less write with {}", method: "DELETE", path: keys + "/key_none", cred: "$admin", body: ` { } `, status: 404},
		{name: "a body-less write with no body", method: "DELETE", path: keys + "/key_none", cred: "$admin", status: 404},
		{name: "a body-less read with an empty body", method: "GET", path: "/v1/me", cred: "$admin", body: "", status: 200},
		{name: "invalid UTF-8 in a string", method: "PATCH", path: org, cred: "$admin", body: "{\"billing_name\": \"a\xffb\"}", status: 400,
			want: map[string]any{"error": "request body is not valid UTF-8"}},
		{name: "invalid UTF-8 in a field name", method: "PATCH", path: org, cred: "$admin", body: "{\"billing_name\xc3\": \"x\"}", status: 400},
		{name: "a lone surrogate escape", method: "PATCH", path: org, cred: "$admin", body: `{"billing_name": "a\ud800b"}`, status: 400,
			want: map[string]any{"error": "request body is not valid UTF-8"}},
		{name: "a surrogate pair escape", method: "PATCH", path: org, cred: "$admin", body: `{"billing_name": "\\ud800 \ud83d\ude00"}`, status: 200,
			want: map[string]any{"organization.billing_name": "\\ud800 \U0001F600"}},
	})
}

// assertNotStored checks that no secret appears in the metadata file: only hashes (or sealed values) are
// kept.
func assertNotStored(t *testing.T, b *bundle, secrets ...string) {
	t.Helper()
	data, err := os.ReadFile(b.db.Path())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		if s != "" && bytes.Contains(data, []byte(s)) {
			t.Errorf("the metadata store holds a secret in plaintext (%.12s...)", s)
		}
	}
}

// TestNullIsNoValue: a project's plan and a backup's label sent as null are refused with a 400 that says
// so (encoding/json would read them as "unchanged" and "no label"), and nothing changes.
func TestNullIsNoValue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	prj := b.project("nulls", "development")
	for _, c := range []struct{ method, path, body, field string }{
		{"PATCH", "/v1/projects/" + prj.ID, `{"plan": null}`, "plan"},
		{"PATCH", "/v1/projects/" + prj.ID, `{"name": "renamed", "environment": null}`, "environment"},
		{"POST", "/v1/projects/" + prj.ID + "/backups", `{"label": null}`, "label"},
	} {
		r := b.do(c.method, c.path, b.adminKey, c.body)
		if want := "field " + c.field + " must not be null: leave it out to keep its current or default value"; r.status != http.StatusBadRequest || r.json["error"] != want {
			t.Errorf("%s %s %s: %d %s", c.method, c.path, c.body, r.status, r.body)
		}
	}
	if got := b.env.Project(t, prj.ID); got.Name != "nulls" || got.Plan != prj.Plan {
		t.Errorf("the project changed: %s on %s", got.Name, got.Plan)
	}
	if backups := b.do("GET", "/v1/projects/"+prj.ID+"/backups", b.adminKey, nil); len(backups.json["backups"].([]any)) != 0 {
		t.Errorf("a backup was made: %s", backups.body)
	}
}

// TestDeletedProjectIsGone: deleting a deleted project, or minting an approval for it, answers 410, as the
// document declares (the bundle's server validates both answers against it).
func TestDeletedProjectIsGone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	prj := b.project("gone", "development")
	now := time.Now().UTC()
	prj.State, prj.DeletedAt = "deleted", &now
	if err := b.db.Update(func(tx *store.Tx) error { return store.Projects.Put(tx, prj) }); err != nil {
		t.Fatal(err)
	}
	if r := b.do("DELETE", "/v1/projects/"+prj.ID, b.adminKey, nil); r.status != http.StatusGone {
		t.Errorf("delete: %d %s", r.status, r.body)
	}
	if r := b.do("POST", "/v1/projects/"+prj.ID+"/approvals", b.adminKey, map[string]any{"action": api.ActionProjectDelete}); r.status != http.StatusGone {
		t.Errorf("approval: %d %s", r.status, r.body)
	}
}
