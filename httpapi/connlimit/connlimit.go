// Package connlimit bounds the connections a listener holds open, so that no client, and no kind of
// connection, can take every slot (and file descriptor) from the others. It serves the API and both
// key-value fronts.
//
// A connection is pending until it proves something: an HTTP request (the server's ConnState reports
// StateActive) or, on a key-value front, a valid token (Authenticated). Pending connections are bounded
// per listener (the oldest is closed to make room) and per client address (more are closed at once), and
// closed after AuthTimeout. Idle keep-alive connections (ConnState StateIdle, also an HTTP/2 connection
// between streams) and pending ones never block a new client: at Max the oldest of them is closed to make
// room; only when every connection is busy does the next one wait until one closes or goes idle.
package connlimit

import (
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits are what a Listener holds at most; 0 means no limit.
type Limits struct {
	// Max is the open connections at most. At the cap the oldest idle or pending connection is closed
	// for the new one; when there is none, the new one waits.
	Max int
	// PerAddr is the open connections from one client address (IP) at most; more are closed at once.
	PerAddr int
	// MaxPending is the connections not yet authenticated at most; at the cap the oldest is closed.
	MaxPending int
	// PendingPerAddr is the connections not yet authenticated from one client address at most; more are
	// closed at once.
	PendingPerAddr int
	// AuthTimeout closes a connection still pending this long after it was accepted.
	AuthTimeout time.Duration
}

type state int

const (
	stateNew    state = iota // accepted, nothing proven yet
	stateActive              // serving a request (or an authenticated key-value session)
	stateIdle                // a keep-alive connection between requests
)

// Listener wraps a net.Listener with Limits. Set an http.Server's ConnState to the Listener's ConnState
// so that it knows which connections are idle.
type Listener struct {
	net.Listener
	lim Limits

	mu      sync.Mutex
	wake    *sync.Cond
	conns   map[*Conn]struct{}
	byAddr  map[string]int
	pending map[string]int // pending connections by address
	npend   int
	closed  bool
}

// Conn is a connection the Listener accepted.
type Conn struct {
	net.Conn
	l       *Listener
	addr    string
	state   state
	since   time.Time // when it entered its state
	authed  bool
	timer   *time.Timer
	once    sync.Once
	removed bool // guarded by l.mu
}

// New wraps l.
func New(l net.Listener, lim Limits) *Listener {
	ln := &Listener{Listener: l, lim: lim, conns: map[*Conn]struct{}{}, byAddr: map[string]int{}, pending: map[string]int{}}
	ln.wake = sync.NewCond(&ln.mu)
	return ln
}

// Accept returns the next connection within the limits. Connections over a per-address limit are closed
// as they come; at Max it closes the oldest idle or pending connection, or waits for a slot.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c := l.admit(nc); c != nil {
			return c, nil
		}
	}
}

// admit registers nc, or closes it and returns nil.
func (l *Listener) admit(nc net.Conn) *Conn {
	addr := hostOf(nc.RemoteAddr())
	l.mu.Lock()
	defer l.mu.Unlock()
	if (l.lim.PerAddr > 0 && l.byAddr[addr] >= l.lim.PerAddr) || (l.lim.PendingPerAddr > 0 && l.pending[addr] >= l.lim.PendingPerAddr) {
		nc.Close()
		return nil
	}
	if l.lim.MaxPending > 0 && l.npend >= l.lim.MaxPending {
		if v := l.oldest(func(c *Conn) bool { return !c.authed }); v != nil {
			l.evictLocked(v)
		}
	}
	for l.lim.Max > 0 && len(l.conns) >= l.lim.Max {
		if v := l.oldest(func(c *Conn) bool { return c.state != stateActive }); v != nil {
			l.evictLocked(v)
			continue
		}
		if l.closed {
			nc.Close()
			return nil
		}
		l.wake.Wait()
	}
	if l.closed {
		nc.Close()
		return nil
	}
	c := &Conn{Conn: nc, l: l, addr: addr, state: stateNew, since: time.Now()}
	l.conns[c] = struct{}{}
	l.byAddr[addr]++
	l.pending[addr]++
	l.npend++
	if l.lim.AuthTimeout > 0 {
		c.timer = time.AfterFunc(l.lim.AuthTimeout, func() {
			l.mu.Lock()
			late := !c.authed && !c.removed
			l.mu.Unlock()
			if late {
				c.Close()
			}
		})
	}
	return c
}

// oldest is the connection that has been in its state longest among those ok accepts (l.mu held).
func (l *Listener) oldest(ok func(*Conn) bool) *Conn {
	var o *Conn
	for c := range l.conns {
		if ok(c) && (o == nil || c.since.Before(o.since)) {
			o = c
		}
	}
	return o
}

// evictLocked closes c to make room (l.mu held).
func (l *Listener) evictLocked(c *Conn) {
	l.removeLocked(c)
	c.Conn.Close()
}

// removeLocked forgets c (l.mu held); closing it is the caller's.
func (l *Listener) removeLocked(c *Conn) {
	if c.removed {
		return
	}
	c.removed = true
	if c.timer != nil {
		c.timer.Stop()
	}
	delete(l.conns, c)
	if l.byAddr[c.addr]--; l.byAddr[c.addr] <= 0 {
		delete(l.byAddr, c.addr)
	}
	if !c.authed {
		l.unpendLocked(c)
	}
	l.wake.Broadcast()
}

func (l *Listener) unpendLocked(c *Conn) {
	l.npend--
	if l.pending[c.addr]--; l.pending[c.addr] <= 0 {
		delete(l.pending, c.addr)
	}
}

// Close stops accepting; connections already accepted stay open.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	l.closed = true
	l.wake.Broadcast()
	l.mu.Unlock()
	return err
}

// Authenticated marks c (a *Conn, or a *tls.Conn over one) as no longer pending: it proved a credential.
func (l *Listener) Authenticated(c net.Conn) {
	lc := l.of(c)
	if lc == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if lc.authed || lc.removed {
		return
	}
	lc.authed = true
	if lc.timer != nil {
		lc.timer.Stop()
	}
	l.unpendLocked(lc)
	if lc.state == stateNew {
		lc.state, lc.since = stateActive, time.Now()
	}
}

// ConnState is for http.Server.ConnState: it tells the Listener which connections are busy and which
// idle. Without an AuthTimeout and pending limits, a first request is what ends a connection's pending
// state; with them, only Authenticated does.
func (l *Listener) ConnState(c net.Conn, st http.ConnState) {
	lc := l.of(c)
	if lc == nil {
		return
	}
	var s state
	switch st {
	case http.StateActive:
		s = stateActive
	case http.StateIdle:
		s = stateIdle
	default:
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if lc.removed {
		return
	}
	if !lc.authed && l.lim.AuthTimeout == 0 && l.lim.MaxPending == 0 && l.lim.PendingPerAddr == 0 {
		lc.authed = true
		l.unpendLocked(lc)
	}
	if lc.state != s {
		lc.state, lc.since = s, time.Now()
	}
	if s == stateIdle {
		l.wake.Broadcast()
	}
}

// of finds the Listener's connection under c.
func (l *Listener) of(c net.Conn) *Conn {
	for {
		switch v := c.(type) {
		case *Conn:
			if v.l == l {
				return v
			}
			return nil
		case interface{ NetConn() net.Conn }: // a *tls.Conn, or a front's own wrapper
			c = v.NetConn()
		default:
			return nil
		}
	}
}

// Counts reports the open and the pending connections.
func (l *Listener) Counts() (open, pending int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns), l.npend
}

// Close closes the connection and frees its slot.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.removeLocked(c)
		c.l.mu.Unlock()
	})
	return err
}

func hostOf(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// DrainRefusedBody reads what is left of a refused request body (up to 32 MiB, for 5 seconds) before the
// answer goes out: a client that sends its whole body before reading the answer (most do) then reads the
// answer (a 413) instead of a connection reset by the close with unread data. A larger body is cut off
// when the server closes the connection. (Over HTTP/2 the stream's flow control bounds what arrives.)
func DrainRefusedBody(w http.ResponseWriter, r *http.Request) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.CopyN(io.Discard, r.Body, 32<<20)
}
