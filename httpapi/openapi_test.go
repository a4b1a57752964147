package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/programs"
	"github.com/theappliance/appliance/appliance/testtools"
	"github.com/theappliance/appliance/store"
)

// TestOpenAPIServed fetches /v1/openapi.json and checks that it documents every route of the table.
// With OPENAPI_OUT=<file> it also writes the document there (to look at it or lint it by hand).
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do("GET", "/v1/openapi.json", "", nil)
	if r.status != 200 {
		t.Fatalf("openapi.json: %d %s", r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if out := os.Getenv("OPENAPI_OUT"); out != "" {
		var buf bytes.Buffer
		json.Indent(&buf, r.body, "", "  ")
		if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	doc := r.json
	if doc["openapi"] != "3.1.0" {
		t.Errorf("openapi = %v", doc["openapi"])
	}
	paths, _ := doc["paths"].(map[string]any)
	opIDs := map[string]string{}
	for _, rt := range b.api.Routes() {
		item, _ := paths[rt.Path].(map[string]any)
		op, _ := item[strings.ToLower(rt.Method)].(map[string]any)
		if op == nil {
			t.Errorf("%s %s is not in the document", rt.Method, rt.Path)
			continue
		}
		id, _ := op["operationId"].(string)
		if id == "" {
			t.Errorf("%s %s: no operationId", rt.Method, rt.Path)
		} else if prev, dup := opIDs[id]; dup {
			t.Errorf("operationId %s of %s %s is also %s's", id, rt.Method, rt.Path, prev)
		}
		opIDs[id] = rt.Method + " " + rt.Path
		if op["summary"] != rt.Summary {
			t.Errorf("%s %s: summary %v", rt.Method, rt.Path, op["summary"])
		}
		wantAuth := map[Auth]string{Public: "public", Authenticated: "authenticated", SessionOnly: "session", ServiceToken: "service_token"}[rt.Auth]
		if op["x-auth"] != wantAuth {
			t.Errorf("%s %s: x-auth %v, want %s", rt.Method, rt.Path, op["x-auth"], wantAuth)
		}
		if scope, _ := op["x-required-scope"].(string); scope != string(rt.Scope) {
			t.Errorf("%s %s: x-required-scope %q, want %q", rt.Method, rt.Path, scope, rt.Scope)
		}
		sec, _ := op["security"].([]any)
		if (rt.Auth == Public) != (len(sec) == 0) {
			t.Errorf("%s %s: security %v for auth %s", rt.Method, rt.Path, op["security"], wantAuth)
		}
		responses, _ := op["responses"].(map[string]any)
		if _, ok := responses[strconvItoa(rt.Status)]; !ok {
			t.Errorf("%s %s: success status %d not documented", rt.Method, rt.Path, rt.Status)
		}
		if _, ok := responses["429"]; !ok {
			t.Errorf("%s %s: 429 not documented", rt.Method, rt.Path)
		}
	}
	// The document served is the one generated, and generating is deterministic.
	again, err := json.Marshal(OpenAPI(b.api.Routes(), "test"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(r.body), again) {
		t.Errorf("the served document differs from a second generation")
	}
}

func strconvItoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// Types exercising the reflection rules.
type (
	oaInner struct {
		A string `json:"a"`
		B int    `json:"b"`
	}
	oaOther struct {
		B string `json:"b"` // same depth as oaInner.B and untagged conflict? both tagged: dropped
		C bool   `json:"c"`
	}
	oaResp struct {
		oaInner
		*oaOther
		B        int64             `json:"b"` // shallower: wins over the embedded ones
		When     time.Time         `json:"when"`
		Maybe    *time.Time        `json:"maybe" doc:"null when never"`
		List     []string          `json:"list"`
		Nums     map[string]uint16 `json:"nums"`
		Raw      json.RawMessage   `json:"raw"`
		Any      any               `json:"any"`
		Skip     string            `json:"-"`
		Opt      string            `json:"opt,omitempty"`
		Child    *oaChild          `json:"child"`
		MaybeKid *oaChild          `json:"maybeKid" api:"nullable"`
		Kids     []oaChild         `json:"kids"`
		Ratio    float64           `json:"ratio"`
		Str      int               `json:"str,string"`
		Bytes    []byte            `json:"bytes"`
		Org      *appliance.Organization
		private  string
	}
	oaChild struct {
		Name string `json:"name"`
	}
	oaReq struct {
		Name  string   `json:"name" api:"required" doc:"the name"`
		Tags  []string `json:"tags"`
		Child oaChild  `json:"child"`
		Maybe *string  `json:"maybe"`
	}
)

func TestOpenAPISchemas(t *testing.T) {
	t.Parallel()
	routes := []Route{
		{Method: "POST", Path: "/v1/things/{thingID}/{rest...}", Summary: "s", Status: 201,
			Do: Op{Body: reflect.TypeFor[oaReq](), Resp: reflect.TypeFor[oaResp]()}},
		{Method: "GET", Path: "/v1/jobs/{jobID}", Summary: "a", Status: 200, Do: Op{Resp: reflect.TypeFor[api.Job]()}},
		{Method: "GET", Path: "/v2/jobs/{jobID}", Summary: "b", Status: 200, Do: Op{Resp: reflect.TypeFor[store.Job]()}},
		{Method: "PUT", Path: "/v1/children", Summary: "c", Status: 200,
			Do: Op{Body: reflect.TypeFor[oaChild](), Resp: reflect.TypeFor[oaChild]()}},
	}
	doc := roundTrip(t, OpenAPI(routes, "1"))
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	get := func(path ...string) any {
		var v any = doc
		for _, p := range path {
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not an object at %s", path, p)
			}
			v = m[p]
		}
		return v
	}
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }

	for _, name := range []string{"oaResp", "oaReq", "oaChild", "oaChildInput", "ApiJob", "StoreJob", "Organization", "Error"} {
		if schemas[name] == nil {
			t.Errorf("no schema %s; have %v", name, keys(schemas))
		}
	}
	props := get("components", "schemas", "oaResp", "properties").(map[string]any)
	want := map[string]string{
		"a":        `{"type":"string"}`,
		"b":        `{"format":"int64","type":"integer"}`,
		"c":        `{"type":"boolean"}`,
		"when":     `{"format":"date-time","type":"string"}`,
		"maybe":    `{"description":"null when never","format":"date-time","type":["string","null"]}`,
		"list":     `{"items":{"type":"string"},"type":"array"}`,
		"nums":     `{"additionalProperties":{"minimum":0,"type":"integer"},"type":"object"}`,
		"raw":      `{"additionalProperties":true,"items":{},"type":["object","array","string","number","boolean","null"]}`,
		"any":      `{"additionalProperties":true,"items":{},"type":["object","array","string","number","boolean","null"]}`,
		"opt":      `{"type":"string"}`,
		"child":    `{"$ref":"#/components/schemas/oaChild"}`, // a pointer is not null unless tagged api:"nullable"
		"maybeKid": `{"oneOf":[{"$ref":"#/components/schemas/oaChild"},{"type":"null"}]}`,
		"kids":     `{"items":{"$ref":"#/components/schemas/oaChild"},"type":"array"}`,
		"ratio":    `{"type":"number"}`,
		"str":      `{"example":"8071840665353803258","format":"int64","pattern":"^-?(0|[1-9][0-9]{0,18})$","type":"string"}`,
		"bytes":    `{"contentEncoding":"base64","type":"string"}`,
		"Org":      `{"$ref":"#/components/schemas/Organization"}`,
	}
	for name, w := range want {
		if got := js(props[name]); got != w {
			t.Errorf("oaResp.%s = %s, want %s", name, got, w)
		}
	}
	if len(props) != len(want) {
		t.Errorf("oaResp properties %v, want %v", keys(props), keys(want))
	}
	// Response: every field required, except omitempty ones and those promoted through a pointer.
	req := js(get("components", "schemas", "oaResp", "required"))
	for _, name := range []string{`"a"`, `"b"`, `"when"`, `"maybe"`, `"raw"`, `"Org"`} {
		if !strings.Contains(req, name) {
			t.Errorf("oaResp required %s lacks %s", req, name)
		}
	}
	for _, name := range []string{`"opt"`, `"c"`, `"Skip"`, `"private"`} {
		if strings.Contains(req, name) {
			t.Errorf("oaResp required %s has %s", req, name)
		}
	}
	if got := js(schemas["oaReq"]); got != openAPISnapshot(t, "oaReq.json") {
		t.Errorf("oaReq = %s", got)
	}
	if got := js(schemas["oaChildInput"]); got != openAPISnapshot(t, "oaChildInput.json") {
		t.Errorf("oaChildInput = %s", got)
	}
	op := get("paths", "/v1/things/{thingID}/{rest}", "post").(map[string]any)
	if js(op["requestBody"]) != openAPISnapshot(t, "requestBody.json") {
		t.Errorf("requestBody = %s", js(op["requestBody"]))
	}
	if op["operationId"] != "postThingsByThingIDByRest" {
		t.Errorf("operationId = %v", op["operationId"])
	}
	if a, b := get("paths", "/v1/jobs/{jobID}", "get", "operationId"), get("paths", "/v2/jobs/{jobID}", "get", "operationId"); a != "getJobsByJobID" || b != "getV2JobsByJobID" {
		t.Errorf("operationIds %v %v", a, b)
	}
	if got := js(get("components", "schemas", "ApiJob", "properties", "result")); got != openAPISnapshot(t, "job-result.json") {
		t.Errorf("Job.result = %s", got)
	}
}

// openAPISnapshot is the expected JSON of a part of the document, in testdata/openapi/name.
func openAPISnapshot(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "openapi", name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func roundTrip(t *testing.T, doc map[string]any) map[string]any {
	t.Helper()
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestOpenAPILint runs spectral (spectral:oas) and redocly (recommended) on the document, as pinned in
// tools/openapi-lint (installed there with npm ci, in a copy): any error or warning of either fails.
func TestOpenAPILint(t *testing.T) {
	t.Parallel()
	npm, err := exec.LookPath("npm")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("npm is not on PATH (CI must install Node): %v", err)
		}
		t.Skip("npm is not on PATH")
	}
	b := setup(t)
	src := filepath.Join("..", "tools", "openapi-lint")
	work := t.TempDir()
	for _, name := range []string{"package.json", "package-lock.json", ".spectral.yaml", "redocly.yaml"} {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(work, "openapi.json"), b.api.openapi, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	run := func(name string, args ...string) []byte {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "NO_UPDATE_NOTIFIER=1", "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true",
			"npm_config_fund=false", "npm_config_audit=false")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if _, exit := err.(*exec.ExitError); err != nil && !exit {
			t.Fatalf("%s: %v\n%s", name, err, stderr.Bytes())
		}
		return stdout.Bytes()
	}
	run(npm, "ci", "--ignore-scripts")
	bin := func(name string) string { return filepath.Join(work, "node_modules", ".bin", name) }

	// spectral: every finding of severity error (0) or warning (1) fails; info and hints are shown.
	var findings []struct {
		Code     string `json:"code"`
		Message  string `json:"message"`
		Path     []any  `json:"path"`
		Severity int    `json:"severity"`
	}
	out := run(bin("spectral"), "lint", "--ruleset", ".spectral.yaml", "--format", "json", "--quiet", "openapi.json")
	if err := json.Unmarshal(out, &findings); err != nil {
		t.Fatalf("spectral's report is not JSON: %v\n%s", err, out)
	}
	for _, f := range findings {
		if f.Severity <= 1 {
			t.Errorf("spectral %s (severity %d) at %v: %s", f.Code, f.Severity, f.Path, f.Message)
		} else {
			t.Logf("spectral %s at %v: %s", f.Code, f.Path, f.Message)
		}
	}

	// redocly: its totals must be 0 errors and 0 warnings.
	var report struct {
		Totals   struct{ Errors, Warnings int } `json:"totals"`
		Problems []struct {
			RuleID   string `json:"ruleId"`
			Severity string `json:"severity"`
			Message  string `json:"message"`
			Location []struct {
				Pointer string `json:"pointer"`
			} `json:"location"`
		} `json:"problems"`
	}
	out = run(bin("redocly"), "lint", "--config", "redocly.yaml", "--format", "json", "openapi.json")
	if i := bytes.IndexByte(out, '{'); i < 0 || json.Unmarshal(out[i:], &report) != nil {
		t.Fatalf("redocly's report is not JSON:\n%s", out)
	}
	for _, p := range report.Problems {
		where := ""
		if len(p.Location) > 0 {
			where = p.Location[0].Pointer
		}
		t.Errorf("redocly %s (%s) at %s: %s", p.RuleID, p.Severity, where, p.Message)
	}
	if report.Totals.Errors+report.Totals.Warnings > 0 {
		t.Errorf("redocly: %d errors, %d warnings", report.Totals.Errors, report.Totals.Warnings)
	}
}

// TestOpenAPIResponsesConform calls every route of the table, with successes and typical failures; b.do
// validates each response against the served document.
func TestOpenAPIResponsesConform(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{limits: RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}, instances: true})
	org := "/v1/organizations/" + b.org.ID
	prj := b.provision("conform", "production")
	member := b.session("member")
	owner := b.session("owner")
	readOnly := b.key("", api.ScopeProjectsRead)

	called := map[string]bool{}
	call := func(method, path, pattern, cred string, body any, want int) *response {
		t.Helper()
		r := b.do(method, path, cred, body)
		if r.status != want {
			t.Errorf("%s %s: %d, want %d: %s", method, path, r.status, want, r.body)
		}
		called[method+" "+pattern] = true
		return r
	}

	call("GET", "/healthz", "/healthz", "", nil, 200)
	call("GET", "/status", "/status", "", nil, 200)
	call("GET", "/v1/openapi.json", "/v1/openapi.json", "", nil, 200)
	if r := call("GET", "/v1/ca.crt", "/v1/ca.crt", "", nil, 200); !strings.HasPrefix(string(r.body), "-----BEGIN CERTIFICATE-----") {
		t.Errorf("ca.crt: %.60s", r.body)
	}
	call("GET", "/v1/me", "/v1/me", b.adminKey, nil, 200)
	call("GET", "/v1/me", "/v1/me", "nope", nil, 401)
	if r := call("GET", "/v1/me", "/v1/me", b.session("platform-admin"), nil, 200); r.json["organization"] != nil {
		t.Errorf("platform admin me: %s", r.body)
	}
	// The operators' routes, on an organization of their own.
	operator := b.session("platform-admin")
	// Restoring a project elsewhere needs a cluster: a single node answers 409 (cmd's TestClusterNodeLoss
	// restores one for real).
	call("POST", "/v1/projects/"+prj.ID+"/restore-elsewhere", "/v1/projects/{projectID}/restore-elsewhere", operator, nil, 409)
	call("POST", "/v1/projects/"+prj.ID+"/restore-elsewhere", "/v1/projects/{projectID}/restore-elsewhere", b.adminKey, nil, 403)
	call("GET", "/v1/nodes", "/v1/nodes", operator, nil, 200)
	call("GET", "/v1/nodes", "/v1/nodes", b.adminKey, nil, 403)

	call("POST", "/v1/projects/"+prj.ID+"/move", "/v1/projects/{projectID}/move", operator, map[string]any{"node": "nod_nope"}, 409)
	call("POST", "/v1/projects/"+prj.ID+"/move", "/v1/projects/{projectID}/move", b.adminKey, map[string]any{"node": "nod_nope"}, 403)
	newOrg := call("POST", "/v1/organizations", "/v1/organizations", operator, map[string]any{"name": "Conform Customer", "owner_email": "conform-owner@example.com"}, 201)
	call("POST", "/v1/organizations", "/v1/organizations", operator, map[string]any{}, 400)
	call("POST", "/v1/organizations", "/v1/organizations", owner, map[string]any{"name": "x"}, 403)
	call("GET", "/v1/organizations", "/v1/organizations", operator, nil, 200)
	if id, _ := newOrg.json["organization"].(map[string]any)["id"].(string); id != "" {
		o := "/v1/organizations/" + id
		call("POST", o+"/suspend", "/v1/organizations/{orgID}/suspend", operator, map[string]any{"reason": "conformance"}, 200)
		call("POST", o+"/suspend", "/v1/organizations/{orgID}/suspend", operator, map[string]any{"reason": "conformance"}, 409)
		call("POST", o+"/resume", "/v1/organizations/{orgID}/resume", operator, nil, 200)
		call("POST", o+"/resume", "/v1/organizations/{orgID}/resume", operator, nil, 409)
		call("DELETE", o, "/v1/organizations/{orgID}", owner, nil, 403)
		call("DELETE", o, "/v1/organizations/{orgID}", operator, nil, 200)
		call("DELETE", o, "/v1/organizations/{orgID}", operator, nil, 404)
	}
	// The programs' routes: service tokens, a submission and its review (billing off: approval is a 409).
	minted := call("POST", "/v1/service-tokens", "/v1/service-tokens", operator, map[string]any{"name": "conformance"}, 201)
	call("POST", "/v1/service-tokens", "/v1/service-tokens", operator, map[string]any{}, 400)
	call("GET", "/v1/service-tokens", "/v1/service-tokens", operator, nil, 200)
	svcToken, _ := minted.json["plaintext_token"].(string)
	apps, appPattern := "/v1/program-applications", "/v1/program-applications/{applicationID}"
	application := map[string]any{"company_name": "Conform", "contact_name": "C", "email": "conform@example.com", "segment": "saas",
		"use_case": "tests", "program": "startup", "team_size": 2}
	submitted := call("POST", apps, apps, svcToken, application, 201)
	call("POST", apps, apps, svcToken, application, 409)
	call("POST", apps, apps, b.adminKey, application, 403)
	call("POST", apps, apps, "", application, 401)
	call("POST", apps, apps, svcToken, map[string]any{"team_size": 0}, 400)
	call("GET", apps+"?status=received", apps, operator, nil, 200)
	call("GET", apps+"?status=nope", apps, operator, nil, 400)
	if id, _ := submitted.json["program_application"].(map[string]any)["id"].(string); id != "" {
		call("GET", apps+"/"+id, appPattern, operator, nil, 200)
		call("GET", apps+"/pap_nope", appPattern, operator, nil, 404)
		call("POST", apps+"/"+id+"/approve", appPattern+"/approve", operator, map[string]any{"percent_off": 10}, 409)
		call("POST", apps+"/"+id+"/reject", appPattern+"/reject", operator, map[string]any{"operator_note": "conformance"}, 200)
		call("POST", apps+"/"+id+"/reject", appPattern+"/reject", operator, map[string]any{}, 409)
	}
	if id, _ := minted.json["service_token"].(map[string]any)["id"].(string); id != "" {
		call("DELETE", "/v1/service-tokens/"+id, "/v1/service-tokens/{tokenID}", operator, nil, 200)
		call("DELETE", "/v1/service-tokens/"+id, "/v1/service-tokens/{tokenID}", operator, nil, 409)
		call("DELETE", "/v1/service-tokens/svt_nope", "/v1/service-tokens/{tokenID}", operator, nil, 404)
	}
	// Plans and quotas (the operators' configuration).
	call("GET", "/v1/plans", "/v1/plans", owner, nil, 200)
	plan := map[string]any{"max_connections": 20, "storage_limit_bytes": 1 << 30, "kv_memory_mb": 32, "previews_limit": 2,
		"ai_uses_per_month": 10, "memory_bytes": 512 << 20, "cpu_cores": 0.5}
	call("PUT", "/v1/plans/conform", "/v1/plans/{name}", operator, plan, 200)
	call("PUT", "/v1/plans/conform", "/v1/plans/{name}", operator, map[string]any{"max_connections": 0}, 400)
	call("PUT", "/v1/plans/conform", "/v1/plans/{name}", owner, plan, 403)
	call("DELETE", "/v1/plans/conform", "/v1/plans/{name}", operator, nil, 200)
	call("DELETE", "/v1/plans/free", "/v1/plans/{name}", operator, nil, 409)
	call("DELETE", "/v1/plans/conform", "/v1/plans/{name}", operator, nil, 404)
	call("GET", "/v1/organizations/"+b.org.ID+"/quota", "/v1/organizations/{orgID}/quota", operator, nil, 200)
	call("PATCH", "/v1/organizations/"+b.org.ID+"/quota", "/v1/organizations/{orgID}/quota", operator, map[string]any{"previews_limit": 60}, 200)
	call("PATCH", "/v1/organizations/"+b.org.ID+"/quota", "/v1/organizations/{orgID}/quota", operator, map[string]any{}, 400)
	call("PATCH", "/v1/organizations/org_nope/quota", "/v1/organizations/{orgID}/quota", operator, map[string]any{"previews_limit": 1}, 404)
	// Sign-up, the operators' invites, and the referral code and referrals.
	call("GET", "/v1/signup", "/v1/signup", "", nil, 200)
	call("POST", "/v1/signup", "/v1/signup", "", map[string]any{"email": "new@example.com", "password": "a long enough password", "organization_name": "New"}, 403)
	sgi := call("POST", "/v1/signup-invites", "/v1/signup-invites", operator, map[string]any{"note": "conformance"}, 201)
	call("GET", "/v1/signup-invites", "/v1/signup-invites", operator, nil, 200)
	b.svc.Tenancy().SetSignupMode("invite")
	call("POST", "/v1/signup", "/v1/signup", "", map[string]any{"email": "new@example.com", "password": "a long enough password", "organization_name": "New",
		"invite_token": sgi.json["token"], "referral_code": "NOSUCHCODE"}, 201)
	call("POST", "/v1/signup", "/v1/signup", "", map[string]any{"email": "new2@example.com", "password": "short", "organization_name": "New"}, 400)
	b.svc.Tenancy().SetSignupMode("closed")
	sgi2 := call("POST", "/v1/signup-invites", "/v1/signup-invites", operator, map[string]any{}, 201)
	if id, _ := sgi2.json["signup_invite"].(map[string]any)["id"].(string); id != "" {
		call("DELETE", "/v1/signup-invites/"+id, "/v1/signup-invites/{inviteID}", operator, nil, 200)
		call("DELETE", "/v1/signup-invites/"+id, "/v1/signup-invites/{inviteID}", operator, nil, 409)
	}
	osgi := "/v1/organizations/" + b.org.ID + "/signup-invites"
	oinv := call("POST", osgi, "/v1/organizations/{orgID}/signup-invites", b.adminKey, map[string]any{"note": "a friend"}, 201)
	call("POST", osgi, "/v1/organizations/{orgID}/signup-invites", b.adminKey, map[string]any{"expires_in_hours": 0.5}, 400)
	call("GET", osgi, "/v1/organizations/{orgID}/signup-invites", b.adminKey, nil, 200)
	if id, _ := oinv.json["signup_invite"].(map[string]any)["id"].(string); id != "" {
		call("DELETE", osgi+"/"+id, "/v1/organizations/{orgID}/signup-invites/{inviteID}", b.adminKey, nil, 200)
		call("DELETE", osgi+"/"+id, "/v1/organizations/{orgID}/signup-invites/{inviteID}", b.adminKey, nil, 409)
	}
	call("DELETE", osgi+"/sgi_nope", "/v1/organizations/{orgID}/signup-invites/{inviteID}", b.adminKey, nil, 404)
	call("GET", "/v1/referrals", "/v1/referrals", operator, nil, 200)
	call("GET", "/v1/referrals?status=void", "/v1/referrals", operator, nil, 200)
	call("GET", "/v1/referrals?status=nope", "/v1/referrals", operator, nil, 400)
	call("GET", "/v1/referrals", "/v1/referrals", owner, nil, 403)
	rcode := "/v1/organizations/" + b.org.ID + "/referral-code"
	call("GET", rcode, "/v1/organizations/{orgID}/referral-code", b.adminKey, nil, 200)
	call("POST", rcode, "/v1/organizations/{orgID}/referral-code", b.adminKey, map[string]any{}, 200)
	call("GET", rcode, "/v1/organizations/{orgID}/referral-code", b.adminKey, nil, 200)
	call("PATCH", rcode, "/v1/organizations/{orgID}/referral-code", b.adminKey, map[string]any{"discount_id": "co_x"}, 409)
	call("PATCH", rcode, "/v1/organizations/{orgID}/referral-code", b.adminKey, map[string]any{}, 400)
	call("GET", "/v1/organizations/"+b.org.ID+"/referrals", "/v1/organizations/{orgID}/referrals", b.adminKey, nil, 200)
	call("POST", "/v1/auth/sessions", "/v1/auth/sessions", "", map[string]any{"email": "x@example.com", "password": "wrong"}, 401)
	call("POST", "/v1/auth/sessions", "/v1/auth/sessions", "", `{"email": 1}`, 400)

	start := call("POST", "/v1/cli/login/sessions", "/v1/cli/login/sessions", "", map[string]any{"device_name": "laptop"}, 201)
	sid, _ := start.json["session_id"].(string)
	poll, _ := start.json["poll_token"].(string)
	login := "/v1/cli/login/sessions/" + sid
	loginPattern := "/v1/cli/login/sessions/{sessionID}"
	call("GET", login+"?poll_token="+poll, loginPattern, "", nil, 200)
	call("GET", login, loginPattern, "", nil, 400)
	call("GET", login+"?poll_token=wrong", loginPattern, "", nil, 404)
	call("GET", login+"/details", loginPattern+"/details", member, nil, 200)
	call("GET", login+"/details", loginPattern+"/details", b.adminKey, nil, 403)
	call("POST", login+"/authorize", loginPattern+"/authorize", owner, nil, 200)
	call("POST", login+"/authorize", loginPattern+"/authorize", owner, nil, 409)
	if r := call("GET", login+"?poll_token="+poll, loginPattern, "", nil, 200); r.json["plaintext_api_key"] == "" {
		t.Errorf("poll after authorize: %s", r.body)
	}
	call("POST", login+"/refuse", loginPattern+"/refuse", owner, nil, 409) // authorized: its key exists
	other := call("POST", "/v1/cli/login/sessions", "/v1/cli/login/sessions", "", map[string]any{}, 201)
	otherLogin := "/v1/cli/login/sessions/" + other.json["session_id"].(string)
	call("POST", otherLogin+"/refuse", loginPattern+"/refuse", member, nil, 200)
	if r := call("GET", otherLogin+"?poll_token="+other.json["poll_token"].(string), loginPattern, "", nil, 200); r.json["state"] != "refused" {
		t.Errorf("poll after refuse: %s", r.body)
	}

	call("GET", org, "/v1/organizations/{orgID}", b.adminKey, nil, 200)
	call("GET", org, "/v1/organizations/{orgID}", readOnly, nil, 403)
	call("GET", "/v1/organizations/org_nope", "/v1/organizations/{orgID}", b.adminKey, nil, 404)
	call("PATCH", org, "/v1/organizations/{orgID}", b.adminKey, map[string]any{"name": "Renamed", "billing_email": "b@example.com"}, 200)
	call("PATCH", org, "/v1/organizations/{orgID}", b.adminKey, map[string]any{"nope": 1}, 400)
	call("GET", org+"/usage", "/v1/organizations/{orgID}/usage", b.adminKey, nil, 200)
	call("GET", org+"/audit-events?limit=5", "/v1/organizations/{orgID}/audit-events", b.adminKey, nil, 200)
	call("GET", org+"/audit-events?limit=0", "/v1/organizations/{orgID}/audit-events", b.adminKey, nil, 400)

	call("GET", org+"/api-keys", "/v1/organizations/{orgID}/api-keys", b.adminKey, nil, 200)
	created := call("POST", org+"/api-keys", "/v1/organizations/{orgID}/api-keys", b.adminKey,
		map[string]any{"name": "ci", "scopes": []string{"jobs:read"}, "expires_in_days": 30}, 201)
	keyID, _ := created.json["api_key"].(map[string]any)["id"].(string)
	call("POST", org+"/api-keys", "/v1/organizations/{orgID}/api-keys", b.adminKey, map[string]any{"name": "ci"}, 400)
	call("DELETE", org+"/api-keys/"+keyID, "/v1/organizations/{orgID}/api-keys/{keyID}", b.adminKey, nil, 200)
	call("DELETE", org+"/api-keys/key_nope", "/v1/organizations/{orgID}/api-keys/{keyID}", b.adminKey, nil, 404)

	// Webhook endpoints: errors and successes conform.
	b.env.StartWebhooks(t)
	receiver := b.env.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	hooks, hooksPattern := org+"/webhook-endpoints", "/v1/organizations/{orgID}/webhook-endpoints"
	call("GET", hooks, hooksPattern, b.adminKey, nil, 200)
	hook := call("POST", hooks, hooksPattern, b.adminKey, map[string]any{"url": receiver, "description": "conformance", "event_types": []string{"job.completed"}}, 201)
	call("POST", hooks, hooksPattern, b.adminKey, map[string]any{"url": "ftp://example.com"}, 400)
	call("POST", hooks, hooksPattern, b.adminKey, map[string]any{"url": receiver, "event_types": []string{"job.exploded"}}, 400)
	call("POST", hooks, hooksPattern, b.adminKey, map[string]any{"url": "http://169.254.169.254/latest"}, 400)
	hookID, _ := hook.json["webhook_endpoint"].(map[string]any)["id"].(string)
	one, onePattern := hooks+"/"+hookID, hooksPattern+"/{endpointID}"
	call("PATCH", one, onePattern, b.adminKey, map[string]any{"description": "renamed"}, 200)
	call("PATCH", hooks+"/whe_nope", onePattern, b.adminKey, map[string]any{}, 404)
	call("POST", one+"/rotate-secret", onePattern+"/rotate-secret", b.adminKey, nil, 200)
	delivered := b.deliveredTest(hookID)
	called["POST "+onePattern+"/test"] = true
	call("POST", hooks+"/whe_nope/test", onePattern+"/test", b.adminKey, nil, 404)
	call("GET", one+"/deliveries?limit=10", onePattern+"/deliveries", b.adminKey, nil, 200)
	call("GET", one+"/deliveries?limit=0", onePattern+"/deliveries", b.adminKey, nil, 400)
	call("POST", one+"/deliveries/"+delivered+"/redeliver", onePattern+"/deliveries/{deliveryID}/redeliver", b.adminKey, nil, 200)
	call("POST", one+"/deliveries/msg_nope/redeliver", onePattern+"/deliveries/{deliveryID}/redeliver", b.adminKey, nil, 404)
	call("PATCH", one, onePattern, b.adminKey, map[string]any{"is_active": false}, 200)
	call("POST", one+"/deliveries/"+delivered+"/redeliver", onePattern+"/deliveries/{deliveryID}/redeliver", b.adminKey, nil, 409)
	call("POST", one+"/test", onePattern+"/test", b.adminKey, nil, 409)
	call("DELETE", one, onePattern, b.adminKey, nil, 200)
	call("DELETE", one, onePattern, b.adminKey, nil, 404)

	membersPattern := "/v1/organizations/{orgID}/members"
	call("GET", org+"/members", membersPattern, b.adminKey, nil, 200)
	added := call("POST", org+"/members", membersPattern, b.adminKey, map[string]any{"email": "conform@example.com", "role": "member"}, 201)
	uid, _ := added.json["member"].(map[string]any)["user_id"].(string)
	call("POST", org+"/members", membersPattern, b.adminKey, map[string]any{"email": "conform@example.com", "role": "member"}, 409)
	call("POST", org+"/members", membersPattern, b.adminKey, map[string]any{"email": "other@example.com", "role": "boss"}, 400)
	call("PATCH", org+"/members/"+uid, membersPattern+"/{userID}", b.adminKey, map[string]any{"role": "admin"}, 200)
	call("PATCH", org+"/members/usr_nope", membersPattern+"/{userID}", b.adminKey, map[string]any{"role": "admin"}, 404)
	call("DELETE", org+"/members/"+uid, membersPattern+"/{userID}", b.adminKey, nil, 200)
	call("DELETE", org+"/members/usr_nope", membersPattern+"/{userID}", b.adminKey, nil, 404)
	// Invitations: an existing user (of another organization) is invited, and accepts or declines signed in.
	elsewhere, _ := b.otherOrg("conform-elsewhere")
	invitee := func(email string) (session, invitation string) {
		t.Helper()
		if err := b.db.Update(func(tx *store.Tx) error {
			_, err := b.svc.Identity().CreateUser(tx, email, "Invitee", "correct horse battery staple", false, store.Membership{OrganizationID: elsewhere.ID, Role: "owner"})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		r := call("POST", org+"/members", membersPattern, b.adminKey, map[string]any{"email": email, "role": "member"}, 201)
		in := b.do("POST", "/v1/auth/sessions", "", map[string]any{"email": email, "password": "correct horse battery staple"})
		return in.json["token"].(string), r.json["invitation"].(map[string]any)["id"].(string)
	}
	invitations, mine := org+"/invitations", "/v1/me/invitations"
	accepter, inv1 := invitee("accepter@example.com")
	decliner, inv2 := invitee("decliner@example.com")
	_, inv3 := invitee("withdrawn@example.com")
	invPattern := "/v1/organizations/{orgID}/invitations"
	call("GET", invitations, invPattern, b.adminKey, nil, 200)
	call("GET", mine, mine, accepter, nil, 200)
	call("GET", mine, mine, b.adminKey, nil, 403)
	call("POST", mine+"/"+inv1+"/accept", mine+"/{invitationID}/accept", decliner, nil, 404)
	call("POST", mine+"/"+inv1+"/accept", mine+"/{invitationID}/accept", accepter, nil, 200)
	call("POST", mine+"/"+inv2+"/decline", mine+"/{invitationID}/decline", decliner, nil, 200)
	call("POST", mine+"/"+inv2+"/decline", mine+"/{invitationID}/decline", decliner, nil, 404)
	call("DELETE", invitations+"/"+inv3, invPattern+"/{invitationID}", b.adminKey, nil, 200)
	call("DELETE", invitations+"/"+inv3, invPattern+"/{invitationID}", b.adminKey, nil, 404)
	changer := b.session("member")
	call("POST", "/v1/auth/password", "/v1/auth/password", changer, map[string]any{"current_password": "not the password", "new_password": "a brand new passphrase"}, 403)
	call("POST", "/v1/auth/password", "/v1/auth/password", changer, map[string]any{"current_password": "correct horse battery staple", "new_password": "short"}, 400)
	call("POST", "/v1/auth/password", "/v1/auth/password", b.adminKey, map[string]any{"current_password": "x", "new_password": "a brand new passphrase"}, 403)
	call("POST", "/v1/auth/password", "/v1/auth/password", changer, map[string]any{"current_password": "correct horse battery staple", "new_password": "a brand new passphrase"}, 200)
	call("DELETE", "/v1/auth/sessions/current", "/v1/auth/sessions/current", b.adminKey, nil, 403)
	call("DELETE", "/v1/auth/sessions/current", "/v1/auth/sessions/current", changer, nil, 200)
	call("DELETE", "/v1/auth/sessions/current", "/v1/auth/sessions/current", changer, nil, 401)

	project := "/v1/projects/" + prj.ID
	call("POST", project+"/approvals", "/v1/projects/{projectID}/approvals", b.adminKey, map[string]any{"action": "project.delete"}, 201)
	call("POST", project+"/approvals", "/v1/projects/{projectID}/approvals", b.adminKey, map[string]any{"action": "nope"}, 400)
	call("GET", project+"/audit-events", "/v1/projects/{projectID}/audit-events", b.adminKey, nil, 200)
	call("GET", project+"/jobs", "/v1/projects/{projectID}/jobs", b.adminKey, nil, 200)
	call("GET", project+"/events?follow=false", "/v1/projects/{projectID}/events", b.adminKey, nil, 200)
	waitJob := func(r *response) {
		t.Helper()
		if job, ok := r.json["job"].(map[string]any); ok {
			if j := b.env.WaitJob(t, job["id"].(string)); j.State != "completed" {
				t.Fatalf("%s: %s", j.Type, j.Error)
			}
		}
	}
	// Preview databases: an empty one made, listed, extended, connected to, deleted.
	pv := "/v1/preview-databases/{previewID}"
	madePrv := call("POST", project+"/preview-databases", "/v1/projects/{projectID}/preview-databases", b.adminKey, map[string]any{"mode": "empty", "ttl_hours": 2}, 202)
	call("POST", project+"/preview-databases", "/v1/projects/{projectID}/preview-databases", b.adminKey, map[string]any{"mode": "fork"}, 400)
	call("POST", project+"/preview-databases", "/v1/projects/{projectID}/preview-databases", b.adminKey, map[string]any{"ttl_hours": 0}, 400)
	waitJob(madePrv)
	prvID := madePrv.json["preview"].(map[string]any)["id"].(string)
	call("GET", project+"/preview-databases", "/v1/projects/{projectID}/preview-databases", b.adminKey, nil, 200)
	call("POST", "/v1/preview-databases/"+prvID+"/extend", pv+"/extend", b.adminKey, map[string]any{"ttl_hours": 10}, 200)
	call("POST", "/v1/preview-databases/"+prvID+"/extend", pv+"/extend", b.adminKey, map[string]any{"ttl_hours": 1000}, 400)
	call("GET", "/v1/preview-databases/"+prvID+"/connections", pv+"/connections", b.adminKey, nil, 200)
	call("GET", "/v1/preview-databases/prv_nope/connections", pv+"/connections", b.adminKey, nil, 404)
	call("GET", "/v1/preview-databases/"+prvID+"/schema-diff", pv+"/schema-diff", b.adminKey, nil, 200)
	call("GET", "/v1/preview-databases/prv_nope/schema-diff", pv+"/schema-diff", b.adminKey, nil, 404)
	call("POST", project+"/preview-databases", "/v1/projects/{projectID}/preview-databases", b.adminKey, map[string]any{"source_restore_point_id": "rp_nope"}, 400)
	waitJob(call("POST", "/v1/preview-databases/"+prvID+"/reset", pv+"/reset", b.adminKey, nil, 202))
	delPrv := call("DELETE", "/v1/preview-databases/"+prvID, pv, b.adminKey, nil, 202)
	call("DELETE", "/v1/preview-databases/"+prvID, pv, b.adminKey, nil, 409)
	waitJob(delPrv)
	// Cutover requests: one rejected, one approved and promoted (an empty preview into the project).
	cr, crPattern := project+"/cutover-requests", "/v1/projects/{projectID}/cutover-requests"
	nextPrv := call("POST", project+"/preview-databases", "/v1/projects/{projectID}/preview-databases", b.adminKey, map[string]any{"mode": "empty"}, 202)
	waitJob(nextPrv)
	nextID := nextPrv.json["preview"].(map[string]any)["id"].(string)
	call("POST", cr, crPattern, b.adminKey, map[string]any{}, 400)
	call("POST", cr, crPattern, b.adminKey, map[string]any{"preview_id": prvID}, 404) // deleted
	reqID := func(r *response) string { return r.json["cutover_request"].(map[string]any)["id"].(string) }
	first := reqID(call("POST", cr, crPattern, b.adminKey, map[string]any{"preview_id": nextID, "customer_note": "first"}, 201))
	call("POST", cr, crPattern, b.adminKey, map[string]any{"preview_id": nextID}, 409)
	call("GET", cr, crPattern, b.adminKey, nil, 200)
	call("GET", cr+"/"+first, crPattern+"/{requestID}", b.adminKey, nil, 200)
	call("GET", cr+"/cut_nope", crPattern+"/{requestID}", b.adminKey, nil, 404)
	call("POST", cr+"/"+first+"/reject", crPattern+"/{requestID}/reject", b.adminKey, map[string]any{}, 400)
	call("POST", cr+"/"+first+"/reject", crPattern+"/{requestID}/reject", b.adminKey, map[string]any{"rejected_reason": "not yet"}, 200)
	second := reqID(call("POST", cr, crPattern, b.adminKey, map[string]any{"preview_id": nextID}, 201))
	waitJob(call("POST", cr+"/"+second+"/approve", crPattern+"/{requestID}/approve", b.adminKey, map[string]any{"operator_note": "go"}, 202))
	call("POST", cr+"/"+second+"/approve", crPattern+"/{requestID}/approve", b.adminKey, map[string]any{}, 409)

	// Studio: the console, the table editor and the AI counter.
	st := "/v1/projects/{projectID}"
	call("POST", project+"/sql", st+"/sql", b.adminKey, map[string]any{"query": "CREATE TABLE studio_items (id serial PRIMARY KEY, name text NOT NULL, tags text[]); SELECT 1 AS one, now() AS at, 1 AS one"}, 200)
	call("POST", project+"/sql", st+"/sql", b.adminKey, map[string]any{"query": "SELECT nope"}, 400)
	call("POST", project+"/sql", st+"/sql", b.adminKey, map[string]any{"query": " "}, 400)
	call("GET", project+"/sql/history?limit=5", st+"/sql/history", b.adminKey, nil, 200)
	call("GET", project+"/sql/history?limit=500", st+"/sql/history", b.adminKey, nil, 400)
	call("POST", project+"/sql/runs/none/cancel", st+"/sql/runs/{runID}/cancel", b.adminKey, nil, 200)
	call("POST", project+"/sql/runs/no%20ne/cancel", st+"/sql/runs/{runID}/cancel", b.adminKey, nil, 400)
	saved := call("POST", project+"/saved-queries", st+"/saved-queries", b.adminKey, map[string]any{"name": "conform", "sql": "SELECT 1"}, 201)
	call("POST", project+"/saved-queries", st+"/saved-queries", b.adminKey, map[string]any{"name": "conform", "sql": "SELECT 1"}, 409)
	call("GET", project+"/saved-queries", st+"/saved-queries", b.adminKey, nil, 200)
	savedOne := project + "/saved-queries/" + saved.json["saved_query"].(map[string]any)["id"].(string)
	call("GET", savedOne, st+"/saved-queries/{queryID}", b.adminKey, nil, 200)
	call("PATCH", savedOne, st+"/saved-queries/{queryID}", b.adminKey, map[string]any{"name": ""}, 400)
	call("PATCH", savedOne, st+"/saved-queries/{queryID}", b.adminKey, map[string]any{"name": "renamed"}, 200)
	call("DELETE", savedOne, st+"/saved-queries/{queryID}", b.adminKey, nil, 200)
	call("GET", savedOne, st+"/saved-queries/{queryID}", b.adminKey, nil, 404)
	call("GET", project+"/tables", st+"/tables", b.adminKey, nil, 200)
	tbl, tp := project+"/tables/public/studio_items", st+"/tables/{schema}/{table}"
	call("GET", tbl+"/columns", tp+"/columns", b.adminKey, nil, 200)
	call("GET", project+"/tables/public/nope/columns", tp+"/columns", b.adminKey, nil, 404)
	call("POST", tbl+"/rows", tp+"/rows", b.adminKey, map[string]any{"rows": []any{map[string]any{"name": "a", "tags": []string{"x", "y"}}, map[string]any{"name": "b"}}}, 200)
	call("POST", tbl+"/rows", tp+"/rows", b.adminKey, map[string]any{"rows": []any{map[string]any{"nope": 1}}}, 400)
	call("GET", tbl+"/rows?limit=10", tp+"/rows", b.adminKey, nil, 200)
	call("GET", tbl+"/rows?limit=100000", tp+"/rows", b.adminKey, nil, 400)
	call("PATCH", tbl+"/rows", tp+"/rows", b.adminKey, map[string]any{"match": map[string]any{"id": 1}, "set": map[string]any{"name": "c"}}, 200)
	call("PATCH", tbl+"/rows", tp+"/rows", b.adminKey, map[string]any{"set": map[string]any{"name": "c"}}, 400)
	call("DELETE", tbl+"/rows", tp+"/rows", b.adminKey, map[string]any{"match": map[string]any{"id": 2}}, 200)
	call("DELETE", tbl+"/rows", tp+"/rows", b.adminKey, map[string]any{}, 400)
	// The table editor: filters and sort, CSV out and in, schema changes with their dry runs.
	if r := call("GET", tbl+"/rows?filter=name:eq:c&sort=-id&filter=id:gte:1", tp+"/rows", b.adminKey, nil, 200); r.json["result"].(map[string]any)["total"] != float64(1) {
		t.Errorf("filtered rows: %s", r.body)
	}
	call("GET", tbl+"/rows?filter=nope:eq:1", tp+"/rows", b.adminKey, nil, 400)
	call("GET", tbl+"/rows?sort=id&sort=-id", tp+"/rows", b.adminKey, nil, 400)
	if r := call("GET", tbl+"/csv?sort=-id", tp+"/csv", b.adminKey, nil, 200); !strings.HasPrefix(string(r.body), `"id","name","tags"`) {
		t.Errorf("csv export: %s", r.body)
	}
	call("GET", tbl+"/csv?filter=id:bad", tp+"/csv", b.adminKey, nil, 400)
	call("POST", tbl+"/csv", tp+"/csv", b.adminKey, "name,tags\nfrom csv,\"{a,b}\"\n", 200)
	call("POST", tbl+"/csv", tp+"/csv", b.adminKey, "name,tags\nx,not an array\n", 400)
	newTable := map[string]any{"name": "conform_new", "columns": []any{map[string]any{"name": "id", "type": "bigint", "identity": true, "primary_key": true},
		map[string]any{"name": "item", "type": "int", "references": map[string]any{"schema": "public", "table": "studio_items", "column": "id"}}}}
	call("POST", project+"/tables?dry_run=true", st+"/tables", b.adminKey, newTable, 200)
	call("POST", project+"/tables", st+"/tables", b.adminKey, newTable, 200)
	call("POST", project+"/tables", st+"/tables", b.adminKey, map[string]any{"name": "bad", "columns": []any{map[string]any{"name": "a", "type": "int; drop"}}}, 400)
	newTbl := project + "/tables/public/conform_new"
	call("POST", newTbl+"/columns?dry_run=true", tp+"/columns", b.adminKey, map[string]any{"name": "note", "type": "text"}, 200)
	call("POST", newTbl+"/columns", tp+"/columns", b.adminKey, map[string]any{"name": "note", "type": "text", "nullable": false, "default": map[string]any{"value": ""}}, 200)
	if r := call("GET", newTbl+"/columns", tp+"/columns", b.adminKey, nil, 200); !strings.Contains(string(r.body), `"foreign_key":{"schema":"public","table":"studio_items","column":"id"}`) {
		t.Errorf("columns: %s", r.body)
	}
	call("PATCH", newTbl+"/columns/note?dry_run=true", tp+"/columns/{column}", b.adminKey, map[string]any{"name": "body"}, 200)
	call("PATCH", newTbl+"/columns/note", tp+"/columns/{column}", b.adminKey, map[string]any{"name": "body", "nullable": true}, 200)
	call("PATCH", newTbl+"/columns/note", tp+"/columns/{column}", b.adminKey, map[string]any{"name": "x"}, 400)
	call("DELETE", newTbl+"/columns/body?dry_run=true", tp+"/columns/{column}", b.adminKey, nil, 200)
	call("DELETE", newTbl+"/columns/body", tp+"/columns/{column}", b.adminKey, nil, 200)
	call("DELETE", newTbl+"/columns/body", tp+"/columns/{column}", b.adminKey, nil, 400)
	call("GET", project+"/ai-usage", st+"/ai-usage", b.adminKey, nil, 200)
	call("POST", project+"/ai-usage", st+"/ai-usage", b.adminKey, nil, 200)

	// Ephemeral databases: created without a credential, read and deleted with the claim token, claimed.
	ephemeral := func(name string) (string, string) {
		t.Helper()
		r := call("POST", "/v1/ephemeral-databases", "/v1/ephemeral-databases", "", map[string]any{"name": name}, 201)
		return r.json["ephemeral_database"].(map[string]any)["project_id"].(string), r.json["claim_token"].(string)
	}
	callWith := func(method, path, pattern, token string, want int) *response {
		t.Helper()
		var hdr http.Header
		if token != "" {
			hdr = http.Header{"X-Service-Claim-Token": {token}}
		}
		r := b.call(t, method, path, hdr, nil)
		if r.status != want {
			t.Errorf("%s %s: %d, want %d: %s", method, path, r.status, want, r.body)
		}
		called[method+" "+pattern] = true
		return r
	}
	eph, ephToken := ephemeral("conformance")
	call("POST", "/v1/ephemeral-databases", "/v1/ephemeral-databases", "", map[string]any{"region": "mars"}, 400)
	ephPattern := "/v1/ephemeral-databases/{projectID}"
	callWith("GET", "/v1/ephemeral-databases/"+eph, ephPattern, "", 401)
	callWith("GET", "/v1/ephemeral-databases/"+eph, ephPattern, "eph_wrong", 404)
	callWith("GET", "/v1/ephemeral-databases/prj_nope", ephPattern, ephToken, 404)
	callWith("GET", "/v1/ephemeral-databases/"+eph, ephPattern, ephToken, 200)
	call("POST", "/v1/ephemeral-databases/"+eph+"/claim", ephPattern+"/claim", b.adminKey, map[string]any{"claim_token": "eph_wrong"}, 404)
	call("POST", "/v1/ephemeral-databases/"+eph+"/claim", ephPattern+"/claim", b.adminKey, map[string]any{}, 400)
	call("POST", "/v1/ephemeral-databases/"+eph+"/claim", ephPattern+"/claim", b.adminKey, map[string]any{"claim_token": ephToken}, 200)
	call("POST", "/v1/ephemeral-databases/"+eph+"/claim", ephPattern+"/claim", b.adminKey, map[string]any{"claim_token": ephToken}, 409)
	callWith("GET", "/v1/ephemeral-databases/"+eph, ephPattern, ephToken, 404) // a claimed database is a project now
	gone, goneToken := ephemeral("conformance-deleted")
	callWith("DELETE", "/v1/ephemeral-databases/"+gone, ephPattern, "eph_wrong", 404)
	callWith("DELETE", "/v1/ephemeral-databases/"+gone, ephPattern, goneToken, 202)
	// Billing is off in this bundle: the Stripe webhook is 404 (TestStripeWebhook checks its other answers).
	call("POST", "/v1/billing/stripe/webhook", "/v1/billing/stripe/webhook", "", `{"id": "evt_1"}`, 404)

	// Integrations: the real providers against the bundle's fakes of their platforms (their signed webhooks
	// in TestScopeMatrix, their flows in appliance's TestIntegrationDeployA and TestIntegrationProviders).
	ints, intsP := project+"/integrations", "/v1/projects/{projectID}/integrations"
	call("GET", ints, intsP, b.adminKey, nil, 200)
	call("PUT", ints+"/deploy_a", intsP+"/{provider}", b.adminKey, map[string]any{"config": map[string]any{"targets": []string{"staging"}}}, 400)
	call("PUT", ints+"/deploy_z", intsP+"/{provider}", b.adminKey, map[string]any{}, 400)
	call("PUT", ints+"/deploy_a", intsP+"/{provider}", b.adminKey, map[string]any{"config": map[string]any{"targets": []string{"production"}}}, 200)
	call("PUT", ints+"/deploy_a", intsP+"/{provider}", readOnly, map[string]any{}, 403)
	waitJob(call("POST", ints+"/deploy_a/connect", intsP+"/deploy_a/connect", b.adminKey,
		map[string]any{"deploy_a_project_id": "prj_fixture", "token": fixtureDeployAToken, "webhook_secret": fixtureSecret}, 202))
	call("POST", ints+"/deploy_a/connect", intsP+"/deploy_a/connect", b.adminKey, map[string]any{"token": "x"}, 400)
	if r := call("GET", ints, intsP, b.adminKey, nil, 200); strings.Contains(string(r.body), fixtureDeployAToken) || !strings.Contains(string(r.body), `"state":"active"`) {
		t.Errorf("integrations after connect: %s", r.body)
	}
	waitJob(call("POST", ints+"/deploy_b/connect", intsP+"/deploy_b/connect", b.adminKey,
		map[string]any{"site_id": b.fakes.deployB.SiteID, "token": b.fakes.deployB.Token}, 202))
	waitJob(call("POST", ints+"/edge_c/connect", intsP+"/edge_c/connect", b.adminKey,
		map[string]any{"account_id": b.fakes.edgeC.AccountID, "api_token": b.fakes.edgeC.Token, "config": map[string]any{"mode": "worker_secret", "script": "my-worker"}}, 202))
	call("POST", ints+"/edge_c/connect", intsP+"/edge_c/connect", b.adminKey,
		map[string]any{"account_id": "a", "api_token": "t", "config": map[string]any{"mode": "worker_secret"}}, 400) // no script
	call("POST", ints+"/auth_a/connect", intsP+"/auth_a/connect", b.adminKey, map[string]any{"secret_key": fixtureAuthAKey}, 202)
	for _, name := range []string{"deploy_a", "deploy_b", "auth_a", "auth_b", "auth_c"} {
		call("POST", "/v1/integrations/"+name+"/webhook/"+prj.ID, "/v1/integrations/"+name+"/webhook/{projectID}", "", `{"id":"evt_unsigned"}`, 401)
	}
	call("GET", "/v1/integrations/deploy_a/oauth/start?project_id="+prj.ID, "/v1/integrations/{provider}/oauth/start", b.adminKey, nil, 409)
	call("GET", "/v1/integrations/deploy_a/oauth/start", "/v1/integrations/{provider}/oauth/start", b.adminKey, nil, 400)
	call("GET", "/v1/integrations/deploy_a/oauth/callback?code=c&state=forged", "/v1/integrations/{provider}/oauth/callback", "", nil, 400)
	waitJob(call("DELETE", ints+"/deploy_a", intsP+"/{provider}", b.adminKey, nil, 200))
	call("DELETE", ints+"/deploy_a", intsP+"/{provider}", b.adminKey, nil, 404)

	// Key-value stores: the whole life of one.
	kvp := "/v1/projects/{projectID}/kv"
	call("GET", project+"/kv", kvp, b.adminKey, nil, 404)
	waitJob(call("POST", project+"/kv", kvp, b.adminKey, nil, 202))
	call("POST", project+"/kv", kvp, b.adminKey, nil, 409)
	call("GET", project+"/kv", kvp, b.adminKey, nil, 200)
	call("GET", "/v1/kv", "/v1/kv", b.adminKey, nil, 200)
	call("GET", "/v1/kv", "/v1/kv", b.session("platform-admin"), nil, 400)
	call("GET", project+"/kv/credentials", kvp+"/credentials", b.adminKey, nil, 200)
	call("POST", project+"/kv/rotate-token", kvp+"/rotate-token", b.adminKey, nil, 200)
	waitJob(call("POST", project+"/kv/flush", kvp+"/flush", b.adminKey, nil, 202))
	del := call("DELETE", project+"/kv", kvp, b.adminKey, nil, 202)
	// While the store is deleted a flush is refused (409); a delete job that finished already leaves none
	// (404): the job is looked at after the answer, so a 404 is right only once it has completed.
	if r := b.do("POST", project+"/kv/flush", b.adminKey, nil); r.status != 409 {
		delJob, _ := del.json["job"].(map[string]any)
		id, _ := delJob["id"].(string)
		var j *store.Job
		b.env.DB.View(func(tx *store.Tx) (err error) { j, err = store.Jobs.Get(tx, id); return err })
		if r.status != 404 || j == nil || j.State != "completed" {
			t.Errorf("flush of a store being deleted: %d (the delete job %+v): %s", r.status, j, r.body)
		}
	}
	called["POST "+kvp+"/flush"] = true
	waitJob(del)
	call("GET", project+"/kv/credentials", kvp+"/credentials", b.adminKey, nil, 404)
	call("GET", project+"/events?last_event_id=x", "/v1/projects/{projectID}/events", b.adminKey, nil, 400)
	call("GET", org+"/events?follow=false", "/v1/organizations/{orgID}/events", b.adminKey, nil, 200)
	call("GET", "/v1/organizations/org_nope/events?follow=false", "/v1/organizations/{orgID}/events", b.adminKey, nil, 404)
	call("GET", "/v1/jobs/job_nope", "/v1/jobs/{jobID}", b.adminKey, nil, 404)

	call("GET", "/v1/projects", "/v1/projects", b.adminKey, nil, 200)
	call("GET", "/v1/projects", "/v1/projects", b.session("platform-admin"), nil, 400)
	call("POST", "/v1/projects", "/v1/projects", b.adminKey, map[string]any{"name": "conformance"}, 202)
	call("POST", "/v1/projects", "/v1/projects", b.adminKey, map[string]any{"name": "x", "plan": "huge"}, 400)
	call("GET", project, "/v1/projects/{projectID}", b.adminKey, nil, 200)
	call("GET", "/v1/projects/prj_nope", "/v1/projects/{projectID}", b.adminKey, nil, 404)
	patched := call("PATCH", project, "/v1/projects/{projectID}", b.adminKey, map[string]any{"plan": "pro"}, 200)
	b.env.WaitJob(t, patched.json["project"].(map[string]any)["latest_job_id"].(string)) // a restart
	call("PATCH", project, "/v1/projects/{projectID}", b.adminKey, map[string]any{"statement_timeout": "soon"}, 400)
	call("GET", project+"/connections", "/v1/projects/{projectID}/connections", b.adminKey, nil, 200)
	call("POST", project+"/credentials/rotate", "/v1/projects/{projectID}/credentials/rotate", b.adminKey, map[string]any{"overlap_seconds": 60}, 202)
	call("POST", project+"/credentials/rotate", "/v1/projects/{projectID}/credentials/rotate", b.adminKey, map[string]any{"overlap_seconds": -1}, 400)
	call("DELETE", project, "/v1/projects/{projectID}", b.adminKey, nil, 403)

	dbs, roles := "/v1/projects/{projectID}/databases", "/v1/projects/{projectID}/roles"
	call("GET", project+"/databases", dbs, b.adminKey, nil, 200)
	call("POST", project+"/databases", dbs, b.adminKey, map[string]any{"name": "conformance"}, 201)
	call("POST", project+"/databases", dbs, b.adminKey, map[string]any{"name": "conformance"}, 409)
	call("POST", project+"/databases", dbs, b.adminKey, map[string]any{"name": "template1"}, 400)
	call("DELETE", project+"/databases/conformance", dbs+"/{databaseName}", member, nil, 403)
	call("DELETE", project+"/databases/conformance", dbs+"/{databaseName}", b.adminKey, nil, 200)
	call("DELETE", project+"/databases/conformance", dbs+"/{databaseName}", b.adminKey, nil, 404)
	call("GET", project+"/roles", roles, b.adminKey, nil, 200)
	call("POST", project+"/roles", roles, b.adminKey, map[string]any{"name": "conformance"}, 201)
	call("POST", project+"/roles", roles, b.adminKey, map[string]any{"name": "conformance"}, 409)
	call("POST", project+"/roles/conformance/reset-password", roles+"/{roleName}/reset-password", b.adminKey, nil, 200)
	call("POST", project+"/roles/nobody/reset-password", roles+"/{roleName}/reset-password", b.adminKey, nil, 404)
	call("DELETE", project+"/roles/"+prj.RoleName, roles+"/{roleName}", b.adminKey, nil, 400)
	call("DELETE", project+"/roles/conformance", roles+"/{roleName}", b.adminKey, nil, 200)
	call("DELETE", project+"/roles/conformance", roles+"/{roleName}", b.adminKey, nil, 404)
	ext := "/v1/projects/{projectID}/extensions"
	call("GET", project+"/extensions", ext, b.adminKey, nil, 200)
	call("POST", project+"/extensions", ext, b.adminKey, map[string]any{"name": "citext"}, 202)
	call("POST", project+"/extensions", ext, b.adminKey, map[string]any{"name": "no_such_extension"}, 404)
	call("DELETE", project+"/extensions/no_such_extension", ext+"/{extensionName}", b.adminKey, nil, 404)
	call("POST", project+"/extensions/pg_stat_statements/update", ext+"/{extensionName}/update", b.adminKey, nil, 409)
	up := "/v1/projects/{projectID}/upgrade"
	call("POST", project+"/upgrade/minor", up+"/minor", b.adminKey, nil, 202)
	call("POST", project+"/upgrade/major/preflight?target_major=16", up+"/major/preflight", b.adminKey, nil, 202)
	call("POST", project+"/upgrade/major/preflight?target_major=abc", up+"/major/preflight", b.adminKey, nil, 400)
	call("POST", project+"/upgrade/major?target_major=15", up+"/major", b.adminKey, nil, 400)
	call("POST", project+"/upgrade/major/confirm", up+"/major/confirm", b.adminKey, nil, 409)
	call("POST", project+"/upgrade/major/rollback", up+"/major/rollback", b.adminKey, nil, 409)
	// The upgrade jobs above hold the project: a restart is refused until they end; a member may not.
	call("POST", project+"/restart", "/v1/projects/{projectID}/restart", b.adminKey, nil, 409)
	call("POST", project+"/restart", "/v1/projects/{projectID}/restart", member, nil, 403)
	call("POST", project+"/suspend", "/v1/projects/{projectID}/suspend", b.adminKey, nil, 409)
	call("POST", project+"/suspend", "/v1/projects/{projectID}/suspend", member, nil, 403)
	call("GET", project+"/summary", "/v1/projects/{projectID}/summary", b.adminKey, nil, 200)

	bk := "/v1/projects/{projectID}/backups"
	taken := call("POST", project+"/backups", bk, b.adminKey, map[string]any{"label": "conform"}, 202)
	call("POST", project+"/backups", bk, b.adminKey, map[string]any{"nope": 1}, 400)
	call("POST", project+"/backups", bk, b.adminKey, map[string]any{"label": strings.Repeat("x", 101)}, 400)
	if id, _ := taken.json["job"].(map[string]any)["id"].(string); id != "" {
		b.env.WaitJob(t, id)
	}
	backups := call("GET", project+"/backups", bk, b.adminKey, nil, 200)
	call("GET", project+"/backups", bk, readOnly, nil, 403)
	sb := "/v1/projects/{projectID}/scheduled-backups"
	call("GET", project+"/scheduled-backups", sb, b.adminKey, nil, 200)
	call("PUT", project+"/scheduled-backups/default", sb+"/default", b.adminKey, map[string]any{"cron_hour": 3, "cron_minute": 30, "is_active": true, "retention_days": 14}, 200)
	call("PUT", project+"/scheduled-backups/default", sb+"/default", b.adminKey, map[string]any{"cron_hour": 24, "cron_minute": 0, "is_active": true}, 400)
	call("PUT", project+"/scheduled-backups/default", sb+"/default", b.adminKey, map[string]any{"cron_hour": 3, "is_active": true}, 400)
	call("PUT", project+"/scheduled-backups/default", sb+"/default", b.adminKey, map[string]any{"cron_hour": 3, "cron_minute": 0, "is_active": true, "nope": 1}, 400)
	call("PUT", project+"/scheduled-backups/default", sb+"/default", readOnly, map[string]any{"cron_hour": 3, "cron_minute": 0, "is_active": true}, 403)
	call("GET", project+"/scheduled-backups", sb, b.adminKey, nil, 200)
	rpp := "/v1/projects/{projectID}/restore-points"
	made := call("POST", project+"/restore-points", rpp, b.adminKey, map[string]any{"label": "conform"}, 201)
	call("POST", project+"/restore-points", rpp, b.adminKey, map[string]any{}, 400)
	call("GET", project+"/restore-points", rpp, b.adminKey, nil, 200)
	if rp, _ := made.json["restore_point"].(map[string]any); rp != nil {
		call("DELETE", project+"/restore-points/"+rp["id"].(string), rpp+"/{restorePointID}", b.adminKey, nil, 200)
	}
	call("DELETE", project+"/restore-points/rp_nope", rpp+"/{restorePointID}", b.adminKey, nil, 404)

	exp := "/v1/projects/{projectID}/exports"
	exported := call("POST", project+"/exports", exp, b.adminKey, nil, 202)
	call("POST", project+"/exports", exp, b.adminKey, map[string]any{"nope": 1}, 400)
	call("POST", project+"/exports", exp, readOnly, nil, 403)
	exportID, _ := exported.json["export_id"].(string)
	if id, _ := exported.json["job"].(map[string]any)["id"].(string); id != "" {
		if j := b.env.WaitJob(t, id); j.State != "completed" {
			t.Errorf("export job %s: %s %s", j.State, j.Error, j.LastStderr)
		}
	}
	call("GET", project+"/exports", exp, b.adminKey, nil, 200)
	call("GET", project+"/exports/exp_nope/download", exp+"/{exportID}/download", b.adminKey, nil, 404)
	dl := call("GET", project+"/exports/"+exportID+"/download", exp+"/{exportID}/download", b.adminKey, nil, 200)
	if d, _ := dl.json["download"].(map[string]any); d != nil {
		u, err := url.Parse(d["download_url"].(string))
		if err != nil {
			t.Fatal(err)
		}
		pub := "/v1/downloads/exports/{exportID}"
		if r := call("GET", u.RequestURI(), pub, "", nil, 200); len(r.body) == 0 || r.header.Get("Content-Type") != "application/octet-stream" ||
			!strings.HasPrefix(r.header.Get("Content-Disposition"), "attachment") {
			t.Errorf("download: %d bytes, headers %v", len(r.body), r.header)
		}
		q := u.Query()
		q.Set("sig", strings.Repeat("0", 64))
		call("GET", u.Path+"?"+q.Encode(), pub, "", nil, 403)
		call("GET", u.Path, pub, "", nil, 400)
	} else {
		t.Errorf("no download: %s", dl.body)
	}

	// Imports: an upload URL, the export's dump PUT through it, and an import of it.
	imp := "/v1/projects/{projectID}/imports"
	call("POST", project+"/imports/uploads", imp+"/uploads", readOnly, nil, 403)
	call("POST", project+"/imports/uploads", imp+"/uploads", b.adminKey, map[string]any{"nope": 1}, 400)
	call("POST", project+"/imports", imp, b.adminKey, map[string]any{"confirm": false}, 400)
	call("POST", project+"/imports", imp, b.adminKey, map[string]any{"confirm": true}, 409)
	upl := call("POST", project+"/imports/uploads", imp+"/uploads", b.adminKey, nil, 201)
	dl2 := call("GET", project+"/exports/"+exportID+"/download", exp+"/{exportID}/download", b.adminKey, nil, 200)
	if d, _ := dl2.json["download"].(map[string]any); d != nil && upl.json["upload"] != nil {
		du, _ := url.Parse(d["download_url"].(string))
		dump := b.do("GET", du.RequestURI(), "", nil)
		uu, _ := url.Parse(upl.json["upload"].(map[string]any)["upload_url"].(string))
		pub := "/v1/uploads/imports/{uploadID}"
		q := uu.Query()
		q.Set("sig", strings.Repeat("0", 64))
		call("PUT", uu.Path+"?"+q.Encode(), pub, "", string(dump.body), 403)
		call("PUT", uu.Path, pub, "", string(dump.body), 400)
		call("PUT", uu.RequestURI(), pub, "", string(dump.body), 200)
		call("PUT", uu.RequestURI(), pub, "", string(dump.body), 409)
		imported := call("POST", project+"/imports", imp, b.adminKey, map[string]any{"confirm": true}, 202)
		if id, _ := imported.json["job"].(map[string]any)["id"].(string); id != "" {
			if j := b.env.WaitJob(t, id); j.State != "completed" {
				t.Errorf("import job %s: %s %s", j.State, j.Error, j.LastStderr)
			}
		}
	} else {
		t.Errorf("no upload: %s", upl.body)
	}

	// Preflight and follow of a second local PostgreSQL (wal_level = logical), through to the cutover.
	src := b.env.StartSource(t, "logical")
	src.App(t, "shop", "CREATE TABLE items (id int PRIMARY KEY, name text)", "INSERT INTO items SELECT g, 'i' || g FROM generate_series(1, 20) g")
	call("POST", project+"/imports/preflight", imp+"/preflight", b.adminKey, map[string]any{"source_url": "http://nope"}, 400)
	call("POST", project+"/imports/preflight", imp+"/preflight", readOnly, map[string]any{"source_url": src.URL("shop")}, 403)
	call("POST", project+"/imports/preflight", imp+"/preflight", b.adminKey, map[string]any{"source_url": "postgres://app:x@127.0.0.1:1/shop"}, 200)
	pf := call("POST", project+"/imports/preflight", imp+"/preflight", b.adminKey, map[string]any{"source_url": src.URL("shop")}, 200)
	if ok, _ := pf.json["preflight"].(map[string]any)["ok"].(bool); !ok {
		t.Errorf("preflight of a ready source: %s", pf.body)
	}
	call("POST", project+"/imports/follow/status", imp+"/follow/status", b.adminKey, nil, 404)
	call("POST", project+"/imports/follow", imp+"/follow", b.adminKey, map[string]any{"source_url": src.URL("shop")}, 400)
	wait := func(r *response) map[string]any {
		id, _ := r.json["job"].(map[string]any)["id"].(string)
		if id == "" {
			return nil
		}
		j := b.env.WaitJob(t, id)
		if j.State != "completed" {
			t.Errorf("%s job %s: %s %s", j.Type, j.State, j.Error, j.LastStderr)
		}
		var res map[string]any
		json.Unmarshal(j.Result, &res)
		return res
	}
	wait(call("POST", project+"/imports/follow", imp+"/follow", b.adminKey, map[string]any{"source_url": src.URL("shop"), "confirm": true}, 202))
	call("POST", project+"/imports/follow", imp+"/follow", b.adminKey, map[string]any{"source_url": src.URL("shop"), "confirm": true}, 409)
	if st := wait(call("POST", project+"/imports/follow/status", imp+"/follow/status", b.adminKey, nil, 202)); st["state"] != "following" {
		t.Errorf("follow status: %v", st)
	}
	call("POST", project+"/imports/follow/cutover", imp+"/follow/cutover", b.adminKey, map[string]any{}, 400)
	wait(call("POST", project+"/imports/follow/cutover", imp+"/follow/cutover", b.adminKey, map[string]any{"confirm": true}, 202))
	call("POST", project+"/imports/follow/abort", imp+"/follow/abort", b.adminKey, nil, 409)

	// Observability: the snapshot, history, top queries, alerts, logs, the advisor and /metrics.
	obs := "/v1/projects/{projectID}"
	call("GET", project+"/observability", obs+"/observability", b.adminKey, nil, 200)
	call("GET", project+"/observability/history?hours=24", obs+"/observability/history", readOnly, nil, 200)
	call("GET", project+"/observability/history?hours=0", obs+"/observability/history", b.adminKey, nil, 400)
	call("GET", project+"/observability/queries", obs+"/observability/queries", b.adminKey, nil, 200)
	call("GET", project+"/observability/queries?hours=169", obs+"/observability/queries", b.adminKey, nil, 400)
	call("GET", project+"/observability/queries/NOT-A-HASH", obs+"/observability/queries/{queryHash}", b.adminKey, nil, 400)
	call("GET", project+"/observability/queries/"+strings.Repeat("0", 32), obs+"/observability/queries/{queryHash}", b.adminKey, nil, 404)
	alertID, hash := b.observed(prj)
	call("GET", project+"/observability/queries/"+hash, obs+"/observability/queries/{queryHash}", b.adminKey, nil, 200)
	call("GET", project+"/observability/statements/12x", obs+"/observability/statements/{queryID}", b.adminKey, nil, 400)
	call("GET", project+"/observability/statements/-1", obs+"/observability/statements/{queryID}", b.adminKey, nil, 404)
	var queryID string
	if err := b.env.Svc.AdminQueryRow(t.Context(), prj.ID, `SELECT s.queryid::text FROM public.pg_stat_statements s JOIN pg_catalog.pg_roles r ON r.oid = s.userid
		WHERE r.rolname = $1 AND s.calls > 0 AND s.query NOT LIKE '/* appliance internal */%' ORDER BY s.calls DESC LIMIT 1`, []any{prj.RoleName}, &queryID); err != nil {
		t.Fatalf("a statement of the project's role: %v", err)
	}
	call("GET", project+"/observability/statements/"+queryID, obs+"/observability/statements/{queryID}", b.adminKey, nil, 200)
	call("GET", project+"/alerts", obs+"/alerts", readOnly, nil, 200)
	call("POST", project+"/alerts/alr_nope/acknowledge", obs+"/alerts/{alertID}/acknowledge", b.adminKey, nil, 404)
	call("POST", project+"/alerts/"+alertID+"/acknowledge", obs+"/alerts/{alertID}/acknowledge", readOnly, nil, 403)
	call("POST", project+"/alerts/"+alertID+"/acknowledge", obs+"/alerts/{alertID}/acknowledge", b.adminKey, nil, 200)
	call("GET", project+"/logs?severity=error,log&limit=50", obs+"/logs", b.adminKey, nil, 200)
	call("GET", project+"/logs?severity=loud", obs+"/logs", b.adminKey, nil, 400)
	call("GET", project+"/logs?hours=200", obs+"/logs", b.adminKey, nil, 400)
	call("GET", project+"/logs?cursor=garbage", obs+"/logs", b.adminKey, nil, 400)
	from := url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
	call("GET", project+"/logs?q=Division&sqlstate=22012&user=u&database=d&from="+from, obs+"/logs", readOnly, nil, 200)
	call("GET", project+"/logs?from=yesterday", obs+"/logs", b.adminKey, nil, 400)
	call("GET", project+"/logs?sqlstate=4", obs+"/logs", b.adminKey, nil, 400)
	if r := call("GET", project+"/logs/download?severity=error&from="+from, obs+"/logs/download", readOnly, nil, 200); r.header.Get("Content-Type") != "application/x-ndjson" ||
		!strings.HasPrefix(r.header.Get("Content-Disposition"), "attachment; filename=") {
		t.Errorf("log download: %v", r.header)
	}
	call("GET", project+"/logs/download?from=2020-01-01T00:00:00Z", obs+"/logs/download", b.adminKey, nil, 400)
	if r := call("GET", project+"/logs/stream?follow=false", obs+"/logs/stream", b.adminKey, nil, 200); !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
		t.Errorf("log stream: %v", r.header)
	}
	call("GET", project+"/advisor/indexes", obs+"/advisor/indexes", b.adminKey, nil, 200)
	call("GET", project+"/advisor/indexes?min_selectivity=0", obs+"/advisor/indexes", b.adminKey, nil, 400)
	call("GET", project+"/advisor/index-hygiene", obs+"/advisor/index-hygiene", b.adminKey, nil, 200)
	call("GET", "/metrics", "/metrics", "", nil, 200)

	// A real restore, last: it stops and swaps the project's server.
	rs := "/v1/projects/{projectID}/restores"
	call("POST", project+"/restores", rs, b.adminKey, map[string]any{}, 400)
	call("POST", project+"/restores", rs, b.adminKey, map[string]any{"backup_key": "x", "restore_time": "2020-01-01T00:00:00Z"}, 400)
	call("POST", project+"/restores", rs, b.adminKey, map[string]any{"restore_time": "2020-01-01T00:00:00Z"}, 400)
	if list, _ := backups.json["backups"].([]any); len(list) > 0 {
		key := list[0].(map[string]any)["backup_key"].(string)
		call("POST", project+"/restores", rs, member, map[string]any{"backup_key": key}, 403)
		last := lastAuditID(b)
		restored := call("POST", project+"/restores", rs, b.adminKey, map[string]any{"backup_key": key}, 202)
		checkAudited(t, b, "POST "+project+"/restores", b.adminKey, last, "")
		if id, _ := restored.json["job"].(map[string]any)["id"].(string); id != "" {
			if j := b.env.WaitJob(t, id); j.State != "completed" {
				t.Errorf("restore job %s: %s %s", j.State, j.Error, j.LastStderr)
			}
		}
	} else {
		t.Errorf("no backup listed: %s", backups.body)
	}
	// Resuming a running project leaves it as it is (the suspension and the wake: appliance's TestScaleToZero).
	if r := call("POST", project+"/resume", "/v1/projects/{projectID}/resume", b.adminKey, nil, 200); !strings.Contains(string(r.body), `"runtime_status":"active"`) {
		t.Errorf("resume: %s", r.body)
	}

	// A real major upgrade, 15 → 17 with pg_upgrade (Debian 13's PostgreSQL 17, given as up --pg-dist
	// 17=<its bin directory> gives it), on a project of its own: the four endpoints answer 2xx and their jobs
	// complete, by pg_upgrade; rolled back, upgraded again, confirmed. (The logical path, to the npm build:
	// appliance's TestMajorUpgradeByLogicalReplication.)
	bin17, err := testtools.DebianPostgres(t.Context(), 17)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (programs.Dist{Major: 17, Source: bin17}).Obtain(t.Context(), appliance.PostgresDistDir(b.env.Dir), nil); err != nil {
		t.Fatal(err)
	}
	upPrj := "/v1/projects/" + b.provision("conform-upgrade", "development").ID
	completes := func(r *response) {
		t.Helper()
		if id, _ := r.json["job"].(map[string]any)["id"].(string); id == "" {
			t.Errorf("no job: %s", r.body)
		} else if j := b.env.WaitJob(t, id); j.State != "completed" {
			t.Errorf("%s job %s: %s", j.Type, j.State, j.Error)
		} else if !strings.Contains(string(j.Result), `"method":"pg_upgrade"`) {
			t.Errorf("%s job: not by pg_upgrade: %s", j.Type, j.Result)
		}
	}
	completes(call("POST", upPrj+"/upgrade/major/preflight?target_major=17", up+"/major/preflight", b.adminKey, nil, 202))
	completes(call("POST", upPrj+"/upgrade/major?target_major=17", up+"/major", b.adminKey, nil, 202))
	if r := call("GET", upPrj+"/upgrade/major", up+"/major", b.adminKey, nil, 200); !strings.Contains(string(r.body), `"pending":{"previous_major":15,"method":"pg_upgrade"}`) {
		t.Errorf("the window open: %s", r.body)
	}
	call("POST", upPrj+"/upgrade/major?target_major=18", up+"/major", b.adminKey, nil, 409)
	completes(call("POST", upPrj+"/upgrade/major/rollback", up+"/major/rollback", b.adminKey, nil, 202))
	completes(call("POST", upPrj+"/upgrade/major?target_major=17", up+"/major", b.adminKey, nil, 202))
	completes(call("POST", upPrj+"/upgrade/major/confirm", up+"/major/confirm", b.adminKey, nil, 202))

	for _, rt := range b.api.Routes() {
		if !called[rt.Method+" "+rt.Path] {
			t.Errorf("%s %s was not exercised: add a call here", rt.Method, rt.Path)
		}
	}
}

// TestOpenAPIRateLimitConforms checks the 429 answer (and its Retry-After header) against the document.
func TestOpenAPIRateLimitConforms(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{limits: RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 0.001, StrictBurst: 1}})
	b.do("POST", "/v1/cli/login/sessions", "", nil)
	r := b.do("POST", "/v1/cli/login/sessions", "", nil)
	if r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Fatalf("second start: %d %v %s", r.status, r.header, r.body)
	}
}

// tbRecorder collects the errors checkAgainstOpenAPI reports.
type tbRecorder struct {
	testing.TB
	errs []string
}

func (r *tbRecorder) Helper() {}
func (r *tbRecorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestCheckAgainstOpenAPIRejects makes sure the validation used by every API test does catch mismatches.
func TestCheckAgainstOpenAPIRejects(t *testing.T) {
	t.Parallel()
	b := setup(t)
	jsonHeader := http.Header{"Content-Type": {"application/json"}}
	// status is a /status answer whose component has the given status and further members.
	status := func(componentStatus, more string) []byte {
		return []byte(`{"service":"appliance","status":"operational","regions":[],"updated_at":"2026-01-31T12:00:00Z","generated_at":"2026-01-31T12:00:00Z",` +
			`"components":[{"name":"store","message":"ok","status":` + componentStatus + more + `}]}`)
	}
	cases := []struct {
		name, method, path string
		resp               response
		wantErr            bool
	}{
		{"valid", "GET", "/healthz", response{status: 200, header: jsonHeader, body: []byte(`{"service":"appliance","status":"ok"}`)}, false},
		{"wrong type", "GET", "/healthz", response{status: 200, header: jsonHeader, body: []byte(`{"service":1,"status":"ok"}`)}, true},
		{"missing field", "GET", "/healthz", response{status: 200, header: jsonHeader, body: []byte(`{"service":"appliance"}`)}, true},
		{"null list", "GET", "/v1/projects/prj_x/jobs", response{status: 200, header: jsonHeader, body: []byte(`{"jobs":null}`)}, true},
		{"bad timestamp", "GET", "/v1/jobs/job_x", response{status: 200, header: jsonHeader, body: []byte(`{"job":{"created_at":"yesterday"}}`)}, true},
		{"error shape", "GET", "/v1/me", response{status: 401, header: http.Header{"Content-Type": {"application/json"}, "Www-Authenticate": {"Bearer"}}, body: []byte(`{"message":"no"}`)}, true},
		{"valid error", "GET", "/v1/me", response{status: 403, header: jsonHeader, body: []byte(`{"error":"no"}`)}, false},
		{"429 without Retry-After", "GET", "/healthz", response{status: 429, header: jsonHeader, body: []byte(`{"error":"slow down"}`)}, true},
		{"wrong media type", "GET", "/healthz", response{status: 200, header: http.Header{"Content-Type": {"text/plain"}}, body: []byte(`ok`)}, true},
		{"undeclared field", "GET", "/healthz", response{status: 200, header: jsonHeader, body: []byte(`{"service":"appliance","status":"ok","extra":1}`)}, true},
		{"valid status", "GET", "/status", response{status: 200, header: jsonHeader, body: status(`"operational"`, ``)}, false},
		{"undeclared nested field", "GET", "/status", response{status: 200, header: jsonHeader, body: status(`"operational"`, `,"surprise":true`)}, true},
		{"enum value outside the set", "GET", "/status", response{status: 200, header: jsonHeader, body: status(`"fine"`, ``)}, true},
		{"undeclared status", "DELETE", "/v1/projects/prj_x/restore-points/rp_x", response{status: 410, header: jsonHeader, body: []byte(`{"error":"gone"}`)}, true},
		{"undeclared error status", "GET", "/healthz", response{status: 409, header: jsonHeader, body: []byte(`{"error":"conflict"}`)}, true},
		{"unknown path", "GET", "/v1/nope", response{status: 404, header: jsonHeader, body: []byte(`whatever`)}, false},
		{"other method", "PUT", "/v1/me", response{status: 405, header: jsonHeader, body: []byte(`whatever`)}, false},
	}
	for _, c := range cases {
		req, err := http.NewRequest(c.method, b.ts.URL+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		rec := &tbRecorder{TB: t}
		checkAgainstOpenAPI(rec, b, req, &c.resp)
		if got := len(rec.errs) > 0; got != c.wantErr {
			t.Errorf("%s: errors %q, want error: %v", c.name, rec.errs, c.wantErr)
		}
	}
}

// TestEveryErrorKindIsDocumented: each status an error kind is answered with has a shared response in the
// document (errorStatuses and the routes' Errors can only name those).
func TestEveryErrorKindIsDocumented(t *testing.T) {
	t.Parallel()
	for kind, status := range statusOf {
		name, ok := errorResponseNames[status]
		if !ok {
			t.Errorf("kind %d answers %d, which has no shared response", kind, status)
			continue
		}
		if r, _ := sharedResponses[name].(map[string]any); r == nil || r["description"] == "" {
			t.Errorf("status %d: shared response %q is missing or undocumented", status, name)
		}
	}
}
