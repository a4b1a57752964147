package usersync_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/integrations/autha"
	"github.com/theappliance/appliance/appliance/integrations/autha/authatest"
	"github.com/theappliance/appliance/appliance/integrations/authb"
	"github.com/theappliance/appliance/appliance/integrations/authb/authbtest"
	"github.com/theappliance/appliance/appliance/integrations/authc"
	"github.com/theappliance/appliance/appliance/integrations/authc/authctest"
	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/appliance/integrations/usersync"
)

// directoryHarness drives one provider's fake: users put and deleted at the platform, and the signed
// webhook the platform sends for each change.
type directoryHarness struct {
	dir provider.Directory
	env provider.Env
	// put creates or changes user i to version v at time at and returns the signed webhook of the change.
	put func(i, v int, at time.Time, created bool) (http.Header, []byte)
	// del deletes user i at time at and returns the signed webhook.
	del func(i int, at time.Time) (http.Header, []byte)
}

func email(i, v int) string { return fmt.Sprintf("user%d.v%d@example.com", i, v) }

func harnesses(t *testing.T) map[string]directoryHarness {
	client := &http.Client{Timeout: 10 * time.Second}
	hs := map[string]directoryHarness{}

	{
		fake := authatest.New(t, "sk_test_sync")
		const secret = "whsec_c2VjcmV0LWZvci10aGUtc3luYy10ZXN0LTEyMzQ="
		created := map[int]time.Time{}
		n := 0
		user := func(i, v int, at time.Time) authatest.User {
			return authatest.User{ID: fmt.Sprintf("user_%04d", i), Email: email(i, v), FirstName: "V", LastName: fmt.Sprint(v), CreatedAt: created[i], UpdatedAt: at}
		}
		hs[provider.AuthA] = directoryHarness{
			dir: autha.New(),
			env: provider.Env{HTTP: client, BaseURL: fake.URL, Credentials: provider.Credentials{Token: "sk_test_sync", WebhookSecret: secret}},
			put: func(i, v int, at time.Time, isNew bool) (http.Header, []byte) {
				typ := "user.updated"
				if isNew {
					created[i], typ = at, "user.created"
				}
				u := user(i, v, at)
				fake.Put(u)
				n++
				body := authatest.EventBody(typ, u, at)
				return authatest.Sign(t, secret, fmt.Sprintf("msg_%d", n), time.Now(), body), body
			},
			del: func(i int, at time.Time) (http.Header, []byte) {
				u := user(i, 0, at)
				fake.Delete(u.ID)
				n++
				body := authatest.EventBody("user.deleted", u, at)
				return authatest.Sign(t, secret, fmt.Sprintf("msg_%d", n), time.Now(), body), body
			},
		}
	}
	{
		fake := authbtest.New(t, "sync.eu.auth0.com", "sync-client", "sync-client-secret")
		const token = "log-stream-token"
		created := map[int]time.Time{}
		n := 0
		user := func(i, v int, at time.Time) authbtest.User {
			return authbtest.User{ID: fmt.Sprintf("auth0|%04d", i), Email: email(i, v), GivenName: "V", FamilyName: fmt.Sprint(v), CreatedAt: created[i], UpdatedAt: at}
		}
		hs[provider.AuthB] = directoryHarness{
			dir: authb.New(),
			env: provider.Env{HTTP: client, BaseURL: fake.URL, Credentials: provider.Credentials{ExternalID: "sync.eu.auth0.com",
				ClientID: "sync-client", ClientSecret: "sync-client-secret", WebhookSecret: token}},
			put: func(i, v int, at time.Time, isNew bool) (http.Header, []byte) {
				if isNew {
					created[i] = at
				}
				u := user(i, v, at)
				fake.Put(u)
				n++
				l := authbtest.APILog(fmt.Sprintf("9%05d", n), http.MethodPatch, u, at)
				if isNew {
					l = authbtest.SignupLog(fmt.Sprintf("9%05d", n), u, at)
				}
				return authbtest.Headers(token), authbtest.LogBatch(authbtest.OtherLog(fmt.Sprintf("8%05d", n), "s", u, at), l)
			},
			del: func(i int, at time.Time) (http.Header, []byte) {
				id := user(i, 0, at).ID
				fake.Delete(id)
				n++
				return authbtest.Headers(token), authbtest.LogLines(authbtest.DeletionLog(fmt.Sprintf("9%05d", n), id, at))
			},
		}
	}
	{
		fake := authctest.New(t, "sk_workos_sync")
		const secret = "workos-sync-secret"
		const dir = "directory_sync"
		created := map[int]time.Time{}
		n := 0
		user := func(i, v int, at time.Time) authctest.User {
			return authctest.User{ID: fmt.Sprintf("directory_user_%04d", i), Directory: dir, Email: email(i, v), FirstName: "V", LastName: fmt.Sprint(v), CreatedAt: created[i], UpdatedAt: at}
		}
		hs[provider.AuthC] = directoryHarness{
			dir: authc.New(),
			env: provider.Env{HTTP: client, BaseURL: fake.URL, Credentials: provider.Credentials{Token: "sk_workos_sync", ExternalID: dir, WebhookSecret: secret}},
			put: func(i, v int, at time.Time, isNew bool) (http.Header, []byte) {
				typ := "dsync.user.updated"
				if isNew {
					created[i], typ = at, "dsync.user.created"
				}
				u := user(i, v, at)
				fake.Put(u)
				n++
				body := authctest.EventBody(fmt.Sprintf("event_%d", n), typ, u, at)
				return authctest.Sign(secret, time.Now(), body), body
			},
			del: func(i int, at time.Time) (http.Header, []byte) {
				u := user(i, 1, at)
				u.UpdatedAt = created[i]
				fake.Delete(u.ID)
				n++
				body := authctest.EventBody(fmt.Sprintf("event_%d", n), "dsync.user.deleted", u, at)
				return authctest.Sign(secret, time.Now(), body), body
			},
		}
	}
	return hs
}

// deliver is what the area does with an inbound webhook: verify, parse (auth_b's MultiEvent when the
// provider has it), apply.
func deliver(t *testing.T, conn *pgx.Conn, tb usersync.Table, h directoryHarness, hdr http.Header, body []byte) {
	t.Helper()
	ctx := context.Background()
	if _, err := h.dir.VerifyWebhook(h.env, hdr, body, time.Now()); err != nil {
		t.Fatalf("verify: %v", err)
	}
	var evs []provider.UserEvent
	if m, ok := h.dir.(authb.MultiEvent); ok {
		var err error
		if evs, err = m.UserEvents(ctx, h.env, body); err != nil && !errors.Is(err, provider.ErrIgnored) {
			t.Fatalf("user events: %v", err)
		}
	} else {
		ev, err := h.dir.UserEvent(body)
		if err != nil {
			t.Fatalf("user event: %v", err)
		}
		evs = []provider.UserEvent{ev}
	}
	if err := tb.Apply(ctx, conn, evs...); err != nil {
		t.Fatal(err)
	}
}

// TestProvidersThroughTheContract: each directory provider, through provider.Directory alone (and
// auth_b's MultiEvent), fills the table from its fake: a paged backfill of more users than a page, then
// webhooks for an update, a deletion, a late (older) update of the deleted user and a redelivery.
func TestProvidersThroughTheContract(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	for name, h := range harnesses(t) {
		t.Run(name, func(t *testing.T) {
			tb := usersync.Table{Schema: usersync.DefaultSchema, Name: name}
			if err := tb.Ensure(ctx, b.admin, b.role); err != nil {
				t.Fatal(err)
			}
			const n = 230
			base := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
			for i := 0; i < n; i++ {
				h.put(i, 1, base.Add(time.Duration(i)*time.Millisecond), true)
			}
			cursor, pages := "", 0
			for {
				at := time.Now()
				users, next, err := h.dir.ListUsers(ctx, h.env, cursor)
				if err != nil {
					t.Fatal(err)
				}
				if err := tb.Backfill(ctx, b.admin, users, at); err != nil {
					t.Fatal(err)
				}
				pages++
				if next == "" {
					break
				}
				cursor = next
			}
			got, _ := read(t, b.admin, tb)
			if len(got) != n || pages < 3 {
				t.Fatalf("backfill: %d rows in %d pages, want %d in 3 or more", len(got), pages, n)
			}

			later := base.Add(10 * time.Minute)
			hdr, updated := h.put(3, 2, later, false)
			deliver(t, b.admin, tb, h, hdr, updated)
			staleHdr, stale := h.put(4, 2, later, false)
			hdr, deleted := h.del(4, later.Add(time.Minute))
			deliver(t, b.admin, tb, h, hdr, deleted)
			deliver(t, b.admin, tb, h, staleHdr, stale) // the older update, delivered late
			deliver(t, b.admin, tb, h, hdr, deleted)    // a redelivery
			hdr, newUser := h.put(n, 1, later.Add(2*time.Minute), true)
			deliver(t, b.admin, tb, h, hdr, newUser)

			got, _ = read(t, b.admin, tb)
			if len(got) != n {
				t.Fatalf("after the events: %d rows, want %d", len(got), n)
			}
			for id, r := range got {
				switch {
				case r.Email == email(3, 2):
					if r.Last != "2" || !r.SourceAt.Equal(later) {
						t.Errorf("updated user %s: %+v", id, r)
					}
				case r.Email == email(4, 1) || r.Email == email(4, 2):
					t.Errorf("deleted user %s is back: %+v", id, r)
				case r.Email == email(3, 1):
					t.Errorf("user %s not updated: %+v", id, r)
				}
			}
			found := false
			for _, r := range got {
				found = found || r.Email == email(n, 1)
			}
			if !found {
				t.Error("the new user's row is missing")
			}
		})
	}
}
