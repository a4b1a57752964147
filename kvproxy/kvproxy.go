// Package kvproxy is the TLS front of the key-value stores: a RESP listener (redcon) that authenticates a
// store token and relays to that store's redis-server over its unix socket. Plaintext is never accepted.
package kvproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/tidwall/redcon"
)

// Resolver maps a presented token to the unix socket of its store.
type Resolver interface {
	ResolveToken(ctx context.Context, token string) (socket string, err error)
}

// ErrInvalidToken is what a resolver returns for an unknown or rotated token.
var ErrInvalidToken = errors.New("invalid token")

var (
	errNoAuth      = "NOAUTH Authentication required."
	errInvalidPass = "WRONGPASS invalid username-password pair or user is disabled."
	errNotReady    = "ERR key-value store relay is not available in this build"
)

// Server is the RESP-over-TLS front.
type Server struct {
	Addr     string
	TLS      *tls.Config
	Resolver Resolver

	mu   sync.Mutex
	srv  *redcon.Server
	ln   net.Listener
	done chan error
}

// connState is the per-connection state kept with SetContext.
type connState struct {
	socket string
}

// Start listens with TLS and serves in the background.
func (s *Server) Start(ctx context.Context) error {
	if s.TLS == nil {
		return errors.New("kvproxy: TLS config required (no plaintext listener)")
	}
	ln, err := tls.Listen("tcp", s.Addr, s.TLS)
	if err != nil {
		return fmt.Errorf("kvproxy listen on %s: %w", s.Addr, err)
	}
	s.mu.Lock()
	s.ln = ln
	srv := redcon.NewServer(s.Addr, s.handle, s.accept, nil)
	s.srv = srv
	done := make(chan error, 1)
	s.done = done
	s.mu.Unlock()
	go func() { done <- srv.Serve(ln) }()
	return nil
}

// Stop closes the listener and every connection. Idempotent.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	srv, ln := s.srv, s.ln
	s.srv = nil
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	srv.Close()
	ln.Close() // Serve may not have registered the listener with redcon yet
	select {
	case <-s.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
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

// Health proves the listener accepts a TLS handshake.
func (s *Server) Health(ctx context.Context) (status, message string) {
	addr := s.ListenAddr()
	if addr == "" {
		return "down", "not listening"
	}
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}} // only probes that the listener answers
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "down", fmt.Sprintf("TLS RESP listener on %s does not answer: %v", addr, err)
	}
	c.Close()
	return "operational", "TLS RESP listener on " + addr
}

func (s *Server) accept(conn redcon.Conn) bool {
	conn.SetContext(&connState{})
	return true
}

func (s *Server) handle(conn redcon.Conn, cmd redcon.Command) {
	st, _ := conn.Context().(*connState)
	name := strings.ToLower(string(cmd.Args[0]))
	switch name {
	case "quit":
		conn.WriteString("OK")
		conn.Close()
	case "auth":
		var token string
		switch len(cmd.Args) {
		case 2:
			token = string(cmd.Args[1])
		case 3:
			token = string(cmd.Args[2])
		default:
			conn.WriteError("ERR wrong number of arguments for 'auth' command")
			return
		}
		sock, err := s.Resolver.ResolveToken(context.Background(), token)
		if err != nil {
			conn.WriteError(errInvalidPass)
			return
		}
		st.socket = sock
		conn.WriteString("OK")
	default:
		if st == nil || st.socket == "" {
			conn.WriteError(errNoAuth)
			return
		}
		conn.WriteError(errNotReady)
	}
}
