package webhook

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/theappliance/appliance/scheduler/lane"
)

var dialer net.Dialer

var testSecret = NewSecret()

func message(url string) Message {
	return Message{URL: url, ID: "msg_1", Time: time.Now(), Body: []byte(`{"type":"webhook.test"}`), Secrets: []string{testSecret}}
}

// countConns serves h and counts the connections it accepted.
func countConns(t *testing.T, h http.Handler) (*httptest.Server, *atomic.Int32) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

// TestSenderKeepsConnections: attempts to one receiver share a connection; the request carries the
// Standard Webhooks headers and body; an answer that must not be reused (Connection: close, a body over
// BodyCap) is not.
func TestSenderKeepsConnections(t *testing.T) {
	var got []string
	var mu sync.Mutex
	srv, conns := countConns(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := Verify(testSecret, r.Header, body, time.Now(), time.Minute); err != nil {
			t.Errorf("the receiver cannot verify the request: %v", err)
		}
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("webhook-id")+" "+r.Header.Get("Content-Type")+" "+r.Host+" "+string(body))
		mu.Unlock()
		switch r.URL.Query().Get("answer") {
		case "close":
			w.Header().Set("Connection", "close")
		case "long":
			w.Write([]byte(strings.Repeat("x", BodyCap+100)))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	s := NewSender(dialer.DialContext, 5*time.Second, lane.New(1))
	defer s.Close()
	for range 3 {
		if res := s.Send(t.Context(), message(srv.URL+"/hook")); !res.OK() || res.Status != 204 {
			t.Fatalf("send: %+v", res)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("3 attempts used %d connections, want 1", n)
	}
	for _, answer := range []string{"close", "long"} {
		s := NewSender(dialer.DialContext, 5*time.Second, nil) // nothing kept yet
		before := conns.Load()
		for _, q := range []string{"?answer=" + answer, ""} {
			if res := s.Send(t.Context(), message(srv.URL+"/hook"+q)); !res.OK() {
				t.Fatalf("%s: %+v", answer, res)
			}
		}
		if n := conns.Load() - before; n != 2 {
			t.Fatalf("an attempt after an answer with %q used %d connections in all, want 2 (not reused)", answer, n)
		}
		s.Close()
	}
	if want := `POST /hook msg_1 application/json ` + strings.TrimPrefix(srv.URL, "http://") + ` {"type":"webhook.test"}`; got[0] != want {
		t.Fatalf("received %q", got[0])
	}
}

// TestSenderRetriesAClosedIdleConnection: a receiver that closed a kept connection (its idle timeout) gets
// the attempt on a new one; the caller sees one successful attempt.
func TestSenderRetriesAClosedIdleConnection(t *testing.T) {
	srv, conns := countConns(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	s := NewSender(dialer.DialContext, 5*time.Second, nil)
	defer s.Close()
	if res := s.Send(t.Context(), message(srv.URL)); !res.OK() {
		t.Fatal(res)
	}
	srv.CloseClientConnections() // the kept connection is gone on the receiver's side
	time.Sleep(20 * time.Millisecond)
	if res := s.Send(t.Context(), message(srv.URL)); !res.OK() {
		t.Fatalf("after the receiver closed the idle connection: %+v", res)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

// TestSenderAnswers: the status, Retry-After on 429, an interim 100 before the final answer, redirects
// not followed, https with the configured roots, and no answer within the timeout.
func TestSenderAnswers(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/busy", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "120")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/elsewhere", http.StatusFound) })
	mux.HandleFunc("/gone", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusGone) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // so that the server notices the client going away
		select {
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	s := NewSender(dialer.DialContext, 300*time.Millisecond, lane.New(1))
	defer s.Close()
	for path, want := range map[string]int{"/busy": 429, "/moved": 302, "/gone": 410} {
		res := s.Send(t.Context(), message(srv.URL+path))
		if res.Err != nil || res.Status != want {
			t.Errorf("%s: %+v, want status %d", path, res, want)
		}
		if path == "/busy" && res.RetryAfter != 2*time.Minute {
			t.Errorf("Retry-After: %v", res.RetryAfter)
		}
	}
	if res := s.Send(t.Context(), message(srv.URL+"/slow")); res.Err == nil || res.Status != 0 {
		t.Errorf("no answer within the timeout: %+v", res)
	}

	// A raw receiver: 100 Continue, then the answer.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		fmt.Fprint(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
	}()
	if res := s.Send(t.Context(), message("http://"+l.Addr().String())); res.Status != 202 {
		t.Errorf("after an interim answer: %+v", res)
	}

	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer tlsSrv.Close()
	if res := s.Send(t.Context(), message(tlsSrv.URL)); res.Err == nil {
		t.Errorf("https to a certificate no root vouches for: %+v", res)
	}
	roots := x509.NewCertPool()
	roots.AddCert(tlsSrv.Certificate())
	s.TLS = &tls.Config{RootCAs: roots}
	if res := s.Send(t.Context(), message(tlsSrv.URL)); res.Status != 204 {
		t.Errorf("https with its root: %+v", res)
	}
}

// TestSenderLeavesTheLaneWhileWaiting: with a lane one wide, attempts to receivers that never answer do not
// keep an attempt to a fast receiver (or anything else in the lane) waiting.
func TestSenderLeavesTheLaneWhileWaiting(t *testing.T) {
	hang := make(chan struct{})
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer stuck.Close()
	defer close(hang)
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer fast.Close()
	ln := lane.New(1)
	s := NewSender(dialer.DialContext, 10*time.Second, ln)
	defer s.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for range 3 {
		go s.Send(ctx, message(stuck.URL))
	}
	time.Sleep(100 * time.Millisecond) // the three are waiting for their answers
	done := make(chan Result, 1)
	go func() { done <- s.Send(t.Context(), message(fast.URL)) }()
	select {
	case res := <-done:
		if !res.OK() {
			t.Fatal(res)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an attempt waited behind attempts to a receiver that does not answer")
	}
	ln.Do(func() {}) // and the lane is free
}

// TestSenderClosesExpiredIdleConnections: kept connections that no attempt takes again are closed once
// they have been idle for the sender's idle time, whatever their destination; then nothing is left.
func TestSenderClosesExpiredIdleConnections(t *testing.T) {
	var closed atomic.Int64
	serve := func() *httptest.Server {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
		srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed {
				closed.Add(1)
			}
		}
		srv.Start()
		t.Cleanup(srv.Close)
		return srv
	}
	a, b := serve(), serve()
	s := NewSender(dialer.DialContext, 5*time.Second, nil)
	s.idleFor = time.Second
	defer s.Close()
	for _, u := range []string{a.URL, b.URL} {
		if res := s.Send(t.Context(), message(u)); !res.OK() {
			t.Fatalf("send: %+v", res)
		}
	}
	if closed.Load() != 0 {
		t.Fatal("a kept connection closed at once")
	}
	for deadline := time.Now().Add(5 * time.Second); closed.Load() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the 2 idle connections closed after their idle time", closed.Load())
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.idle) != 0 || s.sweeper != nil {
		t.Fatalf("after the sweep: %d destinations kept, sweeper %v", len(s.idle), s.sweeper != nil)
	}
}
