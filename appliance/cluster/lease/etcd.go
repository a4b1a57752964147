package lease

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultTTL is the lease's time to live when Config.TTL is 0: a node that stops renewing it is taken for
// gone that long after its last renewal (etcd raises a TTL below its minimum, about 2s with its default
// timings, to that minimum).
const DefaultTTL = 10 * time.Second

// DefaultPrefix is the keys' prefix when Config.Prefix is empty.
const DefaultPrefix = "/appliance/"

// opTimeout bounds each request the membership makes on its own (taking a lease, revoking one, reading
// the nodes for the watch).
const opTimeout = 10 * time.Second

// Config is an Etcd membership's.
type Config struct {
	Client *clientv3.Client // stays the caller's
	// Prefix is the keys' (DefaultPrefix when empty): <prefix>alive/<node> per node, <prefix>leader/ the
	// election's.
	Prefix string
	Node   string        // this node's id (no '/')
	TTL    time.Duration // the lease's (DefaultTTL when 0; whole seconds)
	Log    *slog.Logger
	// Renewed, when set, is told after each grant and answered renewal until when (this process's clock,
	// monotonic) the node may take itself for alive: the moment its term ends unless a renewal is answered
	// meanwhile, a fifth of the TTL before etcd can expire the lease. It is told the zero time when the term
	// ends. A self-fence outside this process (nodeloss.RunWatchdog) fences the node's instances then, even
	// while this process is frozen. It must not block.
	Renewed func(until time.Time)
}

// Etcd is a node's membership of a cluster on etcd.
type Etcd struct {
	cfg   Config
	c     *clientv3.Client
	log   *slog.Logger
	ttl   int64  // seconds
	runID string // this membership's random id, in the liveness key's value

	life    context.Context // ends at Stop
	stop    context.CancelFunc
	done    chan struct{} // closed when the goroutines returned
	stopCtx context.Context

	mu      sync.Mutex
	term    *term
	lead    context.Context // ends when the leadership ends (nil: never led)
	lastErr string
	started bool

	w    watchers
	wg   sync.WaitGroup
	once sync.Once
}

var _ Membership = (*Etcd)(nil)

// term is one holding of the lease.
type term struct {
	id     clientv3.LeaseID
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func (t *term) lease() string { return leaseHex(t.id) }

func leaseHex(id clientv3.LeaseID) string { return strconv.FormatInt(int64(id), 16) }

// NewEtcd is the membership cfg describes (Start joins).
func NewEtcd(cfg Config) (*Etcd, error) {
	if cfg.Client == nil {
		return nil, errors.New("cluster membership: no etcd client")
	}
	if cfg.Node == "" || strings.Contains(cfg.Node, "/") {
		return nil, fmt.Errorf("cluster membership: node id %q: it must be non-empty and hold no '/'", cfg.Node)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < time.Second {
		return nil, fmt.Errorf("cluster membership: a lease TTL of %s is under etcd's granularity (1s)", cfg.TTL)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	e := &Etcd{cfg: cfg, c: cfg.Client, log: cfg.Log.With("component", "cluster-lease", "node", cfg.Node),
		ttl: int64((cfg.TTL + time.Second - 1) / time.Second), done: make(chan struct{}), runID: rand.Text()}
	e.life, e.stop = context.WithCancel(context.Background())
	return e, nil
}

func (e *Etcd) aliveKey(node string) string { return e.cfg.Prefix + "alive/" + node }
func (e *Etcd) alivePrefix() string         { return e.cfg.Prefix + "alive/" }
func (e *Etcd) electionPrefix() string      { return e.cfg.Prefix + "leader" }

// Start takes the node's lease and puts its liveness key (it is alive when Start returns), then keeps
// the lease alive, campaigns for the leadership and watches the other nodes until Stop. A failure to
// take the lease (etcd unreachable, no quorum: ctx ends first) is Start's error.
func (e *Etcd) Start(ctx context.Context) error {
	e.mu.Lock()
	if e.started {
		e.mu.Unlock()
		return errors.New("start cluster membership: already started (or stopped)")
	}
	e.started = true
	e.mu.Unlock()
	t, err := e.acquire(ctx)
	if err != nil {
		e.stop()
		close(e.done)
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (etcd did not answer: the cluster has no quorum, or its members are out of reach)", err)
		}
		return fmt.Errorf("start cluster membership of node %s: %w", e.cfg.Node, err)
	}
	e.wg.Add(2)
	go e.run(t)
	go e.watchNodes()
	go func() { e.wg.Wait(); close(e.done) }()
	e.log.Info("cluster membership started", "lease", t.lease(), "ttl_seconds", e.ttl)
	return nil
}

// Stop resigns the leadership, revokes the lease (the liveness key goes at once: the other nodes see
// this node leave without waiting for the TTL) and ends the watchers. Idempotent.
func (e *Etcd) Stop(ctx context.Context) error {
	e.once.Do(func() {
		e.mu.Lock()
		e.stopCtx = ctx
		never := !e.started
		e.started = true // a Start after Stop is refused
		e.mu.Unlock()
		e.stop()
		if never {
			close(e.done)
		}
	})
	select {
	case <-e.done:
	case <-ctx.Done():
		return fmt.Errorf("stop cluster membership: %w", ctx.Err())
	}
	e.w.closeAll()
	return nil
}

// aliveValue is a liveness key's value.
type aliveValue struct {
	Node  string    `json:"node"`
	Run   string    `json:"run"` // the membership's (a process's) random id
	Lease string    `json:"lease"`
	Since time.Time `json:"since"`
}

// acquire grants a lease, binds this node's liveness key to it and keeps it alive. The key held under an
// earlier term of this membership has that lease revoked (it was taken for lost: its leadership must not
// outlive it by a TTL). The key held by another process with this node's id — this node's previous run,
// killed, or a second appliance given the same id — is waited for until its lease lapses (or ctx ends:
// an error saying so): two processes never take turns revoking each other's lease.
func (e *Etcd) acquire(ctx context.Context) (*term, error) {
	key := e.aliveKey(e.cfg.Node)
	for {
		rctx, cancel := context.WithTimeout(ctx, opTimeout)
		prev, err := e.c.Get(rctx, key)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("read the liveness key: %w", err)
		}
		var seen int64 // the key's mod revision (0: absent)
		if len(prev.Kvs) > 0 {
			kv := prev.Kvs[0]
			seen = kv.ModRevision
			var v aliveValue
			_ = json.Unmarshal(kv.Value, &v)
			if v.Run != e.runID {
				if err := e.waitGone(ctx, key, prev.Header.Revision, v); err != nil {
					return nil, err
				}
				continue
			}
			if old := clientv3.LeaseID(kv.Lease); old != 0 {
				rctx, cancel := context.WithTimeout(ctx, opTimeout)
				_, err := e.c.Revoke(rctx, old)
				cancel()
				if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
					return nil, fmt.Errorf("revoke lease %s of this node's earlier term: %w", leaseHex(old), err)
				}
				e.log.Info("revoked the lease of this node's earlier term", "lease", leaseHex(old))
				continue
			}
		}
		t, err := e.grant(ctx, key, seen)
		if err != nil || t != nil {
			return t, err
		}
		// The key changed between the read and the put: look again.
	}
}

// waitGone waits until the liveness key another process holds (v) is deleted.
func (e *Etcd) waitGone(ctx context.Context, key string, rev int64, v aliveValue) error {
	e.log.Warn("another process holds this node's liveness key: waiting for its lease to lapse (this node's previous run, killed; or a second appliance with this node's id)",
		"run", v.Run, "lease", v.Lease, "since", v.Since)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range e.c.Watch(wctx, key, clientv3.WithRev(rev+1)) {
		if err := wr.Err(); err != nil {
			return fmt.Errorf("watch the liveness key: %w", err)
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				return nil
			}
		}
	}
	return fmt.Errorf("node id %s is held by another process (lease %s, since %s): this node's previous run, whose lease lapses within its TTL, or a second appliance with this id: %w",
		e.cfg.Node, v.Lease, v.Since.Format(time.RFC3339), context.Cause(ctx))
}

// grant takes a lease and puts the liveness key bound to it if the key is still at mod revision seen
// (nil, nil when it is not).
func (e *Etcd) grant(ctx context.Context, key string, seen int64) (*term, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	asked := time.Now() // etcd's expiry of the lease is at least a TTL after this
	g, err := e.c.Grant(ctx, e.ttl)
	if err != nil {
		return nil, fmt.Errorf("take a lease: %w", err)
	}
	fail := func(err error) (*term, error) {
		rctx, rcancel := context.WithTimeout(context.Background(), opTimeout)
		_, _ = e.c.Revoke(rctx, g.ID)
		rcancel()
		return nil, err
	}
	val, _ := json.Marshal(aliveValue{Node: e.cfg.Node, Run: e.runID, Lease: leaseHex(g.ID), Since: time.Now().UTC()})
	resp, err := e.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", seen)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(g.ID))).Commit()
	if err != nil {
		return fail(fmt.Errorf("put the liveness key: %w", err))
	}
	if !resp.Succeeded {
		return fail(nil)
	}
	tctx, tcancel := context.WithCancelCause(e.life)
	t := &term{id: g.ID, ctx: tctx, cancel: tcancel}
	e.mu.Lock()
	e.term, e.lastErr = t, ""
	e.mu.Unlock()
	e.renewed(asked.Add(time.Duration(g.TTL)*time.Second - time.Duration(g.TTL)*time.Second/5))
	e.wg.Add(1)
	go e.keepAlive(t, asked, time.Duration(g.TTL)*time.Second)
	e.w.send(Event{Kind: Held, Node: e.cfg.Node, Lease: t.lease(), At: time.Now().UTC()})
	return t, nil
}

// keepAlive renews the lease every quarter of its TTL, one request at a time (KeepAliveOnce), so that it
// knows when each renewal was asked for: etcd renews on receipt, so the lease lives at least a TTL past
// the asking of the last renewal answered. It ends the term a fifth of the TTL before that (the timer's
// own lateness on a busy machine), or at once when etcd says the lease is gone.
func (e *Etcd) keepAlive(t *term, asked time.Time, ttl time.Duration) {
	defer e.wg.Done()
	deadline := asked.Add(ttl - ttl/5)
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	tick := time.NewTicker(ttl / 4)
	defer tick.Stop()
	lastAsked := asked
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-timer.C:
			t.cancel(fmt.Errorf("%w: etcd answered no keepalive asked since %s (the lease's TTL is %s): unreachable or without quorum",
				ErrLost, lastAsked.UTC().Format(time.RFC3339Nano), ttl))
			return
		case <-tick.C:
		}
		now := time.Now()
		ctx, cancel := context.WithDeadline(t.ctx, deadline)
		resp, err := e.c.KeepAliveOnce(ctx, t.id)
		cancel()
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			t.cancel(fmt.Errorf("%w: etcd says the lease is gone (it expired or was revoked)", ErrLost))
			return
		case err != nil:
			continue // the timer ends the term if no renewal comes in time
		}
		lastAsked = now
		if resp.TTL > 0 {
			ttl = time.Duration(resp.TTL) * time.Second
		}
		deadline = now.Add(ttl - ttl/5)
		e.renewed(deadline)
		timer.Reset(time.Until(deadline))
	}
}

// renewed tells Config.Renewed until when this node is alive (the zero time: no longer).
func (e *Etcd) renewed(until time.Time) {
	if e.cfg.Renewed != nil {
		e.cfg.Renewed(until)
	}
}

// run holds each term until it ends, then takes a new one, until Stop.
func (e *Etcd) run(t *term) {
	defer e.wg.Done()
	backoff := 100 * time.Millisecond
	for {
		e.hold(t)
		if e.life.Err() != nil {
			e.release(t)
			return
		}
		e.renewed(time.Time{})
		cause := context.Cause(t.ctx)
		e.mu.Lock()
		e.lastErr = cause.Error()
		e.mu.Unlock()
		e.log.Error("this node lost its cluster lease: it is not alive and does not lead until it holds a new one", "lease", t.lease(), "err", cause)
		e.w.send(Event{Kind: Lost, Node: e.cfg.Node, Lease: t.lease(), Err: cause, At: time.Now().UTC()})
		for {
			nt, err := e.acquire(e.life)
			if err == nil {
				e.log.Info("this node holds a cluster lease again", "lease", nt.lease())
				t, backoff = nt, 100*time.Millisecond
				break
			}
			if e.life.Err() != nil {
				return
			}
			e.mu.Lock()
			e.lastErr = err.Error()
			e.mu.Unlock()
			e.log.Warn("take a new cluster lease", "err", err, "retry_in", backoff)
			select {
			case <-e.life.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}
}

// hold campaigns for the leadership under term t and leads while it can, until the term ends.
func (e *Etcd) hold(t *term) {
	el := &election{c: e.c, prefix: e.electionPrefix() + "/", key: e.electionPrefix() + "/" + t.lease(), lease: t.id}
	for t.ctx.Err() == nil {
		if err := el.campaign(t.ctx, e.cfg.Node); err != nil {
			if t.ctx.Err() != nil {
				break
			}
			e.log.Warn("campaign for the cluster's leadership", "err", err)
			select {
			case <-t.ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		e.lead1(t, el)
	}
	if e.life.Err() != nil && el.rev != 0 && context.Cause(t.ctx) == context.Canceled {
		ctx, cancel := e.stopContext()
		defer cancel()
		if err := el.resign(ctx); err != nil {
			e.log.Warn("resign the cluster's leadership", "err", err)
		}
	}
}

// election is the campaign of one term, as clientv3/concurrency's Election runs it (a key per candidate
// under the prefix, bound to its lease; the oldest leads), with each request under the term's context:
// concurrency's Campaign, cancelled, resigns under the client's context, which waits for good on a
// member that is gone.
type election struct {
	c      *clientv3.Client
	prefix string
	key    string // this candidate's
	lease  clientv3.LeaseID
	rev    int64 // the key's create revision (0: not a candidate)
}

// campaign puts the candidate's key (once) and waits until no older candidate's key is left: then this
// node leads.
func (el *election) campaign(ctx context.Context, val string) error {
	if el.rev == 0 {
		resp, err := el.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(el.key), "=", 0)).
			Then(clientv3.OpPut(el.key, val, clientv3.WithLease(el.lease))).
			Else(clientv3.OpGet(el.key)).Commit()
		if err != nil {
			return err
		}
		el.rev = resp.Header.Revision
		if !resp.Succeeded {
			el.rev = resp.Responses[0].GetResponseRange().Kvs[0].CreateRevision
		}
	}
	for {
		older, err := el.c.Get(ctx, el.prefix, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(el.rev-1))...)
		if err != nil {
			return err
		}
		if len(older.Kvs) == 0 {
			// The candidate's own key must still be there (a lease lost and its keys gone is not a win).
			own, err := el.c.Get(ctx, el.key, clientv3.WithRev(older.Header.Revision))
			if err != nil {
				return err
			}
			if len(own.Kvs) == 0 || own.Kvs[0].CreateRevision != el.rev {
				el.rev = 0
				return errors.New("the candidate's key is gone (its lease ended)")
			}
			return nil
		}
		// Wait for the youngest older candidate to go, then look again.
		k := string(older.Kvs[0].Key)
		wctx, cancel := context.WithCancel(ctx)
		wc := el.c.Watch(wctx, k, clientv3.WithRev(older.Header.Revision+1))
		gone := false
		for !gone {
			wr, ok := <-wc
			if !ok || wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					gone = true
				}
			}
		}
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// resign deletes the candidate's key (if it is still this campaign's).
func (el *election) resign(ctx context.Context) error {
	_, err := el.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(el.key), "=", el.rev)).
		Then(clientv3.OpDelete(el.key)).Commit()
	el.rev = 0
	return err
}

// lead1 is one leadership: from the election won until the term ends or the leader key is gone.
func (e *Etcd) lead1(t *term, el *election) {
	lctx, lcancel := context.WithCancelCause(t.ctx)
	defer lcancel(nil)
	e.mu.Lock()
	e.lead = lctx
	e.mu.Unlock()
	if t.ctx.Err() != nil {
		return
	}
	e.log.Info("this node leads the cluster", "lease", t.lease())
	e.w.send(Event{Kind: Elected, Node: e.cfg.Node, Lease: t.lease(), At: time.Now().UTC()})
	wc := e.c.Watch(lctx, el.key, clientv3.WithRev(el.rev+1))
	func() {
		for {
			select {
			case <-lctx.Done():
				return
			case wr, ok := <-wc:
				if !ok || wr.Err() != nil {
					// The watch broke (the member went away): the term's keepalive says whether the lease
					// is lost; the leadership stands while it is held.
					<-lctx.Done()
					return
				}
				for _, ev := range wr.Events {
					if ev.Type == mvccpb.DELETE {
						el.rev = 0
						lcancel(errors.New("the leader key was deleted"))
						return
					}
				}
			}
		}
	}()
	cause := context.Cause(lctx)
	if e.life.Err() != nil {
		cause = nil
	}
	lcancel(cause)
	if cause != nil {
		e.log.Warn("this node no longer leads the cluster", "err", cause)
	}
	e.w.send(Event{Kind: Deposed, Node: e.cfg.Node, Lease: t.lease(), Err: cause, At: time.Now().UTC()})
}

// release revokes the lease of t at Stop (a lease lost before is revoked too: etcd may not have expired
// it yet).
func (e *Etcd) release(t *term) {
	ctx, cancel := e.stopContext()
	defer cancel()
	if _, err := e.c.Revoke(ctx, t.id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		e.log.Warn("revoke this node's lease at stop (it expires after its TTL)", "err", err)
	}
	e.log.Info("cluster membership stopped", "lease", t.lease())
}

// stopTimeout bounds each request Stop makes (a member that is gone must not hold Stop for long).
const stopTimeout = 3 * time.Second

// stopContext is the context of the requests Stop makes: Stop's own, not past stopTimeout.
func (e *Etcd) stopContext() (context.Context, context.CancelFunc) {
	e.mu.Lock()
	ctx := e.stopCtx
	e.mu.Unlock()
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
}

// watchNodes follows the liveness keys and sends NodeUp and NodeDown; after a broken watch it reads
// them again and sends the differences.
func (e *Etcd) watchNodes() {
	defer e.wg.Done()
	var known map[string]int64 // node → lease
	for e.life.Err() == nil {
		ctx, cancel := context.WithTimeout(e.life, opTimeout)
		resp, err := e.c.Get(ctx, e.alivePrefix(), clientv3.WithPrefix())
		cancel()
		if err == nil {
			now := map[string]int64{}
			for _, kv := range resp.Kvs {
				now[string(kv.Key[len(e.alivePrefix()):])] = kv.Lease
			}
			if known != nil {
				for n, l := range known {
					if _, ok := now[n]; !ok {
						e.gone(n, l)
					}
				}
				for n, l := range now {
					if known[n] != l {
						e.w.send(Event{Kind: NodeUp, Node: n, Lease: leaseHex(clientv3.LeaseID(l)), At: time.Now().UTC()})
					}
				}
			}
			known = now
			wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(e.life))
			for wr := range e.c.Watch(wctx, e.alivePrefix(), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
				if wr.Err() != nil {
					break
				}
				for _, ev := range wr.Events {
					n := string(ev.Kv.Key[len(e.alivePrefix()):])
					switch ev.Type {
					case mvccpb.PUT:
						if known[n] != ev.Kv.Lease {
							known[n] = ev.Kv.Lease
							e.w.send(Event{Kind: NodeUp, Node: n, Lease: leaseHex(clientv3.LeaseID(ev.Kv.Lease)), At: time.Now().UTC()})
						}
					case mvccpb.DELETE:
						if l, ok := known[n]; ok {
							delete(known, n)
							e.gone(n, l)
						}
					}
				}
			}
			wcancel()
		}
		select {
		case <-e.life.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// gone tells that node's liveness key (bound to lease) went away. When it is this node's, under the term
// it holds, the term ends first (its lease was revoked, or expired before the keepalive saw it): the
// watchers learn of the loss before they act on the NodeDown.
func (e *Etcd) gone(node string, lease int64) {
	if node == e.cfg.Node {
		e.mu.Lock()
		t := e.term
		e.mu.Unlock()
		if t != nil && int64(t.id) == lease && t.ctx.Err() == nil {
			t.cancel(fmt.Errorf("%w: this node's liveness key was deleted (its lease was revoked or expired)", ErrLost))
		}
	}
	e.w.send(Event{Kind: NodeDown, Node: node, Lease: leaseHex(clientv3.LeaseID(lease)), At: time.Now().UTC()})
}

// Verify reads this node's liveness key and reports whether it is still bound to t's lease (nil) or not
// (an error wrapping ErrLost; the term is ended).
func (e *Etcd) Verify(ctx context.Context, t Term) error {
	resp, err := e.c.Get(ctx, e.aliveKey(e.cfg.Node))
	if err != nil {
		return fmt.Errorf("read this node's liveness key: %w", err)
	}
	if len(resp.Kvs) > 0 && leaseHex(clientv3.LeaseID(resp.Kvs[0].Lease)) == t.Lease {
		return nil
	}
	err = fmt.Errorf("%w: this node's liveness key is no longer bound to lease %s", ErrLost, t.Lease)
	e.mu.Lock()
	cur := e.term
	e.mu.Unlock()
	if cur != nil && cur.lease() == t.Lease && cur.ctx.Err() == nil {
		cur.cancel(err)
	}
	return err
}

func (e *Etcd) Node() string { return e.cfg.Node }

func (e *Etcd) Current() (Term, bool) {
	e.mu.Lock()
	t := e.term
	e.mu.Unlock()
	if t == nil || t.ctx.Err() != nil {
		return Term{}, false
	}
	return Term{Lease: t.lease(), Ctx: t.ctx}, true
}

func (e *Etcd) Leading() (context.Context, bool) {
	e.mu.Lock()
	l := e.lead
	e.mu.Unlock()
	if l == nil || l.Err() != nil {
		return nil, false
	}
	return l, true
}

func (e *Etcd) IsLeader() bool {
	_, ok := e.Leading()
	return ok
}

func (e *Etcd) Alive(ctx context.Context, node string) (bool, error) {
	resp, err := e.c.Get(ctx, e.aliveKey(node), clientv3.WithCountOnly())
	if err != nil {
		return false, fmt.Errorf("read the liveness of node %s: %w", node, err)
	}
	return resp.Count > 0, nil
}

func (e *Etcd) Live(ctx context.Context) ([]Member, error) {
	resp, err := e.c.Get(ctx, e.alivePrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read the live nodes: %w", err)
	}
	out := make([]Member, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, Member{Node: string(kv.Key[len(e.alivePrefix()):]), Lease: leaseHex(clientv3.LeaseID(kv.Lease))})
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Node, b.Node) })
	return out, nil
}

func (e *Etcd) Leader(ctx context.Context) (string, error) {
	resp, err := e.c.Get(ctx, e.electionPrefix()+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", fmt.Errorf("read the cluster's leader: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", ErrNoLeader
	}
	return string(resp.Kvs[0].Value), nil
}

func (e *Etcd) Watch(ctx context.Context) <-chan Event { return e.w.add(ctx, e.life) }

func (e *Etcd) Status() Status {
	t, held := e.Current()
	e.mu.Lock()
	defer e.mu.Unlock()
	st := Status{Node: e.cfg.Node, Held: held, Leader: e.lead != nil && e.lead.Err() == nil}
	if held {
		st.Lease = t.Lease
	} else {
		st.Error = e.lastErr
	}
	return st
}
