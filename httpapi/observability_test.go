package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/pglog"
)

// TestObservabilityOverHTTP: /metrics parses with Prometheus' own text parser and carries the project's
// gauges; its token and loopback rules hold; a RAISE LOG line is returned by /logs and then arrives on
// /logs/stream, and a reconnect with Last-Event-ID resumes after it.
func TestObservabilityOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{limits: RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}, instances: true})
	prj := b.provision("metered", "development")
	var mu sync.Mutex
	now := time.Now().UTC()
	b.env.Clock.Set(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	sweep := func() {
		t.Helper()
		if res, err := b.svc.Observe().Sample(t.Context()); err != nil || res.Projects != 1 {
			t.Fatalf("sweep: %+v %v", res, err)
		}
	}
	sweep()
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	sweep()

	t.Run("metrics", func(t *testing.T) {
		r := b.do("GET", "/metrics", "", nil)
		if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain; version=0.0.4") {
			t.Fatalf("/metrics: %d %v", r.status, r.header)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		families, err := p.TextToMetricFamilies(strings.NewReader(string(r.body)))
		if err != nil {
			t.Fatalf("the exposition does not parse: %v\n%s", err, r.body)
		}
		label := func(m *dto.Metric, name string) string {
			for _, l := range m.GetLabel() {
				if l.GetName() == name {
					return l.GetValue()
				}
			}
			return ""
		}
		find := func(family string, match func(*dto.Metric) bool) *dto.Metric {
			t.Helper()
			f := families[family]
			if f == nil {
				t.Fatalf("no %s in\n%s", family, r.body)
			}
			for _, m := range f.GetMetric() {
				if match(m) {
					return m
				}
			}
			t.Fatalf("%s has no matching metric: %v", family, f)
			return nil
		}
		req := find("appliance_http_requests_total", func(m *dto.Metric) bool {
			return label(m, "route") == "/v1/projects" && label(m, "method") == "POST" && label(m, "code") == "202"
		})
		if req.GetCounter().GetValue() < 1 {
			t.Fatalf("requests: %v", req)
		}
		find("appliance_jobs_ended_total", func(m *dto.Metric) bool {
			return label(m, "type") == "project.provision" && label(m, "state") == "completed" && m.GetCounter().GetValue() >= 1
		})
		if f := families["appliance_sampler_sweeps_total"]; f == nil || f.GetMetric()[0].GetCounter().GetValue() != 2 {
			t.Fatalf("sweeps: %v", f)
		}
		conns := find("appliance_project_connection_limit", func(m *dto.Metric) bool { return label(m, "project_id") == prj.ID })
		if conns.GetGauge().GetValue() <= 0 || label(conns, "organization_id") != prj.OrganizationID {
			t.Fatalf("connection limit: %v", conns)
		}
		if m := find("appliance_project_memory_bytes", func(m *dto.Metric) bool { return label(m, "project_id") == prj.ID }); m.GetGauge().GetValue() <= 0 {
			t.Fatalf("memory: %v", m)
		}
	})

	t.Run("metrics token and loopback", func(t *testing.T) {
		scrape := func(api *Server, remote, auth string) int {
			req := httptest.NewRequest("GET", "/metrics", nil)
			req.RemoteAddr = remote
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			w := httptest.NewRecorder()
			api.ServeHTTP(w, req)
			if w.Code >= 400 {
				var e map[string]string
				if json.Unmarshal(w.Body.Bytes(), &e) != nil || e["error"] == "" {
					t.Fatalf("error body: %s", w.Body)
				}
			}
			return w.Code
		}
		if c := scrape(b.api, "203.0.113.7:4000", ""); c != http.StatusForbidden {
			t.Fatalf("a remote client without a token: %d", c)
		}
		if c := scrape(b.api, "[::1]:4000", ""); c != http.StatusOK {
			t.Fatalf("a loopback client: %d", c)
		}
		tok := New(b.svc, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), MetricsToken: "s3cret-token"})
		defer tok.Close()
		for _, c := range []struct {
			remote, auth string
			want         int
		}{
			{"203.0.113.7:4000", "", 401},
			{"127.0.0.1:4000", "", 401},
			{"203.0.113.7:4000", "Bearer wrong", 401},
			{"203.0.113.7:4000", "Bearer s3cret-token", 200},
		} {
			if got := scrape(tok, c.remote, c.auth); got != c.want {
				t.Errorf("%s with %q: %d, want %d", c.remote, c.auth, got, c.want)
			}
		}
	})

	t.Run("log stream", func(t *testing.T) {
		mu.Lock()
		now = time.Now().UTC() // log times are the server's
		mu.Unlock()
		sql := func(q string) {
			t.Helper()
			if r := b.do("POST", "/v1/projects/"+prj.ID+"/sql", b.adminKey, map[string]any{"query": q}); r.status != http.StatusOK {
				t.Fatalf("%s: %d %s", q, r.status, r.body)
			}
		}
		sql("DO $$ BEGIN RAISE LOG 'stream-marker-one'; END $$")
		var first pglog.Entry
		deadline := time.Now().Add(20 * time.Second)
		for first.Cursor == "" {
			r := b.do("GET", "/v1/projects/"+prj.ID+"/logs?severity=log", b.adminKey, nil)
			var res appliance.LogsResponse
			if r.status != http.StatusOK || json.Unmarshal(r.body, &res) != nil {
				t.Fatalf("/logs: %d %s", r.status, r.body)
			}
			for _, e := range res.Logs.Entries {
				if strings.Contains(e.Message, "stream-marker-one") {
					first = e
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("/logs never returned the marker: %s", r.body)
			}
			time.Sleep(100 * time.Millisecond)
		}

		open := func(lastID string) (<-chan [3]string, context.CancelFunc) {
			ctx, cancel := context.WithCancel(t.Context())
			req, _ := http.NewRequestWithContext(ctx, "GET", b.ts.URL+"/v1/projects/"+prj.ID+"/logs/stream?severity=log", nil)
			req.Header.Set("Authorization", "Bearer "+b.adminKey)
			if lastID != "" {
				req.Header.Set("Last-Event-ID", lastID)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("stream: %d %v", resp.StatusCode, resp.Header)
			}
			events := make(chan [3]string, 100)
			go func() {
				defer resp.Body.Close()
				defer close(events)
				sc := bufio.NewScanner(resp.Body)
				var ev [3]string
				for sc.Scan() {
					line := sc.Text()
					switch {
					case line == "":
						if ev[2] != "" {
							events <- ev
						}
						ev = [3]string{}
					case strings.HasPrefix(line, "id: "):
						ev[0] = line[4:]
					case strings.HasPrefix(line, "event: "):
						ev[1] = line[7:]
					case strings.HasPrefix(line, "data: "):
						ev[2] = line[6:]
					}
				}
			}()
			return events, cancel
		}
		waitFor := func(events <-chan [3]string, marker string) [3]string {
			t.Helper()
			timeout := time.After(20 * time.Second)
			for {
				select {
				case ev, ok := <-events:
					if !ok {
						t.Fatalf("the stream ended before %q", marker)
					}
					if strings.Contains(ev[2], marker) {
						return ev
					}
				case <-timeout:
					t.Fatalf("%q never arrived", marker)
				}
			}
		}
		events, cancel := open("")
		ev := waitFor(events, "stream-marker-one") // the backlog of the window
		if ev[0] != first.Cursor || ev[1] != "log" {
			t.Fatalf("event: %v, want id %s", ev, first.Cursor)
		}
		sql("DO $$ BEGIN RAISE LOG 'stream-marker-two'; END $$")
		waitFor(events, "stream-marker-two") // live
		cancel()

		// A reconnect after the first marker gets the second, not the first again.
		events, cancel = open(first.Cursor)
		defer cancel()
		timeout := time.After(20 * time.Second)
		for done := false; !done; {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatal("the resumed stream ended")
				}
				if strings.Contains(ev[2], "stream-marker-one") {
					t.Fatalf("the entry named by Last-Event-ID was sent again: %v", ev)
				}
				done = strings.Contains(ev[2], "stream-marker-two")
			case <-timeout:
				t.Fatal("the resumed stream did not send the second marker")
			}
		}
	})
}

// bigQueryID is a pg_stat_statements queryid past 2^53, where a float64 (a JavaScript number) rounds.
const bigQueryID int64 = 8071840665353803258

// TestQueryIDIsAString: the 64-bit query_id travels as a JSON string, exactly, both ways, in the slow
// queries and the advisor's suggestions, and the document says so.
func TestQueryIDIsAString(t *testing.T) {
	t.Parallel()
	if float64(bigQueryID) != float64(bigQueryID+1) {
		t.Fatal("the test value must be one a float64 (a JavaScript number) cannot hold")
	}
	for _, v := range []any{&api.Statement{QueryID: bigQueryID}, &api.Suggestion{QueryID: bigQueryID}} {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), `"query_id":"8071840665353803258"`) {
			t.Errorf("%T marshals as %s", v, data)
		}
		back := reflect.New(reflect.TypeOf(v).Elem()).Interface()
		if err := json.Unmarshal(data, back); err != nil {
			t.Fatal(err)
		}
		if got := reflect.ValueOf(back).Elem().FieldByName("QueryID").Int(); got != bigQueryID {
			t.Errorf("%T: query_id %d after the round trip", v, got)
		}
	}
	var doc map[string]any
	if err := json.Unmarshal(setup(t).api.openapi, &doc); err != nil {
		t.Fatal(err)
	}
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	for _, name := range []string{"Statement", "Suggestion"} {
		q := schemas[name].(map[string]any)["properties"].(map[string]any)["query_id"].(map[string]any)
		if q["type"] != "string" || q["format"] != "int64" {
			t.Errorf("%s.query_id is documented as %v", name, q)
		}
	}
}
