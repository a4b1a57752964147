package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestUncleanPathsNeverRedirect: a "." or ".." segment (plain or escaped) or a doubled slash is refused
// with 400 JSON, never answered with a redirect: net/http's ServeMux would clean
// /v1/projects/P/restore-points/.. into /v1/projects/P and answer 307, keeping the method, so a client
// following it deleted the project.
func TestUncleanPathsNeverRedirect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	prj := b.project("kept", "development")
	base := "/v1/projects/" + prj.ID
	for _, p := range []string{
		base + "/restore-points/..",
		base + "/restore-points/%2E%2E",
		base + "/restore-points/%2e%2e/",
		base + "/backups/../..",
		base + "/./restore-points",
		"/v1//projects/" + prj.ID,
		"//v1/projects/" + prj.ID,
		base + "/restore-points/.",
	} {
		for _, method := range []string{"DELETE", "GET", "POST"} {
			r := b.call(t, method, p, bearer(b.adminKey), nil)
			if r.status != http.StatusBadRequest || r.header.Get("Location") != "" || !strings.Contains(r.text(), "not clean") {
				t.Errorf("%s %s: %d %v %s", method, p, r.status, r.header.Get("Location"), r.body)
			}
		}
	}
	if r := b.do("GET", base, b.adminKey, nil); r.status != http.StatusOK || r.json["project"].(map[string]any)["state"] != "active" {
		t.Fatalf("the project after the unclean DELETEs: %d %s", r.status, r.body)
	}
}

// FuzzRequests sends any method, any value for the path parameters of any route and any body, with the
// organization's admin key: the API never answers 5xx nor a redirect, and every error is JSON. The seed
// corpus is in testdata/fuzz/FuzzRequests (go test runs it; go test -fuzz=FuzzRequests explores further).
func FuzzRequests(f *testing.F) {
	b := setup(f)
	routes := b.api.Routes()
	prj := b.project("fuzz", "development")
	f.Add(uint(0), "GET", prj.ID, `{}`)
	f.Add(uint(7), "DELETE", "..", ``)
	f.Add(uint(9), "PATCH", prj.ID, `{"name": "a\u0000b", "statement_timeout": "999999999d"}`)
	f.Add(uint(3), "POST", "%2e%2e", `{"name": 1}`)
	f.Fuzz(func(t *testing.T, route uint, method, param, body string) {
		rt := routes[route%uint(len(routes))]
		path := pathParam.ReplaceAllString(rt.Path, param)
		u, err := url.Parse("http://appliance.test" + path)
		if err != nil || method == "" || strings.ContainsAny(method, " \t\r\n/") {
			return
		}
		req, err := http.NewRequest(method, u.String(), strings.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Authorization", "Bearer "+b.adminKey)
		req.Header.Set("Content-Type", "application/json")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // an event stream ends with it
		defer cancel()
		req = req.WithContext(ctx)
		rec := httptest.NewRecorder()
		b.api.ServeHTTP(rec, req)
		if rec.Code >= 500 || (rec.Code >= 300 && rec.Code < 400) {
			t.Fatalf("%s %s %q: %d %s", method, u, body, rec.Code, rec.Body)
		}
		if rec.Code >= 400 && !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
			t.Fatalf("%s %s: %d with %q: %s", method, u, rec.Code, rec.Header().Get("Content-Type"), rec.Body)
		}
	})
}

// TestMalformedQueries: a query string that does not parse is 400, never silently the defaults.
func TestMalformedQueries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	org := "/v1/organizations/" + b.org.ID + "/audit-events"
	for _, q := range []string{"?limit=1;select", "?limit=%zz", "?limit=1&limit=2", "?limit=1;select%20pg_sleep(1)"} {
		r := b.do("GET", org+q, b.adminKey, nil)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s: %d %s", q, r.status, r.body)
		}
	}
	if r := b.do("GET", org+"?limit=2", b.adminKey, nil); r.status != http.StatusOK {
		t.Errorf("a good query: %d %s", r.status, r.body)
	}
}
