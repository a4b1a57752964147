package kvproxy_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/theappliance/appliance/httpapi/connlimit"
	"github.com/theappliance/appliance/kvproxy"
)

// limitedFronts starts a second RESP and REST front of k's stores with lim.
func (k *kvEnv) limitedFronts(t *testing.T, lim connlimit.Limits) (*kvproxy.Server, *kvproxy.REST) {
	t.Helper()
	cfg, err := k.CA.ServerTLS("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	resp := &kvproxy.Server{Addr: "127.0.0.1:0", TLS: cfg, Resolver: k.Svc.KV(), Limits: lim}
	rest := &kvproxy.REST{Addr: "127.0.0.1:0", TLS: cfg, Resolver: k.Svc.KV(), Limits: lim}
	for _, s := range []interface {
		Start(context.Context) error
		Stop(context.Context) error
	}{resp, rest} {
		if err := s.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Stop(context.Background()) })
	}
	return resp, rest
}

// dialFrom opens a TLS connection to addr from the local address from (127.0.0.x) and completes the
// handshake, which proves the front took the connection.
func (k *kvEnv) dialFrom(from, addr string, protos ...string) (*tls.Conn, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(c, &tls.Config{RootCAs: k.CA.Pool(), ServerName: "localhost", NextProtos: protos})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, err
	}
	tc.SetDeadline(time.Time{})
	return tc, nil
}

// closedByFront reports whether the front closed c (a read ends in EOF or a reset within 10 s).
func closedByFront(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.ReadAll(c)
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestFrontsBoundUnauthenticatedConnections: on both key-value fronts, one client address holds at most
// PendingPerAddr connections that have not authenticated (more are closed at once), the front holds at
// most MaxPending of them (the oldest is closed for a new one), and a client with a token is served
// meanwhile from another address. (Before, 20,000 raw connections exhausted the process's descriptors.)
func TestFrontsBoundUnauthenticatedConnections(t *testing.T) {
	t.Parallel()
	k := newKVEnv(t)
	tok := *k.store(t, k.project(t, "limits")).Token
	resp, rest := k.limitedFronts(t, connlimit.Limits{MaxPending: 4, PendingPerAddr: 2, AuthTimeout: time.Minute})
	for _, f := range []struct{ name, addr string }{{"resp", resp.ListenAddr()}, {"rest", rest.ListenAddr()}} {
		var held []*tls.Conn
		for _, from := range []string{"127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3"} {
			c, err := k.dialFrom(from, f.addr)
			if err != nil {
				t.Fatalf("%s: connection %d from %s: %v", f.name, len(held)+1, from, err)
			}
			defer c.Close()
			held = append(held, c)
		}
		if c, err := k.dialFrom("127.0.0.2", f.addr); err == nil {
			c.Close()
			t.Fatalf("%s: a third unauthenticated connection from one address was taken", f.name)
		}
		c, err := k.dialFrom("127.0.0.4", f.addr)
		if err != nil {
			t.Fatalf("%s: a new address at the cap of unauthenticated connections: %v", f.name, err)
		}
		defer c.Close()
		if !closedByFront(held[0]) {
			t.Fatalf("%s: the oldest unauthenticated connection stays open past the cap", f.name)
		}
	}
	// Clients with the token, from another address, are served.
	rc := redis.NewClient(&redis.Options{Addr: resp.ListenAddr(), Password: tok, MaxRetries: -1,
		TLSConfig: &tls.Config{RootCAs: k.CA.Pool(), ServerName: "localhost"}})
	defer rc.Close()
	if err := rc.Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Fatalf("RESP client with the token: %v", err)
	}
	if st, v := k.callAt(t, rest.ListenAddr(), tok, "/get/k"); st != http.StatusOK || v.(map[string]any)["result"] != "v" {
		t.Fatalf("REST client with the token: %d %v", st, v)
	}
}

// callAt is k.call against another REST front.
func (k *kvEnv) callAt(t *testing.T, addr, token, path string) (int, any) {
	t.Helper()
	_, port, _ := strings.Cut(addr, ":")
	return k.callURL(t, "https://localhost:"+port, token, "GET", path, nil)
}

// TestUnauthenticatedConnectionsTimeOut: a connection that does not authenticate within the auth timeout
// is closed — on the RESP front one that sends nothing or only NOAUTH commands, on the REST front one
// whose requests bring no valid token (before, such a REST connection stayed open as long as it sent a
// request every 2 minutes) — and an authenticated one is not.
func TestUnauthenticatedConnectionsTimeOut(t *testing.T) {
	t.Parallel()
	k := newKVEnv(t)
	tok := *k.store(t, k.project(t, "timeout")).Token
	const timeout = 200 * time.Millisecond
	resp, rest := k.limitedFronts(t, connlimit.Limits{AuthTimeout: timeout})

	// RESP: an authenticated client outlives an unauthenticated connection opened after it.
	rc := redis.NewClient(&redis.Options{Addr: resp.ListenAddr(), Password: tok, MaxRetries: -1, PoolSize: 1,
		TLSConfig: &tls.Config{RootCAs: k.CA.Pool(), ServerName: "localhost"}})
	defer rc.Close()
	if err := rc.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	c, err := k.dialFrom("127.0.0.1", resp.ListenAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "PING\r\n")
	if !closedByFront(c) {
		t.Fatal("RESP: an unauthenticated connection stays open past the auth timeout")
	}
	var cid int64
	if cid, err = rc.ClientID(t.Context()).Result(); err != nil {
		t.Fatalf("RESP: the authenticated client after the auth timeout: %v", err)
	}
	if id2, err := rc.ClientID(t.Context()).Result(); err != nil || id2 != cid {
		t.Fatalf("RESP: the authenticated connection was replaced: %d %d %v", cid, id2, err)
	}

	// REST: an HTTP/1.1 connection whose requests bring a wrong token is closed; one that brought the
	// token stays.
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: k.CA.Pool()}}, Timeout: 10 * time.Second}
	defer cl.CloseIdleConnections()
	_, port, _ := strings.Cut(rest.ListenAddr(), ":")
	get := func(token string) (status int, reused bool) {
		t.Helper()
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(),
			&httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}), "GET", "https://localhost:"+port+"/get/k", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode, reused
	}
	if st, _ := get(tok); st != http.StatusOK {
		t.Fatalf("REST with the token: %d", st)
	}
	bad, err := k.dialFrom("127.0.0.1", rest.ListenAddr(), "http/1.1")
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	io.WriteString(bad, "GET /get/k HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer wrong\r\n\r\n")
	if !closedByFront(bad) { // reads the 401, then the end
		t.Fatal("REST: a connection whose requests bring no valid token stays open past the auth timeout")
	}
	if st, reused := get(tok); st != http.StatusOK || !reused {
		t.Fatalf("REST: the authenticated connection after the auth timeout: %d, reused %v", st, reused)
	}
}
