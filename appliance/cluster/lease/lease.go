// Package lease is a node's place in its cluster of appliances: its liveness — a key per node
// (<prefix>alive/<node>) bound to an etcd lease the node keeps alive, gone when the node stops renewing
// it — and the leadership of the cluster-wide work: an election (clientv3/concurrency) on the same lease,
// so that a node that lost its lease is no longer alive and no longer leads, at once.
//
// Membership is what the scheduler and the appliance use. Etcd is a cluster's; Single is the single-node
// appliance's (bbolt): its node is always alive and always the leader.
//
// Failure semantics (Etcd): the node renews its lease every quarter of the TTL, one renewal at a time,
// and takes the lease as lost when no renewal asked for in the last four fifths of the TTL was answered —
// before etcd itself can expire it (etcd renews on receipt, so the lease lives at least a TTL past the
// asking of the last renewal answered). Then the term's context ends (the claims made under it are to be
// abandoned), leadership ends with it (IsLeader is false from that moment), a Lost event is sent, and the
// node tries to take a new lease (a new term) until it is stopped. No other node can be elected before
// etcd expires the old lease. A node id another live process holds (this node's previous run, killed; or
// a second appliance given the same id) is waited for until its lease lapses, never taken over.
package lease

import (
	"context"
	"errors"
	"time"
)

// ErrLost is wrapped by the cause of a term's end when the node lost its lease.
var ErrLost = errors.New("this node lost its cluster lease")

// ErrNoLeader is returned by Leader when no node leads.
var ErrNoLeader = errors.New("no node leads the cluster")

// Member is a live node: its id and the lease its liveness key is bound to (hex; "" on a single node).
type Member struct {
	Node  string `json:"node"`
	Lease string `json:"lease"`
}

// Term is one holding of this node's lease: the lease (hex; "" on a single node) and a context that ends
// when the node loses it or the membership stops (its cause says which).
type Term struct {
	Lease string
	Ctx   context.Context
}

// EventKind says what an Event tells.
type EventKind string

// The events a membership sends.
const (
	Held     EventKind = "held"      // this node holds a lease (again): Lease
	Lost     EventKind = "lost"      // this node lost its lease: Err says how
	Elected  EventKind = "elected"   // this node became the leader
	Deposed  EventKind = "deposed"   // this node no longer leads: Err says why (nil: it stopped)
	NodeUp   EventKind = "node-up"   // Node's liveness key appeared, or moved to a new lease
	NodeDown EventKind = "node-down" // Node's liveness key went away: its lease expired or was revoked
)

// Event is a change a membership saw.
type Event struct {
	Kind  EventKind
	Node  string // the node it is about (this node's for Held, Lost, Elected, Deposed)
	Lease string
	Err   error
	At    time.Time
}

// Status is a membership's state for /status.
type Status struct {
	Node   string `json:"node"`
	Lease  string `json:"lease"`  // the lease held ("" while none, and on a single node)
	Held   bool   `json:"held"`   // this node holds its lease: it is alive
	Leader bool   `json:"leader"` // this node leads
	// Error is why the node holds no lease, or the last failure to take one ("" when none).
	Error string `json:"error,omitempty"`
}

// Membership is this node's place in its cluster.
type Membership interface {
	// Node is this node's id.
	Node() string
	// Current is the term this node holds now (false while it holds none: it must not claim work).
	Current() (Term, bool)
	// Verify reads from the cluster whether this node is still alive under t's lease (nil), or not (an
	// error wrapping ErrLost, and the term ends): what a claim made under t checks before acting on it.
	Verify(ctx context.Context, t Term) error
	// Leading is, while this node leads, a context that ends when its leadership ends (true); false
	// otherwise.
	Leading() (context.Context, bool)
	// IsLeader reports whether this node leads now.
	IsLeader() bool
	// Alive reports whether node's liveness key exists (read from the cluster).
	Alive(ctx context.Context, node string) (bool, error)
	// Live lists the live nodes, by id (read from the cluster).
	Live(ctx context.Context) ([]Member, error)
	// Leader is the id of the node that leads (ErrNoLeader when none).
	Leader(ctx context.Context) (string, error)
	// Watch sends the membership's events, in order, until ctx ends or the membership stops (then the
	// channel is closed). Events queue for a slow reader; none is dropped.
	Watch(ctx context.Context) <-chan Event
	// Status is the membership's state now.
	Status() Status
}
