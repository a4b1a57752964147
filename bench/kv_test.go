package bench

import (
	"context"
	"crypto/tls"
	"encoding/csv"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/kvproxy"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// kvBench is an appliance with a data plane, both key-value fronts, one project with a running store,
// and a reference redis-server of the same package listening with TLS on its own port.
type kvBench struct {
	e        *appliancetest.Env
	token    string
	resp     *kvproxy.Server
	rest     *kvproxy.REST
	refPort  int
	refPID   int // the reference redis-server's
	refToken string
	storeDir string
	// clientCPU is the CPU time (user and system) the last redis-benchmark run used.
	clientCPU time.Duration
}

func newKVBench(b *testing.B) *kvBench {
	b.Helper()
	e := appliancetest.New(b, appliancetest.Options{Instances: true})
	p, err := e.Svc.Identity().Authenticate(b.Context(), e.Bootstrap.APIKey)
	if err != nil {
		b.Fatal(err)
	}
	f := e.StartKVFronts(b)
	k := &kvBench{e: e, resp: f.RESP, rest: f.REST}
	res, err := e.Svc.CreateProject(b.Context(), p, &appliance.CreateProjectRequest{Name: "kv-bench", Environment: "development", Plan: "scale"})
	if err != nil {
		b.Fatal(err)
	}
	if j := e.WaitJob(b, res.Job.ID); j.State != scheduler.StateCompleted {
		b.Fatalf("provision: %s", j.Error)
	}
	kv, err := e.Svc.KV().Create(b.Context(), p, res.Project.ID)
	if err != nil {
		b.Fatal(err)
	}
	if j := e.WaitJob(b, kv.Job.ID); j.State != scheduler.StateCompleted {
		b.Fatalf("kv.create: %s", j.Error)
	}
	k.token = *kv.KVStore.Token
	e.DB.View(func(tx *store.Tx) error {
		r, err := store.KVStores.Get(tx, kv.KVStore.ID)
		if err == nil {
			k.storeDir = r.Dir
		}
		return err
	})
	k.startReference(b)
	return k
}

// startReference runs redis-server with its own TLS port (a certificate of the appliance's CA), the same
// maxmemory and policy as the store, no persistence, and a password.
func (k *kvBench) startReference(b *testing.B) {
	b.Helper()
	dir := b.TempDir()
	cert, key, err := k.e.CA.Issue("localhost", "127.0.0.1")
	if err != nil {
		b.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "tls.crt"), cert, 0o600)
	os.WriteFile(filepath.Join(dir, "tls.key"), key, 0o600)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	k.refPort = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	k.refToken = "reference-password"
	cmd := exec.Command("redis-server", "--port", "0", "--tls-port", strconv.Itoa(k.refPort), "--bind", "127.0.0.1",
		"--tls-cert-file", filepath.Join(dir, "tls.crt"), "--tls-key-file", filepath.Join(dir, "tls.key"),
		"--tls-ca-cert-file", k.e.CA.CertPath(), "--tls-auth-clients", "no", "--requirepass", k.refToken,
		"--save", "", "--appendonly", "no", "--maxmemory", "1024mb", "--maxmemory-policy", "volatile-lru", "--dir", dir)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	k.refPID = cmd.Process.Pid
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", k.refPort), Password: k.refToken,
		TLSConfig: &tls.Config{RootCAs: k.e.CA.Pool(), ServerName: "localhost"}})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); c.Ping(b.Context()).Err() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("the reference redis-server does not answer")
		}
	}
}

// benchResult is one redis-benchmark test: requests/s and latency percentiles (ms).
type benchResult struct{ rps, p50, p99 float64 }

// redisBenchmark runs redis-benchmark --tls against port with password; results by test name (SET, GET).
func (k *kvBench) redisBenchmark(b *testing.B, port int, password string, pipeline, clients, requests int) map[string]benchResult {
	return k.redisBenchmarkAs(b, port, "", password, pipeline, clients, requests)
}

// redisBenchmarkAs is redisBenchmark logging in as user ("": AUTH with the password alone). Every run offers
// only the TLS 1.3 cipher suite tlsSuite, so that every server negotiates the same one.
func (k *kvBench) redisBenchmarkAs(b *testing.B, port int, user, password string, pipeline, clients, requests int) map[string]benchResult {
	b.Helper()
	args := []string{"--tls", "--cacert", k.e.CA.CertPath(), "--tls-ciphersuites", tlsSuite(), "-h", "localhost",
		"-p", strconv.Itoa(port), "-t", "set,get", "-c", strconv.Itoa(clients), "-P", strconv.Itoa(pipeline),
		"-n", strconv.Itoa(requests), "-r", "100000", "--csv", "-a", password}
	if user != "" {
		args = append(args, "--user", user)
	}
	cmd := exec.CommandContext(b.Context(), "redis-benchmark", args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("redis-benchmark: %v: %s%s", err, out, stderr.String())
	}
	k.clientCPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	recs, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil {
		b.Fatalf("redis-benchmark output: %v\n%s", err, out)
	}
	res := map[string]benchResult{}
	for _, r := range recs[1:] { // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
		f := func(i int) float64 { v, _ := strconv.ParseFloat(r[i], 64); return v }
		res[r[0]] = benchResult{rps: f(1), p50: f(4), p99: f(6)}
	}
	return res
}

// tlsSuite is the one TLS 1.3 cipher suite redis-benchmark offers (BENCH_TLS_SUITE). Left to themselves the
// servers differ: crypto/tls (the fronts) picks TLS_AES_128_GCM_SHA256, OpenSSL (HAProxy, redis-server)
// follows the client's order and OpenSSL's client puts TLS_AES_256_GCM_SHA384 first. The default is the
// latter: the references keep what they negotiate by default, and the fronts are measured on the dearer one.
func tlsSuite() string {
	if s := os.Getenv("BENCH_TLS_SUITE"); s != "" {
		return s
	}
	return "TLS_AES_256_GCM_SHA384"
}

// negotiated is what a TLS client offering tlsSuite() agrees with the server on port: the protocol, cipher
// suite and key exchange group, as openssl s_client reports them.
func (k *kvBench) negotiated(b *testing.B, port int) string {
	b.Helper()
	cmd := exec.CommandContext(b.Context(), "openssl", "s_client", "-brief", "-connect", fmt.Sprintf("127.0.0.1:%d", port),
		"-servername", "localhost", "-CAfile", k.e.CA.CertPath(), "-ciphersuites", tlsSuite())
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("openssl s_client to port %d: %v: %s", port, err, out)
	}
	var got []string
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok && (k == "Protocol version" || k == "Ciphersuite" || k == "Server Temp Key") {
			got = append(got, strings.TrimSpace(v))
		}
	}
	return strings.Join(got, ", ")
}

// medianF is the median of xs (the mean of the middle two for an even count).
func medianF(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchmarkKVRESP: redis-benchmark --tls -t set,get -c 50 at pipelining 1 and 16, through the front and
// against a redis-server's own TLS port, alternating in one run (BENCH_ROUNDS pairs, BENCH_REQUESTS each).
func BenchmarkKVRESP(b *testing.B) {
	k := newKVBench(b)
	rounds, requests := envInt(b, "BENCH_ROUNDS", 5), envInt(b, "BENCH_REQUESTS", 200000)
	frontPort := portOfAddr(k.resp.ListenAddr())
	for _, pipe := range []int{1, 16} {
		type pair struct{ front, ref benchResult }
		byTest := map[string][]pair{}
		for round := range rounds {
			var front, ref map[string]benchResult
			if round%2 == 0 {
				front = k.redisBenchmark(b, frontPort, k.token, pipe, 50, requests)
				ref = k.redisBenchmark(b, k.refPort, k.refToken, pipe, 50, requests)
			} else {
				ref = k.redisBenchmark(b, k.refPort, k.refToken, pipe, 50, requests)
				front = k.redisBenchmark(b, frontPort, k.token, pipe, 50, requests)
			}
			for t := range front {
				byTest[t] = append(byTest[t], pair{front[t], ref[t]})
			}
		}
		for _, t := range []string{"SET", "GET"} {
			var ratios, fr, rr, fp99, rp99, added []float64
			for _, p := range byTest[t] {
				ratios = append(ratios, p.front.rps/p.ref.rps)
				fr, rr = append(fr, p.front.rps), append(rr, p.ref.rps)
				fp99, rp99 = append(fp99, p.front.p99), append(rp99, p.ref.p99)
				added = append(added, p.front.p99-p.ref.p99)
			}
			b.Logf("P=%d %s: ops/s front/reference ratio median %.3f (pairs %s); front %.0f ops/s, reference %.0f (medians); p99 front %.3f ms, reference %.3f ms, added %.3f ms (medians)",
				pipe, t, medianF(ratios), fmtList(ratios, "%.3f"), medianF(fr), medianF(rr), medianF(fp99), medianF(rp99), medianF(added))
		}
	}
}

func fmtList(xs []float64, f string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf(f, x)
	}
	return strings.Join(s, " ")
}

func portOfAddr(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

// BenchmarkKVREST: single GETs over 50 keep-alive connections for BENCH_SECONDS each, through the REST
// front and through the RESP front (go-redis, one command per round trip), alternating: requests/s,
// p50 and p99. Then the memory (PSS) of the idle store's redis-server.
func BenchmarkKVREST(b *testing.B) {
	k := newKVBench(b)
	rounds, secs := envInt(b, "BENCH_ROUNDS", 4), envInt(b, "BENCH_SECONDS", 5)
	const conns = 50
	rc := redis.NewClient(&redis.Options{Addr: k.resp.ListenAddr(), Password: k.token, PoolSize: conns,
		TLSConfig: &tls.Config{RootCAs: k.e.CA.Pool(), ServerName: "localhost"}})
	defer rc.Close()
	if err := rc.Set(b.Context(), "greeting", "hello", 0).Err(); err != nil {
		b.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: k.e.CA.Pool()}, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}
	hc := &http.Client{Transport: tr}
	url := fmt.Sprintf("https://localhost:%d/get/greeting", portOfAddr(k.rest.ListenAddr()))
	restGet := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+k.token)
		res, err := hc.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			return fmt.Errorf("status %d", res.StatusCode)
		}
		return nil
	}
	respGet := func(ctx context.Context) error { return rc.Get(ctx, "greeting").Err() }
	run := func(get func(context.Context) error) (rps, p50, p99 float64) {
		ctx, cancel := context.WithTimeout(b.Context(), time.Duration(secs)*time.Second)
		defer cancel()
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		start := time.Now()
		for range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []time.Duration
				for ctx.Err() == nil {
					t := time.Now()
					if err := get(ctx); err != nil {
						if ctx.Err() == nil {
							b.Error(err)
						}
						break
					}
					mine = append(mine, time.Since(t))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		el := time.Since(start)
		slices.Sort(lat)
		q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
		return float64(len(lat)) / el.Seconds(), q(0.50), q(0.99)
	}
	var rest, resp [3][]float64
	for round := range rounds {
		order := []bool{true, false}
		if round%2 == 1 {
			order = []bool{false, true}
		}
		for _, isREST := range order {
			into, f := &resp, respGet
			if isREST {
				into, f = &rest, restGet
			}
			r, p50, p99 := run(f)
			into[0], into[1], into[2] = append(into[0], r), append(into[1], p50), append(into[2], p99)
		}
	}
	b.Logf("REST GET, %d connections: %.0f req/s (runs %s), p50 %.3f ms, p99 %.3f ms (medians)", conns, medianF(rest[0]), fmtList(rest[0], "%.0f"), medianF(rest[1]), medianF(rest[2]))
	b.Logf("RESP GET, %d connections: %.0f req/s (runs %s), p50 %.3f ms, p99 %.3f ms (medians)", conns, medianF(resp[0]), fmtList(resp[0], "%.0f"), medianF(resp[1]), medianF(resp[2]))

	// The idle store: its redis-server's PSS after the clients closed and 2 s of quiet.
	rc.Close()
	tr.CloseIdleConnections()
	time.Sleep(2 * time.Second)
	pidB, err := os.ReadFile(filepath.Join(k.storeDir, "redis.pid"))
	if err != nil {
		b.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(pidB)))
	pss, uss, err := rollupKB(pid)
	if err != nil {
		b.Fatal(err)
	}
	rss, _ := statusKB(pid, "VmRSS:")
	b.Logf("idle store (after the runs above): redis-server PSS %.0f KiB, USS %.0f KiB, RSS %.0f KiB", pss, uss, rss)
}
