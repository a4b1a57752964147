package kvproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/theappliance/appliance/appliance/certs"
)

// oneStore resolves one token to one socket.
type oneStore struct{ token, sock string }

func (o oneStore) ResolveToken(ctx context.Context, token string) (string, error) {
	if token != o.token {
		return "", fmt.Errorf("no store")
	}
	return o.sock, nil
}

// relayEnv is a front (with loops relay loops: 0 is the default, -1 the goroutine relay) before a real
// redis-server on a unix socket whose tenant user has the token.
type relayEnv struct {
	s     *Server
	ca    *certs.CA
	sock  string
	token string
}

func newRelayEnv(t *testing.T, loops int) *relayEnv {
	t.Helper()
	dir := t.TempDir()
	e := &relayEnv{sock: filepath.Join(dir, "redis.sock"), token: "relay-test-token"}
	cmd := exec.Command("redis-server", "--port", "0", "--unixsocket", e.sock, "--save", "", "--appendonly", "no",
		"--dir", dir, "--user", TenantUser, "on", ">"+e.token, "~*", "&*", "+@all")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ca, err := certs.LoadOrCreateCA(filepath.Join(dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ca.ServerTLS("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	e.ca = ca
	e.s = &Server{Addr: "127.0.0.1:0", TLS: cfg, Resolver: oneStore{e.token, e.sock}, RelayLoops: loops}
	if err := e.s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.s.Stop(context.Background()) })
	return e
}

func (e *relayEnv) client(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: e.s.ListenAddr(), Password: e.token, MaxRetries: -1,
		TLSConfig: &tls.Config{RootCAs: e.ca.Pool(), ServerName: "localhost"}})
	t.Cleanup(func() { c.Close() })
	return c
}

// dial opens a TLS connection to the front and authenticates it.
func (e *relayEnv) dial(t *testing.T) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	c, err := tls.Dial("tcp", e.s.ListenAddr(), &tls.Config{RootCAs: e.ca.Pool(), ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := bufio.NewReader(c)
	if got := send(t, c, r, "AUTH", e.token); got != "+OK" {
		t.Fatalf("AUTH: %q", got)
	}
	return c, r
}

func resp(args ...string) []byte {
	var b bytes.Buffer
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	return b.Bytes()
}

// readBulk reads one bulk string reply.
func readBulk(t *testing.T, r *bufio.Reader) []byte {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(line, "$") {
		t.Fatalf("want a bulk string, got %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(r, b); err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

// relayModes runs a test with the event-loop relay (one loop, two loops) and the goroutine relay.
func relayModes(t *testing.T, f func(t *testing.T, loops int)) {
	for _, loops := range []int{0, 2, -1} {
		t.Run(fmt.Sprintf("loops=%d", loops), func(t *testing.T) {
			t.Parallel()
			f(t, loops)
		})
	}
}

// TestRelayLargeRepliesUnread: twenty GETs of a 4 MiB value pipelined while the client reads nothing, so
// the client's socket fills and the relay holds back (and stops reading the store); then every reply
// arrives whole and in order. Also a 32 MiB SET sent in one write.
func TestRelayLargeRepliesUnread(t *testing.T) {
	relayModes(t, func(t *testing.T, loops int) {
		e := newRelayEnv(t, loops)
		c, r := e.dial(t)
		big := make([]byte, 4<<20)
		rand.Read(big)
		if got := send(t, c, r, "SET", "big", string(big)); got != "+OK" {
			t.Fatalf("SET: %q", got)
		}
		var cmds []byte
		for range 20 {
			cmds = append(cmds, resp("GET", "big")...)
		}
		if _, err := c.Write(cmds); err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			if got := readBulk(t, r); !bytes.Equal(got, big) {
				t.Fatalf("reply %d: %d bytes, not the value", i, len(got))
			}
		}
		huge := make([]byte, 32<<20)
		rand.Read(huge)
		if got := send(t, c, r, "SET", "huge", string(huge)); got != "+OK" {
			t.Fatalf("SET huge: %q", got)
		}
		got, err := e.client(t).Get(t.Context(), "huge").Bytes()
		if err != nil || !bytes.Equal(got, huge) {
			t.Fatalf("GET huge: %d bytes, %v", len(got), err)
		}
	})
}

// TestRelayHalfClose: a client that ends its sending (close_notify, or a TCP half-close) gets the replies to
// what it sent, then the end of the connection.
func TestRelayHalfClose(t *testing.T) {
	relayModes(t, func(t *testing.T, loops int) {
		e := newRelayEnv(t, loops)
		for _, how := range []string{"close_notify", "tcp"} {
			c, r := e.dial(t)
			if _, err := c.Write(append(resp("SET", "k-"+how, "v"), resp("GET", "k-"+how)...)); err != nil {
				t.Fatal(err)
			}
			var err error
			if how == "close_notify" {
				err = c.CloseWrite()
			} else {
				err = c.NetConn().(*net.TCPConn).CloseWrite()
			}
			if err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(20 * time.Second)) // a relay that keeps the store's side open hangs here
			rest, err := io.ReadAll(r)
			if err != nil || string(rest) != "+OK\r\n$1\r\nv\r\n" {
				t.Fatalf("%s: after the half-close read %q, %v", how, rest, err)
			}
		}
	})
}

// TestRelayStoreEndCutsClient: the store closing a connection (a token rotation's CLIENT KILL) cuts the
// client off; other connections stay.
func TestRelayStoreEndCutsClient(t *testing.T) {
	relayModes(t, func(t *testing.T, loops int) {
		e := newRelayEnv(t, loops)
		c, r := e.dial(t)
		if got := send(t, c, r, "CLIENT", "SETNAME", "victim"); got != "+OK" {
			t.Fatalf("SETNAME: %q", got)
		}
		other := e.client(t)
		if err := other.Ping(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		list, err := other.ClientList(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		var id string
		for _, l := range strings.Split(list, "\n") {
			if strings.Contains(l, "name=victim") {
				id = strings.TrimPrefix(strings.Fields(l)[0], "id=")
			}
		}
		if err := other.Do(t.Context(), "CLIENT", "KILL", "ID", id).Err(); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := r.ReadByte(); err == nil {
			t.Fatalf("the client still reads (%q) after the store closed its connection", n)
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("the client was not cut off")
		}
		if err := other.Ping(t.Context()).Err(); err != nil {
			t.Fatalf("another connection: %v", err)
		}
	})
}

// TestRelayManyClients: fifty clients pipelining at once each get their own answers, and once they close,
// the front holds no connection (their slots freed).
func TestRelayManyClients(t *testing.T) {
	relayModes(t, func(t *testing.T, loops int) {
		e := newRelayEnv(t, loops)
		var wg sync.WaitGroup
		errs := make(chan error, 50)
		for i := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := redis.NewClient(&redis.Options{Addr: e.s.ListenAddr(), Password: e.token, MaxRetries: -1, PoolSize: 1,
					TLSConfig: &tls.Config{RootCAs: e.ca.Pool(), ServerName: "localhost"}})
				defer c.Close()
				key := fmt.Sprintf("n%d", i)
				for range 5 {
					p := c.Pipeline()
					for range 100 {
						p.Incr(t.Context(), key)
					}
					if _, err := p.Exec(t.Context()); err != nil {
						errs <- err
						return
					}
				}
				if n, err := c.Get(t.Context(), key).Int(); err != nil || n != 500 {
					errs <- fmt.Errorf("%s: %d, %v", key, n, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if open, _ := e.s.ln.Counts(); open == 0 {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("%d connections still held after their clients closed", open)
			}
		}
	})
}

// TestRelayStopEndsConnections: Stop ends relayed connections (the clients read the end) and returns.
func TestRelayStopEndsConnections(t *testing.T) {
	relayModes(t, func(t *testing.T, loops int) {
		e := newRelayEnv(t, loops)
		var readers []*bufio.Reader
		for range 5 {
			_, r := e.dial(t)
			readers = append(readers, r)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := e.s.Stop(ctx); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		for i, r := range readers {
			if b, err := r.ReadByte(); err == nil {
				t.Fatalf("client %d still reads (%q) after Stop", i, b)
			}
		}
	})
}
