package bench

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/theappliance/appliance/kvproxy"
)

// bareHTTPS is the reference of the REST front: what a user would write instead, a bare net/http HTTPS
// handler (a certificate of the same CA, served as the front serves: http.Server.ServeTLS, so the same
// protocols offered) that takes the Upstash request shape (POST / with a JSON array, a bearer token),
// does the one command on the store's unix socket over a pool of connections logged in as the tenant,
// and answers {"result": …} with the result base64-encoded when Upstash-Encoding: base64 asks for it.
// It knows one store (its socket and token): no token lookup, no limits, no pipelines.
type bareHTTPS struct {
	sock, token string
	idle        chan *bareConn
	srv         *http.Server
	ln          net.Listener
}

type bareConn struct {
	net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

func startBareHTTPS(b *testing.B, k *kvBench, sock string) *bareHTTPS {
	b.Helper()
	cfg, err := k.e.CA.ServerTLS("127.0.0.1", "localhost")
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	h := &bareHTTPS{sock: sock, token: k.token, idle: make(chan *bareConn, 64), ln: ln}
	h.srv = &http.Server{Handler: h, TLSConfig: cfg}
	go h.srv.ServeTLS(ln, "", "")
	b.Cleanup(func() {
		h.srv.Close()
		for {
			select {
			case c := <-h.idle:
				c.Close()
			default:
				return
			}
		}
	})
	return h
}

func (h *bareHTTPS) conn() (*bareConn, error) {
	select {
	case c := <-h.idle:
		return c, nil
	default:
	}
	nc, err := net.Dial("unix", h.sock)
	if err != nil {
		return nil, err
	}
	c := &bareConn{Conn: nc, r: bufio.NewReader(nc), w: bufio.NewWriter(nc)}
	if _, err := c.do("AUTH", kvproxy.TenantUser, h.token); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// do sends one command and reads a status, error or bulk reply (all a GET needs).
func (c *bareConn) do(args ...string) ([]byte, error) {
	c.w.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		c.w.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	if err := c.w.Flush(); err != nil {
		return nil, err
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 {
		return nil, errors.New("malformed reply")
	}
	switch line[0] {
	case '+':
		return bytes.Clone(line[1 : len(line)-2]), nil
	case '-':
		return nil, errors.New(string(line[1 : len(line)-2]))
	case '$':
		n, err := strconv.Atoi(string(line[1 : len(line)-2]))
		if err != nil || n < 0 {
			return nil, err
		}
		v := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, v); err != nil {
			return nil, err
		}
		return v[:n], nil
	}
	return nil, fmt.Errorf("unexpected reply %q", line)
}

func (h *bareHTTPS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+h.token {
		http.Error(w, `{"error":"Unauthorized"}`, http.StatusUnauthorized)
		return
	}
	var cmd []string
	if err := json.NewDecoder(r.Body).Decode(&cmd); err != nil || len(cmd) == 0 {
		http.Error(w, `{"error":"bad command"}`, http.StatusBadRequest)
		return
	}
	c, err := h.conn()
	if err != nil {
		http.Error(w, `{"error":"store"}`, http.StatusServiceUnavailable)
		return
	}
	v, err := c.do(cmd...)
	if err != nil {
		c.Close()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	select {
	case h.idle <- c:
	default:
		c.Close()
	}
	var res any
	if v != nil {
		if r.Header.Get("Upstash-Encoding") == "base64" {
			res = base64.StdEncoding.EncodeToString(v)
		} else {
			res = string(v)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"result": res})
}

// restLoad is BENCH_CONNS clients, each its own http.Transport holding one keep-alive connection (HTTP/1.1,
// as @upstash/redis's fetch in Node speaks; BENCH_H2=1 forces HTTP/2), issuing @upstash/redis's shape
// of a single GET: POST / ["GET","<key>"], Authorization: Bearer <token>, Upstash-Encoding: base64.
type restLoad struct {
	clients []*http.Client
	key     string
	token   string
	want    string // the body a GET answers
}

func newRESTLoad(b *testing.B, k *kvBench, conns int, h2 bool, key, value string) *restLoad {
	l := &restLoad{key: key, token: k.token}
	for range conns {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: k.e.CA.Pool(), ServerName: "localhost"},
			MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1, ForceAttemptHTTP2: h2}
		l.clients = append(l.clients, &http.Client{Transport: tr})
	}
	want, _ := json.Marshal(map[string]string{"result": base64.StdEncoding.EncodeToString([]byte(value))})
	l.want = string(want)
	return l
}

func (l *restLoad) close() {
	for _, c := range l.clients {
		c.CloseIdleConnections()
	}
}

// round sends n requests on each connection to addr; it returns every request's latency, sorted.
func (l *restLoad) round(b *testing.B, addr string, n int) []time.Duration {
	url := "https://" + addr + "/"
	body := `["GET","` + l.key + `"]`
	lat := make([][]time.Duration, len(l.clients))
	var wg sync.WaitGroup
	for i, c := range l.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, n)
			for range n {
				req, _ := http.NewRequestWithContext(b.Context(), http.MethodPost, url, bytes.NewReader([]byte(body)))
				req.Header.Set("Authorization", "Bearer "+l.token)
				req.Header.Set("Upstash-Encoding", "base64")
				req.Header.Set("Content-Type", "application/json")
				t := time.Now()
				res, err := c.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				got, err := io.ReadAll(res.Body)
				res.Body.Close()
				mine = append(mine, time.Since(t))
				if err != nil || res.StatusCode != 200 || string(bytes.TrimSpace(got)) != l.want {
					b.Errorf("%s: %d %s %v (want %s)", addr, res.StatusCode, got, err, l.want)
					return
				}
			}
			lat[i] = mine
		}()
	}
	wg.Wait()
	all := slices.Concat(lat...)
	slices.Sort(all)
	return all
}

// BenchmarkKVRESTvsBareHTTPS (issue 34 B): the REST front (kvproxy.REST, the appliance's, with its token
// lookup, limits and pool) against a bare Go HTTPS handler doing the same one GET on the same store's
// unix socket. BENCH_CONNS (50) keep-alive connections each send BENCH_REQUESTS (2000) single GETs per
// round, BENCH_ROUNDS (5) rounds each, alternating which goes first, after one warm-up round each. Per
// round: p50 and p99 latency and this process's CPU time per request (getrusage: both servers and the
// clients run here, so the difference between the two is the server's). Logs medians and the ratio
// ours/reference (goal: p99 ratio ≤ 1.2). BENCH_CPUPROFILE=file writes a CPU profile of the REST
// front after the measured rounds (one more round of it).
func BenchmarkKVRESTvsBareHTTPS(b *testing.B) {
	k := newKVBench(b)
	rounds, n, conns := envInt(b, "BENCH_ROUNDS", 5), envInt(b, "BENCH_REQUESTS", 2000), envInt(b, "BENCH_CONNS", 50)
	h2 := os.Getenv("BENCH_H2") == "1"
	sock, err := k.e.Svc.KV().ResolveToken(b.Context(), k.token)
	if err != nil {
		b.Fatal(err)
	}
	rc := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, Username: kvproxy.TenantUser, Password: k.token})
	defer rc.Close()
	const key, value = "greeting", "hello, world"
	if err := rc.Set(b.Context(), key, value, 0).Err(); err != nil {
		b.Fatal(err)
	}
	ref := startBareHTTPS(b, k, sock)
	targets := []struct {
		name string
		addr string
	}{{"rest", k.rest.ListenAddr()}, {"bare", ref.ln.Addr().String()}}
	l := newRESTLoad(b, k, conns, h2, key, value)
	defer l.close()
	for _, t := range targets { // warm-up: connections, handshakes, the store pools
		l.round(b, t.addr, max(n/10, 10))
	}
	type stat struct{ p50, p99, cpu, rps []float64 }
	got := map[string]*stat{"rest": {}, "bare": {}}
	for round := range rounds {
		for i := range targets {
			t := targets[(i+round)%len(targets)]
			runtime.GC()
			c0, w0 := cpuTime(b, 0), time.Now()
			lat := l.round(b, t.addr, n)
			el, cpu := time.Since(w0), cpuTime(b, 0)-c0
			if b.Failed() {
				b.FailNow()
			}
			q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond) }
			s := got[t.name]
			s.p50, s.p99 = append(s.p50, q(0.50)), append(s.p99, q(0.99))
			s.cpu = append(s.cpu, float64(cpu)/float64(time.Microsecond)/float64(len(lat)))
			s.rps = append(s.rps, float64(len(lat))/el.Seconds())
		}
	}
	if p := os.Getenv("BENCH_CPUPROFILE"); p != "" { // one more round of the front alone, profiled
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		pprof.StartCPUProfile(f)
		l.round(b, targets[0].addr, n)
		pprof.StopCPUProfile()
		f.Close()
	}
	ratio := func(f func(*stat) []float64) []float64 {
		out := make([]float64, rounds)
		for i := range out {
			out[i] = f(got["rest"])[i] / f(got["bare"])[i]
		}
		return out
	}
	load, _ := os.ReadFile("/proc/loadavg")
	proto := "HTTP/1.1"
	if h2 {
		proto = "HTTP/2"
	}
	b.Logf("%s, %d connections × %d GETs, %d rounds; load average %s", proto, conns, n, rounds, bytes.TrimSpace(load))
	for _, name := range []string{"rest", "bare"} {
		s := got[name]
		b.Logf("%s: p50 %.3f ms (rounds %s), p99 %.3f ms (rounds %s), %.0f req/s, CPU %.1f µs/request (rounds %s) (medians)", name,
			medianF(s.p50), fmtList(s.p50, "%.3f"), medianF(s.p99), fmtList(s.p99, "%.3f"), medianF(s.rps), medianF(s.cpu), fmtList(s.cpu, "%.1f"))
	}
	p50r, p99r, cpur := ratio(func(s *stat) []float64 { return s.p50 }), ratio(func(s *stat) []float64 { return s.p99 }), ratio(func(s *stat) []float64 { return s.cpu })
	b.Logf("rest/bare: p50 %.2f (rounds %s), p99 %.2f (rounds %s; goal ≤ 1.2), CPU per request %.2f (rounds %s) (medians)",
		medianF(p50r), fmtList(p50r, "%.2f"), medianF(p99r), fmtList(p99r, "%.2f"), medianF(cpur), fmtList(cpur, "%.2f"))
}
