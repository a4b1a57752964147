package appliance_test

import (
	"os"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/store"
)

// TestRevocationRecordOutlivesTheMetadata: a revoked API key and a signed-out session are written to the
// data directory's revocation record; when the metadata forgets the revocations (as an older meta.db put
// back does: the records are written back live here), ApplyRevocations revokes them again and neither
// authenticates, and the reconcile report named them before.
func TestRevocationRecordOutlivesTheMetadata(t *testing.T) {
	t.Parallel()
	e, admin := keyEnv(t, appliancetest.Options{})
	ctx := t.Context()
	org := e.Bootstrap.OrganizationID
	k, err := e.Svc.Identity().CreateAPIKey(ctx, admin, org, &appliance.CreateAPIKeyRequest{Name: "old", Scopes: []string{"projects:read"}})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := e.Svc.Identity().CreateSession(ctx, &appliance.SessionRequest{Email: appliance.BootstrapOwnerEmail, Password: e.Bootstrap.Password})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := e.Svc.Identity().Authenticate(ctx, sess.Token)
	if err != nil {
		t.Fatal(err)
	}
	// The state an older copy of the metadata has: both live.
	var liveKey *store.APIKey
	var liveSessions []*store.Session
	e.DB.View(func(tx *store.Tx) error {
		liveKey, _ = store.APIKeys.Get(tx, k.APIKey.ID)
		liveSessions, _ = store.Sessions.All(tx, nil)
		return nil
	})
	if _, err := e.Svc.Identity().RevokeAPIKey(ctx, admin, org, k.APIKey.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Svc.Identity().SignOut(ctx, ps); err != nil {
		t.Fatal(err)
	}
	record, err := os.ReadFile(appliance.RevocationFile(e.Dir))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(record), "api_key "+liveKey.KeyHash+"\n") || !strings.Contains(string(record), "session ") {
		t.Fatalf("the revocation record:\n%s", record)
	}
	if err := e.DB.Update(func(tx *store.Tx) error {
		if err := store.APIKeys.Put(tx, liveKey); err != nil {
			return err
		}
		for _, x := range liveSessions {
			if err := store.Sessions.Put(tx, x); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Svc.Identity().Authenticate(ctx, k.PlaintextAPIKey); err != nil {
		t.Fatalf("the key written back live does not authenticate (%v): the test shows nothing", err)
	}
	report, err := appliance.Reconcile(e.DB, e.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(report, "\n"); !strings.Contains(got, "API key "+k.APIKey.ID+" is live in the metadata but revoked in the revocation record") ||
		!strings.Contains(got, "session ") {
		t.Fatalf("reconcile:\n%s", got)
	}
	again, err := e.Svc.ApplyRevocations()
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 2 {
		t.Fatalf("revoked again: %q", again)
	}
	if _, err := e.Svc.Identity().Authenticate(ctx, k.PlaintextAPIKey); err == nil {
		t.Fatal("the revoked key authenticates again")
	}
	if _, err := e.Svc.Identity().Authenticate(ctx, sess.Token); err == nil {
		t.Fatal("the signed-out session authenticates again")
	}
	if report, _ := appliance.Reconcile(e.DB, e.Dir); len(report) != 0 {
		t.Fatalf("reconcile after applying: %q", report)
	}
}
