package authb_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/integrations/authb"
	"github.com/theappliance/appliance/appliance/integrations/authb/authbtest"
	"github.com/theappliance/appliance/appliance/integrations/provider"
)

const (
	domain       = "acme.eu.auth0.com"
	clientID     = "m2m_client"
	clientSecret = "m2m-secret-value"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// setup gives each test its own fake tenant and client secret (the token cache is the process's).
func setup(t *testing.T) (provider.Directory, *authbtest.Server, provider.Env) {
	secret := clientSecret + "-" + t.Name()
	fake := authbtest.New(t, domain, clientID, secret)
	env := provider.Env{HTTP: &http.Client{Timeout: 10 * time.Second}, BaseURL: fake.URL,
		Credentials: provider.Credentials{ExternalID: domain, ClientID: clientID, ClientSecret: secret}}
	return authb.New(), fake, env
}

func user(i int) authbtest.User {
	return authbtest.User{ID: fmt.Sprintf("auth0|%05d", i), Email: fmt.Sprintf("u%d@example.com", i), GivenName: "Given", FamilyName: fmt.Sprint(i),
		CreatedAt: t0.Add(time.Duration(i) * time.Second), UpdatedAt: t0.Add(time.Duration(i)*time.Second + time.Millisecond)}
}

func listAll(t *testing.T, d provider.Directory, env provider.Env) (map[string]provider.User, int, error) {
	t.Helper()
	seen := map[string]provider.User{}
	cursor, pages := "", 0
	for {
		users, next, err := d.ListUsers(context.Background(), env, cursor)
		if err != nil {
			return seen, pages, err
		}
		pages++
		for _, u := range users {
			seen[u.ID] = u
		}
		if next == "" {
			return seen, pages, nil
		}
		cursor = next
	}
}

// TestListUsersPastTheWindow: more users than Auth0 pages through in one query are all listed, with one
// token for the whole list.
func TestListUsersPastTheWindow(t *testing.T) {
	d, fake, env := setup(t)
	const n = 2*authb.Window + 345
	for i := 0; i < n; i++ {
		fake.Put(user(i))
	}
	seen, pages, err := listAll(t, d, env)
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != n {
		t.Fatalf("%d users listed in %d pages, want %d", len(seen), pages, n)
	}
	u := seen["auth0|00042"]
	if u.Email != "u42@example.com" || u.FirstName != "Given" || u.LastName != "42" ||
		!u.CreatedAt.Equal(t0.Add(42*time.Second)) || !u.UpdatedAt.Equal(t0.Add(42*time.Second+time.Millisecond)) {
		t.Fatalf("user 42: %+v", u)
	}
	var raw map[string]any
	if err := json.Unmarshal(u.Raw, &raw); err != nil || raw["identities"] == nil {
		t.Fatalf("raw: %s", u.Raw)
	}
	grants, lists := 0, 0
	for _, c := range fake.Calls() {
		switch c.Path {
		case "/oauth/token":
			grants++
			form, _ := url.ParseQuery(string(c.Body))
			if form.Get("grant_type") != "client_credentials" || form.Get("client_id") != clientID || form.Get("audience") != "https://"+domain+"/api/v2/" || c.Status != 200 {
				t.Errorf("token call: %+v", c)
			}
		case "/api/v2/users":
			lists++
			q, _ := url.ParseQuery(c.Query)
			if c.Status != 200 || q.Get("per_page") != "100" || q.Get("sort") != "created_at:1" || !strings.HasPrefix(c.Authorization, "Bearer eyJfake.") {
				t.Errorf("list call: %+v", c)
			}
		default:
			t.Errorf("unexpected call %+v", c)
		}
	}
	if grants != 1 || lists != pages {
		t.Fatalf("%d token grants and %d list calls for %d pages", grants, lists, pages)
	}
}

func TestListUsersSameInstant(t *testing.T) {
	d, fake, env := setup(t)
	for i := 0; i < authb.Window+1; i++ {
		u := user(i)
		u.CreatedAt = t0
		fake.Put(u)
	}
	if _, _, err := listAll(t, d, env); err == nil || !strings.Contains(err.Error(), "share that time") {
		t.Fatalf("more than 1000 users created at one instant: %v", err)
	}
}

func TestCheck(t *testing.T) {
	d, fake, env := setup(t)
	ctx := context.Background()
	fake.Put(user(1))
	if err := d.Check(ctx, env); err != nil {
		t.Fatal(err)
	}
	bad := env
	bad.Credentials.ClientSecret = "wrong-secret-value"
	if err := d.Check(ctx, bad); !errors.Is(err, provider.ErrCredentials) || strings.Contains(err.Error(), "wrong-secret") {
		t.Fatalf("a wrong secret: %v", err)
	}
	other := env
	other.Credentials.ExternalID = "other.eu.auth0.com" // the audience of another tenant: refused
	if err := d.Check(ctx, other); !errors.Is(err, provider.ErrCredentials) {
		t.Fatalf("another tenant's audience: %v", err)
	}
	tokenOnly := env
	tokenOnly.Credentials = provider.Credentials{ExternalID: domain, Token: "eyJnot-issued"}
	if err := d.Check(ctx, tokenOnly); !errors.Is(err, provider.ErrCredentials) || strings.Contains(err.Error(), "eyJnot") {
		t.Fatalf("a token the tenant did not issue: %v", err)
	}
	for _, c := range []provider.Credentials{
		{ExternalID: domain},
		{ExternalID: domain, ClientID: clientID},
	} {
		e := env
		e.Credentials = c
		if err := d.Check(ctx, e); !errors.Is(err, provider.ErrCredentials) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	for _, ext := range []string{"", "acme.auth0.com/evil", "user@host", "a..b"} {
		e := env
		e.Credentials.ExternalID = ext
		if err := d.Check(ctx, e); err == nil || errors.Is(err, provider.ErrCredentials) {
			t.Errorf("external_id %q: %v", ext, err)
		}
	}
	// A revoked token is dropped: the call after the refusal gets a new one.
	fake.RevokeTokens()
	if err := d.Check(ctx, env); !errors.Is(err, provider.ErrCredentials) {
		t.Fatalf("a revoked token: %v", err)
	}
	if err := d.Check(ctx, env); err != nil {
		t.Fatalf("after a revoked token: %v", err)
	}
}

type recorder struct{ urls []string }

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.urls = append(r.urls, req.URL.String())
	return &http.Response{StatusCode: http.StatusUnauthorized, Body: io.NopCloser(strings.NewReader(`{"error":"access_denied"}`)), Header: http.Header{}, Request: req}, nil
}

// TestTenantDomain: without a base URL (or with the default) the calls go to the tenant's domain; a bare
// tenant name is <name>.auth0.com.
func TestTenantDomain(t *testing.T) {
	for _, c := range []struct{ base, ext, want string }{
		{"", "acme.eu.auth0.com", "https://acme.eu.auth0.com/oauth/token"},
		{authb.DefaultBaseURL, "acme", "https://acme.auth0.com/oauth/token"},
		{"http://127.0.0.1:9/", "acme.eu.auth0.com", "http://127.0.0.1:9/oauth/token"},
	} {
		rec := &recorder{}
		env := provider.Env{HTTP: &http.Client{Transport: rec}, BaseURL: c.base,
			Credentials: provider.Credentials{ExternalID: c.ext, ClientID: "id", ClientSecret: "secret " + c.want}}
		if err := authb.New().Check(context.Background(), env); !errors.Is(err, provider.ErrCredentials) {
			t.Fatalf("%+v: %v", c, err)
		}
		if len(rec.urls) != 1 || rec.urls[0] != c.want {
			t.Fatalf("%+v: called %v", c, rec.urls)
		}
	}
}

const streamToken = "stream-token-value"

func TestVerifyWebhook(t *testing.T) {
	d := authb.New()
	env := provider.Env{Credentials: provider.Credentials{WebhookSecret: streamToken}}
	now := time.Now()
	one := authbtest.LogBatch(authbtest.SignupLog("90020261101000001", user(1), t0))
	if id, err := d.VerifyWebhook(env, authbtest.Headers(streamToken), one, now); err != nil || id != "90020261101000001" {
		t.Fatalf("one log: %q, %v", id, err)
	}
	batch := authbtest.LogBatch(authbtest.SignupLog("900001", user(1), t0), authbtest.OtherLog("900002", "s", user(1), t0), authbtest.DeletionLog("900003", user(1).ID, t0))
	if id, err := d.VerifyWebhook(env, authbtest.Headers(streamToken), batch, now); err != nil || id != "900001..900003" {
		t.Fatalf("a batch: %q, %v", id, err)
	}
	for _, c := range []struct {
		name   string
		secret string
		h      http.Header
	}{
		{"wrong token", streamToken, authbtest.Headers("another-token")},
		{"no header", streamToken, http.Header{}},
		{"no stored token", "", authbtest.Headers(streamToken)},
		{"token without Bearer", streamToken, http.Header{"Authorization": {streamToken}}},
		{"token as a prefix", streamToken, authbtest.Headers(streamToken + "x")},
	} {
		if _, err := d.VerifyWebhook(provider.Env{Credentials: provider.Credentials{WebhookSecret: c.secret}}, c.h, one, now); !errors.Is(err, provider.ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", c.name, err)
		}
	}
	for _, body := range []string{"not json", "[]", `[{"data":{"type":"ss"}}]`, `"text"`} {
		if _, err := d.VerifyWebhook(env, authbtest.Headers(streamToken), []byte(body), now); !errors.Is(err, provider.ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", body, err)
		}
	}
}

func TestUserEvent(t *testing.T) {
	d := authb.New()
	u := user(7)
	ev, err := d.UserEvent(authbtest.LogBatch(authbtest.OtherLog("1", "s", u, t0), authbtest.SignupLog("2", u, t0.Add(time.Minute))))
	if err != nil || ev.ID != "2" || ev.Deleted || ev.User.ID != u.ID || ev.User.Email != u.Email || !ev.At.Equal(t0.Add(time.Minute)) {
		t.Fatalf("signup: %+v, %v", ev, err)
	}
	u.UpdatedAt = t0.Add(time.Hour)
	u.GivenName = "Changed"
	ev, err = d.UserEvent(authbtest.LogBatch(authbtest.APILog("3", http.MethodPatch, u, t0.Add(2*time.Hour))))
	if err != nil || ev.User.FirstName != "Changed" || ev.User.LastName != "7" || !ev.At.Equal(t0.Add(time.Hour)) || len(ev.User.Raw) == 0 {
		t.Fatalf("management API update: %+v, %v", ev, err)
	}
	ev, err = d.UserEvent(authbtest.LogLines(authbtest.DeletionLog("4", u.ID, t0.Add(3*time.Hour))))
	if err != nil || !ev.Deleted || ev.User.ID != u.ID || !ev.At.Equal(t0.Add(3*time.Hour)) || ev.ID != "4" {
		t.Fatalf("deletion: %+v, %v", ev, err)
	}
	ev, err = d.UserEvent(authbtest.LogBatch(authbtest.APILog("5", http.MethodDelete, u, t0.Add(4*time.Hour))))
	if err != nil || !ev.Deleted || ev.User.ID != u.ID {
		t.Fatalf("management API deletion: %+v, %v", ev, err)
	}
	if _, err := d.UserEvent(authbtest.LogBatch(authbtest.OtherLog("6", "s", u, t0), authbtest.OtherLog("7", "fp", u, t0))); !errors.Is(err, provider.ErrIgnored) {
		t.Fatalf("logins only: %v", err)
	}
	if _, err := d.UserEvent([]byte(`[{"log_id":"8","data":{"type":"sdu","date":"yesterday","user_id":"x"}}]`)); err == nil || errors.Is(err, provider.ErrIgnored) {
		t.Fatalf("a bad date: %v", err)
	}
}

// TestUserEvents: a delivery's every user event, each changed user read afresh (one read per user), a
// user gone by then skipped, deletions as they came; in the array and the lines formats.
func TestUserEvents(t *testing.T) {
	d, fake, env := setup(t)
	multi, ok := d.(authb.MultiEvent)
	if !ok {
		t.Fatal("auth_b's directory is not a MultiEvent")
	}
	u1, u2, gone := user(1), user(2), user(3)
	u1.GivenName, u1.UpdatedAt = "Signed", t0.Add(time.Hour)
	u2.FamilyName, u2.UpdatedAt = "Patched", t0.Add(2*time.Hour)
	fake.Put(u1)
	fake.Put(u2)
	logs := []authbtest.Log{
		authbtest.SignupLog("10", u1, t0.Add(time.Hour)),
		authbtest.OtherLog("11", "s", u1, t0.Add(time.Hour)),
		authbtest.OtherLog("12", "sce", u1, t0.Add(time.Hour)),
		authbtest.APILog("13", http.MethodPatch, u2, t0.Add(2*time.Hour)),
		authbtest.OtherLog("14", "scu", gone, t0.Add(3*time.Hour)),
		authbtest.DeletionLog("15", gone.ID, t0.Add(4*time.Hour)),
	}
	for name, body := range map[string][]byte{"array": authbtest.LogBatch(logs...), "lines": authbtest.LogLines(logs...)} {
		before := len(fake.Calls())
		evs, err := multi.UserEvents(context.Background(), env, body)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := []string{}
		for _, ev := range evs {
			got = append(got, fmt.Sprintf("%s %s del=%v %s %s %s", ev.ID, ev.User.ID, ev.Deleted, ev.User.FirstName, ev.User.LastName, ev.At.Format(time.TimeOnly)))
		}
		want := []string{
			"10 auth0|00001 del=false Signed 1 13:00:00",
			"12 auth0|00001 del=false Signed 1 13:00:00",
			"13 auth0|00002 del=false Given Patched 14:00:00",
			"15 auth0|00003 del=true   16:00:00",
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("%s:\n%s\nwant\n%s", name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		reads := map[string]int{}
		for _, c := range fake.Calls()[before:] {
			if strings.HasPrefix(c.Path, "/api/v2/users/") {
				reads[c.Path]++
			}
		}
		if len(reads) != 3 || reads["/api/v2/users/auth0|00001"] != 1 {
			t.Fatalf("%s: reads %v", name, reads)
		}
	}
	if _, err := multi.UserEvents(context.Background(), env, authbtest.LogBatch(authbtest.OtherLog("20", "s", u1, t0))); !errors.Is(err, provider.ErrIgnored) {
		t.Fatalf("logins only: %v", err)
	}
	bad := env
	bad.Credentials.ClientSecret = "nope"
	if _, err := multi.UserEvents(context.Background(), bad, authbtest.LogBatch(logs[0])); !errors.Is(err, provider.ErrCredentials) {
		t.Fatalf("refused credentials: %v", err)
	}
}

func TestValidateConfig(t *testing.T) {
	d := authb.New()
	if got, err := d.ValidateConfig(nil); err != nil || string(got) != `{"schema":"auth_sync","table":"users"}` {
		t.Fatalf("defaults: %s, %v", got, err)
	}
	if _, err := d.ValidateConfig(json.RawMessage(`{"table":"users; drop"}`)); err == nil || !strings.Contains(err.Error(), "table") {
		t.Fatalf("bad table: %v", err)
	}
	if d.Name() != provider.AuthB {
		t.Fatal(d.Name())
	}
}
