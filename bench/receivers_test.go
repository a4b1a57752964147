package bench

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/appliancetest"
)

// The webhook receivers of the fan-out benchmark run in a process of their own (this test binary started
// again with receiverChild set), as real receivers run elsewhere: in the appliance's process they would
// compete with its API for the Go scheduler, which no receiver does in production.
const receiverChild = "BENCH_RECEIVER_CHILD"

func init() {
	if spec := os.Getenv(receiverChild); spec != "" {
		os.Exit(runReceivers(spec))
	}
}

// startReceivers starts fast receivers answering 204 at once and hanging ones that never answer, in a child
// process, and returns their URLs (fast first) and a function counting the deliveries the fast ones took.
func startReceivers(b *testing.B, e *appliancetest.Env, fast, hanging int) ([]string, func() int64) {
	b.Helper()
	own := e.Svc.Config().Ports
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d,%d,%d,%d", receiverChild, fast, hanging, own.First, own.Last))
	stdin, err := cmd.StdinPipe() // the child ends when it closes
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	var urls []string
	sc := bufio.NewScanner(out)
	for len(urls) < fast+hanging+1 && sc.Scan() {
		urls = append(urls, sc.Text())
	}
	if len(urls) < fast+hanging+1 {
		b.Fatalf("receivers: %d of %d URLs", len(urls), fast+hanging+1)
	}
	counter, urls := urls[0], urls[1:]
	client := &http.Client{Timeout: 10 * time.Second}
	return urls, func() int64 {
		res, err := client.Get(counter)
		if err != nil {
			b.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		n, err := strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64)
		if err != nil {
			b.Fatalf("receiver count %q: %v", body, err)
		}
		return n
	}
}

// runReceivers is the child: spec is "fast,hanging,first,last" (the appliance's own port range, which its
// outbound policy refuses). It prints the counter's URL, then the receivers' URLs, one per line.
func runReceivers(spec string) int {
	var fast, hanging, first, last int
	if _, err := fmt.Sscanf(spec, "%d,%d,%d,%d", &fast, &hanging, &first, &last); err != nil {
		fmt.Fprintln(os.Stderr, "receivers:", err)
		return 2
	}
	listen := func() net.Listener {
		for {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				fmt.Fprintln(os.Stderr, "receivers:", err)
				os.Exit(2)
			}
			if p := l.Addr().(*net.TCPAddr).Port; p < first || p > last {
				return l
			}
			l.Close()
		}
	}
	var delivered atomic.Int64
	done := make(chan struct{})
	serve := func(h http.HandlerFunc) {
		l := listen()
		fmt.Printf("http://%s\n", l.Addr())
		go http.Serve(l, h)
	}
	serve(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, delivered.Load()) })
	for range fast {
		serve(func(w http.ResponseWriter, r *http.Request) {
			delivered.Add(1)
			w.WriteHeader(http.StatusNoContent)
		})
	}
	for range hanging {
		serve(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-done:
			case <-r.Context().Done():
			}
		})
	}
	io.Copy(io.Discard, os.Stdin)
	close(done)
	return 0
}
