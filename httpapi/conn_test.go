package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/httpapi/connlimit"
)

// rawRequest sends a whole request on a new connection, then reads the answer (as most clients do: the
// body first, the answer after).
func rawRequest(t *testing.T, addr, head string, body []byte) (*http.Response, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, head); err != nil {
		return nil, err
	}
	if _, err := c.Write(body); err != nil {
		return nil, err
	}
	return http.ReadResponse(bufio.NewReader(c), nil)
}

// TestOversizeBodyGetsItsAnswer: a 10 MB body is answered 413 with a JSON error that the client reads
// after sending the whole body (before, the connection was reset and 19 of 19 clients saw no answer).
func TestOversizeBodyGetsItsAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := bytes.Repeat([]byte("x"), 10<<20)
	head := "POST /v1/projects HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer " + b.adminKey +
		"\r\nContent-Type: application/json\r\nContent-Length: " + itoa(len(body)) + "\r\n\r\n"
	res, err := rawRequest(t, strings.TrimPrefix(b.ts.URL, "http://"), head, body)
	if err != nil {
		t.Fatalf("the client saw no answer: %v", err)
	}
	var e errorBody
	if res.StatusCode != http.StatusRequestEntityTooLarge || json.NewDecoder(res.Body).Decode(&e) != nil || e.Error == "" {
		t.Fatalf("%d %v", res.StatusCode, e)
	}
}

// TestErrorsNetHTTPWritesAreJSON: errors net/http composes (ServeContent's 416 through http.Error) and
// headers over the API's limit (431) are JSON like every other.
func TestErrorsNetHTTPWritesAreJSON(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	w := &jsonErrors{ResponseWriter: rec}
	req := httptest.NewRequest("GET", "/x", nil)
	req.Header.Set("Range", "bytes=1000-2000")
	http.ServeContent(w, req, "dump", time.Now(), strings.NewReader("short"))
	var e errorBody
	if rec.Code != http.StatusRequestedRangeNotSatisfiable || rec.Header().Get("Content-Type") != "application/json" ||
		json.Unmarshal(rec.Body.Bytes(), &e) != nil || !strings.Contains(e.Error, "range") {
		t.Fatalf("416: %d %q %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}

	b := setup(t)
	r := b.call(t, "GET", "/v1/me", http.Header{"Authorization": {"Bearer " + b.adminKey}, "X-Big": {strings.Repeat("a", MaxHeaderBytes+1)}}, nil)
	if r.status != http.StatusRequestHeaderFieldsTooLarge || r.json["error"] == nil {
		t.Fatalf("431: %d %s", r.status, r.body)
	}
}

// TestSlowBodyIsCutOff: a client that stops sending its body does not hold the connection past the
// request's read deadline.
func TestSlowBodyIsCutOff(t *testing.T) {
	t.Parallel()
	e := appliancetest.New(t, appliancetest.Options{})
	api := New(e.Svc, Options{Log: slog.New(slog.DiscardHandler), ReadTimeout: 300 * time.Millisecond})
	ts := httptest.NewServer(api)
	t.Cleanup(func() { api.Close(); ts.Close() })
	c, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /v1/projects HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer "+e.Bootstrap.APIKey+
		"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"name\":")
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("%d", res.StatusCode)
	}
}

// serveAPI serves the API over TLS as up does (HTTPServer, HTTP/1.1 and HTTP/2) within lim; onState, when
// given, sees every connection state change after the listener.
func serveAPI(t *testing.T, lim connlimit.Limits, onState ...func(http.ConnState)) (addr string, e *appliancetest.Env) {
	t.Helper()
	e = appliancetest.New(t, appliancetest.Options{})
	api := New(e.Svc, Options{Log: slog.New(slog.DiscardHandler)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, cl := HTTPServer(api, ln, lim, slog.New(slog.DiscardHandler))
	if srv.TLSConfig, err = e.CA.ServerTLS("127.0.0.1", "localhost"); err != nil {
		t.Fatal(err)
	}
	if len(onState) > 0 {
		inner := srv.ConnState
		srv.ConnState = func(c net.Conn, st http.ConnState) { inner(c, st); onState[0](st) }
	}
	go srv.ServeTLS(cl, "", "")
	t.Cleanup(func() { api.Close(); srv.Close() })
	return ln.Addr().String(), e
}

// apiClient is a client with its own connections, from the local address from (e.g. 127.0.0.2), speaking
// HTTP/2 when h2 is set; every request ends within 15 s.
func apiClient(e *appliancetest.Env, from string, h2 bool) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	tr := &http.Transport{DialContext: d.DialContext, TLSClientConfig: &tls.Config{RootCAs: e.CA.Pool(), ServerName: "localhost"},
		ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: 15 * time.Second}
}

func getHealthz(c *http.Client, addr string, h2 bool) error {
	res, err := c.Get("https://" + addr + "/healthz")
	if err != nil {
		return err
	}
	defer res.Body.Close()
	io.Copy(io.Discard, res.Body)
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", res.StatusCode)
	}
	if h2 && res.ProtoMajor != 2 {
		return fmt.Errorf("served over %s, not HTTP/2", res.Proto)
	}
	return nil
}

// TestIdleConnectionsDoNotLockOutNewClients: with the API at its connection cap, made of idle keep-alive
// connections (HTTP/1.1, and HTTP/2 ones between streams), a new client is served at once: the oldest idle
// connection makes room (before, the new client waited for the idle timeout, 2 minutes).
func TestIdleConnectionsDoNotLockOutNewClients(t *testing.T) {
	t.Parallel()
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "http1", true: "http2"}[h2], func(t *testing.T) {
			t.Parallel()
			const max = 3
			addr, e := serveAPI(t, connlimit.Limits{Max: max})
			for range max { // each client keeps its one connection open, idle
				c := apiClient(e, "127.0.0.1", h2)
				t.Cleanup(c.CloseIdleConnections)
				if err := getHealthz(c, addr, h2); err != nil {
					t.Fatal(err)
				}
			}
			c := apiClient(e, "127.0.0.1", h2)
			defer c.CloseIdleConnections()
			if err := getHealthz(c, addr, h2); err != nil {
				t.Fatalf("a new client at the cap of idle connections: %v", err)
			}
		})
	}
}

// TestOneAddressHoldsItsShare: one client address holds at most its share of the API's connections
// (more are closed at once), and a client from another address is still served.
func TestOneAddressHoldsItsShare(t *testing.T) {
	t.Parallel()
	const perAddr = 3
	addr, e := serveAPI(t, connlimit.Limits{Max: 2 * perAddr, PerAddr: perAddr})
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	open := 0
	for range 3 * perAddr { // raw connections that start a request and never finish it: busy, not idle
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		tc := tls.Client(c, &tls.Config{RootCAs: e.CA.Pool(), ServerName: "localhost", NextProtos: []string{"http/1.1"}})
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		if tc.Handshake() == nil {
			if _, err := io.WriteString(tc, "GET /healthz HTTP/1.1\r\nHost: a\r\n"); err == nil {
				// Refused ones are closed before or right after the handshake: a read tells.
				tc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
				if _, err := tc.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
					open++
				}
			}
		}
	}
	if open != perAddr {
		t.Fatalf("%d connections of one address stay open, want %d", open, perAddr)
	}
	c := apiClient(e, "127.0.0.1", false)
	defer c.CloseIdleConnections()
	if err := getHealthz(c, addr, false); err != nil {
		t.Fatalf("a client from another address: %v", err)
	}
}

// TestBusyConnectionsMakeTheNextWait: when every connection is busy (a request is being served), the next
// waits until one closes (busy connections are not closed for it).
func TestBusyConnectionsMakeTheNextWait(t *testing.T) {
	t.Parallel()
	busy := make(chan struct{}, 1)
	addr, e := serveAPI(t, connlimit.Limits{Max: 1}, func(st http.ConnState) {
		if st == http.StateActive {
			select {
			case busy <- struct{}{}:
			default:
			}
		}
	})
	hold, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: e.CA.Pool(), ServerName: "localhost", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	// A request whose body has not all come: its handler waits for it.
	io.WriteString(hold, "POST /v1/projects HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer "+e.Bootstrap.APIKey+
		"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"name\":")
	<-busy // the server has the request (until then the connection has sent nothing it knows of)
	got := make(chan error, 1)
	go func() { got <- getHealthz(apiClient(e, "127.0.0.1", false), addr, false) }()
	select {
	case err := <-got:
		t.Fatalf("a second connection was served while the first, busy, held the only slot: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	hold.Close()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestOversizeBodyGetsItsAnswerOverHTTP2: over HTTP/2 too, a body over the limit is answered 413 with a
// JSON error, not a reset stream.
func TestOversizeBodyGetsItsAnswerOverHTTP2(t *testing.T) {
	t.Parallel()
	addr, e := serveAPI(t, connlimit.Limits{})
	c := apiClient(e, "127.0.0.1", true)
	defer c.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", "https://"+addr+"/v1/projects", bytes.NewReader(bytes.Repeat([]byte("x"), 10<<20)))
	req.Header.Set("Authorization", "Bearer "+e.Bootstrap.APIKey)
	req.Header.Set("Content-Type", "application/json")
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("the client saw no answer: %v", err)
	}
	defer res.Body.Close()
	var eb errorBody
	if res.ProtoMajor != 2 || res.StatusCode != http.StatusRequestEntityTooLarge || json.NewDecoder(res.Body).Decode(&eb) != nil || eb.Error == "" {
		t.Fatalf("%s %d %v", res.Proto, res.StatusCode, eb)
	}
}

// TestStatusDetailsAreOperators: the public /status names each component and its status, but not the
// data directory, process counts or webhook counts; a request with the metrics token, or on the
// operator listener, gets each component's details.
func TestStatusDetailsAreOperators(t *testing.T) {
	t.Parallel()
	e := appliancetest.New(t, appliancetest.Options{})
	e.Svc.Probe.Register("instance-supervisor", func(context.Context) (string, string) {
		return appliance.StatusDegraded, "2 of 3 watched processes running, 1 restarting"
	})
	e.Svc.Probe.Register("webhooks", func(context.Context) (string, string) { // as WebhookHealth words it
		return appliance.StatusOperational, "4 endpoints (1 failing, 0 disabled), 7 deliveries pending"
	})
	get := func(h http.Handler, remote, auth string) (int, string) {
		req := httptest.NewRequest("GET", "/status", nil)
		req.RemoteAddr = remote
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code, w.Body.String()
	}
	details := []string{e.DB.Path(), "watched processes", "deliveries pending"}
	plain := New(e.Svc, Options{Log: slog.New(slog.DiscardHandler)})
	tok := New(e.Svc, Options{Log: slog.New(slog.DiscardHandler), MetricsToken: "s3cret-token", OperatorListener: true})
	t.Cleanup(func() { plain.Close(); tok.Close() })
	for _, c := range []struct {
		name   string
		h      http.Handler
		remote string
		auth   string
		want   bool // the details
	}{
		{"a remote client", plain, "203.0.113.7:4000", "", false},
		{"a loopback client (a reverse proxy's)", plain, "127.0.0.1:4000", "", false},
		{"a wrong token", tok, "203.0.113.7:4000", "Bearer wrong", false},
		{"the metrics token", tok, "203.0.113.7:4000", "Bearer s3cret-token", true},
		{"the operator listener", plain.OperatorHandler(), "203.0.113.7:4000", "", true},
	} {
		code, body := get(c.h, c.remote, c.auth)
		var st appliance.Status
		if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil || st.Status != appliance.StatusDegraded || len(st.Components) != 3 {
			t.Fatalf("%s: %d %s", c.name, code, body)
		}
		for _, d := range details {
			if strings.Contains(body, d) != c.want {
				t.Errorf("%s: details shown %v, want %v: %q in %s", c.name, !c.want, c.want, d, body)
			}
		}
	}
}

// TestMetricsOnTheOperatorListener: with an operator listener, it answers /metrics to any client that
// reaches it and nothing but /metrics and /status; the API's listener no longer answers /metrics to
// loopback clients (a reverse proxy on the same machine would pass them on).
func TestMetricsOnTheOperatorListener(t *testing.T) {
	t.Parallel()
	e := appliancetest.New(t, appliancetest.Options{})
	api := New(e.Svc, Options{Log: slog.New(slog.DiscardHandler), OperatorListener: true})
	t.Cleanup(api.Close)
	get := func(h http.Handler, path, remote string) int {
		req := httptest.NewRequest("GET", path, nil)
		req.RemoteAddr = remote
		req.Header.Set("Authorization", "Bearer "+e.Bootstrap.APIKey)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code >= 400 && !strings.Contains(w.Body.String(), `"error"`) {
			t.Fatalf("%s: %d %s", path, w.Code, w.Body)
		}
		return w.Code
	}
	if c := get(api, "/metrics", "127.0.0.1:4000"); c != http.StatusForbidden {
		t.Errorf("/metrics on the API's listener to a loopback client: %d", c)
	}
	op := api.OperatorHandler()
	if c := get(op, "/metrics", "203.0.113.7:4000"); c != http.StatusOK {
		t.Errorf("/metrics on the operator listener: %d", c)
	}
	if c := get(op, "/v1/me", "203.0.113.7:4000"); c != http.StatusNotFound {
		t.Errorf("/v1/me on the operator listener: %d", c)
	}
}
