package wake_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/postgres/pgtest"
	"github.com/theappliance/appliance/appliance/wake"
)

// suspended is a real PostgreSQL, stopped, whose port a Front holds; its Waker starts the server and counts
// the wakes. fail, when set, makes the wake fail instead.
type suspended struct {
	srv   *pgtest.Server
	front *wake.Front
	wakes atomic.Int32
	fail  atomic.Pointer[error]
	db    string
	role  string
}

func setup(t *testing.T, startupTimeout time.Duration) *suspended {
	t.Helper()
	s := &suspended{srv: pgtest.Start(t, postgres.Settings{})}
	var conn *pgx.Conn
	s.db, s.role, conn = s.srv.Tenant(t)
	conn.Close(context.Background())
	if err := s.srv.Instance.Stop(context.Background(), nil, daemon.StopFast); err != nil {
		t.Fatal(err)
	}
	s.front = wake.New(wake.Config{StartupTimeout: startupTimeout, Waker: wake.WakerFunc(func(ctx context.Context, id string) error {
		s.wakes.Add(1)
		if p := s.fail.Load(); p != nil {
			return *p
		}
		return s.srv.Instance.Start(ctx, nil)
	})})
	t.Cleanup(func() { s.front.Close() })
	s.hold(t)
	return s
}

func (s *suspended) serverTLS(t *testing.T) *tls.Config {
	cert, err := tls.LoadX509KeyPair(s.srv.Instance.CertFile(), s.srv.Instance.KeyFile())
	if err != nil {
		t.Error(err)
		return nil
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}}
}

// hold gives the port to the front; the Waker's start binds it once the front released it.
func (s *suspended) hold(t *testing.T) {
	t.Helper()
	if err := s.front.Hold("prj_test", s.serverTLS(t), s.srv.Instance.Port); err != nil {
		t.Fatal(err)
	}
}

func (s *suspended) config(t *testing.T, sslmode string) *pgx.ConnConfig {
	cfg := s.srv.TenantConfig(t, s.db, s.role)
	if sslmode != "verify-full" {
		c2, err := pgx.ParseConfig(strings.Replace(cfg.ConnString(), "sslmode=verify-full", "sslmode="+sslmode, 1))
		if err != nil {
			t.Fatal(err)
		}
		cfg = c2
	}
	return cfg
}

func selectOne(ctx context.Context, cfg *pgx.ConnConfig) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return err
	}
	if one != 1 {
		return errors.New("SELECT 1 answered " + strconv.Itoa(one))
	}
	return nil
}

func TestWakeOnConnectVerifyFull(t *testing.T) {
	s := setup(t, 0)
	if err := selectOne(t.Context(), s.config(t, "verify-full")); err != nil {
		t.Fatalf("the first connection: %v", err)
	}
	if n := s.wakes.Load(); n != 1 {
		t.Fatalf("wakes = %d, want 1", n)
	}
	if s.front.Holding("prj_test") {
		t.Fatal("the front still holds the port after the wake")
	}
	// The next connection goes to the server itself.
	if err := selectOne(t.Context(), s.config(t, "verify-full")); err != nil {
		t.Fatal(err)
	}
	if n := s.wakes.Load(); n != 1 {
		t.Fatalf("wakes = %d after a second connection, want 1", n)
	}
}

func TestWakeConcurrentFirstConnections(t *testing.T) {
	s := setup(t, 0)
	// The 20 connections are all made (accepted by the kernel on the front's socket) before any sends its
	// opening packet, so all of them are the front's: a connection made after the front handed the port to
	// the starting server is not a first connection (see bench/README.md, the hand-over's window).
	const n = 20
	var dialed sync.WaitGroup
	dialed.Add(n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := s.config(t, "verify-full")
			cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
				var d net.Dialer
				c, err := d.DialContext(ctx, network, addr)
				dialed.Done()
				dialed.Wait()
				return c, err
			}
			errs[i] = selectOne(t.Context(), cfg)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("connection %d: %v", i, err)
		}
	}
	if got := s.wakes.Load(); got != 1 {
		t.Fatalf("wakes = %d, want 1", got)
	}
}

func TestSilentOrForeignConnectionWakesNothing(t *testing.T) {
	s := setup(t, 300*time.Millisecond)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.srv.Instance.Port))
	for _, send := range []string{"", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "\x00\x00\x00\x08\x00\x01\x02\x03"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if send != "" {
			if _, err := c.Write([]byte(send)); err != nil {
				t.Fatal(err)
			}
		}
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		b, err := io.ReadAll(c) // the front closes it: after the timeout, or at once for foreign bytes
		c.Close()
		if send != "" && errors.Is(err, syscall.ECONNRESET) {
			err = nil // closed with bytes it did not read: the kernel resets
		}
		if err != nil || len(b) != 0 {
			t.Fatalf("sent %q: read %q, %v; want the connection closed with nothing said", send, b, err)
		}
	}
	if n := s.wakes.Load(); n != 0 {
		t.Fatalf("wakes = %d, want 0", n)
	}
	if !s.front.Holding("prj_test") {
		t.Fatal("the front let go of the port")
	}
}

func TestFailedWakeAnswersErrorResponse(t *testing.T) {
	s := setup(t, 0)
	boom := errors.New("disk full (test)")
	s.fail.Store(&boom)
	for _, mode := range []string{"verify-full", "disable"} {
		err := selectOne(t.Context(), s.config(t, mode))
		if err == nil || !strings.Contains(err.Error(), "disk full (test)") || !strings.Contains(err.Error(), "57P03") {
			t.Fatalf("sslmode=%s: %v; want the server's error naming the reason", mode, err)
		}
	}
	if n := s.wakes.Load(); n != 2 {
		t.Fatalf("wakes = %d, want 2 (one per connection: a failed wake is tried again)", n)
	}
	// The front still holds the port; a wake that works then serves the client.
	s.fail.Store(nil)
	if err := selectOne(t.Context(), s.config(t, "verify-full")); err != nil {
		t.Fatal(err)
	}
}

func TestReadOpening(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint32
		ok   bool
	}{
		{"\x00\x00\x00\x08\x04\xd2\x16\x2f", 80877103, true},                                 // SSLRequest
		{"\x00\x00\x00\x08\x04\xd2\x16\x30", 80877104, true},                                 // GSSENCRequest
		{"\x00\x00\x00\x09\x00\x03\x00\x00\x00", 196608, true},                               // an empty StartupMessage 3.0
		{"\x00\x00\x00\x10\x04\xd2\x16\x2e\x00\x00\x00\x01\x00\x00\x00\x02", 80877102, true}, // CancelRequest
		{"\x00\x00\x00\x09\x04\xd2\x16\x2f\x00", 0, false},                                   // SSLRequest of the wrong length
		{"\x00\x01\x00\x00\x00\x03\x00\x00", 0, false},                                       // a startup packet too long
		{"\x16\x03\x01\x02\x00\x01\x00\x01", 0, false},                                       // a TLS ClientHello
		{"\x00\x00\x00", 0, false},                                                           // short
	} {
		_, code, err := wake.ReadOpening(strings.NewReader(tc.in))
		if (err == nil) != tc.ok || code != tc.want {
			t.Errorf("%q: code %d, err %v; want %d, ok %v", tc.in, code, err, tc.want, tc.ok)
		}
	}
}
