package autha_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/integrations/autha"
	"github.com/theappliance/appliance/appliance/integrations/autha/authatest"
	"github.com/theappliance/appliance/appliance/integrations/provider"
)

const key = "sk_test_fakekey123"

func setup(t *testing.T) (provider.Directory, *authatest.Server, provider.Env) {
	fake := authatest.New(t, key)
	env := provider.Env{HTTP: &http.Client{Timeout: 10 * time.Second}, BaseURL: fake.URL, Credentials: provider.Credentials{Token: key}}
	return autha.New(), fake, env
}

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func TestListUsersPages(t *testing.T) {
	d, fake, env := setup(t)
	const n = 2*autha.PageSize + 37
	for i := 0; i < n; i++ {
		fake.Put(authatest.User{ID: fmt.Sprintf("user_%03d", i), Email: fmt.Sprintf("u%d@example.com", i), FirstName: "F", LastName: fmt.Sprint(i),
			CreatedAt: t0.Add(time.Duration(i) * time.Minute), UpdatedAt: t0.Add(time.Duration(i)*time.Minute + time.Second)})
	}
	seen := map[string]provider.User{}
	cursor, pages := "", 0
	for {
		users, next, err := d.ListUsers(context.Background(), env, cursor)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, u := range users {
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
	u := seen["user_007"]
	if u.Email != "u7@example.com" || u.FirstName != "F" || u.LastName != "7" ||
		!u.CreatedAt.Equal(t0.Add(7*time.Minute)) || !u.UpdatedAt.Equal(t0.Add(7*time.Minute+time.Second)) {
		t.Fatalf("user_007: %+v", u)
	}
	var raw map[string]any
	if err := json.Unmarshal(u.Raw, &raw); err != nil || raw["id"] != "user_007" || raw["email_addresses"] == nil {
		t.Fatalf("raw: %s, %v", u.Raw, err)
	}
	calls := fake.Calls()
	if len(calls) != 3 {
		t.Fatalf("calls: %+v", calls)
	}
	for i, c := range calls {
		if c.Path != "/v1/users" || c.Query != fmt.Sprintf("limit=%d&offset=%d", autha.PageSize, i*autha.PageSize) || c.Authorization != "Bearer "+key || c.Status != 200 {
			t.Errorf("call %d: %+v", i, c)
		}
	}
	if _, _, err := d.ListUsers(context.Background(), env, "-3"); err == nil {
		t.Fatal("a negative cursor was accepted")
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
	bad.Credentials.Token = ""
	if err := d.Check(ctx, bad); !errors.Is(err, provider.ErrCredentials) {
		t.Fatalf("no key: %v", err)
	}
	if c := fake.Calls(); len(c) != 2 || c[1].Status != http.StatusUnauthorized {
		t.Fatalf("calls: %+v", c)
	}
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	gone := env
	gone.BaseURL = down.URL + "/v1"
	if err := d.Check(ctx, gone); err == nil || errors.Is(err, provider.ErrCredentials) || strings.Contains(err.Error(), key) {
		t.Fatalf("an unreachable API: %v", err)
	}
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "internal detail sk_secret_leak", http.StatusInternalServerError)
	}))
	defer broken.Close()
	gone.BaseURL = broken.URL
	if err := d.Check(ctx, gone); err == nil || errors.Is(err, provider.ErrCredentials) || strings.Contains(err.Error(), "leak") || !strings.Contains(err.Error(), "500") {
		t.Fatalf("a failing API: %v", err)
	}
}

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func TestVerifyWebhook(t *testing.T) {
	d := autha.New()
	env := provider.Env{Credentials: provider.Credentials{WebhookSecret: secret}}
	now := time.Now()
	body := authatest.EventBody("user.updated", authatest.User{ID: "user_1", Email: "a@example.com", UpdatedAt: now}, now)
	h := authatest.Sign(t, secret, "msg_1", now, body)
	if id, err := d.VerifyWebhook(env, h, body, now); err != nil || id != "msg_1" {
		t.Fatalf("valid: %q, %v", id, err)
	}
	// Svix's documented example (the signature published with it, not one we computed).
	ex := http.Header{}
	ex.Set("svix-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	ex.Set("svix-timestamp", "1614265330")
	ex.Set("svix-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	if id, err := d.VerifyWebhook(env, ex, []byte(`{"test": 2432232314}`), time.Unix(1614265330+60, 0)); err != nil || id != "msg_p5jXN8AQM9LWM0D4loKWxJek" {
		t.Fatalf("svix's example: %q, %v", id, err)
	}
	// Several signatures (a rotated secret): one matching is enough.
	multi := h.Clone()
	multi.Set("svix-signature", "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= "+h.Get("svix-signature"))
	if _, err := d.VerifyWebhook(env, multi, body, now); err != nil {
		t.Fatalf("several signatures: %v", err)
	}

	tampered := append([]byte(nil), body...)
	tampered[len(tampered)-2] ^= 1
	without := func(name string) http.Header {
		c := h.Clone()
		c.Del(name)
		return c
	}
	for _, c := range []struct {
		name string
		env  provider.Env
		h    http.Header
		body []byte
		now  time.Time
	}{
		{"tampered body", env, h, tampered, now},
		{"wrong secret", provider.Env{Credentials: provider.Credentials{WebhookSecret: "whsec_" + "c2VjcmV0LW90aGVyLW90aGVyLW90aGVyLTEyMw=="}}, h, body, now},
		{"no secret", provider.Env{}, h, body, now},
		{"stale", env, h, body, now.Add(5*time.Minute + time.Second)},
		{"from the future", env, h, body, now.Add(-5*time.Minute - time.Second)},
		{"no svix-id", env, without("svix-id"), body, now},
		{"no svix-timestamp", env, without("svix-timestamp"), body, now},
		{"no svix-signature", env, without("svix-signature"), body, now},
		{"another id", env, func() http.Header { c := h.Clone(); c.Set("svix-id", "msg_2"); return c }(), body, now},
		{"bad timestamp", env, func() http.Header { c := h.Clone(); c.Set("svix-timestamp", "soon"); return c }(), body, now},
	} {
		if _, err := d.VerifyWebhook(c.env, c.h, c.body, c.now); !errors.Is(err, provider.ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", c.name, err)
		}
	}
	if _, err := d.VerifyWebhook(env, h, body, now.Add(4*time.Minute)); err != nil {
		t.Fatalf("within the tolerance: %v", err)
	}
}

func TestUserEvent(t *testing.T) {
	d := autha.New()
	u := authatest.User{ID: "user_9", Email: "nine@example.com", FirstName: "Nine", CreatedAt: t0, UpdatedAt: t0.Add(time.Hour)}
	for _, typ := range []string{"user.created", "user.updated"} {
		ev, err := d.UserEvent(authatest.EventBody(typ, u, t0.Add(2*time.Hour)))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Deleted || ev.User.ID != "user_9" || ev.User.Email != "nine@example.com" || ev.User.FirstName != "Nine" || ev.User.LastName != "" ||
			!ev.At.Equal(t0.Add(time.Hour)) || !ev.User.CreatedAt.Equal(t0) || ev.ID == "" {
			t.Fatalf("%s: %+v", typ, ev)
		}
	}
	ev, err := d.UserEvent(authatest.EventBody("user.deleted", u, t0.Add(2*time.Hour)))
	if err != nil || !ev.Deleted || ev.User.ID != "user_9" || !ev.At.Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("deleted: %+v, %v", ev, err)
	}
	// Without the event's timestamp a deletion is ordered by its arrival.
	before := time.Now()
	ev, err = d.UserEvent([]byte(`{"object":"event","type":"user.deleted","data":{"object":"user","id":"user_9","deleted":true}}`))
	if err != nil || !ev.Deleted || ev.At.Before(before) {
		t.Fatalf("deleted without timestamp: %+v, %v", ev, err)
	}
	for _, body := range []string{
		`{"object":"event","type":"session.created","data":{"id":"sess_1"}}`,
		`{"object":"event","type":"organization.updated","data":{"id":"org_1"}}`,
	} {
		if _, err := d.UserEvent([]byte(body)); !errors.Is(err, provider.ErrIgnored) {
			t.Errorf("%s: %v, want ErrIgnored", body, err)
		}
	}
	for _, body := range []string{`not json`, `{"type":"user.updated","data":{"first_name":"x"}}`, `{"type":"user.deleted","data":{}}`} {
		if _, err := d.UserEvent([]byte(body)); err == nil || errors.Is(err, provider.ErrIgnored) {
			t.Errorf("%s: %v, want an error", body, err)
		}
	}
}

func TestValidateConfig(t *testing.T) {
	d := autha.New()
	got, err := d.ValidateConfig(nil)
	if err != nil || string(got) != `{"schema":"auth_sync","table":"users"}` {
		t.Fatalf("defaults: %s, %v", got, err)
	}
	if got, err = d.ValidateConfig(json.RawMessage(`{"schema":"clerk","table":"people"}`)); err != nil || string(got) != `{"schema":"clerk","table":"people"}` {
		t.Fatalf("%s, %v", got, err)
	}
	for _, bad := range []string{`{"schema":"x; drop"}`, `{"table":"Users"}`, `{"other":1}`} {
		if _, err := d.ValidateConfig(json.RawMessage(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if d.Name() != provider.AuthA || d.DefaultBaseURL() != "https://api.clerk.com/v1" {
		t.Fatal(d.Name(), d.DefaultBaseURL())
	}
}
