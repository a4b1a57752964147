package httpapi

import (
	"net/http"
	"strings"
	"testing"
)

// TestDashboardSessionCookie: the dashboard signs in for an HttpOnly, Secure, SameSite=Strict cookie
// (the token never reaches its JavaScript); the cookie authenticates only with the CSRF header, which a
// cross-site page cannot add (the API grants no CORS); signing out ends the session and clears it.
func TestDashboardSessionCookie(t *testing.T) {
	t.Parallel()
	b := setup(t)
	email, password := b.user("member")
	r := b.do("POST", "/v1/auth/sessions", "", map[string]any{"email": email, "password": password, "cookie": true})
	if r.status != http.StatusCreated || r.json["token"] != "" {
		t.Fatalf("cookie sign-in: %d %s", r.status, r.body)
	}
	var cookie *http.Cookie
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == SessionCookie {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || !cookie.Secure || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/" ||
		!strings.HasPrefix(cookie.Value, "ses_") {
		t.Fatalf("cookie: %+v", cookie)
	}
	withCookie := func(csrf bool) http.Header {
		h := http.Header{"Cookie": {SessionCookie + "=" + cookie.Value}}
		if csrf {
			h.Set(CSRFHeader, "1")
		}
		return h
	}
	if r := b.call(t, "GET", "/v1/me", withCookie(false), nil); r.status != http.StatusUnauthorized {
		t.Errorf("the cookie without the CSRF header authenticates: %d %s", r.status, r.body)
	}
	if r := b.call(t, "POST", "/v1/projects", withCookie(false), map[string]any{"name": "csrf"}); r.status != http.StatusUnauthorized {
		t.Errorf("a cross-site POST with the cookie alone: %d %s", r.status, r.body)
	}
	me := b.call(t, "GET", "/v1/me", withCookie(true), nil)
	if me.status != http.StatusOK || me.json["principal"].(map[string]any)["auth_source"] != "session" {
		t.Fatalf("cookie with CSRF header: %d %s", me.status, me.body)
	}
	pre := b.call(t, "OPTIONS", "/v1/me", http.Header{"Origin": {"https://evil.example"}, "Access-Control-Request-Method": {"GET"},
		"Access-Control-Request-Headers": {CSRFHeader}}, nil)
	if pre.header.Get("Access-Control-Allow-Origin") != "" || pre.header.Get("Access-Control-Allow-Headers") != "" {
		t.Errorf("the API answers a CORS preflight: %d %v", pre.status, pre.header)
	}

	out := b.call(t, "DELETE", "/v1/auth/sessions/current", withCookie(true), nil)
	if out.status != http.StatusOK || !strings.Contains(out.header.Get("Set-Cookie"), SessionCookie+"=;") {
		t.Fatalf("sign out: %d %s %v", out.status, out.body, out.header)
	}
	if r := b.call(t, "GET", "/v1/me", withCookie(true), nil); r.status != http.StatusUnauthorized {
		t.Errorf("the session works after sign-out: %d", r.status)
	}
	if r := b.do("DELETE", "/v1/auth/sessions/current", b.adminKey, nil); r.status != http.StatusForbidden {
		t.Errorf("sign out with an API key: %d %s", r.status, r.body)
	}
}
