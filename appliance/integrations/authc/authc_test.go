package authc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/integrations/authc"
	"github.com/theappliance/appliance/appliance/integrations/authc/authctest"
	"github.com/theappliance/appliance/appliance/integrations/provider"
)

const (
	key       = "sk_test_workos_key"
	directory = "directory_01FAKE"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func setup(t *testing.T) (provider.Directory, *authctest.Server, provider.Env) {
	fake := authctest.New(t, key)
	env := provider.Env{HTTP: &http.Client{Timeout: 10 * time.Second}, BaseURL: fake.URL,
		Credentials: provider.Credentials{Token: key, ExternalID: directory}}
	return authc.New(), fake, env
}

func TestListUsersPages(t *testing.T) {
	d, fake, env := setup(t)
	const n = 2*authc.PageSize + 11
	for i := 0; i < n; i++ {
		fake.Put(authctest.User{ID: fmt.Sprintf("directory_user_%03d", i), Directory: directory, Email: fmt.Sprintf("u%d@corp.example", i),
			FirstName: "Ada", LastName: fmt.Sprint(i), CreatedAt: t0.Add(time.Duration(i) * time.Minute), UpdatedAt: t0.Add(time.Duration(i)*time.Minute + time.Second)})
	}
	fake.Put(authctest.User{ID: "directory_user_other", Directory: "directory_other", Email: "x@other.example", CreatedAt: t0, UpdatedAt: t0})
	seen := map[string]provider.User{}
	cursor, pages := "", 0
	for {
		users, next, err := d.ListUsers(context.Background(), env, cursor)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, u := range users {
			if _, dup := seen[u.ID]; dup {
				t.Fatalf("%s listed twice", u.ID)
			}
			seen[u.ID] = u
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(seen) != n || pages != 3 {
		t.Fatalf("%d users in %d pages, want %d in 3", len(seen), pages, n)
	}
	if _, ok := seen["directory_user_other"]; ok {
		t.Fatal("another directory's user was listed")
	}
	u := seen["directory_user_042"]
	if u.Email != "u42@corp.example" || u.FirstName != "Ada" || u.LastName != "42" ||
		!u.CreatedAt.Equal(t0.Add(42*time.Minute)) || !u.UpdatedAt.Equal(t0.Add(42*time.Minute+time.Second)) {
		t.Fatalf("user 42: %+v", u)
	}
	var raw map[string]any
	if err := json.Unmarshal(u.Raw, &raw); err != nil || raw["directory_id"] != directory {
		t.Fatalf("raw: %s, %v", u.Raw, err)
	}
	calls := fake.Calls()
	if len(calls) != 3 {
		t.Fatalf("calls: %+v", calls)
	}
	for i, c := range calls {
		if c.Path != "/directory_users" || !strings.Contains(c.Query, "directory="+directory) || !strings.Contains(c.Query, "limit=100") ||
			(i == 0) == strings.Contains(c.Query, "after=") || c.Authorization != "Bearer "+key || c.Status != 200 {
			t.Errorf("call %d: %+v", i, c)
		}
	}
}

func TestCheck(t *testing.T) {
	d, fake, env := setup(t)
	ctx := context.Background()
	if err := d.Check(ctx, env); err != nil {
		t.Fatal(err)
	}
	bad := env
	bad.Credentials.Token = "sk_test_wrong"
	if err := d.Check(ctx, bad); !errors.Is(err, provider.ErrCredentials) || strings.Contains(err.Error(), "sk_test_wrong") {
		t.Fatalf("a wrong key: %v", err)
	}
	noDir := env
	noDir.Credentials.ExternalID = ""
	if err := d.Check(ctx, noDir); err == nil || errors.Is(err, provider.ErrCredentials) {
		t.Fatalf("no directory: %v", err)
	}
	if c := fake.Calls(); len(c) != 2 || c[0].Query != "directory="+directory+"&limit=1" || c[1].Status != http.StatusUnauthorized {
		t.Fatalf("calls: %+v", c)
	}
}

const secret = "workos_webhook_secret_123"

func TestVerifyWebhook(t *testing.T) {
	d := authc.New()
	env := provider.Env{Credentials: provider.Credentials{WebhookSecret: secret}}
	now := time.Now()
	body := authctest.EventBody("event_01A", "dsync.user.updated", authctest.User{ID: "directory_user_1", Directory: directory, Email: "a@corp.example", CreatedAt: t0, UpdatedAt: t0}, now)
	h := authctest.Sign(secret, now, body)
	if id, err := d.VerifyWebhook(env, h, body, now); err != nil || id != "event_01A" {
		t.Fatalf("valid: %q, %v", id, err)
	}
	if _, err := d.VerifyWebhook(env, h, body, now.Add(4*time.Minute)); err != nil {
		t.Fatalf("within the tolerance: %v", err)
	}
	tampered := []byte(strings.Replace(string(body), "a@corp.example", "b@corp.example", 1))
	for _, c := range []struct {
		name   string
		secret string
		header string
		body   []byte
		now    time.Time
	}{
		{"tampered body", secret, h.Get("WorkOS-Signature"), tampered, now},
		{"wrong secret", "another_secret", h.Get("WorkOS-Signature"), body, now},
		{"no secret", "", h.Get("WorkOS-Signature"), body, now},
		{"stale", secret, h.Get("WorkOS-Signature"), body, now.Add(5*time.Minute + time.Millisecond)},
		{"from the future", secret, h.Get("WorkOS-Signature"), body, now.Add(-5*time.Minute - time.Millisecond)},
		{"missing header", secret, "", body, now},
		{"no v1", secret, strings.Split(h.Get("WorkOS-Signature"), ",")[0], body, now},
		{"no t", secret, strings.TrimSpace(strings.Split(h.Get("WorkOS-Signature"), ",")[1]), body, now},
		{"garbage", secret, "t=abc, v1=zz", body, now},
		{"another time signed", secret, strings.Replace(h.Get("WorkOS-Signature"), fmt.Sprintf("t=%d", now.UnixMilli()), fmt.Sprintf("t=%d", now.UnixMilli()+1), 1), body, now},
	} {
		hh := http.Header{}
		if c.header != "" {
			hh.Set("WorkOS-Signature", c.header)
		}
		if _, err := d.VerifyWebhook(provider.Env{Credentials: provider.Credentials{WebhookSecret: c.secret}}, hh, c.body, c.now); !errors.Is(err, provider.ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", c.name, err)
		}
	}
}

func TestUserEvent(t *testing.T) {
	d := authc.New()
	u := authctest.User{ID: "directory_user_9", Directory: directory, Email: "nine@corp.example", FirstName: "Nine", LastName: "N", CreatedAt: t0, UpdatedAt: t0.Add(time.Hour)}
	for _, typ := range []string{"dsync.user.created", "dsync.user.updated"} {
		ev, err := d.UserEvent(authctest.EventBody("event_"+typ, typ, u, t0.Add(2*time.Hour)))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Deleted || ev.ID != "event_"+typ || ev.User.ID != u.ID || ev.User.Email != u.Email || ev.User.FirstName != "Nine" || ev.User.LastName != "N" ||
			!ev.At.Equal(t0.Add(time.Hour)) || !ev.User.CreatedAt.Equal(t0) {
			t.Fatalf("%s: %+v", typ, ev)
		}
	}
	ev, err := d.UserEvent(authctest.EventBody("event_del", "dsync.user.deleted", u, t0.Add(2*time.Hour)))
	if err != nil || !ev.Deleted || ev.User.ID != u.ID || !ev.At.Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("deleted: %+v, %v", ev, err)
	}
	// Older payloads have emails[] only.
	ev, err = d.UserEvent([]byte(`{"id":"event_old","event":"dsync.user.updated","data":{"id":"directory_user_2","emails":[{"primary":false,"value":"no@x"},{"primary":true,"value":"yes@x"}],"updated_at":"2026-11-01T12:00:00.000Z"}}`))
	if err != nil || ev.User.Email != "yes@x" {
		t.Fatalf("emails[]: %+v, %v", ev, err)
	}
	for _, body := range []string{`{"id":"e","event":"dsync.group.created","data":{"id":"directory_group_1"}}`, `{"id":"e","event":"connection.activated","data":{}}`} {
		if _, err := d.UserEvent([]byte(body)); !errors.Is(err, provider.ErrIgnored) {
			t.Errorf("%s: %v, want ErrIgnored", body, err)
		}
	}
	for _, body := range []string{`nope`, `{"id":"e","event":"dsync.user.updated","data":{"first_name":"x"}}`, `{"id":"e","event":"dsync.user.updated","data":{"id":"u"}}`} {
		if _, err := d.UserEvent([]byte(body)); err == nil || errors.Is(err, provider.ErrIgnored) {
			t.Errorf("%s: %v, want an error", body, err)
		}
	}
}

func TestValidateConfig(t *testing.T) {
	d := authc.New()
	if got, err := d.ValidateConfig(json.RawMessage(`{}`)); err != nil || string(got) != `{"schema":"auth_sync","table":"users"}` {
		t.Fatalf("defaults: %s, %v", got, err)
	}
	if _, err := d.ValidateConfig(json.RawMessage(`{"schema":"a.b"}`)); err == nil || !strings.Contains(err.Error(), "schema") {
		t.Fatalf("bad schema: %v", err)
	}
	if d.Name() != provider.AuthC || d.DefaultBaseURL() != "https://api.workos.com" {
		t.Fatal(d.Name(), d.DefaultBaseURL())
	}
}
