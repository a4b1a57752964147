package httpapi

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"
)

// TestSQLCancelledWhenTheClientGoesAway: an HTTP client that hangs up on a running POST .../sql ends the
// statement on the project's server (pg_stat_activity no longer shows it).
func TestSQLCancelledWhenTheClientGoesAway(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{instances: true, limits: RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}})
	prj := b.provision("console", "development")
	running := func() int {
		n := 0
		if err := b.env.Svc.AdminQueryRow(t.Context(), prj.ID, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%hang-up-marker */%' AND pid <> pg_backend_pid()", nil, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	ctx, hangUp := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.ts.URL+"/v1/projects/"+prj.ID+"/sql",
		bytes.NewReader([]byte(`{"query": "SELECT pg_sleep(3600) /* hang-up-marker */"}`)))
	req.Header.Set("Authorization", "Bearer "+b.adminKey)
	req.Header.Set("Content-Type", "application/json")
	done := make(chan error, 1)
	go func() {
		resp, err := b.ts.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	for deadline := time.Now().Add(15 * time.Second); running() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the statement never started")
		}
	}
	hangUp()
	if err := <-done; err == nil {
		t.Fatal("the request finished instead of being abandoned")
	}
	for deadline := time.Now().Add(10 * time.Second); running() > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the statement still runs after its client went away")
		}
	}
}
