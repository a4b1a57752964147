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

// TestCrossSiteRequests: a cross-site page cannot sign a browser in (login CSRF) or write with its
// cookie. Every JSON endpoint needs Content-Type: application/json (a form or text/plain body, which a
// page may send without a CORS preflight, is a 415; no Content-Type is accepted only with an empty body),
// and a cookie-authenticated write or a sign-in whose Origin or Sec-Fetch-Site says another site is a
// 403. Before, POST /v1/auth/sessions took a text/plain body and cross-site writes were only refused for
// want of the CSRF header.
func TestCrossSiteRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	email, password := b.user("admin")
	host := strings.TrimPrefix(b.ts.URL, "http://")
	v := vars{"org": b.org.ID, "admin": b.adminKey, "email": email, "password": password, "self": "http://" + host}
	signIn := `{"email": "$email", "password": "$password"}`
	textPlain := http.Header{"Content-Type": {"text/plain"}}
	cookie := func(extra ...string) http.Header {
		h := http.Header{"Cookie": {SessionCookie + "=$ses"}, CSRFHeader: {"1"}}
		for i := 0; i+1 < len(extra); i += 2 {
			h.Set(extra[i], extra[i+1])
		}
		return h
	}
	org := "/v1/organizations/$org"
	run(t, b, v, []scenario{
		{name: "sign-in with a text/plain body", method: "POST", path: "/v1/auth/sessions", header: textPlain, body: signIn, status: 415,
			want: map[string]any{"error": "the request body must be JSON, sent with Content-Type: application/json"}},
		{name: "sign-in with a form body", method: "POST", path: "/v1/auth/sessions", header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, body: signIn, status: 415},
		{name: "sign-in with a body and no Content-Type", method: "POST", path: "/v1/auth/sessions", header: http.Header{"Content-Type": nil}, body: signIn, status: 415},
		{name: "sign-in in JSON of another charset", method: "POST", path: "/v1/auth/sessions", header: http.Header{"Content-Type": {"application/json; charset=iso-8859-1"}}, body: signIn, status: 415},
		{name: "sign-in from another site (Sec-Fetch-Site)", method: "POST", path: "/v1/auth/sessions", header: http.Header{"Sec-Fetch-Site": {"cross-site"}}, body: signIn, status: 403},
		{name: "sign-in from another site (Origin)", method: "POST", path: "/v1/auth/sessions", header: http.Header{"Origin": {"https://evil.example"}}, body: signIn, status: 403},
		{name: "sign-in from a sandboxed page (Origin null)", method: "POST", path: "/v1/auth/sessions", header: http.Header{"Origin": {"null"}}, body: signIn, status: 403},
		{name: "sign-in from the dashboard's own origin", method: "POST", path: "/v1/auth/sessions", body: signIn,
			header: http.Header{"Content-Type": {"application/json; charset=utf-8"}, "Origin": {"$self"}, "Sec-Fetch-Site": {"same-origin"}}, status: 201, save: map[string]string{"ses": "token"}},
		{name: "an empty body without Content-Type", method: "POST", path: "/v1/cli/login/sessions", header: http.Header{"Content-Type": nil}, body: "", status: 201},
		{name: "an empty body as text/plain", method: "POST", path: "/v1/cli/login/sessions", header: textPlain, body: "", status: 415},
		{name: "a text/plain body with a key", method: "PATCH", path: org, cred: "$admin", header: textPlain, body: `{"name": "x"}`, status: 415},
		{name: "a cookie write from another site (Origin)", method: "PATCH", path: org, header: cookie("Origin", "https://evil.example"), body: map[string]any{"billing_name": "x"}, status: 403,
			want: map[string]any{"error": "a request from another site may not act with the session cookie"}},
		{name: "a cookie write from a sibling site", method: "PATCH", path: org, header: cookie("Sec-Fetch-Site", "same-site"), body: map[string]any{"billing_name": "x"}, status: 403},
		{name: "a cookie write from the same origin", method: "PATCH", path: org, header: cookie("Origin", "$self", "Sec-Fetch-Site", "same-origin"), body: map[string]any{"billing_name": "same"}, status: 200},
		{name: "a cookie write without browser headers", method: "PATCH", path: org, header: cookie(), body: map[string]any{"billing_name": "plain"}, status: 200},
		{name: "a cookie read from another site", method: "GET", path: "/v1/me", header: cookie("Sec-Fetch-Site", "cross-site"), status: 200},
		{name: "a key write with a foreign Origin", method: "PATCH", path: org, cred: "$admin", header: http.Header{"Origin": {"https://tool.example"}}, body: map[string]any{"billing_name": "k"}, status: 200},
	})
}
