package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/trace"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/heapfloor"
	"github.com/theappliance/appliance/httpapi"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// eventsEnv is an appliance without instances whose job runner ends "bench.noop" jobs at once: each end
// appends job.completed to the event log, as every real job's end does.
type eventsEnv struct {
	e      *appliancetest.Env
	p      *appliance.Principal
	runner *scheduler.Runner
	api    *httptest.Server
}

// newEventsEnv builds it; hooks tune the webhook worker a benchmark starts (nil: the defaults).
func newEventsEnv(b *testing.B, hooks *appliance.WebhookOptions) *eventsEnv {
	b.Helper()
	// The garbage collector's heap floor that up sets (--heap-floor-mb); BENCH_HEAP_FLOOR_MB=0: GOGC alone.
	heapfloor.Set(uint64(envAtLeast(b, "BENCH_HEAP_FLOOR_MB", heapfloor.Default>>20, 0)) << 20)
	e := appliancetest.New(b, appliancetest.Options{Webhooks: hooks})
	p, err := e.Svc.Identity().Authenticate(b.Context(), e.Bootstrap.APIKey)
	if err != nil {
		b.Fatal(err)
	}
	r := scheduler.New(e.DB, scheduler.Options{ID: "bench", HostID: "bench", Workers: 4, Lane: e.Lane})
	// The service enqueues no job here (the benchmarks enqueue bench.noop and notify the runner), so it is
	// built without a notifier.
	e.Svc.RegisterJobs(r)
	r.Handle("bench.noop", func(context.Context, *scheduler.Run) (any, error) { return map[string]bool{"ok": true}, nil })
	if err := r.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r.Stop(ctx)
	})
	api := httpapi.New(e.Svc, httpapi.Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}, Lane: e.Lane})
	ts := httptest.NewServer(api)
	b.Cleanup(func() { api.Close(); ts.Close() })
	return &eventsEnv{e: e, p: p, runner: r, api: ts}
}

// jobs enqueues n bench.noop jobs of projectID ("" for none) in one transaction.
func (v *eventsEnv) jobs(b *testing.B, projectID string, n int) {
	b.Helper()
	if err := v.e.DB.Update(func(tx *store.Tx) error {
		for range n {
			if err := scheduler.Enqueue(tx, &store.Job{Type: "bench.noop", OrganizationID: v.p.OrganizationID, ProjectID: projectID}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	v.runner.Notify()
}

func (v *eventsEnv) endpoint(b *testing.B, url string) {
	b.Helper()
	if _, err := v.e.Svc.Webhooks().CreateEndpoint(b.Context(), v.p, v.p.OrganizationID, &appliance.CreateWebhookEndpointRequest{URL: url, EventTypes: []api.EventType{"job.completed"}}); err != nil {
		b.Fatal(err)
	}
}

func pct(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// BenchmarkWebhookLatency: from an event (a job's end: the body's timestamp) to the receiver holding its
// first delivery attempt, on loopback, over BENCH_EVENTS events (default 1000) enqueued in batches of 10.
func BenchmarkWebhookLatency(b *testing.B) {
	n := envInt(b, "BENCH_EVENTS", 1000)
	for range b.N {
		v := newEventsEnv(b, nil)
		v.e.StartWebhooks(b)
		var mu sync.Mutex
		var lat []time.Duration
		url := v.e.Serve(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			at := time.Now()
			var body struct{ Timestamp time.Time }
			json.NewDecoder(r.Body).Decode(&body)
			mu.Lock()
			lat = append(lat, at.Sub(body.Timestamp))
			mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
		}))
		v.endpoint(b, url)
		for i := 0; i < n; i += 10 {
			v.jobs(b, "", 10)
			time.Sleep(5 * time.Millisecond)
		}
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			got := len(lat)
			mu.Unlock()
			if got >= n {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d deliveries arrived", got, n)
			}
		}
		p50, p99 := pct(lat, 0.5), pct(lat, 0.99)
		b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
		b.Logf("event to first attempt over %d events: p50 %v, p99 %v, max %v", len(lat), p50, p99, pct(lat, 1))
	}
}

// BenchmarkWebhookFanOutAPI: GET /v1/me's p99 while events fan out to 10 endpoints, one of which never
// answers (each attempt to it times out), next to the same figure without fan-out, alternating rounds in
// one run (BENCH_ROUNDS, default 10: each round 100 events = 1000 deliveries; BENCH_REQUESTS per side,
// default 1000, sequential).
func BenchmarkWebhookFanOutAPI(b *testing.B) {
	rounds, perSide := envInt(b, "BENCH_ROUNDS", 10), envInt(b, "BENCH_REQUESTS", 1000)
	fast := envAtLeast(b, "BENCH_FAST_ENDPOINTS", 9, 0) // 0 with BENCH_HANGING=0: the events alone, as a control
	hanging := envAtLeast(b, "BENCH_HANGING", 1, 0)
	o := appliance.DefaultWebhookOptions
	o.Workers = envInt(b, "BENCH_WORKERS", o.Workers)
	o.PerEndpoint = envInt(b, "BENCH_PER_ENDPOINT", o.PerEndpoint)
	for range b.N {
		v := newEventsEnv(b, &o)
		v.e.StartWebhooks(b)
		urls, count := startReceivers(b, v.e, fast, hanging)
		for _, u := range urls {
			v.endpoint(b, u)
		}
		client := v.api.Client()
		me := func() time.Duration {
			req, _ := http.NewRequest("GET", v.api.URL+"/v1/me", nil)
			req.Header.Set("Authorization", "Bearer "+v.e.Bootstrap.APIKey)
			t0 := time.Now()
			res, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				b.Fatalf("/v1/me: %d", res.StatusCode)
			}
			return time.Since(t0)
		}
		var quiet, busy []time.Duration
		var ratios []float64
		for range rounds {
			var q, f []time.Duration
			for range perSide {
				q = append(q, me())
			}
			before := count()
			t0 := time.Now()
			var ru0, ru1 syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			v.jobs(b, "", 100)
			var slow []string
			for range perSide {
				var d time.Duration
				trace.WithRegion(context.Background(), "me", func() { d = me() }) // for -trace: the requests
				if d > 500*time.Microsecond {
					slow = append(slow, fmt.Sprintf("%.0f:%.1f", ms(time.Since(t0)), ms(d)))
				}
				f = append(f, d)
			}
			window := time.Since(t0)
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
			for deadline := time.Now().Add(time.Minute); count() < before+int64(100*fast); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					b.Fatalf("fan-out did not finish: %d of %d", count()-before, 100*fast)
				}
			}
			if os.Getenv("BENCH_DETAIL") != "" {
				b.Logf("round: cpu %.2f of the window; during window %v, fan-out done after %v; slow (at ms: ms) %v", float64(cpu)/float64(window), window, time.Since(t0), slow)
			}
			ratios = append(ratios, float64(pct(f, 0.99))/float64(pct(q, 0.99)))
			quiet, busy = append(quiet, q...), append(busy, f...)
		}
		slices.Sort(ratios)
		ratio := float64(pct(busy, 0.99)) / float64(pct(quiet, 0.99))
		b.ReportMetric(ratio, "p99-ratio")
		b.Logf("GET /v1/me over %d rounds: quiet p50 %v p99 %v; during fan-out p50 %v p99 %v; p99 ratio %.2f (per round: median %.2f, min %.2f, max %.2f)",
			rounds, pct(quiet, 0.5), pct(quiet, 0.99), pct(busy, 0.5), pct(busy, 0.99), ratio, ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1])
	}
}

// BenchmarkEventStreamFanOut: BENCH_CLIENTS (default 200) clients follow one project's event stream while
// BENCH_STREAM_EVENTS (default 2000) events are appended; the time until every client holds every event
// gives the events per second delivered to all.
func BenchmarkEventStreamFanOut(b *testing.B) {
	clients, n := envInt(b, "BENCH_CLIENTS", 200), envInt(b, "BENCH_STREAM_EVENTS", 2000)
	for range b.N {
		v := newEventsEnv(b, nil)
		prj := &store.Project{ID: "prj_bench", Name: "bench", Slug: "bench", OrganizationID: v.p.OrganizationID, State: "active",
			RuntimeStatus: "active", Environment: "development", Plan: "free", CreatedAt: time.Now(), UpdatedAt: time.Now()}
		if err := v.e.DB.Update(func(tx *store.Tx) error { return store.Projects.Put(tx, prj) }); err != nil {
			b.Fatal(err)
		}
		tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: 0}
		client := &http.Client{Transport: tr}
		var ready, done sync.WaitGroup
		var total atomic.Int64
		ctx, cancel := context.WithCancel(b.Context())
		defer cancel()
		for range clients {
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				req, _ := http.NewRequestWithContext(ctx, "GET", v.api.URL+"/v1/projects/"+prj.ID+"/events", nil)
				req.Header.Set("Authorization", "Bearer "+v.e.Bootstrap.APIKey)
				res, err := client.Do(req)
				if err != nil {
					ready.Done()
					return
				}
				defer res.Body.Close()
				ready.Done()
				sc := bufio.NewScanner(res.Body)
				got := 0
				for sc.Scan() {
					if strings.HasPrefix(sc.Text(), "id: ") {
						got++
						total.Add(1)
						if got == n {
							return
						}
					}
				}
			}()
		}
		ready.Wait()
		start := time.Now()
		for i := 0; i < n; i += 100 {
			if err := v.e.DB.Update(func(tx *store.Tx) error {
				for j := range 100 {
					if err := store.AppendEvent(tx, &store.Event{Type: "job.completed", OrganizationID: prj.OrganizationID, ProjectID: prj.ID,
						Data: []byte(fmt.Sprintf(`{"n":%d}`, i+j)), CreatedAt: time.Now()}); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		}
		appended := time.Since(start)
		done.Wait()
		elapsed := time.Since(start)
		if got := total.Load(); got != int64(clients*n) {
			b.Fatalf("clients received %d events, want %d", got, clients*n)
		}
		b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s-to-all")
		b.ReportMetric(float64(clients*n)/elapsed.Seconds(), "deliveries/s")
		b.Logf("%d clients, %d events appended in %v; every client held every event after %v: %.0f events/s to all, %.0f event deliveries/s",
			clients, n, appended, elapsed, float64(n)/elapsed.Seconds(), float64(clients*n)/elapsed.Seconds())
	}
}
