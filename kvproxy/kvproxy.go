// Package kvproxy is the TLS front of the key-value stores, in two protocols: RESP (Server: what redis-cli
// and Redis client libraries speak) and Upstash's REST protocol (REST). Plaintext is never accepted.
//
// Neither front decides what a tenant may do: a presented token is looked up (Resolver) only to find its
// store's unix socket, and the front then logs in to that store's redis-server as the store's tenant user
// with the same token. Redis checks the token against the SHA-256 in its ACL file and enforces the tenant
// user's rights (no CONFIG, SHUTDOWN, ACL, MONITOR…), so a token of one store can never act on another,
// and rotating a token (ACL SETUSER + CLIENT KILL USER) cuts every connection made with the old one.
package kvproxy

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/theappliance/appliance/httpapi/connlimit"
)

// Resolver maps a presented token to the unix socket of its running store.
type Resolver interface {
	ResolveToken(ctx context.Context, token string) (socket string, err error)
}

// Refusal is an error a resolver may return to refuse a token that names a store with a message the client
// reads (a suspended organization's): the RESP front answers it as an error reply, the REST front as a 403.
type Refusal interface {
	error
	KVRefusal() string
}

// refusalOf is the message of a resolver's refusal ("" for any other error).
func refusalOf(err error) string {
	var r Refusal
	if errors.As(err, &r) {
		return r.KVRefusal()
	}
	return ""
}

// ErrInvalidToken is what a resolver may return for an unknown or rotated token.
var ErrInvalidToken = errors.New("invalid token")

// TenantUser is the store's user a front logs in as (appliance/redis.TenantUser).
const TenantUser = "tenant"

// Replies as Redis words them.
const (
	errNoAuth      = "NOAUTH Authentication required."
	errWrongPass   = "WRONGPASS invalid username-password pair or user is disabled."
	errUnavailable = "ERR the key-value store is unavailable: its server is restarting; connect again shortly"
	errHelloNoAuth = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"
)

// DefaultLimits are a front's connection limits where Limits leaves a field 0: each front holds at most
// 4096 connections, 512 not yet authenticated (the oldest is closed for a new one), 32 of those from one
// client address (more are closed at once), and closes a connection that has not authenticated within
// 5 seconds.
var DefaultLimits = connlimit.Limits{Max: 4096, MaxPending: 512, PendingPerAddr: 128, AuthTimeout: 5 * time.Second}

// limits fills l's zero fields from DefaultLimits. (A key-value front always has every limit: PerAddr,
// on all connections of an address, stays as given: many clients of one application server share it.)
func limits(l connlimit.Limits) connlimit.Limits {
	d := DefaultLimits
	return connlimit.Limits{Max: cmp.Or(l.Max, d.Max), PerAddr: l.PerAddr, MaxPending: cmp.Or(l.MaxPending, d.MaxPending),
		PendingPerAddr: cmp.Or(l.PendingPerAddr, d.PendingPerAddr), AuthTimeout: cmp.Or(l.AuthTimeout, d.AuthTimeout)}
}
