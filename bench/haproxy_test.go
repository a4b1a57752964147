package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/theappliance/appliance/kvproxy"
)

// startHAProxyReference starts what a user would otherwise put in front of Redis: a redis-server of the
// same kind and settings as the native reference, on a unix socket only, behind HAProxy (Debian's) with
// nbthread 1, mode tcp, terminating TLS with a certificate of the same kind (issued by the appliance's CA,
// as the kv front's and the native reference's are). It returns HAProxy's TLS port and process id.
func (k *kvBench) startHAProxyReference(b *testing.B) (int, int) {
	b.Helper()
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		if haproxy, err = exec.LookPath("/usr/sbin/haproxy"); err != nil {
			b.Fatalf("haproxy is required (apt-get install haproxy; testtools.Main installs it as root): %v", err)
		}
	}
	dir := b.TempDir()
	sock := filepath.Join(dir, "redis.sock")
	cmd := exec.Command("redis-server", "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700", "--requirepass", k.refToken,
		"--save", "", "--appendonly", "no", "--maxmemory", "1024mb", "--maxmemory-policy", "volatile-lru", "--dir", dir)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	cert, key, err := k.e.CA.Issue("localhost", "127.0.0.1")
	if err != nil {
		b.Fatal(err)
	}
	pem := filepath.Join(dir, "haproxy.pem")
	if err := os.WriteFile(pem, append(append([]byte{}, cert...), key...), 0o600); err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cfg := fmt.Sprintf(`global
	nbthread 1
	maxconn 4096
defaults
	mode tcp
	timeout connect 5s
	timeout client 60s
	timeout server 60s
frontend redis_tls
	bind 127.0.0.1:%d ssl crt %s
	default_backend redis
backend redis
	server local unix@%s
`, port, pem, sock)
	cfgPath := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	hp := exec.Command(haproxy, "-db", "-f", cfgPath)
	hp.Stdout, hp.Stderr = io.Discard, io.Discard
	if err := hp.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { hp.Process.Kill(); hp.Wait() })
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), Password: k.refToken,
		TLSConfig: &tls.Config{RootCAs: k.e.CA.Pool(), ServerName: "localhost"}})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); c.Ping(b.Context()).Err() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("HAProxy in front of the reference redis-server does not answer")
		}
	}
	return port, hp.Process.Pid
}

// syscalls is how many read and write system calls a process has made (/proc/<pid>/io's syscr + syscw;
// pid 0 is this process).
func syscalls(b *testing.B, pid int) float64 {
	p := "/proc/self/io"
	if pid != 0 {
		p = fmt.Sprintf("/proc/%d/io", pid)
	}
	raw, err := os.ReadFile(p)
	if err != nil {
		b.Fatal(err)
	}
	n := 0.0
	for _, l := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok && (k == "syscr" || k == "syscw") {
			x, _ := strconv.ParseFloat(v, 64)
			n += x
		}
	}
	return n
}

// cpuTime is the CPU time (user and system) a process has used: this process's own (pid 0, from
// getrusage: the kv front and whatever else of the bench's appliance ran meanwhile, so an upper bound for
// the front) or another's (/proc/<pid>/stat, in clock ticks of 10 ms).
func cpuTime(b *testing.B, pid int) time.Duration {
	if pid == 0 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command's name (in parentheses, which may hold spaces): utime and stime are the
	// 12th and 13th of them.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// BenchmarkKVRESPvsHAProxy: redis-benchmark --tls -t set,get -c 50, at -P 1 and -P 16, BENCH_ROUNDS (5)
// rounds of BENCH_REQUESTS (200000) requests against each of three, the order rotating every round: the
// kv front (kvproxy, in front of the project's redis-server on its unix socket), HAProxy (nbthread 1, mode
// tcp, TLS terminated, to a redis-server on a unix socket) and a redis-server's own TLS port (native). It
// logs medians of ops/s and of the per-round ratios kvproxy / HAProxy and each / native.
func BenchmarkKVRESPvsHAProxy(b *testing.B) {
	k := newKVBench(b)
	rounds, requests := envInt(b, "BENCH_ROUNDS", 5), envInt(b, "BENCH_REQUESTS", 200000)
	// A front of its own, as up runs it (DefaultLimits' PendingPerAddr, 128, holds redis-benchmark's 50
	// connections opened at once from one address; it was 32 when this bench found that too few).
	cfg, err := k.e.CA.ServerTLS("127.0.0.1", "localhost")
	if err != nil {
		b.Fatal(err)
	}
	front := &kvproxy.Server{Addr: "127.0.0.1:0", TLS: cfg, Resolver: k.e.Svc.KV(), Lane: k.e.Lane,
		Limits: kvproxy.DefaultLimits, RelayLoops: envAtLeast(b, "BENCH_RELAY_LOOPS", 0, -1)}
	if err := front.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { front.Stop(context.Background()) })
	hpPort, hpPID := k.startHAProxyReference(b)
	// cpu is whose CPU time counts as the front's: this process's for the kv front (pid 0), HAProxy's, and
	// for native the redis-server's own (its TLS and its store's work together: not a front's).
	targets := []struct {
		name     string
		port     int
		password string
		cpu      int
	}{
		{"kvproxy", portOfAddr(front.ListenAddr()), k.token, 0},
		{"haproxy", hpPort, k.refToken, hpPID},
		{"native", k.refPort, k.refToken, k.refPID},
	}
	for _, pipe := range []int{1, 16} {
		got := map[string]map[string][]float64{} // test → target → ops/s per round
		cpu := map[string][]float64{}            // target → the front's CPU µs per request (SET and GET together)
		sys := map[string][]float64{}            // target → its read and write system calls per request
		for round := range rounds {
			for i := range targets {
				t := targets[(i+round)%len(targets)]
				c0, s0 := cpuTime(b, t.cpu), syscalls(b, t.cpu)
				res := k.redisBenchmark(b, t.port, t.password, pipe, 50, requests)
				sys[t.name] = append(sys[t.name], (syscalls(b, t.cpu)-s0)/float64(2*requests))
				cpu[t.name] = append(cpu[t.name], float64(cpuTime(b, t.cpu)-c0)/float64(time.Microsecond)/float64(2*requests))
				for test, r := range res {
					if got[test] == nil {
						got[test] = map[string][]float64{}
					}
					got[test][t.name] = append(got[test][t.name], r.rps)
				}
			}
		}
		for _, test := range []string{"SET", "GET"} {
			g := got[test]
			ratio := func(a, c string) []float64 {
				out := make([]float64, len(g[a]))
				for i := range g[a] {
					out[i] = g[a][i] / g[c][i]
				}
				return out
			}
			kh, kn, hn := ratio("kvproxy", "haproxy"), ratio("kvproxy", "native"), ratio("haproxy", "native")
			b.Logf("P=%d %s: ops/s medians kvproxy %.0f, haproxy %.0f, native %.0f; kvproxy/haproxy %.3f (rounds %s); kvproxy/native %.3f; haproxy/native %.3f (rounds %s)",
				pipe, test, medianF(g["kvproxy"]), medianF(g["haproxy"]), medianF(g["native"]), medianF(kh), fmtList(kh, "%.2f"),
				medianF(kn), medianF(hn), fmtList(hn, "%.2f"))
		}
		ratio := make([]float64, len(cpu["kvproxy"]))
		for i := range ratio {
			ratio[i] = cpu["kvproxy"][i] / cpu["haproxy"][i]
		}
		b.Logf("P=%d CPU µs per request (SET and GET), medians: kvproxy %.2f (rounds %s), haproxy %.2f (rounds %s), native redis-server %.2f; kvproxy/haproxy %.2f (rounds %s)",
			pipe, medianF(cpu["kvproxy"]), fmtList(cpu["kvproxy"], "%.2f"), medianF(cpu["haproxy"]), fmtList(cpu["haproxy"], "%.2f"),
			medianF(cpu["native"]), medianF(ratio), fmtList(ratio, "%.2f"))
		b.Logf("P=%d read and write system calls per request, medians: kvproxy %.2f, haproxy %.2f, native redis-server %.2f",
			pipe, medianF(sys["kvproxy"]), medianF(sys["haproxy"]), medianF(sys["native"]))
	}
}
