// Package wake is the front of suspended projects (scale to zero): while a project is suspended it holds the
// project's direct and pooled ports, and the first connection that sends a PostgreSQL opening packet
// (SSLRequest, GSSENCRequest or a StartupMessage) wakes the project through a Waker. The front then hands
// the ports back (the Waker's start binds them: the front is not in the path of a running project's
// connections, see bench/README.md "Scale to zero: a splice front in the path") and replays the bytes it
// read to the started server, so the client's TLS handshake and startup packet pass unchanged and
// sslmode=verify-full keeps working. A connection that sends nothing, or something else, wakes nothing and
// is closed after StartupTimeout. Concurrent first connections wait for one wake; a failed wake answers
// each with a PostgreSQL ErrorResponse naming the reason (inside TLS when the client asked for it and the
// project's certificate is at hand, so the client shows it), never a reset.
package wake

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Waker starts a suspended project's server and pooler. The front calls it after it released the
// project's ports (Release), so the start can bind them; Wake returns once both accept connections. A
// Wake that fails must leave the project suspended: the front then holds its ports again.
type Waker interface {
	Wake(ctx context.Context, projectID string) error
}

// WakerFunc adapts a function to Waker.
type WakerFunc func(ctx context.Context, projectID string) error

// Wake calls f.
func (f WakerFunc) Wake(ctx context.Context, projectID string) error { return f(ctx, projectID) }

// Codes of the opening packets (PostgreSQL's protocol, "Message Formats").
const (
	codeSSLRequest    = 80877103
	codeGSSENCRequest = 80877104
	codeCancelRequest = 80877102
	protocolMajor3    = 3     // a StartupMessage's version: 3.0 (196608), 3.2 (196610)
	maxStartupLength  = 10000 // PostgreSQL's MAX_STARTUP_PACKET_LENGTH
)

// Config is what a Front needs.
type Config struct {
	Waker Waker
	// Host is the address the ports are held on (the instances' listen host); "" is 127.0.0.1.
	Host string
	// StartupTimeout bounds the wait for an opening packet (default 10 s, PostgreSQL's
	// authentication_timeout is 60 s: a silent connection holds nothing but a socket).
	StartupTimeout time.Duration
	// WakeTimeout bounds one wake (default 2 min).
	WakeTimeout time.Duration
	Log         *slog.Logger
}

// Front holds suspended projects' ports.
type Front struct {
	cfg Config

	mu      sync.Mutex
	held    map[string]*hold   // project ID → its listeners
	waking  map[string]*flight // project ID → the wake in flight
	closed  bool
	conns   sync.WaitGroup // connection handlers
	baseCtx context.Context
	cancel  context.CancelFunc
}

type hold struct {
	ports []int
	lns   []net.Listener
	tls   *tls.Config // the project's server certificate, for answering a failed wake inside TLS; may be nil
	done  sync.WaitGroup
	// draining is set by Release: the accept loops take what the kernel has queued (connections whose
	// handshake completed, which closing the listener would reset) until drainQuiet passes with none.
	draining atomic.Bool
}

// drainQuiet is how long a released listener stays open without a new connection before it closes.
const drainQuiet = 5 * time.Millisecond

type flight struct {
	done chan struct{}
	err  error
}

// New makes a Front.
func New(cfg Config) *Front {
	if cfg.StartupTimeout <= 0 {
		cfg.StartupTimeout = 10 * time.Second
	}
	if cfg.WakeTimeout <= 0 {
		cfg.WakeTimeout = 2 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Front{cfg: cfg, held: map[string]*hold{}, waking: map[string]*flight{}, baseCtx: ctx, cancel: cancel}
}

// ErrClosed is Hold's answer after Close.
var ErrClosed = errors.New("wake front closed")

// Hold listens on the project's ports (its direct and pooled port) until Release. serverTLS, when not nil,
// is the project's server certificate: a wake that fails is then answered inside TLS to a client that asked
// for it. Holding a held project does nothing. A port that cannot be bound fails Hold, which then holds
// none of them.
func (f *Front) Hold(projectID string, serverTLS *tls.Config, ports ...int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	if _, ok := f.held[projectID]; ok {
		return nil
	}
	h := &hold{tls: serverTLS, ports: ports}
	for _, p := range ports {
		if p == 0 {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(f.host(), strconv.Itoa(p)))
		if err != nil {
			for _, l := range h.lns {
				l.Close()
			}
			return fmt.Errorf("hold port %d of project %s: %w", p, projectID, err)
		}
		h.lns = append(h.lns, ln)
	}
	f.held[projectID] = h
	for _, ln := range h.lns {
		h.done.Add(1)
		go f.accept(projectID, h, ln)
	}
	return nil
}

func (f *Front) host() string {
	if f.cfg.Host == "" {
		return "127.0.0.1"
	}
	return f.cfg.Host
}

// Release closes the project's listeners (its ports free for its server) and returns once they no longer
// accept. Connections already accepted are served: they wait for the wake. So are those the kernel has
// queued (their TCP handshake done, not yet accepted): closing a listener resets them, which a client sees
// as "connection reset by peer" on its first packet; the listener closes once drainQuiet passes with none. Releasing a project not held
// does nothing.
func (f *Front) Release(projectID string) {
	f.mu.Lock()
	h := f.held[projectID]
	delete(f.held, projectID)
	f.mu.Unlock()
	if h == nil {
		return
	}
	h.draining.Store(true)
	for _, ln := range h.lns {
		if tl, ok := ln.(*net.TCPListener); ok {
			_ = tl.SetDeadline(time.Now().Add(drainQuiet))
		} else {
			ln.Close()
		}
	}
	h.done.Wait()
}

// Holding reports whether the front holds the project's ports.
func (f *Front) Holding(projectID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.held[projectID]
	return ok
}

// Close releases every project and ends the connections waiting in the front (idempotent).
func (f *Front) Close() error {
	f.mu.Lock()
	f.closed = true
	ids := make([]string, 0, len(f.held))
	for id := range f.held {
		ids = append(ids, id)
	}
	f.mu.Unlock()
	for _, id := range ids {
		f.Release(id)
	}
	f.cancel()
	f.conns.Wait()
	return nil
}

func (f *Front) accept(projectID string, h *hold, ln net.Listener) {
	defer h.done.Done()
	port := ln.Addr().(*net.TCPAddr).Port
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				if h.draining.Load() { // released, and nothing queued any more
					ln.Close()
					return
				}
				continue
			}
			f.cfg.Log.Warn("wake front: accept", "project", projectID, "port", port, "err", err)
			time.Sleep(50 * time.Millisecond) // out of descriptors, say: do not spin
			continue
		}
		if h.draining.Load() {
			if tl, ok := ln.(*net.TCPListener); ok {
				_ = tl.SetDeadline(time.Now().Add(drainQuiet))
			}
		}
		f.conns.Add(1)
		go func() {
			defer f.conns.Done()
			f.serve(projectID, h.tls, port, c)
		}()
	}
}

// serve reads the opening packet, wakes the project and splices the client to its server.
func (f *Front) serve(projectID string, serverTLS *tls.Config, port int, c net.Conn) {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(f.cfg.StartupTimeout))
	first, code, err := ReadOpening(c)
	if err != nil {
		return // a port scan, a silent client, or not PostgreSQL: nothing woken
	}
	if code == codeCancelRequest {
		return // nothing runs to cancel
	}
	_ = c.SetReadDeadline(time.Time{})
	if err := f.wake(projectID); err != nil {
		f.cfg.Log.Warn("wake front: wake failed", "project", projectID, "err", err)
		refuse(c, code, serverTLS, fmt.Sprintf("the project's database could not be started: %v", err))
		return
	}
	var d net.Dialer
	ctx, cancel := context.WithTimeout(f.baseCtx, 10*time.Second)
	srv, err := d.DialContext(ctx, "tcp", net.JoinHostPort(f.dialHost(), strconv.Itoa(port)))
	cancel()
	if err != nil {
		refuse(c, code, serverTLS, fmt.Sprintf("the project's database was started but does not answer: %v", err))
		return
	}
	defer srv.Close()
	if _, err := srv.Write(first); err != nil {
		return
	}
	stop := context.AfterFunc(f.baseCtx, func() { c.Close(); srv.Close() })
	defer stop()
	Splice(c, srv)
}

func (f *Front) dialHost() string {
	h := f.host()
	if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
		return "127.0.0.1"
	}
	return h
}

// wake runs one Wake per project at a time: concurrent callers wait for the one in flight and share its
// answer.
func (f *Front) wake(projectID string) error {
	f.mu.Lock()
	fl, ok := f.waking[projectID]
	if !ok {
		fl = &flight{done: make(chan struct{})}
		f.waking[projectID] = fl
		go func() {
			ctx, cancel := context.WithTimeout(f.baseCtx, f.cfg.WakeTimeout)
			defer cancel()
			f.mu.Lock()
			h := f.held[projectID]
			f.mu.Unlock()
			f.Release(projectID)
			fl.err = f.cfg.Waker.Wake(ctx, projectID)
			if fl.err != nil && h != nil {
				if err := f.Hold(projectID, h.tls, h.ports...); err != nil {
					fl.err = errors.Join(fl.err, err)
					f.cfg.Log.Error("wake front: the ports of a project whose wake failed could not be held again", "project", projectID, "err", err)
				}
			}
			f.mu.Lock()
			delete(f.waking, projectID)
			f.mu.Unlock()
			close(fl.done)
		}()
	}
	f.mu.Unlock()
	<-fl.done
	return fl.err
}

// ReadOpening reads a PostgreSQL connection's opening packet: an SSLRequest, a GSSENCRequest, a
// CancelRequest or a StartupMessage (protocol 3). It returns the packet's bytes as read and its code (the
// protocol version for a StartupMessage), or an error for anything else.
func ReadOpening(r io.Reader) ([]byte, uint32, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, 0, err
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	code := binary.BigEndian.Uint32(hdr[4:])
	switch {
	case code == codeSSLRequest || code == codeGSSENCRequest:
		if n != 8 {
			return nil, 0, fmt.Errorf("opening packet of length %d with code %d", n, code)
		}
		return hdr[:], code, nil
	case code == codeCancelRequest:
		if n != 16 {
			return nil, 0, fmt.Errorf("cancel request of length %d", n)
		}
	case code>>16 == protocolMajor3:
		if n < 8 || n > maxStartupLength {
			return nil, 0, fmt.Errorf("startup packet of length %d", n)
		}
	default:
		return nil, 0, fmt.Errorf("not a PostgreSQL opening packet (code %d)", code)
	}
	pkt := make([]byte, n)
	copy(pkt, hdr[:])
	if _, err := io.ReadFull(r, pkt[8:]); err != nil {
		return nil, 0, err
	}
	return pkt, code, nil
}

// refuse answers a client whose wake failed with an ErrorResponse (SQLSTATE 57P03, cannot_connect_now,
// the code of a server still starting). A client that asked for TLS gets it inside TLS when the project's
// certificate is at hand (the client verifies the server as usual, then reads the error as a server's);
// otherwise the ErrorResponse answers the SSLRequest itself, which the protocol allows (a postmaster that
// cannot fork does it) and clients show as a failure during SSL negotiation. A GSSENCRequest gets 'N'
// (no GSSAPI encryption) and then the same as a plain startup.
func refuse(c net.Conn, code uint32, serverTLS *tls.Config, reason string) {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	msg := ErrorResponse("FATAL", "57P03", reason)
	var conn net.Conn = c
	switch code {
	case codeSSLRequest:
		if serverTLS == nil {
			_, _ = c.Write(msg)
			return
		}
		if _, err := c.Write([]byte{'S'}); err != nil {
			return
		}
		tc := tls.Server(c, serverTLS)
		if err := tc.Handshake(); err != nil {
			return
		}
		defer tc.Close()
		conn = tc
		fallthrough
	case codeGSSENCRequest:
		if code == codeGSSENCRequest {
			if _, err := c.Write([]byte{'N'}); err != nil {
				return
			}
		}
		// The client goes on with a StartupMessage (or an SSLRequest after a refused GSSENCRequest).
		_, next, err := ReadOpening(conn)
		if err != nil {
			return
		}
		if next == codeSSLRequest && code == codeGSSENCRequest {
			refuse(c, next, serverTLS, reason)
			return
		}
	}
	_, _ = conn.Write(msg)
}

// ErrorResponse is a PostgreSQL ErrorResponse message with the severity, SQLSTATE and message.
func ErrorResponse(severity, code, message string) []byte {
	var body bytes.Buffer
	for _, f := range []struct {
		t byte
		v string
	}{{'S', severity}, {'V', severity}, {'C', code}, {'M', message}} {
		body.WriteByte(f.t)
		body.WriteString(f.v)
		body.WriteByte(0)
	}
	body.WriteByte(0)
	out := []byte{'E', 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(4+body.Len()))
	return append(out, body.Bytes()...)
}

// Splice relays bytes both ways between a and b until both directions end (io.Copy between TCP
// connections uses splice(2) on Linux), half-closing each side as its peer finishes.
func Splice(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		copyHalf(b, a)
	}()
	copyHalf(a, b)
	wg.Wait()
}

// copyHalf copies src to dst, then closes dst's write side (or dst, when it has none) and src's read side.
func copyHalf(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
	if cr, ok := src.(interface{ CloseRead() error }); ok {
		_ = cr.CloseRead()
	}
}
