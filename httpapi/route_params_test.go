package httpapi

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
)

// TestCallParamsMustBeInThePath: a route whose Call adapter reads a path parameter its path lacks (a
// misspelt name would read "" on every request) stops the server from being built; the table's own
// routes all pass.
func TestCallParamsMustBeInThePath(t *testing.T) {
	get := func(context.Context, *appliance.Principal, string) (*api.DeletedResponse, error) {
		return nil, nil
	}
	good := Route{Method: "GET", Path: "/v1/projects/{projectID}", Do: CallP("projectID", get)}
	good.checkParams()
	bad := Route{Method: "GET", Path: "/v1/projects/{projectID}", Do: CallP("projectId", get)}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), `"projectId"`) {
			t.Fatalf("a misspelt path parameter: recovered %v, want a panic naming it", r)
		}
	}()
	bad.checkParams()
}

func TestTableParams(t *testing.T) {
	// A service that was never built: the rows name the areas' methods (s.svc.KV().Get), which reads the
	// service's area fields (nil here, and a method value of a nil area is only called by a request).
	s := &Server{svc: &appliance.Service{}}
	for _, rt := range s.table() {
		rt.checkParams()
	}
}

// TestRequestBodiesOmitAbsentFields: a request body the Go wire types marshal (the CLI's) never sends
// null for a field it leaves unset, since the server refuses null (route.go): every optional pointer,
// slice and map field of a body type is omitempty.
func TestRequestBodiesOmitAbsentFields(t *testing.T) {
	s := &Server{svc: &appliance.Service{}}
	seen := map[reflect.Type]bool{}
	for _, rt := range s.table() {
		if rt.Do.Body == nil || seen[rt.Do.Body] {
			continue
		}
		seen[rt.Do.Body] = true
		b, err := json.Marshal(reflect.New(rt.Do.Body).Interface())
		if err != nil {
			t.Fatalf("%s %s: %v", rt.Method, rt.Path, err)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(b, &fields); err != nil {
			t.Fatalf("%s %s: %v", rt.Method, rt.Path, err)
		}
		for name, v := range fields {
			if string(v) == "null" {
				t.Errorf("%s %s: %s marshals its unset field %s as null (add omitempty)", rt.Method, rt.Path, rt.Do.Body, name)
			}
		}
	}
}
