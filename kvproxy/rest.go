package kvproxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/theappliance/appliance/httpapi/connlimit"
	"github.com/theappliance/appliance/scheduler/lane"
)

// MaxRESTBody is the largest REST request body, as Upstash caps it (413 beyond).
const MaxRESTBody = 1 << 20

// REST is the Upstash-compatible REST front: a command in the path (/set/foo/bar, with a POST body as its
// last argument and query parameters after it) or as a JSON array body on POST /, POST /pipeline and
// POST /multi-exec with an array of commands. Replies are {"result": …} or {"error": …} with Upstash's
// status codes (400 for a command error, 401 for a wrong token, 405, 413); with the request header
// Upstash-Encoding: base64 every string of a result is base64 (what @upstash/redis asks for by default).
type REST struct {
	Addr string
	// Listener, when set, is served instead of a listener on Addr (as Server's).
	Listener net.Listener
	TLS      *tls.Config
	Resolver Resolver
	Log      *slog.Logger
	// Limits bound the front's connections as the RESP front's (a field left 0: DefaultLimits'): a
	// connection is authenticated once a request on it brought a valid token.
	Limits connlimit.Limits
	// Lane is the background lane that yields to the front's requests (nil: none; scheduler/lane).
	Lane *lane.Lane

	pool *pool
	mu   sync.Mutex
	srv  *http.Server
	ln   *connlimit.Listener
	stop chan struct{}
	done chan struct{}
}

// Start listens with TLS and serves in the background.
func (s *REST) Start(ctx context.Context) error {
	if s.TLS == nil {
		return errors.New("kvproxy: TLS config required (no plaintext listener)")
	}
	raw := s.Listener
	if raw == nil {
		var err error
		if raw, err = net.Listen("tcp", s.Addr); err != nil {
			return fmt.Errorf("kv REST listen on %s: %w", s.Addr, err)
		}
	}
	s.Limits = limits(s.Limits)
	ln := connlimit.New(raw, s.Limits)
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pool, s.ln, s.stop, s.done = newPool(), ln, make(chan struct{}), make(chan struct{})
	s.srv = &http.Server{Handler: s, TLSConfig: s.TLS.Clone(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn), ConnState: ln.ConnState,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) }}
	go s.srv.ServeTLS(ln, "", "")
	go func() {
		defer close(s.done)
		t := time.NewTicker(15 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				s.pool.sweep()
			case <-s.stop:
				return
			}
		}
	}()
	return nil
}

// Stop ends the server and closes the store connections it keeps.
func (s *REST) Stop(ctx context.Context) error {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	close(s.stop)
	<-s.done
	err := srv.Shutdown(ctx)
	srv.Close()
	s.pool.closeAll()
	return err
}

// ListenAddr is the bound address.
func (s *REST) ListenAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Health proves the listener completes a TLS handshake.
func (s *REST) Health(ctx context.Context) (string, string) {
	return probeTLS(ctx, s.ListenAddr(), "TLS REST listener")
}

// connKey holds a request's connection in its context.
type connKey struct{}

// restError answers {"error": msg} with status.
func restError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// noPool are commands after which a connection is not reused (they change its state or keep it busy).
var noPool = map[string]bool{"select": true, "hello": true, "reset": true, "auth": true, "client": true, "multi": true,
	"exec": true, "discard": true, "watch": true, "unwatch": true, "readonly": true, "readwrite": true}

// subscribing commands turn a connection into a pub/sub one: REST cannot answer them (RESP can).
var subscribing = map[string]bool{"subscribe": true, "psubscribe": true, "ssubscribe": true, "monitor": true, "sync": true, "psync": true}

func (s *REST) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.Lane.Foreground() // background work yields to requests (scheduler/lane)
	token := ""
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		token = strings.TrimSpace(h[len("Bearer "):])
	} else if t := r.URL.Query().Get("_token"); t != "" {
		token = t
	}
	if token == "" {
		restError(w, http.StatusUnauthorized, "Unauthorized: the store's token is missing (Authorization: Bearer <token>)")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodPost && r.Method != http.MethodPut && r.Method != http.MethodHead {
		restError(w, http.StatusMethodNotAllowed, "method not allowed: use GET, POST, PUT or HEAD")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRESTBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			connlimit.DrainRefusedBody(w, r)
			restError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("ERR max request size exceeded: the limit is %d bytes", MaxRESTBody))
			return
		}
		restError(w, http.StatusBadRequest, "ERR could not read the request body")
		return
	}
	var cmds [][]string
	var mode string // "", "pipeline" or "multi-exec"
	path := strings.Trim(r.URL.EscapedPath(), "/")
	switch {
	case path == "pipeline" || path == "multi-exec":
		mode = path
		if r.Method != http.MethodPost && r.Method != http.MethodPut {
			restError(w, http.StatusMethodNotAllowed, "method not allowed: "+path+" takes POST with a JSON array of commands")
			return
		}
		if cmds, err = parseCommands(body); err != nil {
			restError(w, http.StatusBadRequest, err.Error())
			return
		}
	case path == "":
		if r.Method != http.MethodPost && r.Method != http.MethodPut {
			// GET / is a health check of the front (Upstash answers it too).
			restError(w, http.StatusBadRequest, "ERR send a command: POST a JSON array such as [\"SET\",\"foo\",\"bar\"], or GET /set/foo/bar")
			return
		}
		cmd, err := parseCommand(body)
		if err != nil {
			restError(w, http.StatusBadRequest, err.Error())
			return
		}
		cmds = [][]string{cmd}
	default:
		cmd, err := pathCommand(path, r.URL.RawQuery, body)
		if err != nil {
			restError(w, http.StatusBadRequest, err.Error())
			return
		}
		cmds = [][]string{cmd}
	}
	for _, c := range cmds {
		if subscribing[strings.ToLower(c[0])] {
			restError(w, http.StatusBadRequest, fmt.Sprintf("ERR %s is not supported over REST: use the RESP endpoint", strings.ToUpper(c[0])))
			return
		}
	}
	ctx := r.Context()
	sock, err := s.Resolver.ResolveToken(ctx, token)
	if msg := refusalOf(err); msg != "" {
		restError(w, http.StatusForbidden, msg)
		return
	}
	if err != nil {
		restError(w, http.StatusUnauthorized, "Unauthorized: "+errWrongPass)
		return
	}
	if c, ok := ctx.Value(connKey{}).(net.Conn); ok {
		s.ln.Authenticated(c)
	}
	c, err := s.pool.get(ctx, sock, token)
	if err != nil {
		var re respError
		if errors.As(err, &re) {
			restError(w, http.StatusUnauthorized, "Unauthorized: "+string(re))
			return
		}
		restError(w, http.StatusServiceUnavailable, "ERR the key-value store does not answer")
		return
	}
	replies, reusable, err := exchange(ctx, c, mode, cmds)
	if err != nil {
		c.Close()
		restError(w, http.StatusServiceUnavailable, "ERR the key-value store closed the connection")
		return
	}
	if reusable {
		s.pool.put(c)
	} else {
		c.Close()
	}
	enc := encoder{b64: strings.EqualFold(r.Header.Get("Upstash-Encoding"), "base64")}
	w.Header().Set("Content-Type", "application/json")
	switch mode {
	case "":
		if e, ok := replies[0].(respError); ok {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]string{"error": string(e)})
			return
		}
		writeJSON(w, enc.result(nil, replies[0]))
	case "pipeline":
		writeJSON(w, enc.items(nil, replies))
	case "multi-exec":
		// MULTI's +OK and the +QUEUED replies are not the client's: EXEC's array is.
		for _, v := range replies[:len(replies)-1] {
			if e, ok := v.(respError); ok {
				w.WriteHeader(http.StatusBadRequest)
				json.NewEncoder(w).Encode(map[string]string{"error": string(e)})
				return
			}
		}
		switch v := replies[len(replies)-1].(type) {
		case respError:
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]string{"error": string(v)})
		case []any:
			writeJSON(w, enc.items(nil, v))
		default:
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]string{"error": "ERR the transaction was aborted"})
		}
	}
}

// exchange sends the commands in one write and reads their replies; reusable says whether the
// connection's state is untouched. A REST request ending early (the client went away) closes the
// connection, which ends a blocking command.
func exchange(ctx context.Context, c *storeConn, mode string, cmds [][]string) (replies []any, reusable bool, err error) {
	reusable = true
	for _, cmd := range cmds {
		if noPool[strings.ToLower(cmd[0])] {
			reusable = false
		}
	}
	if mode == "multi-exec" {
		cmds = append(append([][]string{{"MULTI"}}, cmds...), []string{"EXEC"})
	}
	for _, cmd := range cmds {
		c.write(cmd)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	if err := c.w.Flush(); err != nil {
		return nil, false, err
	}
	replies = make([]any, 0, len(cmds))
	for range cmds {
		v, err := c.read()
		if err != nil {
			return nil, false, err
		}
		replies = append(replies, v)
	}
	if !stop() {
		return replies, false, nil
	}
	return replies, reusable, nil
}

// parseCommand reads a JSON array of strings and numbers.
func parseCommand(body []byte) ([]string, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, errors.New("ERR the body must be a JSON array of strings and numbers, such as [\"SET\",\"foo\",\"bar\"]")
	}
	return commandOf(raw)
}

// parseCommands reads a JSON array of commands.
func parseCommands(body []byte) ([][]string, error) {
	var raw [][]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, errors.New("ERR the body must be a JSON array of commands, each an array of strings and numbers")
	}
	if len(raw) == 0 {
		return nil, errors.New("ERR the body holds no command")
	}
	out := make([][]string, 0, len(raw))
	for _, r := range raw {
		cmd, err := commandOf(r)
		if err != nil {
			return nil, err
		}
		out = append(out, cmd)
	}
	return out, nil
}

func commandOf(raw []json.RawMessage) ([]string, error) {
	if len(raw) == 0 {
		return nil, errors.New("ERR a command needs a name")
	}
	out := make([]string, 0, len(raw))
	for _, r := range raw {
		// r is one valid JSON value (Unmarshal checked the whole body): a string without escapes (and valid
		// UTF-8, which Unmarshal would have replaced) is its text between the quotes, a number its literal.
		r = bytes.TrimSpace(r)
		switch {
		case len(r) > 1 && r[0] == '"' && bytes.IndexByte(r, '\\') < 0 && utf8.Valid(r):
			out = append(out, string(r[1:len(r)-1]))
		case len(r) > 0 && r[0] == '"':
			var s string
			if err := json.Unmarshal(r, &s); err != nil {
				return nil, errors.New("ERR invalid JSON string in the command")
			}
			out = append(out, s)
		case len(r) > 0 && (r[0] == '-' || (r[0] >= '0' && r[0] <= '9')):
			out = append(out, string(r))
		default:
			return nil, fmt.Errorf("ERR command arguments must be strings or numbers, not %s", r)
		}
	}
	if out[0] == "" {
		return nil, errors.New("ERR a command needs a name")
	}
	return out, nil
}

// pathCommand reads /cmd/arg1/…: each segment unescaped; a body is appended, then the query parameters in
// their order (name, and value when not empty), except _token.
func pathCommand(path, rawQuery string, body []byte) ([]string, error) {
	var out []string
	for _, seg := range strings.Split(path, "/") {
		v, err := url.PathUnescape(seg)
		if err != nil {
			return nil, errors.New("ERR invalid escape in the path")
		}
		out = append(out, v)
	}
	if len(body) > 0 {
		out = append(out, string(body))
	}
	for _, kv := range strings.Split(rawQuery, "&") {
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		k, err1 := url.QueryUnescape(k)
		v, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil {
			return nil, errors.New("ERR invalid escape in the query")
		}
		if k == "_token" {
			continue
		}
		out = append(out, k)
		if v != "" {
			out = append(out, v)
		}
	}
	if out[0] == "" {
		return nil, errors.New("ERR a command needs a name")
	}
	return out, nil
}

// encoder appends replies as JSON values: strings (base64 when asked), numbers, null, arrays; written
// by hand (no map, no reflection per request), what encoding/json wrote (its HTML escaping included).
type encoder struct{ b64 bool }

func (e encoder) str(b []byte, v []byte) []byte {
	if e.b64 {
		return append(base64.StdEncoding.AppendEncode(append(b, '"'), v), '"')
	}
	m, _ := json.Marshal(string(v))
	return append(b, m...)
}

func (e encoder) value(b []byte, v any) []byte {
	switch v := v.(type) {
	case status:
		return e.str(b, []byte(v))
	case []byte:
		return e.str(b, v)
	case int64:
		return strconv.AppendInt(b, v, 10)
	case respError:
		return appendError(b, v)
	case []any:
		b = append(b, '[')
		for i, x := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = e.value(b, x)
		}
		return append(b, ']')
	}
	return append(b, "null"...)
}

// result is {"result": v} (or {"error": …} for an error reply).
func (e encoder) result(b []byte, v any) []byte {
	if re, ok := v.(respError); ok {
		return appendError(b, re)
	}
	return append(e.value(append(b, `{"result":`...), v), '}')
}

// items is the per-command answer of a pipeline or a transaction.
func (e encoder) items(b []byte, vs []any) []byte {
	b = append(b, '[')
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = e.result(b, v)
	}
	return append(b, ']')
}

// appendError is {"error": msg}.
func appendError(b []byte, re respError) []byte {
	m, _ := json.Marshal(string(re))
	return append(append(append(b, `{"error":`...), m...), '}')
}

// writeJSON writes an encoded answer, with the newline encoding/json's Encoder ended it with.
func writeJSON(w http.ResponseWriter, b []byte) {
	w.Write(append(b, '\n'))
}
