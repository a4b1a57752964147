package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
)

// Auth says who may call a route.
type Auth int

const (
	Authenticated Auth = iota // an API key or a session
	Public                    // no credentials
	SessionOnly               // a signed-in identity-provider session, never an API key
	// ServiceToken is a narrow service token (svc_…, minted by platform operators) and nothing else: API
	// keys and sessions are refused with 403, and a service token is refused on every other route.
	ServiceToken
)

// Param declares a query parameter; the same declaration validates requests and documents the route.
type Param struct {
	Name     string
	Type     string // "integer", "string" or "boolean"
	Min, Max int64  // bounds of an integer (both 0: unbounded)
	Default  any
	Required bool
	Pattern  string // a string's regular expression (documentation; the handler checks it)
	Doc      string
	// Repeated: a string parameter that may be given several times (name=a&name=b), at most Max times
	// (0: unbounded); Strs reads it.
	Repeated bool
}

// Route is one row of the route table: everything the server, the scope matrix and the OpenAPI
// document need to know about an endpoint.
type Route struct {
	Method, Path string
	Summary      string
	Tag          string
	Auth         Auth
	Scope        api.Scope // "" means any authenticated caller
	// Also are further scopes the route needs: an answer that carries a secret (a token shown once) needs
	// credentials:read beside the scope of the action. The router checks them all; the OpenAPI document and
	// the scope table list them.
	Also     []api.Scope
	OrgLevel bool // acts on a whole organization: refused for project-scoped keys
	// Unaffiliated marks the few routes a session of no organization may call (a person who signed in only to
	// answer an invitation: authz.Principal.Unaffiliated); every other route refuses it.
	Unaffiliated bool
	Bucket       string // rate-limit bucket: "" (default) or "cli_login"
	Status       int    // success status
	Query        []Param
	Header       []Param // request headers the handler reads (documentation; the handler checks them)
	Do           Op
	ContentType  string // response media type when not JSON (documentation only)
	// Stream marks routes whose bodies may take long to send or receive (dump uploads and downloads,
	// event streams): they have no read or write deadline.
	Stream bool
	// RawBody is the media type of a body the handler reads itself (documentation only; "" for none; */*
	// when any Content-Type is accepted and the body is read as bytes).
	RawBody string
	// Errors are the error statuses the operation answers beyond the ones every route of its kind does
	// (400 for a body or query, 401/403 when authenticated, 404 for path parameters, 413 for a body, 429,
	// 500): e.g. 409 for a project in the wrong state, 503 when its server does not answer.
	Errors []int
	// OnNode marks the routes that run where the project's instances live (its server, its KV store, its
	// files): on a cluster, another node forwards them to that node (Options.Forward). Set by onNode.
	OnNode bool
	// NodeOf, on an OnNode route bound to no project, is the path parameter naming the record whose
	// project's node it runs on (a signed URL's upload or export: its file is on that node). Set by onNode.
	NodeOf string
	// Operator marks the routes of platform operators (a session of a user with is_admin): every other
	// caller, an organization's owner included, is refused with 403.
	Operator bool
}

// scopes are every scope the route needs: Scope, then Also.
func (rt Route) scopes() []api.Scope {
	if rt.Scope == "" {
		return rt.Also
	}
	return append([]api.Scope{rt.Scope}, rt.Also...)
}

// Op is a typed handler: its request and response types feed the OpenAPI document.
type Op struct {
	Body reflect.Type // nil when the route takes no body
	Resp reflect.Type // nil when the handler writes the response itself
	fn   func(r *Request) (any, error)
	// params are the path parameters a Call adapter reads: each must be in its route's path (checkParams).
	params []string
}

// withParams records the path parameters op reads.
func (op Op) withParams(ps ...string) Op {
	op.params = ps
	return op
}

// checkParams panics when the route's Op reads a path parameter its path does not have (a misspelt name
// would read as "" on every request): the table is wrong, and the server must not start with it.
func (rt *Route) checkParams() {
	for _, p := range rt.Do.params {
		if !strings.Contains(rt.Path, "{"+p+"}") {
			panic(fmt.Sprintf("route %s %s: its handler reads the path parameter %q, which the path does not have", rt.Method, rt.Path, p))
		}
	}
}

// Request is what a handler sees: the HTTP request, the caller and the parsed query.
type Request struct {
	*http.Request
	W         http.ResponseWriter
	Principal *appliance.Principal
	query     map[string]any
	body      any
	route     *Route // the matched route and its path parameters: stillAllowed authorizes again by them
	params    [][]string
}

// Int returns a declared integer query parameter (its default when absent).
func (r *Request) Int(name string) int { v, _ := r.query[name].(int64); return int(v) }

// Str returns a declared string query parameter.
func (r *Request) Str(name string) string { v, _ := r.query[name].(string); return v }

// Strs returns a declared repeated query parameter's values, in order.
func (r *Request) Strs(name string) []string { v, _ := r.query[name].([]string); return v }

// Bool returns a declared boolean query parameter.
func (r *Request) Bool(name string) bool { v, _ := r.query[name].(bool); return v }

// With builds an Op from a handler that takes a JSON body of type B.
func With[B, R any](fn func(r *Request, body *B) (*R, error)) Op {
	return Op{Body: reflect.TypeFor[B](), Resp: reflect.TypeFor[R](), fn: func(r *Request) (any, error) {
		return fn(r, r.body.(*B))
	}}
}

// Without builds an Op from a handler that takes no body.
func Without[R any](fn func(r *Request) (*R, error)) Op {
	return Op{Resp: reflect.TypeFor[R](), fn: func(r *Request) (any, error) { return fn(r) }}
}

// Raw builds an Op whose handler writes its own response (streams, documents); the result must be nil.
func Raw(fn func(r *Request) error) Op {
	return Op{fn: func(r *Request) (any, error) { return nil, fn(r) }}
}

// The Call adapters make a route row name a service method directly: the method takes the request's
// context and caller, then the named path parameters in order (P: one each), then the JSON body (B) if
// the route takes one. They are With and Without underneath, so the OpenAPI types are the method's.

type principal = *appliance.Principal

// Call builds an Op from a service method that takes no path parameter and no body.
func Call[R any](fn func(context.Context, principal) (*R, error)) Op {
	return Without(func(r *Request) (*R, error) { return fn(r.Context(), r.Principal) })
}

// CallB builds an Op from a service method that takes a body.
func CallB[B, R any](fn func(context.Context, principal, *B) (*R, error)) Op {
	return With(func(r *Request, b *B) (*R, error) { return fn(r.Context(), r.Principal, b) })
}

// CallP builds an Op from a service method that takes one path parameter.
func CallP[R any](p string, fn func(context.Context, principal, string) (*R, error)) Op {
	return Without(func(r *Request) (*R, error) { return fn(r.Context(), r.Principal, r.PathValue(p)) }).withParams(p)
}

// CallPB builds an Op from a service method that takes one path parameter and a body.
func CallPB[B, R any](p string, fn func(context.Context, principal, string, *B) (*R, error)) Op {
	return With(func(r *Request, b *B) (*R, error) { return fn(r.Context(), r.Principal, r.PathValue(p), b) }).withParams(p)
}

// CallPP builds an Op from a service method that takes two path parameters.
func CallPP[R any](p1, p2 string, fn func(context.Context, principal, string, string) (*R, error)) Op {
	return Without(func(r *Request) (*R, error) {
		return fn(r.Context(), r.Principal, r.PathValue(p1), r.PathValue(p2))
	}).withParams(p1, p2)
}

// CallPPB builds an Op from a service method that takes two path parameters and a body.
func CallPPB[B, R any](p1, p2 string, fn func(context.Context, principal, string, string, *B) (*R, error)) Op {
	return With(func(r *Request, b *B) (*R, error) {
		return fn(r.Context(), r.Principal, r.PathValue(p1), r.PathValue(p2), b)
	}).withParams(p1, p2)
}

// CallPPP builds an Op from a service method that takes three path parameters.
func CallPPP[R any](p1, p2, p3 string, fn func(context.Context, principal, string, string, string) (*R, error)) Op {
	return Without(func(r *Request) (*R, error) {
		return fn(r.Context(), r.Principal, r.PathValue(p1), r.PathValue(p2), r.PathValue(p3))
	}).withParams(p1, p2, p3)
}

// CallPPPB builds an Op from a service method that takes three path parameters and a body.
func CallPPPB[B, R any](p1, p2, p3 string, fn func(context.Context, principal, string, string, string, *B) (*R, error)) Op {
	return With(func(r *Request, b *B) (*R, error) {
		return fn(r.Context(), r.Principal, r.PathValue(p1), r.PathValue(p2), r.PathValue(p3), b)
	}).withParams(p1, p2, p3)
}

// maxBody bounds every JSON request body.
const maxBody = 1 << 20

// parseQuery validates the declared query parameters.
func (rt *Route) parseQuery(r *http.Request) (map[string]any, error) {
	out := map[string]any{}
	// A query string net/url cannot read ("limit=1;select", "%zz") is refused, not read as the defaults.
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, appliance.Invalid("the query string is malformed: use name=value pairs joined by &, with %%-escapes")
	}
	for _, p := range rt.Query {
		raw, present := q[p.Name]
		if p.Repeated {
			if p.Max > 0 && int64(len(raw)) > p.Max {
				return nil, appliance.Invalid("query parameter %s is given more than %d times", p.Name, p.Max)
			}
			out[p.Name] = raw
			continue
		}
		if len(raw) > 1 {
			return nil, appliance.Invalid("query parameter %s is given more than once", p.Name)
		}
		if !present || raw[0] == "" {
			if p.Required {
				return nil, appliance.Invalid("query parameter %s is required", p.Name)
			}
			if p.Default != nil {
				out[p.Name] = p.Default
			}
			continue
		}
		v := raw[0]
		switch p.Type {
		case "integer":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, appliance.Invalid("query parameter %s must be an integer", p.Name)
			}
			if (p.Min != 0 || p.Max != 0) && (n < p.Min || n > p.Max) {
				return nil, appliance.Invalid("query parameter %s must be between %d and %d", p.Name, p.Min, p.Max)
			}
			out[p.Name] = n
		case "boolean":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, appliance.Invalid("query parameter %s must be true or false", p.Name)
			}
			out[p.Name] = b
		default:
			out[p.Name] = v
		}
	}
	return out, nil
}

// decodeBody reads a strict JSON object into a new value of type t: unknown fields, wrong types, trailing
// data and missing required fields are refused. An empty body is an empty object.
func decodeBody(r *http.Request, t reflect.Type) (any, error) {
	ptr := reflect.New(t)
	data, err := readBody(r)
	if err != nil {
		return nil, err
	}
	if !validUTF8(data) {
		return nil, appliance.Invalid("request body is not valid UTF-8")
	}
	empty := len(bytes.TrimSpace(data)) == 0
	if err := jsonMediaType(r, empty); err != nil {
		return nil, err
	}
	if empty {
		data = []byte("{}")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil || fields == nil { // fields == nil: the body was null
		return nil, appliance.Invalid("request body must be a JSON object")
	}
	// encoding/json matches names case-insensitively; the API's field names are exact.
	known := knownFields(t)
	for name := range fields {
		if !known[name] {
			return nil, appliance.Invalid("unknown field %q", name)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(ptr.Interface()); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te):
			return nil, appliance.Invalid("field %s must be of type %s", te.Field, jsonTypeName(te.Type))
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return nil, appliance.Invalid("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
		default:
			return nil, appliance.Invalid("invalid JSON body: %v", err)
		}
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := jsonName(f)
		if f.Tag.Get("api") == "required" {
			if v, ok := fields[name]; !ok || string(v) == "null" {
				return nil, appliance.Invalid("field %s is required", name)
			}
		}
	}
	// null is no value of any field (encoding/json would read it as "absent" or as the zero value): an
	// optional field is left out, not sent as null.
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		if string(fields[name]) == "null" {
			return nil, appliance.Invalid("field %s must not be null: leave it out to keep its current or default value", name)
		}
	}
	return ptr.Interface(), nil
}

// noBody checks the body of a route that takes none: it must be empty or an empty JSON object ({}, sent
// as JSON); anything else, malformed JSON among it, is refused rather than ignored.
func noBody(r *http.Request) error {
	data, err := readBody(r)
	if err != nil {
		return err
	}
	empty := len(bytes.TrimSpace(data)) == 0
	if err := jsonMediaType(r, empty); err != nil || empty {
		return err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil || fields == nil || len(fields) > 0 {
		return appliance.Invalid("this endpoint takes no request body: send none, or {}")
	}
	return nil
}

// readBody reads a JSON request body of at most maxBody bytes.
func readBody(r *http.Request) ([]byte, error) {
	data, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &appliance.Error{Kind: appliance.KindTooLarge, Msg: fmt.Sprintf("request body exceeds %d bytes", maxBody)}
		}
		return nil, appliance.Invalid("cannot read request body")
	}
	return data, nil
}

// validUTF8 reports whether a JSON text is UTF-8 and its \u escapes name characters: encoding/json
// would replace an invalid byte or a lone surrogate (\ud800) with U+FFFD rather than refuse it.
func validUTF8(data []byte) bool {
	if !utf8.Valid(data) {
		return false
	}
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(data) || data[i] != '\\' || data[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(data[i+2:i+6]), 16, 16)
		return rune(n), err == nil
	}
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' { // a backslash stands only in a string, where it starts an escape
			continue
		}
		r, ok := hex4(i)
		if !ok {
			i++ // \" \\ \n …: skip the escaped character
			continue
		}
		i += 5
		switch {
		case utf16.IsSurrogate(r) && r < 0xdc00: // a high surrogate needs a low one right after it
			lo, ok := hex4(i + 1)
			if !ok || lo < 0xdc00 || lo > 0xdfff {
				return false
			}
			i += 6
		case utf16.IsSurrogate(r):
			return false
		}
	}
	return true
}

// jsonMediaType requires Content-Type: application/json (charset utf-8 or none) of a JSON body. Without a
// Content-Type only an empty body passes: a browser sends a body without one (a Blob) with no CORS
// preflight, like text/plain and form bodies, so none of them may reach a JSON endpoint.
func jsonMediaType(r *http.Request, empty bool) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" && empty {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		if cs, ok := params["charset"]; !ok || strings.EqualFold(cs, "utf-8") {
			return nil
		}
	}
	return &appliance.Error{Kind: appliance.KindUnsupportedMedia, Msg: "the request body must be JSON, sent with Content-Type: application/json"}
}

// knownFields returns the JSON names a body of type t may carry (those of embedded structs included).
func knownFields(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case tag == "-" || (!f.IsExported() && !f.Anonymous):
		case f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct:
			for name := range knownFields(f.Type) {
				out[name] = true
			}
		default:
			out[jsonName(f)] = true
		}
	}
	return out
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "" {
		return f.Name
	}
	return name
}

func jsonTypeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Pointer:
		return jsonTypeName(t.Elem())
	}
	return "object"
}
