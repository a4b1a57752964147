package appliance_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
)

// TestUpdatesRerunnable: with the store running every Update's function twice (the first run rolled back,
// as etcd runs one again after a conflict), a few flows whose functions once acted outside the transaction
// come out as with one run: the first start's bootstrap file holds the credentials that were committed,
// a removed member's keys are listed once each, and the revocation record names them.
// (APPLIANCE_TEST_RERUN_UPDATES=1 runs any test of the package so.)
func TestUpdatesRerunnable(t *testing.T) {
	t.Parallel()
	e, admin := keyEnv(t, appliancetest.Options{RerunUpdates: true})
	ctx := t.Context()
	org := e.Bootstrap.OrganizationID
	raw, err := os.ReadFile(filepath.Join(e.Dir, "bootstrap.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file appliance.Bootstrap
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if file.APIKey != e.Bootstrap.APIKey || file.OrganizationID != org {
		t.Fatalf("bootstrap.json holds key %q of %s; the committed bootstrap is key %q of %s", file.APIKey, file.OrganizationID, e.Bootstrap.APIKey, org)
	}

	added, err := e.Svc.Identity().AddMember(ctx, admin, org, &appliance.AddMemberRequest{Email: "dana@example.com", Role: appliance.RoleAdmin, Password: "correct horse battery"})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := e.Svc.Identity().CreateSession(ctx, &appliance.SessionRequest{Email: "dana@example.com", Password: "correct horse battery"})
	if err != nil {
		t.Fatal(err)
	}
	pd, err := e.Svc.Identity().Authenticate(ctx, sess.Token)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, name := range []string{"one", "two"} {
		k, err := e.Svc.Identity().CreateAPIKey(ctx, pd, org, &appliance.CreateAPIKeyRequest{Name: name, Scopes: []string{"projects:read"}})
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.APIKey.ID)
	}
	removed, err := e.Svc.Identity().RemoveMember(ctx, admin, org, added.Member.UserID)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed.RevokedAPIKeys)
	slices.Sort(keys)
	if !removed.Removed || !slices.Equal(removed.RevokedAPIKeys, keys) {
		t.Fatalf("removed %v, revoked keys %v, want %v", removed.Removed, removed.RevokedAPIKeys, keys)
	}
}
