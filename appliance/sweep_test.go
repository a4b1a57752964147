package appliance_test

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/store"
)

func setup(t *testing.T) (*appliance.Service, *appliance.Bootstrap, *time.Time) {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	box, err := appliance.OpenSecretBox(filepath.Join(dir, "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	svc := appliance.New(appliance.Config{PasswordCost: 4}, db, box, slog.New(slog.NewTextHandler(io.Discard, nil)))
	now := time.Now().UTC()
	svc.SetClock(func() time.Time { return now })
	boot, err := svc.EnsureBootstrap(t.Context(), filepath.Join(dir, "bootstrap.json"), "ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	return svc, boot, &now
}

func TestSweepExpiresAndDeletes(t *testing.T) {
	t.Parallel()
	svc, boot, now := setup(t)
	ctx := t.Context()
	pending, err := svc.StartCLILogin(ctx, &appliance.CLILoginStartRequest{DeviceName: "laptop"})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := svc.CreateSession(ctx, &appliance.SessionRequest{Email: boot.Email, Password: boot.Password})
	if err != nil {
		t.Fatal(err)
	}
	p, err := svc.Authenticate(ctx, sess.Token)
	if err != nil {
		t.Fatal(err)
	}
	authorized, err := svc.StartCLILogin(ctx, &appliance.CLILoginStartRequest{DeviceName: "desk"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.AuthorizeCLILogin(ctx, p, authorized.SessionID); err != nil {
		t.Fatal(err)
	}

	// Nothing is due yet.
	if res, err := svc.Sweep(ctx); err != nil || res != (appliance.SweepResult{}) {
		t.Fatalf("early sweep: %+v %v", res, err)
	}

	// Past the login deadline: both logins expire and the uncollected key is revoked.
	*now = now.Add(appliance.CLILoginTTL + time.Minute)
	res, err := svc.Sweep(ctx)
	if err != nil || res.LoginsExpired != 2 {
		t.Fatalf("sweep after expiry: %+v %v", res, err)
	}
	keys, err := svc.ListAPIKeys(ctx, p, boot.OrganizationID)
	if err != nil {
		t.Fatal(err)
	}
	revoked := 0
	for _, k := range keys.APIKeys {
		if k.RevokedAt != nil {
			revoked++
		}
	}
	if revoked != 1 {
		t.Fatalf("want the uncollected CLI key revoked, got %d revoked of %d", revoked, len(keys.APIKeys))
	}
	if r, err := svc.PollCLILogin(ctx, pending.SessionID, pending.PollToken); err != nil || r.State != appliance.CLILoginExpired {
		t.Fatalf("poll after sweep: %+v %v", r, err)
	}

	// A day later the records are gone, and so is the expired session.
	*now = now.Add(appliance.SessionTTL + 25*time.Hour)
	res, err = svc.Sweep(ctx)
	if err != nil || res.LoginsDeleted != 2 || res.SessionsDeleted != 1 {
		t.Fatalf("late sweep: %+v %v", res, err)
	}
	if _, err := svc.PollCLILogin(ctx, pending.SessionID, pending.PollToken); appliance.KindOf(err) != appliance.KindNotFound {
		t.Fatalf("poll of a deleted login: %v", err)
	}
}
