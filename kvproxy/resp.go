package kvproxy

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"github.com/theappliance/appliance/httpapi/connlimit"
	"github.com/theappliance/appliance/scheduler/lane"
)

// Server is the RESP-over-TLS front. Until a connection authenticates, the front reads its commands itself
// (redcon's parser): AUTH [user] token and HELLO proto AUTH user token [SETNAME name] find the store, any
// other command is answered NOAUTH as Redis does. The authenticating command is then sent to the store's
// socket as the tenant user, followed by whatever the client pipelined after it, and from there on the two
// connections are spliced: bytes are copied both ways and never parsed, so every command of Redis —
// pipelining, MULTI/EXEC, blocking commands, pub/sub, RESP3 — behaves as on Redis itself. The user name a
// client gives is ignored (default, as Redis clients send it, or any other): a store has one tenant user.
type Server struct {
	Addr string
	// Listener, when set, is served instead of a listener on Addr (bound beforehand, so that its port is
	// known before the front starts); Start takes it over and Stop closes it.
	Listener net.Listener
	TLS      *tls.Config
	Resolver Resolver
	Log      *slog.Logger // nil: discarded
	// StoreWait is how long a client that authenticates waits for its store's server while it does not
	// listen (being restarted); then it is answered errUnavailable and disconnected (0: DefaultStoreWait).
	StoreWait time.Duration
	// Limits bound the front's connections (a field left 0: DefaultLimits'): unauthenticated ones, in
	// all and per client address, and the time to authenticate (the TLS handshake included).
	Limits connlimit.Limits
	// Lane is the background lane that yields to the front's commands (nil: none; scheduler/lane).
	Lane *lane.Lane
	// RelayLoops is how many event loops copy authenticated connections' bytes (relay.go; 0: 1, as
	// HAProxy's nbthread 1 that the bench compares with); -1 copies them with two goroutines per
	// connection instead.
	RelayLoops int

	mu     sync.Mutex
	ln     *connlimit.Listener
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	loops  []*relayLoop
	next   atomic.Uint32 // the loop the next connection goes to
}

// maxPreAuth bounds what a connection may send before it authenticates.
const maxPreAuth = 64 << 10

// Start listens with TLS and serves in the background.
func (s *Server) Start(ctx context.Context) error {
	if s.TLS == nil {
		return errors.New("kvproxy: TLS config required (no plaintext listener)")
	}
	raw := s.Listener
	if raw == nil {
		var err error
		if raw, err = net.Listen("tcp", s.Addr); err != nil {
			return fmt.Errorf("kvproxy listen on %s: %w", s.Addr, err)
		}
	}
	s.Limits = limits(s.Limits)
	var loops []*relayLoop
	for range max(cmp.Or(s.RelayLoops, 1), 0) {
		l, err := newRelayLoop(s)
		if err != nil {
			for _, l := range loops {
				l.shutdown()
			}
			raw.Close()
			return err
		}
		loops = append(loops, l)
	}
	ln := connlimit.New(raw, s.Limits)
	s.mu.Lock()
	s.ln, s.conns, s.closed, s.loops = ln, map[net.Conn]struct{}{}, false, loops
	s.mu.Unlock()
	s.wg.Add(1)
	go s.accept(ln)
	return nil
}

func (s *Server) log() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}

func (s *Server) accept(ln *connlimit.Listener) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			s.log().Warn("kv front accept", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if !s.track(c) {
			c.Close()
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			lc := &loopConn{Conn: c}
			if !s.serve(c, lc, tls.Server(lc, s.TLS)) {
				s.untrack(c)
			}
		}()
	}
}

func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

// Stop closes the listener and every connection, and waits for their goroutines. Idempotent.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.ln == nil || s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	loops := s.loops
	s.mu.Unlock()
	for _, l := range loops {
		l.shutdown()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ListenAddr is the bound address (useful with port 0).
func (s *Server) ListenAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Health proves the listener completes a TLS handshake.
func (s *Server) Health(ctx context.Context) (status, message string) {
	return probeTLS(ctx, s.ListenAddr(), "TLS RESP listener")
}

// probeTLS is a front's health: a TLS handshake with its listener.
func probeTLS(ctx context.Context, addr, what string) (string, string) {
	if addr == "" {
		return "down", "not listening"
	}
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}} // only probes that the listener answers
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "down", fmt.Sprintf("%s on %s does not answer: %v", what, addr, err)
	}
	c.Close()
	return "operational", what + " on " + addr
}

// serve runs one client connection (conn, the accepted one; c, TLS over lc over it): the unauthenticated
// phase, then the relay. It reports whether a relay loop took the connection over (which then ends it).
func (s *Server) serve(conn net.Conn, lc *loopConn, c *tls.Conn) bool {
	c.SetDeadline(time.Now().Add(s.Limits.AuthTimeout))
	if err := c.Handshake(); err != nil {
		return false
	}
	buf := make([]byte, 0, 4096)
	var out []byte
	argsbuf := make([][]byte, 0, 8)
	for {
		for len(buf) > 0 {
			complete, args, _, leftover, err := redcon.ReadNextCommand(buf, argsbuf)
			if err != nil {
				out = redcon.AppendError(out, "ERR Protocol error: "+strings.TrimPrefix(err.Error(), "Protocol error: "))
				c.Write(out)
				return false
			}
			if !complete {
				break
			}
			if len(args) == 0 { // an empty inline line
				buf = leftover
				continue
			}
			switch strings.ToLower(string(args[0])) {
			case "quit":
				c.Write(redcon.AppendOK(out))
				return false
			case "auth", "hello":
				first, reply := authCommand(args)
				if reply != "" {
					out = redcon.AppendError(out, reply)
					buf = leftover
					continue
				}
				sock, err := s.resolve(first.token)
				if msg := refusalOf(err); msg != "" {
					out = redcon.AppendError(out, msg)
					buf = leftover
					continue
				}
				if err != nil {
					out = redcon.AppendError(out, errWrongPass)
					buf = leftover
					continue
				}
				// The token names a store: the connection leaves the unauthenticated ones (and their time
				// limit) before it waits for a store that is being restarted.
				s.ln.Authenticated(c)
				wait := cmp.Or(s.StoreWait, DefaultStoreWait)
				c.SetDeadline(time.Now().Add(wait + 5*time.Second))
				up, err := dialStore(context.Background(), sock, wait)
				if err != nil {
					// Never NOAUTH to what the client pipelined after its AUTH: it is told, and cut off.
					if !errors.Is(err, errStoreDown) {
						s.log().Warn("connect to a key-value store", "err", err)
					}
					c.Write(redcon.AppendError(out, errUnavailable))
					return false
				}
				if len(out) > 0 {
					if _, err := c.Write(out); err != nil {
						up.Close()
						return false
					}
				}
				toStore := append(first.raw, leftover...)
				if len(s.loops) > 0 {
					c.SetDeadline(time.Time{})
					if s.loops[s.next.Add(1)%uint32(len(s.loops))].handoff(conn, lc, c, up, toStore) {
						return true
					}
				}
				s.splice(c, up, toStore)
				return false
			default:
				out = redcon.AppendError(out, errNoAuth)
			}
			buf = leftover
		}
		if len(out) > 0 {
			if _, err := c.Write(out); err != nil {
				return false
			}
			out = out[:0]
		}
		if len(buf) >= maxPreAuth {
			c.Write(redcon.AppendError(nil, "ERR Protocol error: too much data before AUTH"))
			return false
		}
		// Read more: keep what is unparsed at the front of the buffer.
		buf = append(bytes.Clone(buf), make([]byte, 4096)...)[:len(buf)]
		n, err := c.Read(buf[len(buf):cap(buf)])
		if err != nil {
			return false
		}
		s.Lane.Foreground() // background work yields to requests (scheduler/lane)
		buf = buf[:len(buf)+n]
	}
}

// auth is an authenticating command as sent to the store: the token, and the command rewritten to log in as
// the tenant user.
type auth struct {
	token string
	raw   []byte
}

// authCommand reads AUTH [user] token or HELLO proto [AUTH user token] [SETNAME name]; reply is the error to
// answer instead (wrong arity, HELLO without AUTH).
func authCommand(args [][]byte) (auth, string) {
	name := strings.ToLower(string(args[0]))
	if name == "auth" {
		if len(args) != 2 && len(args) != 3 {
			return auth{}, "ERR wrong number of arguments for 'auth' command"
		}
		tok := string(args[len(args)-1])
		return auth{token: tok, raw: appendCommand(nil, "AUTH", TenantUser, tok)}, ""
	}
	// HELLO [protover [AUTH username password] [SETNAME clientname]]
	if len(args) < 2 {
		return auth{}, errHelloNoAuth
	}
	cmd := []string{"HELLO", string(args[1])}
	tok := ""
	for i := 2; i < len(args); i++ {
		switch strings.ToLower(string(args[i])) {
		case "auth":
			if i+2 >= len(args) {
				return auth{}, "ERR Syntax error in HELLO option 'auth'"
			}
			tok = string(args[i+2])
			cmd = append(cmd, "AUTH", TenantUser, tok)
			i += 2
		case "setname":
			if i+1 >= len(args) {
				return auth{}, "ERR Syntax error in HELLO option 'setname'"
			}
			cmd = append(cmd, "SETNAME", string(args[i+1]))
			i++
		default:
			return auth{}, fmt.Sprintf("ERR Syntax error in HELLO option '%s'", args[i])
		}
	}
	if tok == "" {
		return auth{}, errHelloNoAuth
	}
	return auth{token: tok, raw: appendCommand(nil, cmd...)}, ""
}

// appendCommand appends a command as a RESP array of bulk strings.
func appendCommand(b []byte, args ...string) []byte {
	b = redcon.AppendArray(b, len(args))
	for _, a := range args {
		b = redcon.AppendBulkString(b, a)
	}
	return b
}

// resolve finds the socket of the token's store (nil error: the token names a store; Redis itself checks
// the token when the rewritten command arrives).
func (s *Server) resolve(token string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Resolver.ResolveToken(ctx, token)
}

// splice sends first to the store, then copies both ways until either side ends; then both are closed.
func (s *Server) splice(c *tls.Conn, up net.Conn, first []byte) {
	defer up.Close()
	c.SetDeadline(time.Time{})
	if _, err := up.Write(first); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(up, c)
		// The client finished sending: let the store answer what it has, then end.
		if uc, ok := up.(*net.UnixConn); ok {
			uc.CloseWrite()
		}
	}()
	io.Copy(c, up)
	// The store closed (a rotation's CLIENT KILL, a deleted store) or answered the client's end: cut the
	// client off too.
	c.Close()
	up.Close()
	<-done
}
