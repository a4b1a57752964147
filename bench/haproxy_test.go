package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
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

	kvredis "github.com/theappliance/appliance/appliance/redis"
	"github.com/theappliance/appliance/kvproxy"
)

// startHAProxy starts what a user would otherwise put in front of Redis: HAProxy (Debian's) with nbthread 1,
// mode tcp, terminating TLS with a certificate of the same kind (issued by the appliance's CA, as the kv
// front's and the native reference's are), before the redis-server on the unix socket sock (the project's
// store: the same server the kv front relays to, so that the two fronts differ in nothing else). It returns
// HAProxy's TLS port and process id.
func (k *kvBench) startHAProxy(b *testing.B, sock string) (int, int) {
	b.Helper()
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		if haproxy, err = exec.LookPath("/usr/sbin/haproxy"); err != nil {
			b.Fatalf("haproxy is required (apt-get install haproxy; testtools.Main installs it as root): %v", err)
		}
	}
	dir := b.TempDir()
	cert, key, err := k.e.CA.Issue("localhost", "127.0.0.1")
	if err != nil {
		b.Fatal(err)
	}
	pem := filepath.Join(dir, "haproxy.pem")
	if err := os.WriteFile(pem, append(append([]byte{}, cert...), key...), 0o600); err != nil {
		b.Fatal(err)
	}
	port := freePort(b)
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
	k.waitRESP(b, port, kvproxy.TenantUser, "HAProxy in front of the store")
	return port, hp.Process.Pid
}

// waitRESP waits until a RESP server with TLS on port answers PING, logged in as user with the token.
func (k *kvBench) waitRESP(b *testing.B, port int, user, what string) {
	b.Helper()
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), Username: user, Password: k.token,
		TLSConfig: &tls.Config{RootCAs: k.e.CA.Pool(), ServerName: "localhost"}})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); c.Ping(b.Context()).Err() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("%s does not answer", what)
		}
	}
}

func freePort(b *testing.B) int {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// The kv front in a process of its own (as HAProxy is one), so that the CPU time it takes is its own and
// not also the bench's appliance's: the bench binary run again with frontChildEnv naming a directory that
// holds tls.crt, tls.key and front.json. It serves until its standard input closes.
const frontChildEnv = "BENCH_KV_FRONT_CHILD"

type frontChildConfig struct {
	Socket     string
	Token      string
	RelayLoops int
}

// staticResolver resolves one token to one socket.
type staticResolver struct{ token, socket string }

func (r staticResolver) ResolveToken(ctx context.Context, token string) (string, error) {
	if token != r.token {
		return "", kvproxy.ErrInvalidToken
	}
	return r.socket, nil
}

// runFrontChild is the child's main: it prints the front's address, then serves until stdin closes.
func runFrontChild(dir string) int {
	raw, err := os.ReadFile(filepath.Join(dir, "front.json"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var c frontChildConfig
	if err := json.Unmarshal(raw, &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s := &kvproxy.Server{Addr: "127.0.0.1:0", TLS: &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
		Resolver: staticResolver{c.Token, c.Socket}, Limits: kvproxy.DefaultLimits, RelayLoops: c.RelayLoops}
	if err := s.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(s.ListenAddr())
	io.Copy(io.Discard, os.Stdin)
	s.Stop(context.Background())
	return 0
}

// startFrontChild starts the kv front in a process of its own before the store's socket sock; it returns
// the front's port and process id.
func (k *kvBench) startFrontChild(b *testing.B, sock string, loops int) (int, int) {
	b.Helper()
	dir := b.TempDir()
	cert, key, err := k.e.CA.Issue("localhost", "127.0.0.1")
	if err != nil {
		b.Fatal(err)
	}
	cfg, _ := json.Marshal(frontChildConfig{Socket: sock, Token: k.token, RelayLoops: loops})
	for name, data := range map[string][]byte{"tls.crt": cert, "tls.key": key, "front.json": cfg} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), frontChildEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("the kv front's process: %v", err)
	}
	port := portOfAddr(strings.TrimSpace(line))
	k.waitRESP(b, port, "", "the kv front's own process")
	return port, cmd.Process.Pid
}

// procDir is /proc's directory of a process (pid 0: this one).
func procDir(pid int) string {
	if pid == 0 {
		return "/proc/self"
	}
	return fmt.Sprintf("/proc/%d", pid)
}

// procFields adds the numbers of a /proc file's "name: value" lines to sum, by name; false when the file
// cannot be read.
func procFields(path string, sum map[string]float64) bool {
	raw, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			x, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			sum[k] += x
		}
	}
	return true
}

// syscalls is how many read and write system calls a process has made (/proc/<pid>/io's syscr + syscw;
// pid 0 is this process). Those count read(2), write(2) and their vectored kin, not recvfrom(2) and
// sendto(2): HAProxy's reads and writes are those, and it shows 0. A process's counts also take in those
// of each child it has reaped: this process's (the front in the appliance) include redis-benchmark's.
func syscalls(b *testing.B, pid int) float64 {
	f := map[string]float64{}
	if !procFields(procDir(pid)+"/io", f) {
		b.Fatalf("%s/io cannot be read", procDir(pid))
	}
	return f["syscr"] + f["syscw"]
}

// switches is how many context switches (voluntary, nonvoluntary) the threads of a process have made so
// far (/proc/<pid>/task/*/status; pid 0 is this process). A voluntary one is a sleep — in the relay, an
// epoll_wait that found nothing ready — so per request it says how many requests each wake-up served.
func switches(b *testing.B, pid int) (vol, nonvol float64) {
	dir := procDir(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	f := map[string]float64{}
	for _, t := range tasks {
		procFields(filepath.Join(dir, t.Name(), "status"), f) // a thread that ended meanwhile adds nothing
	}
	return f["voluntary_ctxt_switches"], f["nonvoluntary_ctxt_switches"]
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
// rounds of BENCH_REQUESTS (200000) requests against each target, the order rotating every round: the kv
// front (kvproxy) in a process of its own, the same front inside the bench's appliance (as up runs it),
// HAProxy (nbthread 1, mode tcp, TLS terminated) — all three before the project's own redis-server on its
// unix socket — and a redis-server's own TLS port (native). Every client offers one TLS 1.3 cipher suite
// (tlsSuite). It logs medians of ops/s, of the per-round ratios to HAProxy and native, and of each front's
// CPU time per request.
func BenchmarkKVRESPvsHAProxy(b *testing.B) {
	k := newKVBench(b)
	rounds, requests := envInt(b, "BENCH_ROUNDS", 5), envInt(b, "BENCH_REQUESTS", 200000)
	loops := envAtLeast(b, "BENCH_RELAY_LOOPS", 0, -1)
	// A front of its own, as up runs it (DefaultLimits' PendingPerAddr, 128, holds redis-benchmark's 50
	// connections opened at once from one address; it was 32 when this bench found that too few).
	cfg, err := k.e.CA.ServerTLS("127.0.0.1", "localhost")
	if err != nil {
		b.Fatal(err)
	}
	front := &kvproxy.Server{Addr: "127.0.0.1:0", TLS: cfg, Resolver: k.e.Svc.KV(), Lane: k.e.Lane,
		Limits: kvproxy.DefaultLimits, RelayLoops: loops}
	if err := front.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { front.Stop(context.Background()) })
	sock := kvredis.Config{Dir: k.storeDir}.SocketPath()
	// The store behind the fronts (not behind native, which is its own store): its CPU per request says
	// whether a front makes it work harder (more, smaller reads).
	raw, err := os.ReadFile(kvredis.Config{Dir: k.storeDir}.PidPath())
	if err != nil {
		b.Fatal(err)
	}
	storePID, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		b.Fatalf("the store's pid file: %v", err)
	}
	childPort, childPID := k.startFrontChild(b, sock, loops)
	hpPort, hpPID := k.startHAProxy(b, sock)
	// cpu is whose CPU time counts as the front's: the front's own process, this process's for the front
	// in the appliance (pid 0: the appliance's background work too, so an upper bound), HAProxy's, and for
	// native the redis-server's own (its TLS and its store's work together: not a front's).
	targets := []struct {
		name           string
		port           int
		user, password string
		cpu            int
	}{
		{"kvproxy", childPort, "", k.token, childPID},
		{"kvproxy-in-appliance", portOfAddr(front.ListenAddr()), "", k.token, 0},
		{"haproxy", hpPort, kvproxy.TenantUser, k.token, hpPID},
		{"native", k.refPort, "", k.refToken, k.refPID},
	}
	for _, t := range targets {
		b.Logf("%s: %s", t.name, k.negotiated(b, t.port))
	}
	for _, pipe := range []int{1, 16} {
		got := map[string]map[string][]float64{} // test → target → ops/s per round
		cpu := map[string][]float64{}            // target → the front's CPU µs per request (SET and GET together)
		sys := map[string][]float64{}            // target → its read and write system calls per request
		client := map[string][]float64{}         // target → redis-benchmark's CPU µs per request
		behind := map[string][]float64{}         // target → the store's CPU µs per request (native: its own)
		vol := map[string][]float64{}            // target → the front's voluntary context switches per request
		nonvol := map[string][]float64{}         // … and involuntary ones (preemptions)
		for round := range rounds {
			for i := range targets {
				t := targets[(i+round)%len(targets)]
				storeOf := storePID
				if t.name == "native" {
					storeOf = t.cpu
				}
				c0, s0, b0 := cpuTime(b, t.cpu), syscalls(b, t.cpu), cpuTime(b, storeOf)
				v0, n0 := switches(b, t.cpu)
				res := k.redisBenchmarkAs(b, t.port, t.user, t.password, pipe, 50, requests)
				perReq := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(2*requests) }
				v1, n1 := switches(b, t.cpu)
				sys[t.name] = append(sys[t.name], (syscalls(b, t.cpu)-s0)/float64(2*requests))
				cpu[t.name] = append(cpu[t.name], perReq(cpuTime(b, t.cpu)-c0))
				client[t.name] = append(client[t.name], perReq(k.clientCPU))
				behind[t.name] = append(behind[t.name], perReq(cpuTime(b, storeOf)-b0))
				vol[t.name] = append(vol[t.name], (v1-v0)/float64(2*requests))
				nonvol[t.name] = append(nonvol[t.name], (n1-n0)/float64(2*requests))
				for test, r := range res {
					if got[test] == nil {
						got[test] = map[string][]float64{}
					}
					got[test][t.name] = append(got[test][t.name], r.rps)
				}
			}
		}
		ratio := func(xs, ys []float64) []float64 {
			out := make([]float64, min(len(xs), len(ys)))
			for i := range out {
				out[i] = xs[i] / ys[i]
			}
			return out
		}
		for _, test := range []string{"SET", "GET"} {
			g := got[test]
			for _, t := range targets {
				vh, vn := ratio(g[t.name], g["haproxy"]), ratio(g[t.name], g["native"])
				b.Logf("P=%d %s %s: %.0f ops/s (rounds %s); / haproxy %.3f (rounds %s); / native %.3f (rounds %s)",
					pipe, test, t.name, medianF(g[t.name]), fmtList(g[t.name], "%.0f"), medianF(vh), fmtList(vh, "%.2f"),
					medianF(vn), fmtList(vn, "%.2f"))
			}
		}
		for _, t := range targets {
			vh := ratio(cpu[t.name], cpu["haproxy"])
			note := ""
			switch t.name {
			case "haproxy":
				note = " (recvfrom/sendto: not counted)"
			case "kvproxy-in-appliance":
				note = " (with redis-benchmark's own)"
			}
			b.Logf("P=%d CPU µs per request (SET and GET) %s: %.2f (rounds %s); / haproxy %.3f (rounds %s); read(2)/write(2)-family calls per request %.2f%s",
				pipe, t.name, medianF(cpu[t.name]), fmtList(cpu[t.name], "%.2f"), medianF(vh), fmtList(vh, "%.2f"), medianF(sys[t.name]), note)
			b.Logf("P=%d %s: redis-benchmark's CPU µs per request %.2f (rounds %s); the store's %.2f (rounds %s); the front's context switches per request: voluntary %.3f (rounds %s), involuntary %.3f",
				pipe, t.name, medianF(client[t.name]), fmtList(client[t.name], "%.2f"), medianF(behind[t.name]), fmtList(behind[t.name], "%.2f"),
				medianF(vol[t.name]), fmtList(vol[t.name], "%.3f"), medianF(nonvol[t.name]))
		}
		load, _ := os.ReadFile("/proc/loadavg")
		b.Logf("P=%d load average after the rounds: %s", pipe, strings.TrimSpace(string(load)))
	}
}
