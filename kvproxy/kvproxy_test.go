package kvproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance/certs"
)

type noStores struct{}

func (noStores) ResolveToken(ctx context.Context, token string) (string, error) {
	return "", errors.New("no store")
}

func setup(t *testing.T) (*Server, *certs.CA) {
	t.Helper()
	ca, err := certs.LoadOrCreateCA(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ca.ServerTLS("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Addr: "127.0.0.1:0", TLS: cfg, Resolver: noStores{}}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	return s, ca
}

// send writes one RESP command and reads one line of reply.
func send(t *testing.T, c *tls.Conn, r *bufio.Reader, args ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(line)
}

func TestTLSFrontRefusesWithoutValidToken(t *testing.T) {
	t.Parallel()
	s, ca := setup(t)
	c, err := tls.Dial("tcp", s.ListenAddr(), &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got := send(t, c, r, "PING"); !strings.HasPrefix(got, "-NOAUTH") {
		t.Fatalf("PING before AUTH: %q", got)
	}
	if got := send(t, c, r, "AUTH", "nope"); !strings.HasPrefix(got, "-WRONGPASS") {
		t.Fatalf("AUTH with unknown token: %q", got)
	}
	if got := send(t, c, r, "AUTH"); !strings.HasPrefix(got, "-ERR wrong number") {
		t.Fatalf("AUTH arity: %q", got)
	}
	if st, msg := s.Health(t.Context()); st != "operational" {
		t.Fatalf("health: %s %s", st, msg)
	}
}

func TestPlaintextIsRefused(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	// A plaintext RESP client gets no RESP answer: the listener only speaks TLS.
	out, err := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", strings.Split(s.ListenAddr(), ":")[1], "PING").CombinedOutput()
	if errors.Is(err, exec.ErrNotFound) {
		t.Fatal("redis-cli is not installed (Debian redis-tools)")
	}
	if strings.Contains(string(out), "PONG") || strings.Contains(string(out), "NOAUTH") {
		t.Fatalf("plaintext client got a RESP answer: %s", out)
	}
}

func TestStopMakesHealthDown(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	if err := s.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(t.Context()); err != nil {
		t.Fatal("second Stop:", err)
	}
	if st, msg := s.Health(t.Context()); st != "down" {
		t.Fatalf("health after stop: %s %s", st, msg)
	}
}
