package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/httpapi"
	"github.com/theappliance/appliance/httpapi/connlimit"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/ui"
)

// BenchmarkDashboardColdLoad: the dashboard's project page loaded with a cold cache in headless Chromium
// (bench/coldload.mjs), from the navigation's start to a connection string shown, BENCH_COLDLOAD_RUNS (7)
// times unthrottled and as many with the CPU slowed down 4x on an emulated 1.6 Mbit/s, 150 ms link; the
// API calls made one after the other after the main script; and the SQL editor opening a 50,000-row
// result (the longest task, BENCH_SQL_RUNS (3) times). The appliance is served as `up` serves it: the
// dashboard and the API on one TLS listener with HTTP/2 (httpapi.HTTPServer), a real project behind it.
// The whole benchmark runs once, whatever b.N is: use -benchtime 1x.
func BenchmarkDashboardColdLoad(b *testing.B) {
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat("/usr/bin/chromium")
	}
	if err != nil {
		b.Fatalf("the cold-load benchmark needs node and /usr/bin/chromium: %v", err)
	}
	runs, sqlRuns := envInt(b, "BENCH_COLDLOAD_RUNS", 7), envAtLeast(b, "BENCH_SQL_RUNS", 3, 0)
	modes := os.Getenv("BENCH_COLDLOAD_MODES") // local,throttled by default
	// BENCH_COLDLOAD_TRACE=dir writes a DevTools trace of each mode's first counted run there.

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	e := appliancetest.New(b, appliancetest.Options{Instances: true, APIURL: "https://" + ln.Addr().String()})
	p, err := e.Svc.Identity().Authenticate(b.Context(), e.Bootstrap.APIKey)
	if err != nil {
		b.Fatal(err)
	}
	res, err := e.Svc.CreateProject(b.Context(), p, &appliance.CreateProjectRequest{Name: "cold load", Environment: "development"})
	if err != nil {
		b.Fatal(err)
	}
	if j := e.WaitJob(b, res.Job.ID); j.State != scheduler.StateCompleted {
		b.Fatal(j.Error)
	}
	tlsCfg, err := e.CA.ServerTLS("127.0.0.1", "localhost")
	if err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	api := httpapi.New(e.Svc, httpapi.Options{Log: log, Lane: e.Lane,
		Limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}})
	srv, cl := httpapi.HTTPServer(ui.Mount(api), ln, connlimit.Limits{Max: 1024}, log)
	srv.TLSConfig = tlsCfg
	go func() {
		if err := srv.ServeTLS(cl, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			b.Error(err)
		}
	}()
	b.Cleanup(func() { srv.Close(); api.Close() })

	work := nodeWork(b)
	cmd := exec.CommandContext(b.Context(), node, filepath.Join(work, "coldload.mjs"))
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "BASE_URL=https://"+ln.Addr().String(), "PROJECT_ID="+res.Project.ID,
		"EMAIL="+e.Bootstrap.Email, "PASSWORD="+e.Bootstrap.Password,
		"RUNS="+strconv.Itoa(runs), "SQL_RUNS="+strconv.Itoa(sqlRuns), "MODES="+modes,
		"TRACE_DIR="+os.Getenv("BENCH_COLDLOAD_TRACE"))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("load average before: %s", loadavg())
	b.ResetTimer()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var result map[string]map[string]any
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "result "); ok {
			if err := json.Unmarshal([]byte(v), &result); err != nil {
				b.Fatalf("the script's result: %v", err)
			}
			continue
		}
		os.Stdout.WriteString("coldload: " + line + "\n") // every run, whatever the testing package keeps of the log
	}
	if err := cmd.Wait(); err != nil {
		b.Fatalf("bench/coldload.mjs: %v", err)
	}
	b.StopTimer()
	b.Logf("load average after: %s", loadavg())
	metric := func(mode, key, unit string) {
		if v, ok := result[mode][key].(float64); ok {
			b.ReportMetric(v, unit)
		}
	}
	metric("local", "median_ms", "local-ms")
	metric("local", "depth", "local-chain")
	metric("throttled", "median_ms", "throttled-ms")
	metric("throttled", "depth", "throttled-chain")
	metric("sql", "median_longest_ms", "sql-longtask-ms")
}

// nodeWork is a directory with the dashboard's node packages (npm ci of ui's lock: playwright-core, no
// browser download) and the benchmark's script.
func nodeWork(b *testing.B) string {
	b.Helper()
	work := b.TempDir()
	for _, f := range []struct{ from, to string }{
		{filepath.Join("..", "ui", "package.json"), "package.json"},
		{filepath.Join("..", "ui", "package-lock.json"), "package-lock.json"},
		{"coldload.mjs", "coldload.mjs"},
	} {
		data, err := os.ReadFile(f.from)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, f.to), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	npm := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	npm.Dir = work
	npm.Env = append(os.Environ(), "NO_UPDATE_NOTIFIER=1")
	start := time.Now()
	if out, err := npm.CombinedOutput(); err != nil {
		b.Fatalf("npm ci: %v\n%s", err, out)
	}
	b.Logf("npm ci: %s", time.Since(start).Round(time.Second))
	return work
}
