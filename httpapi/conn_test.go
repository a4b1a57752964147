package httpapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/appliancetest"
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

// TestLimitListener: past the cap a connection waits until another closes.
func TestLimitListener(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	go srv.Serve(LimitListener(ln, 1))
	t.Cleanup(func() { srv.Close() })
	hold, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		res, err := http.Get("http://" + ln.Addr().String() + "/")
		if err == nil {
			res.Body.Close()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a second connection was served while the first held the only slot: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	hold.Close()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
