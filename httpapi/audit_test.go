package httpapi

import (
	"cmp"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/theappliance/appliance/store"
)

// TestEveryMutatingRouteIsAudited walks the route table: a successful call of each route that is not a
// GET must write an audit event naming its caller. A new mutating route fails here until newFixtures can
// make a successful call of it.
func TestEveryMutatingRouteIsAudited(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{limits: RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}, instances: true,
		billing: stripeProvider(t)})
	f := newFixtures(b)
	for _, rt := range deletesLast(b.api.Routes()) {
		if rt.Method == http.MethodGet || rt.Method == http.MethodHead {
			continue
		}
		// The jobs earlier calls started (a minor upgrade restarts the server, a backup runs) end first:
		// some routes ask the server, which must not be restarting.
		waitProjectJobs(t, b, f.prjA.ID)
		name := rt.Method + " " + rt.Path
		t.Run(name, func(t *testing.T) {
			cred, path := f.fullRights(rt), f.path(t, rt)
			last := lastAuditID(b)
			r := b.call(t, rt.Method, path, f.header(rt, cred), f.body(rt))
			if want, ok := unreachable[name]; ok {
				if r.status != want {
					t.Fatalf("%d, want %d\n%s", r.status, want, r.body)
				}
				return
			}
			if r.status != rt.Status {
				t.Fatalf("the fixture call must succeed to show its audit event: %d, want %d\n%s", r.status, rt.Status, r.body)
			}
			checkAudited(t, b, rt.Method+" "+path, cred, last, unchanged[name])
		})
	}
}

// unchanged are the mutating routes whose fixture call changes nothing, so writes no audit event (why).
var unchanged = map[string]string{
	"POST /v1/organizations/{orgID}/referral-code": "the fixtures made the code: a second POST returns it",
}

// deletesLast orders routes so that deletes come last, so that what they remove is still there for the
// other routes; a resource's children (longer paths) before the resource itself.
func deletesLast(routes []Route) []Route {
	routes = slices.Clone(routes)
	slices.SortStableFunc(routes, func(x, y Route) int {
		if c := cmp.Compare(boolInt(x.Method == http.MethodDelete), boolInt(y.Method == http.MethodDelete)); c != 0 {
			return c
		}
		return cmp.Compare(len(y.Path), len(x.Path)) * boolInt(x.Method == http.MethodDelete)
	})
	return routes
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// waitProjectJobs waits until every job of a project due now has ended (scheduled ones are left).
func waitProjectJobs(t *testing.T, b *bundle, projectID string) {
	t.Helper()
	var jobs []*store.Job
	if err := b.db.View(func(tx *store.Tx) (err error) {
		jobs, err = store.Jobs.Lookup(tx, store.JobsByProject, projectID, store.Query{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if !j.RunAfter.After(time.Now()) {
			b.env.WaitJob(t, j.ID)
		}
	}
}
