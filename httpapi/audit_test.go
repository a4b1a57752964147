package httpapi

import (
	"net/http"
	"testing"
)

// TestEveryMutatingRouteIsAudited walks the route table: a successful call of each route that is not a
// GET must write an audit event naming its caller. A new mutating route fails here until newFixtures can
// make a successful call of it.
func TestEveryMutatingRouteIsAudited(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, rt := range b.api.Routes() {
		if rt.Method == http.MethodGet || rt.Method == http.MethodHead {
			continue
		}
		t.Run(rt.Method+" "+rt.Path, func(t *testing.T) {
			f := newFixtures(b) // fresh resources: a delete must not spoil the next route's call
			cred, path := f.fullRights(rt), f.path(t, rt)
			last := lastAuditID(b)
			r := b.call(t, rt.Method, path, bearer(cred), f.body(rt))
			if r.status != rt.Status {
				t.Fatalf("the fixture call must succeed to show its audit event: %d, want %d\n%s", r.status, rt.Status, r.body)
			}
			checkAudited(t, b, rt.Method+" "+path, cred, last, "")
		})
	}
}
