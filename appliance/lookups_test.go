package appliance_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/store"
)

// TestKeyAuthCacheFollowsWrites: an API key's principal is cached between requests, and every change to
// what it rests on takes effect on the very next Authenticate: a role change, a revocation, the creator's
// removal, a write to the creator's user record made outside the Service, and the key's expiry by the clock.
func TestKeyAuthCacheFollowsWrites(t *testing.T) {
	t.Parallel()
	e, admin := keyEnv(t, appliancetest.Options{})
	org := e.Bootstrap.OrganizationID
	ctx := t.Context()
	added, err := e.Svc.Identity().AddMember(ctx, admin, org, &appliance.AddMemberRequest{Email: "dana@example.com", Role: appliance.RoleAdmin, Password: "correct horse battery"})
	if err != nil {
		t.Fatal(err)
	}
	dana := added.Member.UserID
	sess, err := e.Svc.Identity().CreateSession(ctx, &appliance.SessionRequest{Email: "dana@example.com", Password: "correct horse battery"})
	if err != nil {
		t.Fatal(err)
	}
	pd, err := e.Svc.Identity().Authenticate(ctx, sess.Token)
	if err != nil {
		t.Fatal(err)
	}
	mint := func(name string, days int64) *appliance.CreatedAPIKey {
		t.Helper()
		k, err := e.Svc.Identity().CreateAPIKey(ctx, pd, org, &appliance.CreateAPIKeyRequest{Name: name,
			Scopes: []string{"projects:read", "api_keys:read", "api_keys:write"}, ExpiresIn: days})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	auth := func(token string) (*appliance.Principal, error) {
		t.Helper()
		// Twice: the second answer comes from the cache, and both must agree.
		p1, err1 := e.Svc.Identity().Authenticate(ctx, token)
		p2, err2 := e.Svc.Identity().Authenticate(ctx, token)
		if (err1 == nil) != (err2 == nil) || err1 == nil && (p1.IDPOrganizationRole != p2.IDPOrganizationRole || !slices.Equal(p1.Scopes, p2.Scopes)) {
			t.Fatalf("two authentications in a row disagree: %+v %v / %+v %v", p1, err1, p2, err2)
		}
		return p2, err2
	}
	refused := func(token, want string) {
		t.Helper()
		_, err := e.Svc.Identity().Authenticate(ctx, token)
		if appliance.KindOf(err) != appliance.KindUnauthenticated || !strings.Contains(err.Error(), want) {
			t.Fatalf("want unauthenticated (%q), got %v", want, err)
		}
	}
	key, other := mint("main", 1), mint("other", 0)
	// Both keys' first use records last_used_at: from then on (for a minute) nothing but the cache's
	// invalidation stops a revoked key.
	if _, err := auth(other.PlaintextAPIKey); err != nil {
		t.Fatal(err)
	}

	p, err := auth(key.PlaintextAPIKey)
	if err != nil || p.IDPOrganizationRole != appliance.RoleAdmin || !p.Has(appliance.ScopeAPIKeysWrite) {
		t.Fatalf("as admin: %+v %v", p, err)
	}
	p.Scopes[0] = "changed by a caller" // a caller's changes do not reach the cache
	if p, _ := auth(key.PlaintextAPIKey); p.Scopes[0] == "changed by a caller" {
		t.Fatal("a principal's scopes are shared with the cache")
	}

	t.Run("role change", func(t *testing.T) {
		if _, err := e.Svc.Identity().SetMemberRole(ctx, admin, org, dana, &appliance.SetMemberRoleRequest{Role: appliance.RoleMember}); err != nil {
			t.Fatal(err)
		}
		p, err := e.Svc.Identity().Authenticate(ctx, key.PlaintextAPIKey)
		if err != nil || p.IDPOrganizationRole != appliance.RoleMember || p.Has(appliance.ScopeAPIKeysWrite) || !p.Has(appliance.ScopeAPIKeysRead) {
			t.Fatalf("after the demotion: %+v %v", p, err)
		}
		if _, err := e.Svc.Identity().SetMemberRole(ctx, admin, org, dana, &appliance.SetMemberRoleRequest{Role: appliance.RoleAdmin}); err != nil {
			t.Fatal(err)
		}
		if p, err := e.Svc.Identity().Authenticate(ctx, key.PlaintextAPIKey); err != nil || !p.Has(appliance.ScopeAPIKeysWrite) {
			t.Fatalf("after the promotion back: %+v %v", p, err)
		}
	})

	t.Run("revocation", func(t *testing.T) {
		if _, err := auth(other.PlaintextAPIKey); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Svc.Identity().RevokeAPIKey(ctx, admin, org, other.APIKey.ID); err != nil {
			t.Fatal(err)
		}
		refused(other.PlaintextAPIKey, "revoked")
	})

	t.Run("user record written outside the service", func(t *testing.T) {
		set := func(role string) {
			t.Helper()
			err := e.DB.Update(func(tx *store.Tx) error {
				u, err := store.Users.Get(tx, dana)
				if err != nil {
					return err
				}
				for i := range u.Memberships {
					u.Memberships[i].Role = role
				}
				return store.Users.Put(tx, u)
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if _, err := auth(key.PlaintextAPIKey); err != nil {
			t.Fatal(err)
		}
		set(appliance.RoleMember)
		if p, err := e.Svc.Identity().Authenticate(ctx, key.PlaintextAPIKey); err != nil || p.Has(appliance.ScopeAPIKeysWrite) {
			t.Fatalf("after the store write: %+v %v", p, err)
		}
		set(appliance.RoleAdmin)
	})

	t.Run("expiry by the clock", func(t *testing.T) {
		if _, err := auth(key.PlaintextAPIKey); err != nil {
			t.Fatal(err)
		}
		later := time.Now().Add(25 * time.Hour)
		e.Clock.Set(func() time.Time { return later })
		defer e.Clock.Set(time.Now)
		refused(key.PlaintextAPIKey, "expired")
	})

	t.Run("removal", func(t *testing.T) {
		if _, err := auth(key.PlaintextAPIKey); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Svc.Identity().RemoveMember(ctx, admin, org, dana); err != nil {
			t.Fatal(err)
		}
		refused(key.PlaintextAPIKey, "")
	})
}

// TestStudioTargetCacheFollowsWrites: the studio's project lookups are cached between runs, and a project
// being deleted, or its record changed by any writer, stops the studio on the very next run.
func TestStudioTargetCacheFollowsWrites(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	a := provision(t, e, p, "cached-a", "development")
	b := provision(t, e, p, "cached-b", "development")
	run := func(prj *store.Project) error {
		_, err := e.Svc.Studio().RunSQL(t.Context(), p, prj.ID, &appliance.SQLRequest{Query: "select 1"})
		return err
	}
	for _, prj := range []*store.Project{a, b} {
		for range 2 {
			if err := run(prj); err != nil {
				t.Fatal(err)
			}
		}
	}

	// A state written straight into the store (as a job's step would): the next run sees it.
	err := e.DB.Update(func(tx *store.Tx) error {
		prj, err := store.Projects.Get(tx, a.ID)
		if err != nil {
			return err
		}
		prj.State = appliance.ProjectFailed
		return store.Projects.Put(tx, prj)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := run(a); appliance.KindOf(err) != appliance.KindConflict {
		t.Fatalf("a run on a failed project: %v", err)
	}

	if err := run(b); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Svc.DeleteProject(t.Context(), p, b.ID, ""); err != nil {
		t.Fatal(err)
	}
	if err := run(b); appliance.KindOf(err) != appliance.KindConflict {
		t.Fatalf("a run on a project being deleted: %v", err)
	}

	// A project-scoped key sees only its project, cache or not.
	k, err := e.Svc.Identity().CreateAPIKey(t.Context(), p, e.Bootstrap.OrganizationID, &appliance.CreateAPIKeyRequest{Name: "a only",
		Scopes: []string{"projects:read", "projects:write"}, ProjectID: a.ID})
	if err != nil {
		t.Fatal(err)
	}
	pa, err := e.Svc.Identity().Authenticate(t.Context(), k.PlaintextAPIKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Svc.Studio().RunSQL(t.Context(), pa, b.ID, &appliance.SQLRequest{Query: "select 1"}); appliance.KindOf(err) != appliance.KindForbidden {
		t.Fatalf("a key of project a on project b: %v", err)
	}
}
