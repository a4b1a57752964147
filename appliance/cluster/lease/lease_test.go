package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/theappliance/appliance/store/etcdembed"
)

const waitFor = 30 * time.Second

// testTTL is the leases' TTL in these tests: etcd's minimum with its default timings.
const testTTL = 2 * time.Second

func startCluster(t *testing.T) *etcdembed.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	c, err := etcdembed.StartCluster(ctx, etcdembed.ClusterConfig{Dirs: dirs, LogLevel: "fatal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// memberClient is a client of member i alone: the node it serves is cut off when the member stops.
func memberClient(t *testing.T, c *etcdembed.Cluster, i int) *clientv3.Client {
	t.Helper()
	cl, err := c.MemberClient(i)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// node is a membership started on a client of member i, with its events recorded.
type node struct {
	*Etcd
	events <-chan Event
}

func join(t *testing.T, c *etcdembed.Cluster, i int, id, prefix string) *node {
	t.Helper()
	m, err := NewEtcd(Config{Client: memberClient(t, c, i), Prefix: prefix, Node: id, TTL: testTTL,
		Log: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	ev := m.Watch(t.Context())
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		if err := m.Stop(ctx); err != nil {
			var b strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
			t.Errorf("stop %s: %v\n%s", id, err, b.String())
		}
	})
	return &node{Etcd: m, events: ev}
}

// next waits for the node's next event of kind (about node about, "" any), skipping others.
func (n *node) next(t *testing.T, kind EventKind, about string) Event {
	t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case ev, ok := <-n.events:
			if !ok {
				t.Fatalf("%s: events closed while waiting for %s", n.Node(), kind)
			}
			if ev.Kind == kind && (about == "" || ev.Node == about) {
				return ev
			}
		case <-deadline:
			t.Fatalf("%s: no %s event (about %q)", n.Node(), kind, about)
		}
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func leaders(nodes []*node) []string {
	var out []string
	for _, n := range nodes {
		if n.IsLeader() {
			out = append(out, n.Node())
		}
	}
	return out
}

func memberIndex(nodes []*node, id string) int {
	return slices.IndexFunc(nodes, func(n *node) bool { return n.Node() == id })
}

// TestLivenessAndElection: three nodes are alive (Live, Alive), exactly one leads and Leader names it;
// a node's Stop resigns and revokes: the others see it leave and elect another at once (no TTL to wait).
func TestLivenessAndElection(t *testing.T) {
	c := startCluster(t)
	const prefix = "/t-election/"
	nodes := []*node{join(t, c, 0, "n1", prefix), join(t, c, 1, "n2", prefix), join(t, c, 2, "n3", prefix)}
	ctx := t.Context()

	live, err := nodes[0].Live(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range live {
		ids = append(ids, m.Node)
		if m.Lease == "" || m.Lease == "0" {
			t.Errorf("member %s has no lease", m.Node)
		}
	}
	if !slices.Equal(ids, []string{"n1", "n2", "n3"}) {
		t.Fatalf("live %v", ids)
	}
	if ok, err := nodes[1].Alive(ctx, "n3"); err != nil || !ok {
		t.Fatalf("n3 alive: %v %v", ok, err)
	}
	if ok, err := nodes[1].Alive(ctx, "n9"); err != nil || ok {
		t.Fatalf("n9 alive: %v %v", ok, err)
	}
	waitUntil(t, "one node leads", func() bool { return len(leaders(nodes)) == 1 })
	lead := leaders(nodes)[0]
	for _, n := range nodes {
		if got, err := n.Leader(ctx); err != nil || got != lead {
			t.Fatalf("%s says the leader is %q (%v), want %s", n.Node(), got, err, lead)
		}
	}
	li := memberIndex(nodes, lead)
	lctx, ok := nodes[li].Leading()
	if !ok {
		t.Fatal("the leader's Leading is false")
	}
	if st := nodes[li].Status(); !st.Held || !st.Leader || st.Lease == "" || st.Error != "" {
		t.Fatalf("leader's status %+v", st)
	}

	// The leader stops: it resigns and its key goes at once.
	other := nodes[(li+1)%3]
	sctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	if err := nodes[li].Stop(sctx); err != nil {
		t.Fatal(err)
	}
	if lctx.Err() == nil {
		t.Fatal("the leadership's context did not end at Stop")
	}
	other.next(t, NodeDown, lead)
	rest := slices.Delete(slices.Clone(nodes), li, li+1)
	waitUntil(t, "another node leads", func() bool { return len(leaders(rest)) == 1 })
	if got, err := other.Leader(ctx); err != nil || got == lead {
		t.Fatalf("leader after the stop: %q %v", got, err)
	}
	if ok, err := other.Alive(ctx, lead); err != nil || ok {
		t.Fatalf("stopped node alive: %v %v", ok, err)
	}
	if _, ok := nodes[li].Current(); ok {
		t.Fatal("a stopped membership still holds a term")
	}
}

// TestLostLeaseStepsDownFirst: the leader's member stops (its node is cut off from etcd): the node takes
// its lease as lost and stops leading at once, before another node is elected (etcd expires the lease
// only later); the others see it leave; when its member comes back it holds a new lease (the old one
// revoked) and is alive again, leading or not.
func TestLostLeaseStepsDownFirst(t *testing.T) {
	c := startCluster(t)
	const prefix = "/t-lost/"
	nodes := []*node{join(t, c, 0, "n1", prefix), join(t, c, 1, "n2", prefix), join(t, c, 2, "n3", prefix)}
	waitUntil(t, "one node leads", func() bool { return len(leaders(nodes)) == 1 })
	lead := leaders(nodes)[0]
	li := memberIndex(nodes, lead)
	old := nodes[li]
	term, ok := old.Current()
	if !ok {
		t.Fatal("the leader holds no term")
	}
	lctx, _ := old.Leading()

	c.Stop(li)
	deposed := old.next(t, Deposed, lead) // the leadership ends with the term, then the loss is told
	lost := old.next(t, Lost, lead)
	if !errors.Is(lost.Err, ErrLost) || !errors.Is(context.Cause(term.Ctx), ErrLost) {
		t.Fatalf("lost event %v, term's cause %v: want ErrLost", lost.Err, context.Cause(term.Ctx))
	}
	if lctx.Err() == nil || old.IsLeader() {
		t.Fatal("the node still leads after losing its lease")
	}
	if st := old.Status(); st.Held || st.Leader || st.Error == "" {
		t.Fatalf("status after the loss: %+v", st)
	}

	rest := slices.Delete(slices.Clone(nodes), li, li+1)
	rest[0].next(t, NodeDown, lead)
	var elected Event
	for elected.Kind == "" {
		for _, n := range rest {
			select {
			case ev := <-n.events:
				if ev.Kind == Elected {
					elected = ev
				}
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	if !elected.At.After(lost.At) || !elected.At.After(deposed.At) {
		t.Fatalf("%s was elected at %s, before the old leader stepped down (lost %s, deposed %s)",
			elected.Node, elected.At, lost.At, deposed.At)
	}

	// Its member back, the node takes a new lease and is alive again.
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	if err := c.Restart(ctx, li); err != nil {
		t.Fatal(err)
	}
	held := old.next(t, Held, lead)
	if held.Lease == term.Lease {
		t.Fatalf("the new term has the old lease %s", held.Lease)
	}
	if ok, err := rest[0].Alive(ctx, lead); err != nil || !ok {
		t.Fatalf("%s alive again: %v %v", lead, ok, err)
	}
	if n := len(leaders(nodes)); n != 1 {
		t.Fatalf("%d leaders", n)
	}
}

// TestNoQuorumNoLeader: with two of three members stopped, no node holds a lease nor leads, and a new
// membership cannot start (a clear error, not a hang).
func TestNoQuorumNoLeader(t *testing.T) {
	c := startCluster(t)
	const prefix = "/t-quorum/"
	nodes := []*node{join(t, c, 0, "n1", prefix), join(t, c, 1, "n2", prefix), join(t, c, 2, "n3", prefix)}
	waitUntil(t, "one node leads", func() bool { return len(leaders(nodes)) == 1 })
	c.Stop(1)
	c.Stop(2)
	nodes[0].next(t, Lost, "n1")
	if nodes[0].IsLeader() {
		t.Fatal("n1 leads without a quorum")
	}
	for _, n := range nodes {
		waitUntil(t, n.Node()+" holds no lease", func() bool { _, ok := n.Current(); return !ok })
	}
	m, err := NewEtcd(Config{Client: memberClient(t, c, 0), Prefix: prefix, Node: "n4", TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	err = m.Start(ctx)
	if err == nil {
		t.Fatal("a membership started without a quorum")
	}
	if want := "(etcd did not answer: the cluster has no quorum, or its members are out of reach)"; !strings.HasPrefix(err.Error(), "start cluster membership of node n4: ") || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
}

// TestSingle: the single-node membership is always alive and the leader until Stop.
func TestSingle(t *testing.T) {
	s := NewSingle("solo")
	ctx := t.Context()
	ev := s.Watch(ctx)
	if tm, ok := s.Current(); !ok || tm.Lease != "" || tm.Ctx.Err() != nil {
		t.Fatalf("term %+v %v", tm, ok)
	}
	lctx, ok := s.Leading()
	if !ok || !s.IsLeader() {
		t.Fatal("single node does not lead")
	}
	if live, _ := s.Live(ctx); !slices.Equal(live, []Member{{Node: "solo"}}) {
		t.Fatalf("live %v", live)
	}
	if ok, _ := s.Alive(ctx, "other"); ok {
		t.Fatal("another node is alive")
	}
	if l, err := s.Leader(ctx); l != "solo" || err != nil {
		t.Fatalf("leader %q %v", l, err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if lctx.Err() == nil || s.IsLeader() {
		t.Fatal("leads after Stop")
	}
	if _, open := <-ev; open {
		t.Fatal("watch not closed at Stop")
	}
	if _, err := s.Leader(ctx); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("leader after stop: %v", err)
	}
}

func TestConfigChecks(t *testing.T) {
	m, err := NewEtcd(Config{Client: &clientv3.Client{}, Node: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(t.Context()); err != nil { // never started: nothing to wait for
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err == nil {
		t.Fatal("started after Stop")
	}
	for _, cfg := range []Config{{Node: "a"}, {Client: &clientv3.Client{}, Node: ""}, {Client: &clientv3.Client{}, Node: "a/b"},
		{Client: &clientv3.Client{}, Node: "a", TTL: time.Millisecond}} {
		if _, err := NewEtcd(cfg); err == nil {
			t.Errorf("%s accepted", fmt.Sprintf("%+v", cfg))
		}
	}
}

// TestSameNodeIDWaits: a second process with a node id another live process holds does not take it (a
// clear error when its Start gives up); once the first is gone (cut off, its lease lapsed) it takes the
// id; the first, back, waits rather than revoking the second's lease in turn.
func TestSameNodeIDWaits(t *testing.T) {
	c := startCluster(t)
	const prefix = "/t-same-id/"
	first := join(t, c, 0, "n1", prefix)
	second, err := NewEtcd(Config{Client: memberClient(t, c, 1), Prefix: prefix, Node: "n1", TTL: testTTL,
		Log: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	err = second.Start(ctx)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "node id n1 is held by another process") {
		t.Fatalf("second start with a live id: %v", err)
	}
	if _, ok := first.Current(); !ok {
		t.Fatal("the first process lost its lease to the second")
	}

	third, err := NewEtcd(Config{Client: memberClient(t, c, 1), Prefix: prefix, Node: "n1", TTL: testTTL,
		Log: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), waitFor)
		defer cancel()
		started <- third.Start(ctx)
	}()
	c.Stop(0) // the first is cut off: its lease lapses
	select {
	case err := <-started:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitFor + time.Second):
		t.Fatal("the id was not taken after the first's lease lapsed")
	}
	t.Cleanup(func() { _ = third.Stop(context.Background()) })
	held, _ := third.Current()
	ctx, cancel = context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	if err := c.Restart(ctx, 0); err != nil {
		t.Fatal(err)
	}
	first.next(t, Lost, "n1")
	// The first, reconnected, waits: the third keeps its lease.
	waitUntil(t, "the first process can read again", func() bool { _, err := first.Live(ctx); return err == nil })
	live, err := first.Live(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != 1 || live[0].Lease != held.Lease {
		t.Fatalf("live %v, want n1 under the third's lease %s", live, held.Lease)
	}
	if now, ok := third.Current(); !ok || now.Lease != held.Lease {
		t.Fatalf("the third's term: %+v %v (held %s)", now, ok, held.Lease)
	}
	if _, ok := first.Current(); ok {
		t.Fatal("the first took the id back")
	}
}

// TestRenewedDeadline: Config.Renewed is told, at the grant and at each answered renewal, a deadline at
// most four fifths of the TTL ahead (the term's end unless renewed: before etcd can expire the lease); its
// member stopped, the node is told the zero time when the term ends, after the last deadline told.
func TestRenewedDeadline(t *testing.T) {
	c := startCluster(t)
	type told struct{ at, until time.Time }
	var mu sync.Mutex
	var seen []told
	m, err := NewEtcd(Config{Client: memberClient(t, c, 0), Prefix: "/t-renewed/", Node: "n1", TTL: testTTL,
		Renewed: func(until time.Time) {
			mu.Lock()
			seen = append(seen, told{time.Now(), until})
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	ev := m.Watch(t.Context())
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		m.Stop(ctx)
	})
	n := &node{Etcd: m, events: ev}
	waitUntil(t, "two renewals told", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) >= 3 })
	c.Stop(0)
	lost := n.next(t, Lost, "n1")
	mu.Lock()
	defer mu.Unlock()
	var last time.Time
	zero := false
	for _, s := range seen {
		if s.until.IsZero() {
			zero = true
			continue
		}
		if zero {
			t.Fatalf("a deadline told after the term's end: %+v", s)
		}
		if ahead := s.until.Sub(s.at); ahead <= 0 || ahead > testTTL*4/5 {
			t.Fatalf("deadline %s ahead when told, want within (0, %s]", ahead, testTTL*4/5)
		}
		last = s.until
	}
	if !zero {
		t.Fatal("the term's end was not told (zero time)")
	}
	if lost.At.Before(last.Add(-10 * time.Millisecond)) {
		t.Fatalf("lost at %s, before the last deadline told %s", lost.At, last)
	}
}
