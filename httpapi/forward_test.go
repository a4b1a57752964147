package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance/cluster/forward"
)

// TestForwardedHeaderRefused: a client sending the header that marks a node's forwarded request is
// refused, on a valid credential and route (a single node: no peer channel at all).
func TestForwardedHeaderRefused(t *testing.T) {
	b := setup(t)
	hdr := http.Header{"Authorization": {"Bearer " + b.adminKey}, forward.Header: {"nod_forged"}}
	r := b.call(t, http.MethodGet, "/v1/organizations/"+b.org.ID+"/api-keys", hdr, nil)
	if r.status != http.StatusForbidden || !strings.Contains(string(r.body), "a client may not send it") {
		t.Fatalf("a forged forwarded request: %d %s", r.status, r.body)
	}
	delete(hdr, forward.Header)
	if r := b.call(t, http.MethodGet, "/v1/organizations/"+b.org.ID+"/api-keys", hdr, nil); r.status != http.StatusOK {
		t.Fatalf("the same without the header: %d %s", r.status, r.body)
	}
}

// TestOnNodeRoutes: the routes that touch a project's server, KV store or files run on its node; the
// reads and writes of records, and routes bound to no project, on any node.
func TestOnNodeRoutes(t *testing.T) {
	b := setup(t)
	want := map[string]bool{
		"POST /v1/projects/{projectID}/sql":                          true,
		"GET /v1/projects/{projectID}/logs":                          true,
		"GET /v1/projects/{projectID}/logs/stream":                   true,
		"GET /v1/projects/{projectID}/connections":                   true,
		"POST /v1/projects/{projectID}/restart":                      true,
		"POST /v1/projects/{projectID}/suspend":                      true,
		"POST /v1/projects/{projectID}/kv/flush":                     true,
		"GET /v1/projects/{projectID}/tables/{schema}/{table}/csv":   true,
		"GET /v1/projects/{projectID}/observability":                 true,
		"PUT /v1/uploads/imports/{uploadID}":                         true,
		"GET /v1/downloads/exports/{exportID}":                       true,
		"GET /v1/projects/{projectID}":                               false,
		"GET /v1/projects/{projectID}/jobs":                          false,
		"GET /v1/projects/{projectID}/events":                        false,
		"GET /v1/projects/{projectID}/kv":                            false,
		"POST /v1/projects/{projectID}/saved-queries":                false,
		"POST /v1/projects/{projectID}/alerts/{alertID}/acknowledge": false,
		"POST /v1/projects":                                          false,
		"GET /v1/jobs/{jobID}":                                       false,
		"GET /v1/organizations/{orgID}/events":                       false,
	}
	seen := map[string]bool{}
	for _, rt := range b.api.Routes() {
		k := rt.Method + " " + rt.Path
		if w, ok := want[k]; ok {
			seen[k] = true
			if rt.OnNode != w {
				t.Errorf("%s: OnNode %v, want %v", k, rt.OnNode, w)
			}
		}
	}
	for k := range want {
		if !seen[k] {
			t.Errorf("no route %s", k)
		}
	}
}
