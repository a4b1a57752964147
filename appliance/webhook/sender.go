package webhook

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/theappliance/appliance/scheduler/lane"
)

// Sender makes delivery attempts over HTTP/1.1 on connections of its own, kept alive per destination. An
// attempt runs in its caller's goroutine (no transport goroutines) but for the CPU work it gives to the
// background lane (package lane): signing and serializing the request, and writing it. Everything that
// waits on the network or the receiver stays out of the lane: the dial and TLS handshake, the answer and
// reading it. A receiver, slow or hostile, thus never holds the lane.
type Sender struct {
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	timeout time.Duration
	lane    *lane.Lane
	// TLS is the client configuration for https destinations (nil: the system's roots); tests set RootCAs.
	TLS *tls.Config

	mu      sync.Mutex
	idle    map[string][]*idleConn
	idleFor time.Duration // how long an idle connection is kept (idleTimeout; tests shorten it)
	sweeper *time.Timer   // closes expired idle connections while there are any
	closed  bool
}

type idleConn struct {
	net.Conn
	since time.Time
}

const (
	// BodyCap is how much of a response body is read (the rest is discarded with the connection).
	BodyCap = 4 << 10
	// headerCap bounds a response's status line and headers.
	headerCap = 16 << 10
	// laneWrite is the largest request written inside the lane: it fits an idle connection's socket
	// buffer, so the write returns at once whatever the receiver does. Larger ones are written outside.
	laneWrite = 8 << 10
	// laneWriteTimeout bounds a write inside the lane all the same (a connection that cannot take a few KB
	// in this long is broken: the attempt fails).
	laneWriteTimeout = time.Second
	idlePerHost      = 4
	idleTimeout      = 30 * time.Second
)

// NewSender returns a sender dialing through dial, giving each attempt timeout, doing its CPU work in ln
// (nil: anywhere).
func NewSender(dial func(ctx context.Context, network, addr string) (net.Conn, error), timeout time.Duration, ln *lane.Lane) *Sender {
	return &Sender{dial: dial, timeout: timeout, lane: ln, idle: map[string][]*idleConn{}, idleFor: idleTimeout}
}

// Send makes one attempt. A kept-alive connection that turns out closed by the receiver before any answer
// is replaced by a new one once (the same webhook-id: receivers deduplicate by it).
func (s *Sender) Send(ctx context.Context, m Message) Result {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	done := func(r Result) Result { r.Duration = time.Since(start); return r }
	u, err := CheckURL(m.URL)
	if err != nil {
		return done(Result{Err: err})
	}
	var wire []byte
	s.lane.Do(func() { wire, err = request(u, m) })
	if err != nil {
		return done(Result{Err: err})
	}
	addr := net.JoinHostPort(u.Hostname(), strconv.Itoa(Port(u)))
	key := u.Scheme + "://" + addr
	for reused := true; ; reused = false {
		var c net.Conn
		if reused {
			c = s.take(key)
		}
		if c == nil {
			reused = false
			if c, err = s.connect(ctx, u.Scheme, u.Hostname(), addr); err != nil {
				return done(Result{Err: err})
			}
		}
		res, keep, answered := s.exchange(ctx, c, wire)
		if res.Err != nil && reused && !answered && ctx.Err() == nil {
			c.Close()
			continue
		}
		if keep {
			s.put(key, c)
		} else {
			c.Close()
		}
		return done(res)
	}
}

// request is the signed request's bytes on the wire: what net/http would write for it, built directly
// (an attempt allocates little: the garbage collector's work competes with the API).
func request(u *url.URL, m Message) ([]byte, error) {
	var sigs []string
	for _, sec := range m.Secrets {
		sig, err := Sign(sec, m.ID, m.Time, m.Body)
		if err != nil {
			return nil, err
		}
		sigs = append(sigs, sig)
	}
	ts := strconv.FormatInt(m.Time.Unix(), 10)
	sig := strings.Join(sigs, " ")
	if strings.ContainsAny(m.ID+sig+u.Host, "\r\n") {
		return nil, errors.New("a header value holds a line break")
	}
	b := make([]byte, 0, 256+len(u.Host)+len(m.ID)+len(sig)+len(m.Body))
	b = append(b, "POST "...)
	b = append(b, u.RequestURI()...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, u.Host...)
	b = append(b, "\r\nUser-Agent: appliance-webhooks/1\r\nContent-Type: application/json\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(m.Body)), 10)
	b = append(b, "\r\nWebhook-Id: "...)
	b = append(b, m.ID...)
	b = append(b, "\r\nWebhook-Timestamp: "...)
	b = append(b, ts...)
	b = append(b, "\r\nWebhook-Signature: "...)
	b = append(b, sig...)
	b = append(b, "\r\n\r\n"...)
	return append(b, m.Body...), nil
}

// post is what http.ReadResponse needs of the request an answer is for.
var post = &http.Request{Method: http.MethodPost}

// readers are the answers' buffers, reused.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}

// exchange writes the request on c (in the lane, when it is small enough to go without waiting) and reads
// the answer (outside it). answered reports whether any byte of an answer came; keep, whether c may carry
// another request (the whole answer read, nothing after it, no Connection: close).
func (s *Sender) exchange(ctx context.Context, c net.Conn, wire []byte) (res Result, keep, answered bool) {
	deadline, _ := ctx.Deadline()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) }) // cancellation ends a wait
	defer stop()
	var err error
	if len(wire) > laneWrite {
		c.SetWriteDeadline(deadline)
		_, err = c.Write(wire)
	} else {
		wd := time.Now().Add(laneWriteTimeout)
		if deadline.Before(wd) {
			wd = deadline
		}
		c.SetWriteDeadline(wd)
		s.lane.Do(func() { _, err = c.Write(wire) })
	}
	if err != nil {
		return Result{Err: err}, false, false
	}
	c.SetReadDeadline(deadline)
	lr := &io.LimitedReader{R: c, N: headerCap + BodyCap + 1<<10}
	br := readers.Get().(*bufio.Reader)
	br.Reset(lr)
	defer func() { br.Reset(nil); readers.Put(br) }()
	if _, err := br.Peek(1); err != nil {
		return Result{Err: err}, false, false
	}
	resp, err := http.ReadResponse(br, post)
	for err == nil && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
		resp, err = http.ReadResponse(br, post) // an interim answer (100 Continue, 103 Early Hints): the final one follows
	}
	if err != nil {
		return Result{Err: err}, false, true
	}
	n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, BodyCap+1))
	whole := err == nil && n <= BodyCap
	resp.Body.Close()
	res = Result{Status: resp.StatusCode}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		res.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	keep = whole && !resp.Close && br.Buffered() == 0 && lr.N > 0 && ctx.Err() == nil
	return res, keep, true
}

// connect dials addr through the sender's dial function (the outbound policy) and, for https, makes the
// TLS handshake for host.
func (s *Sender) connect(ctx context.Context, scheme, host, addr string) (net.Conn, error) {
	c, err := s.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if scheme != "https" {
		return c, nil
	}
	cfg := &tls.Config{}
	if s.TLS != nil {
		cfg = s.TLS.Clone()
	}
	cfg.ServerName, cfg.NextProtos, cfg.MinVersion = host, []string{"http/1.1"}, tls.VersionTLS12
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

// take returns an idle connection to key (nil when there is none); put keeps one for the next attempt.
// Connections are closed outside the lock (closing a TLS one writes to it).
func (s *Sender) take(key string) net.Conn {
	var expired []net.Conn
	defer func() { closeAll(expired) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	for cs := s.idle[key]; len(cs) > 0; cs = s.idle[key] {
		c := cs[len(cs)-1]
		s.idle[key] = cs[:len(cs)-1]
		if time.Since(c.since) < s.idleFor {
			return c.Conn
		}
		expired = append(expired, c.Conn)
	}
	delete(s.idle, key)
	return nil
}

func (s *Sender) put(key string, c net.Conn) {
	c.SetDeadline(time.Time{})
	s.mu.Lock()
	if s.closed || len(s.idle[key]) >= idlePerHost {
		s.mu.Unlock()
		c.Close()
		return
	}
	s.idle[key] = append(s.idle[key], &idleConn{c, time.Now()})
	if s.sweeper == nil {
		s.sweeper = time.AfterFunc(s.idleFor, s.sweep)
	}
	s.mu.Unlock()
}

// sweep closes the idle connections that expired, whatever their destination (take looks at its own
// only): a connection to an endpoint that gets no more deliveries, deleted or quiet, does not stay open.
// It runs again while idle connections remain.
func (s *Sender) sweep() {
	var expired []net.Conn
	defer func() { closeAll(expired) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweeper = nil
	if s.closed {
		return
	}
	now := time.Now()
	next := s.idleFor
	for key, cs := range s.idle {
		kept := cs[:0]
		for _, c := range cs {
			if left := s.idleFor - now.Sub(c.since); left > 0 {
				kept = append(kept, c)
				next = min(next, left)
			} else {
				expired = append(expired, c.Conn)
			}
		}
		if len(kept) == 0 {
			delete(s.idle, key)
		} else {
			s.idle[key] = kept
		}
	}
	if len(s.idle) > 0 {
		s.sweeper = time.AfterFunc(next, s.sweep)
	}
}

// Close drops the idle connections; later ones are closed after their attempt.
func (s *Sender) Close() {
	var idle []net.Conn
	defer func() { closeAll(idle) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.sweeper != nil {
		s.sweeper.Stop()
	}
	for key, cs := range s.idle {
		for _, c := range cs {
			idle = append(idle, c.Conn)
		}
		delete(s.idle, key)
	}
}

func closeAll(cs []net.Conn) {
	for _, c := range cs {
		c.Close()
	}
}
