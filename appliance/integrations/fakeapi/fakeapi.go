// Package fakeapi is the scaffold the providers' local fakes (deploybtest, edgectest, authatest,
// authctest) share: an HTTP server on a loopback port, closed at the test's end, that plays its platform
// down while Fail is in force, refuses a request without the bearer token the fake takes as its platform
// does, hands the rest to the fake's handler, and records every request with its answer's status; and
// the JSON answer. What a platform answers (its paths, its error shapes) stays in its fake.
package fakeapi

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
)

// Call is one request a fake answered.
type Call struct {
	Method        string
	Path          string // the URL path
	Query         string // the raw query
	Authorization string
	Body          []byte
	Status        int // the answer's
}

// Options say how a fake's platform refuses and fails.
type Options struct {
	// Token is the bearer token the fake takes, read at each request (nil: every request is let in).
	Token func() string
	// Refuse answers a request without Bearer Token(), as the platform does.
	Refuse func(w http.ResponseWriter)
	// Down answers every request while Fail(status) is in force, as the platform does when it is down
	// (nil: JSON {"error": "the fake is failing"} with the status).
	Down func(w http.ResponseWriter, status int)
}

// Server is a running fake's HTTP side. A fake embeds it: Calls, ResetCalls, Fail and Client are the
// fake's.
type Server struct {
	srv *httptest.Server
	o   Options

	mu    sync.Mutex
	calls []Call
	fail  int
}

// Start serves h behind the scaffold on a loopback port until tb ends.
func Start(tb testing.TB, h http.Handler, o Options) *Server {
	tb.Helper()
	s := &Server{o: o}
	s.srv = httptest.NewServer(s.wrap(h))
	tb.Cleanup(s.srv.Close)
	return s
}

// Root is the server's URL (scheme and host); a fake's API base URL is a path under it.
func (s *Server) Root() string { return s.srv.URL }

// Client is an HTTP client for the fake.
func (s *Server) Client() *http.Client { return s.srv.Client() }

// Calls returns the calls so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// ResetCalls forgets the calls so far.
func (s *Server) ResetCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = nil
}

// Fail makes every call answer status (a 5xx: the platform down) until Fail(0).
func (s *Server) Fail(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = status
}

// JSON answers v as JSON with status.
func JSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Answer is a handler of a function that answers a status and a value, sent as JSON.
func Answer(f func(r *http.Request) (int, any)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, v := f(r)
		JSON(w, status, v)
	})
}

// recorder holds an answer until its call is recorded: a client that has the answer finds the call in
// Calls.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) WriteHeader(s int)           { r.status = s }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }

func (s *Server) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := &recorder{header: w.Header(), status: http.StatusOK}
		s.mu.Lock()
		fail := s.fail
		s.mu.Unlock()
		switch {
		case fail != 0 && s.o.Down != nil:
			s.o.Down(rec, fail)
		case fail != 0:
			JSON(rec, fail, map[string]string{"error": "the fake is failing"})
		case s.o.Token != nil && r.Header.Get("Authorization") != "Bearer "+s.o.Token():
			s.o.Refuse(rec)
		default:
			next.ServeHTTP(rec, r)
		}
		s.mu.Lock()
		s.calls = append(s.calls, Call{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Authorization: r.Header.Get("Authorization"),
			Body: body, Status: rec.status})
		s.mu.Unlock()
		w.WriteHeader(rec.status)
		w.Write(rec.body.Bytes())
	})
}
