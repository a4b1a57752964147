package httpapi

import (
	"encoding"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
)

// OpenAPI builds the OpenAPI 3.1 document from the route table and the Go types of its Ops. Nothing in it
// is written per endpoint: paths, parameters, security and error responses come from the Route fields, and
// the schemas come from the request and response types by reflection (json tags; `api:"required"` marks a
// required request field and `doc:"..."` describes a field).
func OpenAPI(routes []Route, version string) map[string]any {
	g := newSchemaGen()
	for _, rt := range routes {
		if rt.Do.Body != nil {
			g.collect(rt.Do.Body, true)
		}
		if rt.Do.Resp != nil {
			g.collect(rt.Do.Resp, false)
		}
	}
	g.assignNames()

	paths := map[string]any{}
	var tagOrder []string
	usedResponses := map[string]bool{}
	opIDs := map[string]bool{}
	for _, rt := range routes {
		path, params := openapiPath(rt.Path)
		item, _ := paths[path].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[path] = item
		}
		op := g.operation(rt, params, usedResponses)
		op["operationId"] = uniqueOperationID(rt.Method, path, opIDs)
		item[strings.ToLower(rt.Method)] = op
		if rt.Tag != "" && !slices.Contains(tagOrder, rt.Tag) {
			tagOrder = append(tagOrder, rt.Tag)
		}
	}

	tags := []any{}
	for _, name := range tagOrder {
		desc := tagDescriptions[name]
		if desc == "" {
			desc = "Endpoints of the " + name + " area."
		}
		tags = append(tags, map[string]any{"name": name, "description": desc})
	}

	// Every operation's JSON body and success answer carry an example built from its schema.
	for _, item := range paths {
		for _, op := range item.(map[string]any) {
			addExamples(op.(map[string]any), g.schemas)
		}
	}

	responses := map[string]any{}
	for name := range usedResponses {
		responses[name] = sharedResponses[name]
	}
	schemas := g.schemas
	schemas[errorSchemaName] = map[string]any{
		"type":        "object",
		"description": "Every error answer: a 4xx or 5xx status with a public message.",
		"properties": map[string]any{
			"error":    map[string]any{"type": "string", "description": "what went wrong, safe to show to a user"},
			"sqlstate": map[string]any{"type": "string", "description": "on a SQL error from the studio: PostgreSQL's SQLSTATE code"},
			"position": map[string]any{"type": "integer", "description": "on a SQL error from the studio: the 1-based character position in the query the error points at, when the server names one"},
			"detail":   map[string]any{"type": "string", "description": "on a SQL error from the studio: the server's DETAIL, when it gives one"},
			"hint":     map[string]any{"type": "string", "description": "on a SQL error from the studio: the server's HINT, when it gives one"},
			"row":      map[string]any{"type": "integer", "description": "on a CSV import's bad value: its row (1 for the first row after the header)"},
		},
		"required": []any{"error"},
	}

	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{
			"title":       "appliance API",
			"version":     version,
			"description": apiDescription,
		},
		"servers": []any{map[string]any{"url": "/", "description": "this appliance"}},
		"tags":    tags,
		"paths":   paths,
		"components": map[string]any{
			"schemas":   schemas,
			"responses": responses,
			"securitySchemes": map[string]any{
				"bearerAuth": map[string]any{
					"type":        "http",
					"scheme":      "bearer",
					"description": "An API key (`apl_live_...`) or a session token (`ses_...` from `POST /v1/auth/sessions`) in `Authorization: Bearer <token>`.",
				},
				"apiKeyHeader": map[string]any{
					"type":        "apiKey",
					"in":          "header",
					"name":        "X-API-Key",
					"description": "An API key in the `X-API-Key` header (used when no `Authorization` header is sent).",
				},
			},
		},
	}
}

const apiDescription = "The control-plane API of the appliance, a self-hosted managed-PostgreSQL service.\n\n" +
	"Errors are always `{\"error\": \"message\"}` with a 4xx or 5xx status. Lists are JSON arrays, never null; " +
	"timestamps are RFC 3339 in UTC; every documented field of a response is always present (fields without a " +
	"value are `\"\"` or, for timestamps and free-form values, `null`). Request bodies are JSON objects; unknown " +
	"fields are refused with 400. Every endpoint is rate limited per client IP (429 with `Retry-After`).\n\n" +
	"Authenticate with an API key or a session token as a bearer token, or with an API key in `X-API-Key`. " +
	"Each operation names the scope it needs in its description and in `x-required-scope` (and, when it " +
	"needs more than one, all of them in `x-required-scopes`), and its " +
	"authentication mode in `x-auth` (`public`, `authenticated`, `session` or `service_token`)."

// tagDescriptions describe the tags of the route table; a tag not listed here gets a generic description.
var tagDescriptions = map[string]string{
	"health":        "Liveness, component status and this document.",
	"identity":      "The caller, sign-in to the built-in identity provider and the CLI device login.",
	"organizations": "An organization's profile and usage.",
	"audit":         "Audit events of organizations and projects.",
	"api-keys":      "Programmatic credentials of an organization.",
	"projects":      "Projects: one PostgreSQL instance each.",
	"jobs":          "Durable asynchronous jobs behind every lifecycle action.",
	"billing":       "The billing provider's inbound webhook (Stripe): the organizations' billing_* fields follow its events.",
	"programs":      "Program applications from the public website (with a narrow service token) and the platform operators' review of them.",
}

const errorSchemaName = "Error"

func errorContent() map[string]any {
	return map[string]any{"application/json": map[string]any{
		"schema": map[string]any{"$ref": "#/components/schemas/" + errorSchemaName},
	}}
}

// errorResponseNames name the shared response of each error status (every apperr kind's; a test checks).
var errorResponseNames = map[int]string{
	http.StatusBadRequest: "BadRequest", http.StatusUnauthorized: "Unauthorized", http.StatusForbidden: "Forbidden",
	http.StatusNotFound: "NotFound", http.StatusConflict: "Conflict", http.StatusGone: "Gone",
	http.StatusRequestEntityTooLarge: "PayloadTooLarge", http.StatusUnsupportedMediaType: "UnsupportedMediaType",
	http.StatusTooManyRequests: "TooManyRequests", http.StatusRequestHeaderFieldsTooLarge: "HeadersTooLarge",
	http.StatusInternalServerError: "InternalError", http.StatusServiceUnavailable: "Unavailable",
	http.StatusInsufficientStorage: "InsufficientStorage",
}

// errorStatuses are the error statuses a route can answer, in order: those of every route (400 for an
// unclean path or a malformed query string, 413 for a body over its limit, 429, 431, 500), those of its
// kind (401 and 403 when authenticated, 404 with path parameters, 415 when it reads JSON, 507 when it
// needs disk: needsDisk), then the route's own Errors.
func errorStatuses(rt Route, pathParams []string) []int {
	codes := []int{http.StatusBadRequest}
	if rt.Auth != Public {
		codes = append(codes, http.StatusUnauthorized, http.StatusForbidden)
	}
	if len(pathParams) > 0 {
		codes = append(codes, http.StatusNotFound)
	}
	codes = append(codes, http.StatusRequestEntityTooLarge)
	if rt.RawBody == "" {
		codes = append(codes, http.StatusUnsupportedMediaType)
	}
	codes = append(codes, http.StatusTooManyRequests, http.StatusRequestHeaderFieldsTooLarge, http.StatusInternalServerError)
	if needsDisk(&rt) {
		codes = append(codes, http.StatusInsufficientStorage)
	}
	for _, c := range rt.Errors {
		if !slices.Contains(codes, c) {
			codes = append(codes, c)
		}
	}
	return codes
}

// sharedResponses are the error answers, referenced from the operations under components.responses.
var sharedResponses = map[string]any{
	"BadRequest": map[string]any{
		"description": "Bad input: malformed JSON, a body that is not an object, unknown fields, wrong field types, a missing required field, a field sent as null, a body sent to an endpoint that takes none, a malformed query string or a query value out of bounds, or a path with empty, `.` or `..` segments.",
		"content":     errorContent(),
	},
	"Unauthorized": map[string]any{
		"description": "Missing, invalid, expired or revoked credentials.",
		"headers": map[string]any{
			"WWW-Authenticate": map[string]any{
				"description": "the authentication scheme to use",
				"required":    true,
				"schema":      map[string]any{"type": "string"},
			},
		},
		"content": errorContent(),
	},
	"Forbidden": map[string]any{
		"description": "The credential lacks the scope, the role or the project binding the operation needs.",
		"content":     errorContent(),
	},
	"NotFound": map[string]any{
		"description": "No such resource, or one of another organization.",
		"content":     errorContent(),
	},
	"TooManyRequests": map[string]any{
		"description": "Rate limited.",
		"headers": map[string]any{
			"Retry-After": map[string]any{
				"description": "seconds to wait before trying again",
				"required":    true,
				"schema":      map[string]any{"type": "integer", "minimum": 0},
			},
		},
		"content": errorContent(),
	},
	"Conflict": map[string]any{
		"description": "The resource is not in a state that allows this (a project not active, a job already running, an upload already received …).",
		"content":     errorContent(),
	},
	"Gone": map[string]any{
		"description": "Expired or already used.",
		"content":     errorContent(),
	},
	"HeadersTooLarge": map[string]any{
		"description": "The request headers are over their limit (64 KiB).",
		"content":     errorContent(),
	},
	"InsufficientStorage": map[string]any{
		"description": "The appliance is short of disk space: it refuses what would write to its disk until space is freed (GET /status says so).",
		"content":     errorContent(),
	},
	"PayloadTooLarge": map[string]any{
		"description": "The request body is over its limit (1 MiB for JSON; the project's storage limit for dumps).",
		"content":     errorContent(),
	},
	"UnsupportedMediaType": map[string]any{
		"description": "A body sent with another Content-Type than application/json (text/plain and form bodies included, which a browser sends across sites without asking), or with none.",
		"content":     errorContent(),
	},
	"Unavailable": map[string]any{
		"description": "The project's server does not answer, or this appliance lacks the program the feature needs.",
		"content":     errorContent(),
	},
	"InternalError": map[string]any{
		"description": "An internal error; the cause is logged, never sent.",
		"content":     errorContent(),
	},
}

// operation documents one route.
func (g *schemaGen) operation(rt Route, pathParams []string, used map[string]bool) map[string]any {
	op := map[string]any{}
	if rt.Summary != "" {
		op["summary"] = rt.Summary
	} else {
		op["summary"] = rt.Method + " " + rt.Path
	}
	if rt.Tag != "" {
		op["tags"] = []any{rt.Tag}
	}

	var desc []string
	switch rt.Auth {
	case Public:
		op["x-auth"] = "public"
		op["security"] = []any{}
		desc = append(desc, "No authentication.")
	case SessionOnly:
		op["x-auth"] = "session"
		op["security"] = []any{map[string]any{"bearerAuth": []any{}}}
		desc = append(desc, "Needs a signed-in session token (`ses_...`) as a bearer token; API keys are refused with 403.")
	case ServiceToken:
		op["x-auth"] = "service_token"
		op["security"] = []any{map[string]any{"bearerAuth": []any{}}}
		desc = append(desc, "Needs a service token (`svc_...`, minted by a platform operator) as a bearer token; API keys and sessions are refused with 403, and a service token is refused on every other endpoint.")
	default:
		op["x-auth"] = "authenticated"
		op["security"] = []any{map[string]any{"bearerAuth": []any{}}, map[string]any{"apiKeyHeader": []any{}}}
		desc = append(desc, "Needs an API key or a session token.")
	}
	if scopes := rt.scopes(); len(scopes) > 0 {
		op["x-required-scope"] = string(scopes[0])
		names := make([]string, len(scopes))
		for i, sc := range scopes {
			names[i] = "`" + string(sc) + "`"
		}
		if len(scopes) == 1 {
			desc = append(desc, fmt.Sprintf("Required scope: %s.", names[0]))
		} else {
			op["x-required-scopes"] = scopeStrings(scopes)
			desc = append(desc, fmt.Sprintf("Required scopes: %s (all of them).", strings.Join(names, ", ")))
		}
	} else if rt.Auth != Public {
		desc = append(desc, "No particular scope is required.")
	}
	if rt.Operator {
		op["x-platform-operator"] = true
		desc = append(desc, "For platform operators only (a session of a user with `is_admin`): every other caller is refused with 403.")
	}
	if rt.Auth != Public {
		if rt.OrgLevel {
			desc = append(desc, "Acts on the whole organization: project-scoped API keys are refused with 403.")
		} else if slices.Contains(pathParams, "projectID") {
			desc = append(desc, "Project-scoped API keys may act only on their own project.")
		}
	}
	if rt.Bucket != "" {
		op["x-rate-limit-bucket"] = rt.Bucket
		desc = append(desc, fmt.Sprintf("Rate limited by the `%s` bucket in addition to the general one.", rt.Bucket))
	}
	op["description"] = strings.Join(desc, " ")

	params := []any{}
	for _, name := range pathParams {
		schema := map[string]any{"type": "string"}
		if p := pathParamPatterns[name]; p != "" {
			schema["pattern"] = p
		}
		params = append(params, map[string]any{
			"name": name, "in": "path", "required": true,
			"description": "the " + paramNoun(name),
			"schema":      schema,
		})
	}
	for _, p := range rt.Query {
		typ := p.Type
		if typ == "" {
			typ = "string"
		}
		schema := map[string]any{"type": typ}
		if typ == "integer" && (p.Min != 0 || p.Max != 0) {
			schema["minimum"] = p.Min
			schema["maximum"] = p.Max
		}
		if p.Default != nil {
			schema["default"] = p.Default
		}
		if p.Pattern != "" {
			schema["pattern"] = p.Pattern
		}
		if p.Repeated {
			schema = map[string]any{"type": "array", "items": schema}
			if p.Max > 0 {
				schema["maxItems"] = p.Max
			}
		}
		qp := map[string]any{"name": p.Name, "in": "query", "required": p.Required, "schema": schema}
		if p.Doc != "" {
			qp["description"] = p.Doc
		}
		params = append(params, qp)
	}
	for _, h := range rt.Header {
		hp := map[string]any{"name": h.Name, "in": "header", "required": h.Required, "schema": map[string]any{"type": "string"}}
		if h.Doc != "" {
			hp["description"] = h.Doc
		}
		params = append(params, hp)
	}
	if len(params) > 0 {
		op["parameters"] = params
	}

	if rt.Do.Body != nil {
		schema := g.ref(rt.Do.Body, true)
		op["requestBody"] = map[string]any{
			"required": hasRequiredField(rt.Do.Body),
			"content":  map[string]any{"application/json": map[string]any{"schema": schema}},
		}
	}
	if rt.RawBody != "" {
		desc := "the raw bytes, sent as " + rt.RawBody
		if rt.RawBody == "*/*" {
			desc = "the raw bytes, with any Content-Type (or none): the body is read as bytes, whatever it declares"
		}
		op["requestBody"] = map[string]any{"required": true, "description": desc,
			"content": map[string]any{rt.RawBody: map[string]any{"schema": map[string]any{"type": "string", "format": "binary"}}}}
	}

	status := rt.Status
	if status == 0 {
		status = http.StatusOK
	}
	success := map[string]any{"description": http.StatusText(status)}
	switch {
	case status >= 300 && status < 400: // a redirect: no body, the Location header
		success["headers"] = map[string]any{"Location": map[string]any{"description": "where the browser goes",
			"schema": map[string]any{"type": "string", "format": "uri"}}}
	case rt.Do.Resp != nil:
		success["content"] = map[string]any{"application/json": map[string]any{"schema": g.ref(rt.Do.Resp, false)}}
	default:
		ct := rt.ContentType
		if ct == "" {
			ct = "application/json"
		}
		media := map[string]any{}
		if isJSONMedia(ct) {
			media["schema"] = map[string]any{"type": "object", "additionalProperties": true, "description": "a JSON object"}
		}
		success["content"] = map[string]any{ct: media}
	}
	responses := map[string]any{fmt.Sprint(status): success}
	for _, code := range errorStatuses(rt, pathParams) {
		name, ok := errorResponseNames[code]
		if !ok {
			panic(fmt.Sprintf("route %s %s: no shared response for status %d", rt.Method, rt.Path, code))
		}
		used[name] = true
		responses[fmt.Sprint(code)] = map[string]any{"$ref": "#/components/responses/" + name}
	}
	op["responses"] = responses
	return op
}

func isJSONMedia(ct string) bool {
	ct, _, _ = strings.Cut(ct, ";")
	ct = strings.TrimSpace(ct)
	return ct == "application/json" || strings.HasSuffix(ct, "+json")
}

// pathParamPatterns are the shapes of the path parameters that have one (the handlers check them).
var pathParamPatterns = map[string]string{"queryHash": api.QueryHashPattern}

// paramNoun turns a path parameter name into words: orgID -> "organization ID".
func paramNoun(name string) string {
	base, isID := strings.CutSuffix(name, "ID")
	if base == "org" {
		base = "organization"
	}
	if isID {
		return base + " ID"
	}
	return base
}

// openapiPath converts a ServeMux pattern path to an OpenAPI path and lists its parameters in order:
// {name...} becomes {name} and a trailing {$} is dropped.
func openapiPath(p string) (string, []string) {
	var params []string
	segs := strings.Split(p, "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		if s == "{$}" && i == len(segs)-1 {
			out = append(out, "")
			continue
		}
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			name := strings.TrimSuffix(strings.TrimSuffix(s[1:len(s)-1], "..."), " ")
			params = append(params, name)
			s = "{" + name + "}"
		}
		out = append(out, s)
	}
	return strings.Join(out, "/"), params
}

// uniqueOperationID derives a camelCase operationId from the method and the path, e.g.
// GET /v1/organizations/{orgID}/api-keys -> getOrganizationsByOrgIDApiKeys. The API version segment is left
// out unless that would collide with an earlier route's.
func uniqueOperationID(method, path string, seen map[string]bool) string {
	build := func(keepVersion bool) string {
		var b strings.Builder
		b.WriteString(strings.ToLower(method))
		for i, seg := range strings.Split(path, "/") {
			if seg == "" {
				continue
			}
			if !keepVersion && i == 1 && isVersionSegment(seg) {
				continue
			}
			if strings.HasPrefix(seg, "{") {
				b.WriteString("By")
				b.WriteString(upperFirst(strings.Trim(seg, "{}")))
				continue
			}
			for _, w := range strings.FieldsFunc(seg, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
				b.WriteString(upperFirst(strings.ToLower(w)))
			}
		}
		return b.String()
	}
	id := build(false)
	if seen[id] {
		id = build(true)
	}
	for n := 2; seen[id]; n++ {
		id = fmt.Sprintf("%s%d", build(true), n)
	}
	seen[id] = true
	return id
}

func isVersionSegment(s string) bool {
	if len(s) < 2 || s[0] != 'v' {
		return false
	}
	for _, r := range s[1:] {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	r := []rune(s)
	r[0] = unicode.ToUpper(r[0])
	return string(r)
}

// hasRequiredField reports whether a request type has a field marked `api:"required"`.
func hasRequiredField(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return false
	}
	for _, f := range jsonFields(t) {
		if f.required {
			return true
		}
	}
	return false
}

// --- schemas by reflection ---

// schemaKey is a named struct type in one of two modes: as a request body (required fields from
// `api:"required"`, unknown fields refused) or as a response (every field present).
type schemaKey struct {
	t       reflect.Type
	request bool
}

type schemaGen struct {
	keys    []schemaKey // in discovery order
	seen    map[schemaKey]bool
	names   map[schemaKey]string
	schemas map[string]any
}

func newSchemaGen() *schemaGen {
	return &schemaGen{seen: map[schemaKey]bool{}, names: map[schemaKey]string{}, schemas: map[string]any{}}
}

var (
	timeType          = reflect.TypeFor[time.Time]()
	rawMessageType    = reflect.TypeFor[json.RawMessage]()
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// special returns the schema of a type that encoding/json does not marshal by its structure.
func special(t reflect.Type) (map[string]any, bool) {
	switch {
	case t.Kind() == reflect.Pointer:
		return nil, false // a pointer's method set includes its element's: decide on the element
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}, true
	case t == rawMessageType, t.Kind() == reflect.Interface,
		t.Implements(jsonMarshalerType) || reflect.PointerTo(t).Implements(jsonMarshalerType):
		return freeForm(), true
	case t.Implements(textMarshalerType) || reflect.PointerTo(t).Implements(textMarshalerType):
		return map[string]any{"type": "string"}, true
	}
	return nil, false
}

// freeForm is the schema of any JSON value, null included. In JSON Schema 2020-12 that is `{}`, but
// kin-openapi (v0.152.0, which validates every response in our tests) checks schemas with $refs with its
// OpenAPI 3.0 rules and there refuses null for `{}`; `anyOf: [{}, {type: null}]` draws a Redocly warning and
// boolean schemas are refused by Redocly. So every JSON type is listed (with the open additionalProperties
// and items that Spectral asks for): generated clients type this as
// `{[key: string]: unknown} | unknown[] | string | number | boolean | null`.
func freeForm() map[string]any {
	return map[string]any{
		"type":                 []any{"object", "array", "string", "number", "boolean", "null"},
		"additionalProperties": true,
		"items":                map[string]any{},
	}
}

// admitsNull reports whether a schema built here already allows null.
func admitsNull(s map[string]any) bool {
	if len(s) == 0 {
		return true
	}
	switch typ := s["type"].(type) {
	case string:
		return typ == "null"
	case []any:
		return slices.Contains(typ, any("null"))
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		alts, _ := s[k].([]any)
		for _, a := range alts {
			if m, ok := a.(map[string]any); ok && admitsNull(m) {
				return true
			}
		}
	}
	return false
}

// named reports whether t gets its own component schema.
func named(t reflect.Type) bool { return t.Kind() == reflect.Struct && t.Name() != "" }

// collect records every named struct type reachable from t.
func (g *schemaGen) collect(t reflect.Type, request bool) {
	if _, ok := special(t); ok {
		return
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		g.collect(t.Elem(), request)
	case reflect.Struct:
		if named(t) {
			k := schemaKey{t, request}
			if g.seen[k] {
				return
			}
			g.seen[k] = true
			g.keys = append(g.keys, k)
		}
		for _, f := range jsonFields(t) {
			g.collect(f.typ, request)
		}
	}
}

// assignNames names the component schemas after their Go types. Types of different packages that share a
// name get their package name as a prefix; a type used both as a request and as a response keeps its name
// for the response and gets "Input" appended for the request.
func (g *schemaGen) assignNames() {
	groups := map[string][]schemaKey{}
	for _, k := range g.keys {
		base := typeName(k.t)
		groups[base] = append(groups[base], k)
	}
	taken := map[string]bool{errorSchemaName: true}
	for name := range api.Enums { // the enums' component schemas
		taken[name] = true
	}
	bases := make([]string, 0, len(groups))
	for b := range groups {
		bases = append(bases, b)
	}
	sort.Strings(bases)
	var pending []schemaKey
	for _, base := range bases {
		ks := groups[base]
		types := map[reflect.Type]bool{}
		for _, k := range ks {
			types[k.t] = true
		}
		for _, k := range ks {
			name := base
			if len(types) > 1 || taken[base] {
				name = upperFirst(pkgName(k.t)) + base
			}
			if k.request && g.seen[schemaKey{k.t, false}] {
				name += "Input"
			}
			g.names[k] = name
			pending = append(pending, k)
		}
	}
	// Whatever still collides gets a number, in a stable order.
	sort.SliceStable(pending, func(i, j int) bool {
		a, b := pending[i], pending[j]
		if a.t.PkgPath() != b.t.PkgPath() {
			return a.t.PkgPath() < b.t.PkgPath()
		}
		if a.t.Name() != b.t.Name() {
			return a.t.Name() < b.t.Name()
		}
		return !a.request && b.request
	})
	for _, k := range pending {
		name := g.names[k]
		for n := 2; taken[name]; n++ {
			name = fmt.Sprintf("%s%d", g.names[k], n)
		}
		taken[name] = true
		g.names[k] = name
	}
	for _, k := range g.keys {
		g.schemas[g.names[k]] = g.object(k.t, k.request)
	}
}

// typeName is the type's name reduced to the characters allowed in a component name (generic types carry
// their type arguments in brackets).
func typeName(t reflect.Type) string {
	var b strings.Builder
	for _, r := range t.Name() {
		if r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_') {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func pkgName(t reflect.Type) string {
	p := t.PkgPath()
	return p[strings.LastIndex(p, "/")+1:]
}

// namedEnums are the closed sets whose values the domain holds rather than a struct tag: each of these
// named string types is a component schema of its own (named after it) whose enum is those values, so
// clients get one type for it (and the TypeScript client an array of its values, src/enums.ts).
var namedEnums = map[reflect.Type]func() []string{
	reflect.TypeFor[api.EventType](): appliance.EventTypeNames,
}

// enumRef is the $ref of a named enum's component schema, which it adds on first use.
func (g *schemaGen) enumRef(t reflect.Type, values []string) map[string]any {
	name := typeName(t)
	if _, ok := g.schemas[name]; !ok {
		enum := make([]any, len(values))
		for i, v := range values {
			enum[i] = v
		}
		g.schemas[name] = map[string]any{"type": "string", "enum": enum}
	}
	return map[string]any{"$ref": "#/components/schemas/" + name}
}

// ref returns the schema of t, a $ref for named struct types.
func (g *schemaGen) ref(t reflect.Type, request bool) map[string]any {
	if s, ok := special(t); ok {
		return s
	}
	switch t.Kind() {
	case reflect.Pointer:
		// A pointer is null only where a field says so (see object): list items and request fields never.
		return g.ref(t.Elem(), request)
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32:
		s := map[string]any{"type": "integer"}
		if t.Kind() == reflect.Int32 {
			s["format"] = "int32"
		}
		return s
	case reflect.Int64:
		return map[string]any{"type": "integer", "format": "int64"}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return map[string]any{"type": "integer", "minimum": 0}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.String:
		if values, ok := namedEnums[t]; ok {
			return g.enumRef(t, values())
		}
		return map[string]any{"type": "string"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && t.Kind() == reflect.Slice {
			return map[string]any{"type": "string", "contentEncoding": "base64"}
		}
		return map[string]any{"type": "array", "items": g.ref(t.Elem(), request)}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.ref(t.Elem(), request)}
	case reflect.Struct:
		if named(t) {
			if name, ok := g.names[schemaKey{t, request}]; ok {
				return map[string]any{"$ref": "#/components/schemas/" + name}
			}
		}
		return g.object(t, request)
	}
	return map[string]any{} // chan, func: never marshaled by our handlers
}

// object is the schema of a struct's JSON object.
func (g *schemaGen) object(t reflect.Type, request bool) map[string]any {
	props := map[string]any{}
	required := []any{}
	for _, f := range jsonFields(t) {
		var s map[string]any
		if f.asString {
			s = stringEncoded(f.typ)
		} else {
			s = g.ref(f.typ, request)
		}
		if len(f.enum) > 0 {
			// A named set (api.Enums) is one component schema the fields refer to.
			var e map[string]any
			if f.enumName != "" {
				g.schemas[f.enumName] = map[string]any{"type": "string", "enum": f.enum}
				e = map[string]any{"$ref": "#/components/schemas/" + f.enumName}
			}
			if items, ok := s["items"].(map[string]any); ok && s["type"] == "array" {
				if e == nil {
					e = maps.Clone(items)
					e["enum"] = f.enum
				}
				s = maps.Clone(s)
				s["items"] = e
			} else if s["type"] == "string" {
				if e == nil {
					e = maps.Clone(s)
					e["enum"] = f.enum
				}
				s = e
			} else {
				panic(fmt.Sprintf("%s.%s: enum on a field that is not a string or a list of strings", t, f.name))
			}
		}
		if len(f.bounds) > 0 {
			s = maps.Clone(s)
			maps.Copy(s, f.bounds)
		}
		// In a response, a pointer field is null when it has no value: timestamps (expires_at, revoked_at …)
		// and the fields tagged api:"nullable"; every other pointer always points at something.
		if !request && f.typ.Kind() == reflect.Pointer && (f.nullable || f.typ.Elem() == reflect.TypeOf(time.Time{})) {
			s = nullable(s)
		}
		if f.doc != "" {
			s = withDescription(s, f.doc)
		}
		props[f.name] = s
		if request && f.required || !request && !f.omitEmpty {
			required = append(required, f.name)
		}
	}
	out := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		out["required"] = required
	}
	// Rules across fields that JSON Schema can say (oneOf, …) come from the type itself.
	if x, ok := reflect.New(t).Interface().(interface{ OpenAPIRules() map[string]any }); ok {
		maps.Copy(out, x.OpenAPIRules())
	}
	if request {
		out["additionalProperties"] = false
	}
	return out
}

// stringEncoded is the schema of a `json:",string"` field: a JSON string holding the value. A 64-bit
// integer is sent that way when it can exceed 2^53 (JavaScript's numbers would round it): its pattern
// and format say which integer the string holds.
func stringEncoded(t reflect.Type) map[string]any {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return map[string]any{"type": "string", "format": "int64", "pattern": `^-?(0|[1-9][0-9]{0,18})$`, "example": "8071840665353803258"}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return map[string]any{"type": "string", "format": "uint64", "pattern": `^(0|[1-9][0-9]{0,19})$`, "example": "8071840665353803258"}
	}
	return map[string]any{"type": "string"}
}

// withDescription returns a copy of s with a description (next to a $ref too, as OpenAPI 3.1 allows).
func withDescription(s map[string]any, doc string) map[string]any {
	c := make(map[string]any, len(s)+1)
	for k, v := range s {
		c[k] = v
	}
	c["description"] = doc
	return c
}

// nullable lets s also be null, in the OpenAPI 3.1 way (a type list, or oneOf with null for a $ref).
func nullable(s map[string]any) map[string]any {
	if admitsNull(s) {
		return s
	}
	c := make(map[string]any, len(s))
	for k, v := range s {
		c[k] = v
	}
	switch typ := s["type"].(type) {
	case string:
		c["type"] = []any{typ, "null"}
		return c
	case []any:
		c["type"] = append(slices.Clone(typ), "null")
		return c
	}
	return map[string]any{"oneOf": []any{s, map[string]any{"type": "null"}}}
}

// jsonField is one member of a struct's JSON object, as encoding/json marshals it.
type jsonField struct {
	name      string
	typ       reflect.Type
	tagged    bool
	depth     int
	omitEmpty bool // may be absent from a response
	asString  bool
	required  bool           // `api:"required"`
	nullable  bool           // `api:"nullable"`: a response pointer field that may be null
	enum      []any          // `enum:"Name"` (api.Enums) or `enum:"a,b,c"`: the closed set of a string (or of a string list's items)
	enumName  string         // the api.Enums set of enum, "" for a list in the tag
	bounds    map[string]any // `schema:"minLength=1,maxLength=63,format=date-time,const=true"`: JSON Schema keywords (values hold no commas)
	doc       string
}

// jsonFields lists the JSON members of struct type t with encoding/json's rules: `json:"-"` and unexported
// fields skipped, embedded structs without a name promoted (the shallowest, then the tagged field wins a name
// conflict; otherwise the conflicting fields are all dropped). Fields promoted through an embedded pointer are
// absent when it is nil, so they count as omitempty.
func jsonFields(t reflect.Type) []jsonField {
	var all []jsonField
	var walk func(t reflect.Type, depth int, viaPtr bool, visiting map[reflect.Type]bool)
	walk = func(t reflect.Type, depth int, viaPtr bool, visiting map[reflect.Type]bool) {
		visiting[t] = true
		defer delete(visiting, t)
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			ft := f.Type
			if f.Anonymous {
				et, ptr := ft, false
				if et.Kind() == reflect.Pointer {
					et, ptr = et.Elem(), true
				}
				if !f.IsExported() && et.Kind() != reflect.Struct {
					continue
				}
				if name == "" && et.Kind() == reflect.Struct {
					if _, isSpecial := special(et); !isSpecial {
						if !visiting[et] {
							walk(et, depth+1, viaPtr || ptr, visiting)
						}
						continue
					}
				}
			} else if !f.IsExported() {
				continue
			}
			jf := jsonField{name: name, typ: ft, tagged: name != "", depth: depth, omitEmpty: viaPtr,
				required: f.Tag.Get("api") == "required", nullable: f.Tag.Get("api") == "nullable", doc: f.Tag.Get("doc")}
			if b := f.Tag.Get("schema"); b != "" {
				jf.bounds = map[string]any{}
				for _, kv := range strings.Split(b, ",") {
					k, v, _ := strings.Cut(kv, "=")
					if n, err := strconv.ParseInt(v, 10, 64); err == nil {
						jf.bounds[k] = n
					} else if bv, err := strconv.ParseBool(v); err == nil {
						jf.bounds[k] = bv
					} else {
						jf.bounds[k] = v
					}
				}
			}
			if e := f.Tag.Get("enum"); e != "" {
				vals, named := api.Enums[e]
				if named {
					jf.enumName = e
				} else if unicode.IsUpper(rune(e[0])) {
					panic(fmt.Sprintf("%s.%s: enum %q is not in api.Enums", t, f.Name, e))
				} else {
					vals = strings.Split(e, ",")
				}
				for _, v := range vals {
					jf.enum = append(jf.enum, v)
				}
			}
			if jf.name == "" {
				jf.name = f.Name
			}
			for _, o := range strings.Split(opts, ",") {
				switch o {
				case "omitempty", "omitzero":
					jf.omitEmpty = true
				case "string":
					switch ft.Kind() {
					case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
						reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
						reflect.Float32, reflect.Float64, reflect.String:
						jf.asString = true
					}
				}
			}
			all = append(all, jf)
		}
	}
	walk(t, 0, false, map[reflect.Type]bool{})

	byName := map[string][]int{}
	for i, f := range all {
		byName[f.name] = append(byName[f.name], i)
	}
	var out []jsonField
	for i, f := range all {
		idx := byName[f.name]
		if idx[0] != i && len(idx) > 1 {
			// decided at the first occurrence
			continue
		}
		if len(idx) == 1 {
			out = append(out, f)
			continue
		}
		if w, ok := dominant(all, idx); ok {
			out = append(out, w)
		}
	}
	return out
}

// dominant picks the field that wins a name conflict, as encoding/json does.
func dominant(all []jsonField, idx []int) (jsonField, bool) {
	minDepth := all[idx[0]].depth
	for _, i := range idx {
		minDepth = min(minDepth, all[i].depth)
	}
	var top, tagged []jsonField
	for _, i := range idx {
		if all[i].depth == minDepth {
			top = append(top, all[i])
			if all[i].tagged {
				tagged = append(tagged, all[i])
			}
		}
	}
	switch {
	case len(top) == 1:
		return top[0], true
	case len(tagged) == 1:
		return tagged[0], true
	}
	return jsonField{}, false
}

// addExamples puts an example on an operation's JSON request body and JSON success answers.
func addExamples(op map[string]any, schemas map[string]any) {
	media := func(content any) {
		c, _ := content.(map[string]any)
		m, _ := c["application/json"].(map[string]any)
		if s, ok := m["schema"].(map[string]any); ok && m["example"] == nil {
			m["example"] = exampleOf(s, schemas, 0)
		}
	}
	if rb, ok := op["requestBody"].(map[string]any); ok {
		media(rb["content"])
	}
	for code, r := range op["responses"].(map[string]any) {
		if rm, ok := r.(map[string]any); ok && strings.HasPrefix(code, "2") {
			media(rm["content"])
		}
	}
}

// exampleOf builds a value valid against schema s: its own example or const, the first enum value or
// oneOf branch, bounds met, every property of an answer and the required ones of a request.
func exampleOf(s map[string]any, schemas map[string]any, depth int) any {
	if ref, ok := s["$ref"].(string); ok {
		named, _ := schemas[strings.TrimPrefix(ref, "#/components/schemas/")].(map[string]any)
		if named == nil || depth > 12 { // depth counts references: a guard against cycles
			return map[string]any{}
		}
		return exampleOf(named, schemas, depth+1)
	}
	if v, ok := s["example"]; ok {
		return v
	}
	if v, ok := s["const"]; ok {
		return v
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	if one, ok := s["oneOf"].([]any); ok && s["properties"] == nil {
		for _, o := range one {
			if om, ok := o.(map[string]any); ok && om["type"] != "null" {
				return exampleOf(om, schemas, depth)
			}
		}
		return nil
	}
	typ := s["type"]
	if list, ok := typ.([]any); ok {
		typ = nil
		for _, t := range list {
			if t != "null" {
				typ = t
				break
			}
		}
		if typ == "object" && len(list) > 2 { // free-form
			return map[string]any{}
		}
	}
	switch typ {
	case "string":
		if s["format"] == "date-time" {
			return "2026-01-31T12:00:00Z"
		}
		if s["format"] == "binary" {
			return ""
		}
		v := "example"
		if min, ok := s["minLength"].(int64); ok && int64(len(v)) < min {
			v = strings.Repeat("x", int(min))
		}
		if max, ok := s["maxLength"].(int64); ok && int64(len(v)) > max {
			v = v[:max]
		}
		return v
	case "integer":
		if min, ok := s["minimum"].(int64); ok {
			return min
		}
		if s["minimum"] != nil {
			return s["minimum"]
		}
		return 1
	case "number":
		return 1.5
	case "boolean":
		return true
	case "array":
		items, _ := s["items"].(map[string]any)
		if items == nil {
			return []any{}
		}
		return []any{exampleOf(items, schemas, depth)}
	case "object", nil:
		props, _ := s["properties"].(map[string]any)
		if props == nil {
			return map[string]any{}
		}
		need := map[string]bool{}
		for _, r := range asList(s["required"]) {
			need[r.(string)] = true
		}
		if one, ok := s["oneOf"].([]any); ok && len(one) > 0 { // a request's exactly-one-of: the first
			if om, ok := one[0].(map[string]any); ok {
				for _, r := range asList(om["required"]) {
					need[r.(string)] = true
				}
			}
		}
		request := s["additionalProperties"] == false
		out := map[string]any{}
		for name, ps := range props {
			if request && !need[name] {
				continue
			}
			if pm, ok := ps.(map[string]any); ok {
				out[name] = exampleOf(pm, schemas, depth)
			}
		}
		return out
	}
	return nil
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}
