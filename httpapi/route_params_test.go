package httpapi

import (
	"context"
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
