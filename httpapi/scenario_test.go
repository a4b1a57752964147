package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scenario is one row of an API test table: a call (method, URL, credential, body) and what it must
// answer (status and JSON expectations). Strings in path, cred, header values, body and want values may
// name variables as $name; a row can save values of its response into variables for the rows after it.
type scenario struct {
	name   string
	method string
	path   string
	cred   string      // sent as Authorization: Bearer
	header http.Header // further request headers (a name with no values: the header is not sent)
	body   any         // a string is sent raw; nil sends no body
	status int
	want   map[string]any             // dotted JSON path ("api_keys.0.id") → value or matcher
	save   map[string]string          // variable → dotted JSON path of the response
	hide   []string                   // values that must not appear anywhere in the response body
	before func(t *testing.T, v vars) // runs first (moves the clock, stores records)
	check  func(t *testing.T, v vars, r *response)
	// noAudit says why a successful mutating call writes no audit event (it changed nothing). Empty: the
	// call must write at least one event whose actor is the caller.
	noAudit string
}

// vars are the values a scenario table refers to as $name.
type vars map[string]string

func (v vars) expand(t testing.TB, s string) string {
	t.Helper()
	return os.Expand(s, func(name string) string {
		val, ok := v[name]
		if !ok {
			t.Fatalf("scenario refers to $%s, which is not set", name)
		}
		return val
	})
}

func (v vars) expandAny(t testing.TB, x any) any {
	switch x := x.(type) {
	case string:
		return v.expand(t, x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = v.expandAny(t, e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = v.expandAny(t, e)
		}
		return out
	case []string:
		out := make([]string, len(x))
		for i, e := range x {
			out[i] = v.expand(t, e)
		}
		return out
	}
	return x
}

// run plays a table in order against one bundle: rows build on what earlier rows created.
func run(t *testing.T, b *bundle, v vars, table []scenario) {
	t.Helper()
	for _, sc := range table {
		ok := t.Run(sc.method+" "+sc.name, func(t *testing.T) { play(t, b, v, sc) })
		if !ok && len(sc.save) > 0 {
			t.Fatalf("row %q saves variables the rows after it need: stopping", sc.name)
		}
	}
}

func play(t *testing.T, b *bundle, v vars, sc scenario) {
	t.Helper()
	if sc.before != nil {
		sc.before(t, v)
	}
	path := v.expand(t, sc.path)
	hdr := http.Header{}
	for k, vs := range sc.header {
		if len(vs) == 0 { // an empty entry removes the header (Content-Type, which call sets for a body)
			hdr[http.CanonicalHeaderKey(k)] = nil
		}
		for _, s := range vs {
			hdr.Add(k, v.expand(t, s))
		}
	}
	cred := v.expand(t, sc.cred)
	if cred != "" {
		hdr.Set("Authorization", "Bearer "+cred)
	}
	var body any
	if sc.body != nil {
		body = v.expandAny(t, sc.body)
	}
	last := lastAuditID(b)
	r := b.call(t, sc.method, path, hdr, body)
	if r.status != sc.status {
		t.Fatalf("%s %s: status %d, want %d\n%s", sc.method, path, r.status, sc.status, r.body)
	}
	checkErrorShape(t, r)
	for name, p := range sc.save {
		got, found := lookup(r.json, p)
		s, isStr := got.(string)
		if !found || !isStr {
			t.Fatalf("%s %s: cannot save %s: %s is %v", sc.method, path, name, p, got)
		}
		v[name] = s
	}
	for p, want := range sc.want {
		got, found := lookup(r.json, p)
		if msg := expect(t, v, want, got, found); msg != "" {
			t.Errorf("%s %s: %s: %s\nbody: %s", sc.method, path, p, msg, r.body)
		}
	}
	for _, h := range sc.hide {
		if s := v.expand(t, h); s != "" && strings.Contains(string(r.body), s) {
			t.Errorf("%s %s: the response shows %s, which it must not", sc.method, path, h)
		}
	}
	if sc.check != nil {
		sc.check(t, v, r)
	}
	if sc.method != http.MethodGet && r.status < 300 {
		checkAudited(t, b, sc.method+" "+path, cred, last, sc.noAudit)
	}
}

// checkErrorShape holds every error answer to the contract: a JSON object with a non-empty "error".
func checkErrorShape(t testing.TB, r *response) {
	t.Helper()
	if r.status < 400 {
		return
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("error answer %d has Content-Type %q, want application/json", r.status, ct)
	}
	if msg, _ := r.json["error"].(string); msg == "" {
		t.Errorf("error answer %d has no error message: %s", r.status, r.body)
	}
}

func lastAuditID(b *bundle) string {
	evs := b.auditEvents()
	if len(evs) == 0 {
		return ""
	}
	return evs[len(evs)-1].ID
}

// checkAudited asserts that the call just made wrote an audit event (IDs after last) whose actor is the
// caller, or, when noAudit gives a reason, that it wrote none.
func checkAudited(t testing.TB, b *bundle, call, cred, last, noAudit string) {
	t.Helper()
	var fresh []string
	var match bool
	kind, id := b.actorOf(cred)
	for _, ev := range b.auditEvents() {
		if ev.ID <= last {
			continue
		}
		fresh = append(fresh, ev.Action+" by "+ev.ActorKind+" "+ev.ActorID)
		if ev.ActorKind == "" || ev.CreatedAt.IsZero() {
			t.Errorf("%s: audit event %s lacks actor_kind or created_at", call, ev.ID)
		}
		// Without a credential the actor is anonymous, or the user who just signed in.
		if (cred == "" && ev.ActorKind != "api_key") || (ev.ActorKind == kind && ev.ActorID == id) {
			match = true
		}
	}
	switch {
	case noAudit != "" && len(fresh) > 0:
		t.Errorf("%s: expected no audit event (%s), got %v", call, noAudit, fresh)
	case noAudit == "" && len(fresh) == 0:
		t.Errorf("%s: a successful mutating call wrote no audit event", call)
	case noAudit == "" && !match:
		t.Errorf("%s: audit events %v do not name the caller (%s %s)", call, fresh, kind, id)
	}
}

// lookup follows a dotted path ("a.0.b") through decoded JSON.
func lookup(doc any, path string) (any, bool) {
	cur := doc
	if m, ok := cur.(map[string]any); ok && m == nil {
		return nil, false
	}
	for _, part := range strings.Split(path, ".") {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[part]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// matcher checks a JSON value; it returns "" when it matches, else what is wrong.
type matcher func(v vars, got any, found bool) string

func expect(t testing.TB, v vars, want, got any, found bool) string {
	if m, ok := want.(matcher); ok {
		return m(v, got, found)
	}
	if !found {
		return fmt.Sprintf("absent, want %v", want)
	}
	switch w := want.(type) {
	case int:
		want = float64(w)
	case int64:
		want = float64(w)
	case string:
		want = v.expand(t, w)
	}
	if !reflect.DeepEqual(got, want) {
		return fmt.Sprintf("got %#v, want %#v", got, want)
	}
	return ""
}

// absent: the field is not in the response at all.
var absent matcher = func(_ vars, got any, found bool) string {
	if found {
		return fmt.Sprintf("present (%v), want absent", got)
	}
	return ""
}

// nonEmpty: a non-empty string.
var nonEmpty matcher = func(_ vars, got any, found bool) string {
	if s, ok := got.(string); !ok || s == "" {
		return fmt.Sprintf("got %#v, want a non-empty string", got)
	}
	return ""
}

// notNull: present and not null.
var notNull matcher = func(_ vars, got any, found bool) string {
	if !found || got == nil {
		return "null or absent, want a value"
	}
	return ""
}

// arrayLen: a JSON array of n elements (n < 0: any length, but an array, never null).
func arrayLen(n int) matcher {
	return func(_ vars, got any, found bool) string {
		a, ok := got.([]any)
		if !ok {
			return fmt.Sprintf("got %#v, want an array", got)
		}
		if n >= 0 && len(a) != n {
			return fmt.Sprintf("array of %d elements, want %d", len(a), n)
		}
		return ""
	}
}

var isArray = arrayLen(-1)

// hasPrefix: a string starting with p ($vars expanded).
func hasPrefix(p string) matcher {
	return func(v vars, got any, _ bool) string {
		s, _ := got.(string)
		want := os.Expand(p, func(k string) string { return v[k] })
		if !strings.HasPrefix(s, want) {
			return fmt.Sprintf("got %#v, want a string starting with %q", got, want)
		}
		return ""
	}
}

// prefixOf: a non-empty string that is a prefix of the variable name.
func prefixOf(name string) matcher {
	return func(v vars, got any, _ bool) string {
		s, _ := got.(string)
		if s == "" || !strings.HasPrefix(v[name], s) {
			return fmt.Sprintf("got %#v, want a prefix of $%s", got, name)
		}
		return ""
	}
}

// contains: an array holding x ($vars expanded in strings).
func contains(x any) matcher {
	return func(v vars, got any, _ bool) string {
		a, _ := got.([]any)
		if s, ok := x.(string); ok {
			x = os.Expand(s, func(k string) string { return v[k] })
		}
		if !slices.Contains(a, x) {
			return fmt.Sprintf("%v does not contain %v", got, x)
		}
		return ""
	}
}

// notContains: an array without x.
func notContains(x any) matcher {
	return func(v vars, got any, found bool) string {
		if msg := contains(x)(v, got, found); msg == "" {
			return fmt.Sprintf("%v contains %v", got, x)
		}
		if _, ok := got.([]any); !ok {
			return fmt.Sprintf("got %#v, want an array", got)
		}
		return ""
	}
}

// says: a string containing sub ($vars expanded).
func says(sub string) matcher {
	return func(v vars, got any, _ bool) string {
		s, _ := got.(string)
		want := os.Expand(sub, func(k string) string { return v[k] })
		if !strings.Contains(s, want) {
			return fmt.Sprintf("got %#v, want a string containing %q", got, want)
		}
		return ""
	}
}

// timeIn: an RFC 3339 timestamp d from now (within a minute), in UTC.
func timeIn(d time.Duration) matcher {
	return func(_ vars, got any, _ bool) string {
		s, _ := got.(string)
		ts, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return fmt.Sprintf("got %#v, want an RFC 3339 timestamp", got)
		}
		if !strings.HasSuffix(s, "Z") {
			return fmt.Sprintf("%s is not in UTC", s)
		}
		if want := time.Now().Add(d); ts.Sub(want).Abs() > time.Minute {
			return fmt.Sprintf("%s is not about %v from now (%s)", s, d, want.UTC().Format(time.RFC3339))
		}
		return ""
	}
}

// jsonOf re-encodes a decoded value for messages.
func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
