package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/theappliance/appliance/appliance/cluster/lease"
	"github.com/theappliance/appliance/store"
	"github.com/theappliance/appliance/store/etcdembed"
)

// The scheduler across nodes: a real three-member etcd in the test's process; each node is a runner
// with its own membership and store over a client of one member alone, so that stopping the member cuts
// the node off (its lease lapses) as a node's loss would.

// clusterTTL is the nodes' lease TTL here (etcd's minimum with its default timings).
const clusterTTL = 2 * time.Second

func startEtcd(t *testing.T) *etcdembed.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := etcdembed.StartCluster(ctx, etcdembed.ClusterConfig{Dirs: []string{t.TempDir(), t.TempDir(), t.TempDir()}, LogLevel: "fatal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// clusterNode is one node: membership, store and runner over a client of member i.
type clusterNode struct {
	id      string
	member  int
	client  *clientv3.Client
	db      *store.DB
	m       *lease.Etcd
	r       *Runner
	stopped bool
}

// joinNode starts a node on member i under prefix; register registers its handlers and tasks before its
// runner starts. Its runner and membership stop at cleanup (restart any stopped member before: a node cut
// off cannot record its jobs' release).
func joinNode(t *testing.T, c *etcdembed.Cluster, i int, id, prefix string, register func(*Runner)) *clusterNode {
	t.Helper()
	n := &clusterNode{id: id, member: i}
	var err error
	if n.client, err = c.MemberClient(i); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.client.Close() })
	if n.db, err = store.OpenEtcd(n.client, prefix+"meta/"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.db.Close() })
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})).With("test_node", id)
	if n.m, err = lease.NewEtcd(lease.Config{Client: n.client, Prefix: prefix, Node: id, TTL: clusterTTL, Log: log}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	if err := n.m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	n.r = newRunner(t, n.db, Options{ID: id + "/runner", Members: n.m, Sweep: 200 * time.Millisecond, Log: log})
	if register != nil {
		register(n.r)
	}
	if err := n.r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.stop(t) })
	return n
}

// stop stops the node's runner, then its membership (the order up stops them in).
func (n *clusterNode) stop(t *testing.T) {
	if n.stopped {
		return
	}
	n.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := n.r.Stop(ctx); err != nil {
		t.Errorf("stop runner %s: %v", n.id, err)
	}
	if err := n.m.Stop(ctx); err != nil {
		t.Errorf("stop membership %s: %v", n.id, err)
	}
}

func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func leaderOf(t *testing.T, nodes []*clusterNode) *clusterNode {
	t.Helper()
	var lead *clusterNode
	waitCond(t, "one node leads", func() bool {
		lead = nil
		n := 0
		for _, nd := range nodes {
			if !nd.stopped && nd.m.IsLeader() {
				lead, n = nd, n+1
			}
		}
		return n == 1
	})
	return lead
}

// overlap counts concurrent runs of something and remembers the highest count seen.
type overlap struct {
	mu      sync.Mutex
	now     map[string]int
	max     int
	runs    map[string][]string // key → the nodes that ran it, in order
	maxOver string
}

func newOverlap() *overlap { return &overlap{now: map[string]int{}, runs: map[string][]string{}} }

func (o *overlap) enter(key, node string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.now[key]++
	o.runs[key] = append(o.runs[key], node)
	if o.now[key] > o.max {
		o.max, o.maxOver = o.now[key], key
	}
}

func (o *overlap) leave(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.now[key]--
}

func (o *overlap) ran(key string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.runs[key])
}

func (o *overlap) check(t *testing.T) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.max > 1 {
		t.Errorf("%s ran %d times at once", o.maxOver, o.max)
	}
}

// TestClusterPeriodicOnTheLeader: a task of Every runs on the leader alone, one run at a time across the
// nodes; when the leader's member stops (the node cut off) it moves to another node, and again when that
// node's runner and membership stop. A task of EveryNode runs on every node.
func TestClusterPeriodicOnTheLeader(t *testing.T) {
	c := startEtcd(t)
	const prefix = "/t-periodic/"
	runs := newOverlap()
	var perNode sync.Map // node → *atomic.Int32
	register := func(id string) func(*Runner) {
		return func(r *Runner) {
			if err := r.Every("@every 1s", "cluster-sweep", func(ctx context.Context) {
				runs.enter("cluster-sweep", id)
				defer runs.leave("cluster-sweep")
				select { // a run that lasts: a second leader running meanwhile would overlap it
				case <-ctx.Done():
				case <-time.After(700 * time.Millisecond):
				}
			}); err != nil {
				t.Fatal(err)
			}
			var n atomic.Int32
			perNode.Store(id, &n)
			if err := r.EveryNode("@every 1s", "local", func(ctx context.Context) { n.Add(1) }); err != nil {
				t.Fatal(err)
			}
		}
	}
	nodes := []*clusterNode{
		joinNode(t, c, 0, "n1", prefix, register("n1")),
		joinNode(t, c, 1, "n2", prefix, register("n2")),
		joinNode(t, c, 2, "n3", prefix, register("n3")),
	}
	first := leaderOf(t, nodes)
	waitCond(t, "the task ran twice", func() bool { return len(runs.ran("cluster-sweep")) >= 2 })
	for _, n := range runs.ran("cluster-sweep") {
		if n != first.id {
			t.Fatalf("the task ran on %s, which does not lead (%s does)", n, first.id)
		}
	}
	waitCond(t, "every node ran its own task", func() bool {
		all := true
		perNode.Range(func(_, v any) bool { all = all && v.(*atomic.Int32).Load() > 0; return true })
		return all
	})

	// The leader is cut off: the task moves.
	c.Stop(first.member)
	t.Cleanup(func() { _ = c.Restart(context.Background(), first.member) }) // before the nodes stop
	var second *clusterNode
	waitCond(t, "the task ran on another node", func() bool {
		rs := runs.ran("cluster-sweep")
		if last := rs[len(rs)-1]; last != first.id {
			second = nodes[slices.IndexFunc(nodes, func(n *clusterNode) bool { return n.id == last })]
			return true
		}
		return false
	})
	if first.m.IsLeader() {
		t.Fatal("the cut-off node still leads")
	}

	// Its runner and membership stop (a clean stop resigns): the task moves on.
	second.stop(t)
	third := nodes[slices.IndexFunc(nodes, func(n *clusterNode) bool { return n != first && n != second })]
	waitCond(t, "the task ran on the third node", func() bool {
		rs := runs.ran("cluster-sweep")
		return rs[len(rs)-1] == third.id
	})
	runs.check(t)
}

// TestClusterJobOfLostNodeRetried: a node is cut off while its job runs: its handler's context ends
// (ErrLost), and a live node puts the job back to pending (the attempt counted, the error naming the lost
// node), and another node runs it; never two runs at once.
func TestClusterJobOfLostNodeRetried(t *testing.T) {
	c := startEtcd(t)
	const prefix = "/t-lost-node/"
	runs := newOverlap()
	causes := make(chan error, 4)
	seen := make(chan store.Job, 4)
	register := func(id string) func(*Runner) {
		return func(r *Runner) {
			r.Handle("long", func(ctx context.Context, run *Run) (any, error) {
				runs.enter(run.Job.ID, id)
				defer runs.leave(run.Job.ID)
				seen <- run.Job
				if run.Job.Attempts == 1 {
					<-ctx.Done()
					causes <- context.Cause(ctx)
					return nil, ctx.Err()
				}
				return "done on " + id, nil
			})
		}
	}
	nodes := []*clusterNode{
		joinNode(t, c, 0, "n1", prefix, register("n1")),
		joinNode(t, c, 1, "n2", prefix, register("n2")),
		joinNode(t, c, 2, "n3", prefix, register("n3")),
	}
	id := enqueue(t, nodes[0].db, nodes[0].r, &store.Job{Type: "long", MaxAttempts: 3})
	first := recvCluster(t, seen, "the first attempt")
	owner := nodes[slices.IndexFunc(nodes, func(n *clusterNode) bool { return n.id == first.HostID })]
	if first.Lease == "" {
		t.Fatal("the claim records no lease")
	}
	other := nodes[(owner.member+1)%3]

	c.Stop(owner.member)
	t.Cleanup(func() { _ = c.Restart(context.Background(), owner.member) })
	if cause := recvCluster(t, causes, "the cut-off node's handler to be cancelled"); !errors.Is(cause, lease.ErrLost) {
		t.Fatalf("the handler's context ended with %v, want ErrLost", cause)
	}
	second := recvCluster(t, seen, "the retry")
	if second.HostID == owner.id || second.Attempts != 2 || second.Error != fmt.Sprintf(msgNodeLost, owner.id) {
		t.Fatalf("retry on %s, attempt %d, error %q", second.HostID, second.Attempts, second.Error)
	}
	j := waitFinalCluster(t, other.db, id)
	if j.State != StateCompleted || j.Attempts != 2 || j.HostID == owner.id {
		t.Fatalf("job %+v", j)
	}
	runs.check(t)
}

// TestClusterNodeAffinity: jobs naming a node run on it alone; a job left to another node keeps its place
// on its resource (a later job on the resource, for any node, waits for it); many jobs across three nodes
// each run once.
func TestClusterNodeAffinity(t *testing.T) {
	c := startEtcd(t)
	const prefix = "/t-affinity/"
	runs := newOverlap()
	var order sync.Mutex
	var onRes []string
	register := func(id string) func(*Runner) {
		return func(r *Runner) {
			r.Handle("step", func(ctx context.Context, run *Run) (any, error) {
				runs.enter(run.Job.ID, id)
				defer runs.leave(run.Job.ID)
				if run.Job.LockedResource != "" {
					order.Lock()
					onRes = append(onRes, run.Job.ID)
					order.Unlock()
				}
				time.Sleep(5 * time.Millisecond)
				return id, nil
			})
		}
	}
	nodes := []*clusterNode{
		joinNode(t, c, 0, "n1", prefix, register("n1")),
		joinNode(t, c, 1, "n2", prefix, register("n2")),
		joinNode(t, c, 2, "n3", prefix, register("n3")),
	}
	db := nodes[0].db
	var pinned, free []string
	if err := db.Update(func(tx *store.Tx) error {
		pinned, free = nil, nil
		for i := range 12 {
			j := &store.Job{Type: "step", Node: "n2"}
			if err := Enqueue(tx, j); err != nil {
				return err
			}
			pinned = append(pinned, j.ID)
			j = &store.Job{Type: "step"}
			if err := Enqueue(tx, j); err != nil {
				return err
			}
			free = append(free, j.ID)
			_ = i
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// On one resource: a job for n3, then one for any node.
	resFirst := enqueue(t, db, nil, &store.Job{Type: "step", Node: "n3", LockedResource: "prj_1"})
	resSecond := enqueue(t, db, nil, &store.Job{Type: "step", LockedResource: "prj_1"})
	for _, n := range nodes {
		n.r.Notify()
	}
	hosts := map[string]bool{}
	for _, id := range pinned {
		if j := waitFinalCluster(t, db, id); j.State != StateCompleted || j.HostID != "n2" || string(j.Result) != `"n2"` {
			t.Fatalf("pinned job ran on %s: %+v", j.HostID, j)
		}
	}
	for _, id := range free {
		j := waitFinalCluster(t, db, id)
		if j.State != StateCompleted {
			t.Fatalf("job %+v", j)
		}
		hosts[j.HostID] = true
		if n := len(runs.ran(id)); n != 1 {
			t.Errorf("job %s ran %d times", id, n)
		}
	}
	if j := waitFinalCluster(t, db, resFirst); j.HostID != "n3" {
		t.Fatalf("the resource's first job ran on %s", j.HostID)
	}
	waitFinalCluster(t, db, resSecond)
	order.Lock()
	if !slices.Equal(onRes, []string{resFirst, resSecond}) {
		t.Errorf("jobs on the resource ran in the order %v, want %s then %s", onRes, resFirst, resSecond)
	}
	order.Unlock()
	t.Logf("the free jobs ran on %d nodes", len(hosts))
	runs.check(t)
}

// TestClusterWithoutQuorum: two of three members stop while a job runs: every node loses its lease, the
// job's handler is cancelled, no node leads (the periodic task runs nowhere), a node's Health says it holds
// no lease and a write fails with an error; once the members are back, the job runs again (once) and
// completes, and the task runs again on one node.
func TestClusterWithoutQuorum(t *testing.T) {
	c := startEtcd(t)
	const prefix = "/t-quorum/"
	runs := newOverlap()
	var taskRuns atomic.Int32
	started := make(chan store.Job, 4)
	register := func(id string) func(*Runner) {
		return func(r *Runner) {
			r.Handle("long", func(ctx context.Context, run *Run) (any, error) {
				runs.enter(run.Job.ID, id)
				defer runs.leave(run.Job.ID)
				started <- run.Job
				if run.Job.Attempts == 1 {
					<-ctx.Done()
					return nil, ctx.Err()
				}
				return nil, nil
			})
			if err := r.Every("@every 1s", "cluster-task", func(ctx context.Context) {
				runs.enter("cluster-task", id)
				defer runs.leave("cluster-task")
				taskRuns.Add(1)
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	nodes := []*clusterNode{
		joinNode(t, c, 0, "n1", prefix, register("n1")),
		joinNode(t, c, 1, "n2", prefix, register("n2")),
		joinNode(t, c, 2, "n3", prefix, register("n3")),
	}
	id := enqueue(t, nodes[0].db, nodes[0].r, &store.Job{Type: "long"})
	recvCluster(t, started, "the first attempt")

	c.Stop(1)
	c.Stop(2)
	for _, n := range nodes {
		waitCond(t, n.id+" holds no lease", func() bool { _, ok := n.m.Current(); return !ok })
	}
	for _, n := range nodes {
		if n.m.IsLeader() {
			t.Fatalf("%s leads without a quorum", n.id)
		}
	}
	status, msg := nodes[0].r.Health(t.Context())
	t.Logf("health without quorum: %s: %s", status, msg)
	if status != "degraded" || !strings.Contains(msg, "node n1 holds no cluster lease (") {
		t.Errorf("health without quorum: %s: %s", status, msg)
	}
	before := taskRuns.Load()
	err := nodes[0].db.Update(func(tx *store.Tx) error { return Enqueue(tx, &store.Job{Type: "long"}) })
	t.Logf("a write without quorum: %v", err)
	if err == nil || !strings.Contains(err.Error(), "the cluster has no quorum") {
		t.Fatalf("a write without a quorum: %v", err)
	}
	if n := taskRuns.Load(); n != before {
		t.Errorf("the periodic task ran %d times without a quorum", n-before)
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, i := range []int{1, 2} {
		if err := c.Restart(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	second := recvCluster(t, started, "the retry")
	if second.Attempts != 2 {
		t.Fatalf("retry at attempt %d", second.Attempts)
	}
	if j := waitFinalCluster(t, nodes[0].db, id); j.State != StateCompleted {
		t.Fatalf("job %+v", j)
	}
	after := taskRuns.Load()
	waitCond(t, "the periodic task runs again", func() bool { return taskRuns.Load() > after })
	runs.check(t)
}

// recvCluster is recv with the cluster tests' longer wait (a lease to lapse, members to come back and
// elect, a node to take a new lease).
func recvCluster[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(2 * waitFor):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// waitFinalCluster waits until the job is completed or failed, as long as recvCluster.
func waitFinalCluster(t *testing.T, db *store.DB, id string) *store.Job {
	t.Helper()
	var j *store.Job
	waitCond(t, "job "+id+" ends", func() bool { j = getJob(t, db, id); return isFinal(j) })
	return j
}

// TestClusterRevokedLeaseRejoin: a node's lease is revoked while its job (pinned to it) runs, the store
// still in reach: its handler's context ends (ErrLost), the job goes back to pending with the attempt
// counted (recorded by the node itself or by a live node's sweep, whichever comes first), the node takes
// a new lease and runs the job again — itself, as the job is pinned to it.
func TestClusterRevokedLeaseRejoin(t *testing.T) {
	c := startEtcd(t)
	const prefix = "/t-revoked/"
	runs := newOverlap()
	causes := make(chan error, 4)
	seen := make(chan store.Job, 4)
	register := func(id string) func(*Runner) {
		return func(r *Runner) {
			r.Handle("pinned", func(ctx context.Context, run *Run) (any, error) {
				runs.enter(run.Job.ID, id)
				defer runs.leave(run.Job.ID)
				seen <- run.Job
				if run.Job.Attempts == 1 {
					<-ctx.Done()
					causes <- context.Cause(ctx)
					return nil, ctx.Err()
				}
				return nil, nil
			})
		}
	}
	n1 := joinNode(t, c, 0, "n1", prefix, register("n1"))
	joinNode(t, c, 1, "n2", prefix, register("n2"))
	id := enqueue(t, n1.db, n1.r, &store.Job{Type: "pinned", Node: "n1"})
	first := recvCluster(t, seen, "the first attempt")
	held, ok := n1.m.Current()
	if !ok || first.Lease != held.Lease || first.HostID != "n1" {
		t.Fatalf("claimed by %s under lease %s; n1 holds %s (%v)", first.HostID, first.Lease, held.Lease, ok)
	}
	leaseID, err := strconv.ParseInt(held.Lease, 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	if _, err := cl.Revoke(t.Context(), clientv3.LeaseID(leaseID)); err != nil {
		t.Fatal(err)
	}
	if cause := recvCluster(t, causes, "the handler to be cancelled"); !errors.Is(cause, lease.ErrLost) {
		t.Fatalf("the handler's context ended with %v, want ErrLost", cause)
	}
	second := recvCluster(t, seen, "the retry")
	if second.HostID != "n1" || second.Attempts != 2 || second.Lease == held.Lease ||
		(second.Error != fmt.Sprintf(msgLeaseLost, "n1") && second.Error != fmt.Sprintf(msgNodeLost, "n1")) {
		t.Fatalf("retry on %s, attempt %d, lease %s (the revoked one: %s), error %q", second.HostID, second.Attempts, second.Lease, held.Lease, second.Error)
	}
	if j := waitFinalCluster(t, n1.db, id); j.State != StateCompleted || j.Attempts != 2 {
		t.Fatalf("job %+v", j)
	}
	runs.check(t)
}

// TestClusterJobPinnedToLostNode: jobs pinned to node n3, which holds no lease (it is lost). One whose
// project is still on n3 waits; once its project is placed on n2 (restored there), it follows it and runs
// on n2. One pinned to n3 whose project is on a node without a lease either (n4: a restore elsewhere
// pinned to a leader lost since) fails with an error that names both nodes. One whose project is gone
// fails too.
func TestClusterJobPinnedToLostNode(t *testing.T) {
	c := startEtcd(t)
	const prefix = "/t-pinned-lost/"
	register := func(id string) func(*Runner) {
		return func(r *Runner) {
			r.Handle("step", func(ctx context.Context, run *Run) (any, error) { return id, nil })
		}
	}
	nodes := []*clusterNode{
		joinNode(t, c, 0, "n1", prefix, register("n1")),
		joinNode(t, c, 1, "n2", prefix, register("n2")),
	}
	db := nodes[0].db
	now := time.Now().UTC()
	if err := db.Update(func(tx *store.Tx) error {
		for _, p := range []*store.Project{{ID: "prj_follow", NodeID: "n3"}, {ID: "prj_lost", NodeID: "n4"}} {
			p.Name, p.CreatedAt, p.UpdatedAt = p.ID, now, now
			if err := store.Projects.Put(tx, p); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	follows := enqueue(t, db, nil, &store.Job{Type: "step", ProjectID: "prj_follow", LockedResource: "prj_follow"})
	if j := getJob(t, db, follows); j.Node != "n3" {
		t.Fatalf("the job is pinned to %q, want its project's node n3", j.Node)
	}
	lost := enqueue(t, db, nil, &store.Job{Type: "step", ProjectID: "prj_lost", Node: "n3"})
	gone := enqueue(t, db, nil, &store.Job{Type: "step", ProjectID: "prj_gone", Node: "n3"})
	if j := waitFinalCluster(t, db, lost); j.State != StateFailed || j.Error != fmt.Sprintf(msgPinnedLost, "n3", "n4") {
		t.Fatalf("job pinned to n3 with its project on n4 (both without a lease): %s %q", j.State, j.Error)
	}
	if j := waitFinalCluster(t, db, gone); j.State != StateFailed || j.Error != fmt.Sprintf(msgPinnedGone, "n3") {
		t.Fatalf("job pinned to n3 of a project that is gone: %s %q", j.State, j.Error)
	}
	// Both settled by a sweep that also saw the first job: it still waits for n3, its project's node.
	if j := getJob(t, db, follows); j.State != StatePending || j.Node != "n3" {
		t.Fatalf("job of a project still on n3: %s on %q, want pending on n3", j.State, j.Node)
	}
	if err := db.Update(func(tx *store.Tx) error {
		p, err := store.Projects.Get(tx, "prj_follow")
		if err != nil {
			return err
		}
		p.NodeID = "n2"
		return store.Projects.Put(tx, p)
	}); err != nil {
		t.Fatal(err)
	}
	if j := waitFinalCluster(t, db, follows); j.State != StateCompleted || j.HostID != "n2" || j.Node != "n2" || string(j.Result) != `"n2"` {
		t.Fatalf("job whose project moved to n2: %+v", j)
	}
}
