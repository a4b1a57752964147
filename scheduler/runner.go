package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/theappliance/appliance/appliance/cluster/lease"
	"github.com/theappliance/appliance/scheduler/lane"
	"github.com/theappliance/appliance/store"
)

// Errors recorded on jobs interrupted by the end of the process.
const (
	// msgCrashed is recorded by Start on a job a previous process left running that has attempts left.
	msgCrashed = "interrupted: the appliance stopped while the job ran; retrying"
	// msgCrashedSpent is recorded by Start on such a job that has none left: it failed.
	msgCrashedSpent = "failed: the appliance stopped while the job ran, and that was its last attempt (%d of %d)"
	// msgStopped is recorded by a clean Stop on a job whose handler it cancelled.
	msgStopped = "interrupted: the appliance was stopped while the job ran; it runs again at the next start"
	// msgNodeLost is recorded (by any live node) on a job whose claiming node lost its cluster lease (it
	// died, or was cut off from the cluster past the lease's TTL) while the job ran, with attempts left.
	msgNodeLost = "interrupted: node %s lost its cluster lease while the job ran (it stopped or was cut off); retrying"
	// msgNodeLostSpent is recorded on such a job that has none left: it failed.
	msgNodeLostSpent = "failed: node %s lost its cluster lease while the job ran, and that was its last attempt (%d of %d)"
	// msgLeaseLost is recorded by the node itself on a job whose handler it cancelled when it lost its lease.
	msgLeaseLost = "interrupted: this node (%s) lost its cluster lease while the job ran; retrying"
)

// Options configure a runner.
type Options struct {
	ID string // recorded as claimed_by (default "scheduler")
	// HostID is the node, recorded as host_id (with Members: Members.Node(), whatever HostID says).
	HostID  string
	Workers int // concurrent jobs (default 4)
	// Backoff is the delay before the next try after attempt number attempt (1, 2 …) failed with a
	// transient error (default DefaultBackoff: 2s, 4s, 8s … capped at five minutes).
	Backoff func(attempt int) time.Duration
	// Poll is how often idle workers look for due jobs without being notified (default 1s): it picks up
	// retries whose backoff ended and jobs enqueued without Notify.
	Poll time.Duration
	Log  *slog.Logger
	// Lane is where the runner's own bookkeeping (claiming a job, recording its end, with the events and
	// deliveries the end appends) runs; handlers run outside it (nil: in the runner's goroutines, unpaced;
	// up gives the process's background lane).
	Lane *lane.Lane
	// Members is this node's place in its cluster (lease.Etcd). Jobs are claimed under its lease, recorded
	// on the job (Job.Lease), and only while it holds one; a handler's context ends when it is lost. Tasks
	// of Every run only while it leads. Jobs claimed under a lease that is gone (their node died or was cut
	// off) are put back to pending by the live nodes. A job whose Node names another node is left to it.
	// nil: a single node (lease.Single on HostID: always alive, always the leader).
	Members lease.Membership
	// Sweep is how often, in a cluster, the runner looks for jobs claimed under a lease that is gone, besides
	// at each node's loss the membership tells (default 5s).
	Sweep time.Duration
}

type phase int

const (
	phaseNew phase = iota
	phaseStarted
	phaseStopped
)

// Runner claims and runs jobs, and runs periodic tasks.
type Runner struct {
	db    *store.DB
	opts  Options
	onEnd func(tx *store.Tx, j *store.Job) error
	// before runs before every handler (Before).
	before Handler
	log    *slog.Logger
	cron   *cron.Cron
	wakes  []chan struct{} // one per worker; fixed in New so Notify needs no lock

	// ctx is the context of handlers and periodic tasks: cancelled by Stop.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	handlers map[string]Handler
	phase    phase
	// recovered: Recover settled the interrupted jobs before Start.
	recovered bool
	inflight  map[string]*store.Job // claimed jobs whose handler runs, as claimed
	done      chan struct{}         // closed when every worker returned (nil until Start)
	cronDone  context.Context       // done when running periodic tasks returned (nil until Stop)

	// claimMu orders claims against Stop: once Stop set stopping, no claim commits.
	claimMu  sync.Mutex
	stopping bool

	workers sync.WaitGroup

	// clustered: Options.Members was given (a single node's runner sweeps nothing: it alone claims).
	clustered bool
}

// New makes a runner over db.
func New(db *store.DB, opts Options) *Runner {
	if opts.ID == "" {
		opts.ID = "scheduler"
	}
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.Backoff == nil {
		opts.Backoff = DefaultBackoff
	}
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Sweep <= 0 {
		opts.Sweep = 5 * time.Second
	}
	clustered := opts.Members != nil
	if clustered {
		opts.HostID = opts.Members.Node()
	} else {
		opts.Members = lease.NewSingle(opts.HostID)
	}
	r := &Runner{db: db, opts: opts, log: opts.Log.With("component", "scheduler"),
		cron:     cron.New(cron.WithLocation(time.UTC)),
		handlers: map[string]Handler{}, inflight: map[string]*store.Job{}, clustered: clustered}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	for range opts.Workers {
		r.wakes = append(r.wakes, make(chan struct{}, 1))
	}
	return r
}

// Handle registers the handler of a job type (before Start).
func (r *Runner) Handle(jobType string, h Handler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handlers[jobType] = h
}

// Before registers what runs before the handler of every job (before Start): an error it returns is the
// job's, as a handler's would be, and the handler does not run. Its result is ignored.
func (r *Runner) Before(h Handler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.before = h
}

// Every registers a periodic task of the cluster, run once per cluster: on a cron spec (five fields or a
// descriptor such as "@every 1m", evaluated in UTC), by the node that leads (on a single node: always). It
// may be called before or after Start. A run is skipped while the previous run of the same task is still
// going, and on a node that does not lead; a panic is logged. fn's ctx is cancelled by Stop, and when this
// node's leadership ends (it lost its lease): the new leader runs the task from its next tick.
func (r *Runner) Every(spec, name string, fn func(ctx context.Context)) error {
	return r.every(spec, name, fn, false)
}

// EveryNode registers a periodic task every node runs, leading or not (and holding its lease or not): the
// work that looks at this node's own processes and files. Otherwise as Every.
func (r *Runner) EveryNode(spec, name string, fn func(ctx context.Context)) error {
	return r.every(spec, name, fn, true)
}

func (r *Runner) every(spec, name string, fn func(ctx context.Context), perNode bool) error {
	if name == "" || fn == nil {
		return errors.New("schedule periodic task: name and function are required")
	}
	r.mu.Lock()
	stopped := r.phase == phaseStopped
	r.mu.Unlock()
	if stopped {
		return fmt.Errorf("schedule %s: the scheduler is stopped", name)
	}
	var busy atomic.Bool
	_, err := r.cron.AddFunc(spec, func() {
		if r.ctx.Err() != nil {
			return
		}
		ctx := r.ctx
		if !perNode {
			lctx, ok := r.opts.Members.Leading()
			if !ok {
				r.log.Debug("periodic task skipped: this node does not lead the cluster", "task", name)
				return
			}
			c, stop := within(r.ctx, lctx)
			defer stop()
			ctx = c
		}
		if !busy.CompareAndSwap(false, true) {
			r.log.Warn("periodic task skipped: previous run still going", "task", name)
			return
		}
		defer busy.Store(false)
		defer func() {
			if v := recover(); v != nil {
				r.log.Error("periodic task panicked", "task", name, "panic", v, "stack", string(debug.Stack()))
			}
		}()
		start := time.Now()
		fn(ctx)
		r.log.Debug("periodic task ran", "task", name, "took", time.Since(start))
	})
	if err != nil {
		return fmt.Errorf("schedule %s (%q): %w", name, spec, err)
	}
	return nil
}

// Start recovers jobs a previous process left running, then starts the workers and the cron (and, in a
// cluster, the sweep of the jobs of nodes that lost their lease).
//
// A job this node claimed that is found running at Start was interrupted by a crash (or a Stop that ran
// out of time); so was, on a single node, every job found running. In a cluster, so was a job whose
// claiming node is not alive under the lease it claimed it with. Its claim already counted an attempt:
// with attempts left it goes back to pending at once; otherwise it fails. Counting the crashed attempt
// bounds a job that itself brings the process down.
func (r *Runner) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.phase {
	case phaseStarted:
		return errors.New("start scheduler: already started")
	case phaseStopped:
		return errors.New("start scheduler: already stopped")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("start scheduler: %w", err)
	}
	if !r.recovered {
		if _, err := r.recoverOrphans(ctx, true); err != nil {
			return fmt.Errorf("start scheduler: recover interrupted jobs: %w", err)
		}
	}
	r.phase = phaseStarted
	r.done = make(chan struct{})
	for i := range r.opts.Workers {
		r.workers.Add(1)
		go r.work(r.wakes[i])
	}
	if r.clustered {
		r.workers.Add(1)
		go r.sweep(r.opts.Members.Watch(r.ctx))
	}
	go func() {
		r.workers.Wait()
		close(r.done)
	}()
	r.cron.Start()
	r.log.Info("scheduler started", "workers", r.opts.Workers, "id", r.opts.ID)
	return nil
}

// Recover settles, before Start, the jobs a previous process left running (as Start would), without
// starting a worker: what the process does at its start between the two (adopting the instances, whose
// repairs look for an interrupted job made pending) runs with no job beside it, so no job's attempt takes
// an instance from supervision before the adoption puts it under supervision again.
func (r *Runner) Recover(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.phase != phaseNew {
		return errors.New("recover scheduler: already started")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("recover scheduler: %w", err)
	}
	if _, err := r.recoverOrphans(ctx, true); err != nil {
		return fmt.Errorf("recover scheduler: recover interrupted jobs: %w", err)
	}
	r.recovered = true
	return nil
}

// recoverOrphans settles the running jobs whose claim is void: claimed under a lease that is not live any
// more (their node died, was cut off past its lease's TTL, or claimed them in an earlier term), and at
// Start every job this node claimed before (an earlier run of its process). Each goes back to pending with
// its attempt counted, or fails when that was its last. It returns how many it settled.
//
// The running jobs are read before the live nodes: a claim seen was made under a lease granted before the
// read, so a lease missing from the later list of live nodes has ended. The transaction then settles only
// the claims seen (a job claimed anew since is left alone).
func (r *Runner) recoverOrphans(ctx context.Context, atStart bool) (int, error) {
	var running []*store.Job
	if err := r.db.View(func(tx *store.Tx) (err error) {
		running, err = store.Jobs.Lookup(tx, store.JobsByState, StateRunning, store.Query{})
		return err
	}); err != nil {
		return 0, err
	}
	if len(running) == 0 {
		return 0, nil
	}
	lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	live, err := r.opts.Members.Live(lctx)
	cancel()
	if err != nil {
		return 0, err
	}
	alive := map[lease.Member]bool{}
	for _, m := range live {
		alive[m] = true
	}
	var orphans []*store.Job
	for _, j := range running {
		if atStart && j.HostID == r.opts.HostID || !alive[lease.Member{Node: j.HostID, Lease: j.Lease}] {
			orphans = append(orphans, j)
		}
	}
	if len(orphans) == 0 {
		return 0, nil
	}
	n := 0
	err = r.db.Update(func(tx *store.Tx) error {
		n = 0 // a run again starts over
		now := time.Now().UTC()
		for _, o := range orphans {
			j, err := store.Jobs.Get(tx, o.ID)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if !sameClaim(j, o) {
				continue
			}
			crashed := !r.clustered || j.HostID == r.opts.HostID // this node's earlier run
			j.RetryClassification, j.UpdatedAt = ClassTransient, now
			if j.Attempts < maxAttempts(j) {
				j.State, j.RunAfter = StatePending, now
				if j.Error = msgCrashed; !crashed {
					j.Error = fmt.Sprintf(msgNodeLost, j.HostID)
				}
				tx.OnCommit(func() {
					r.log.Warn("job interrupted (its claim's process or node is gone); retrying", "job", j.ID, "type", j.Type, "attempts", j.Attempts, "node", j.HostID)
				})
			} else {
				j.State, j.CompletedAt = StateFailed, &now
				if j.Error = fmt.Sprintf(msgCrashedSpent, j.Attempts, maxAttempts(j)); !crashed {
					j.Error = fmt.Sprintf(msgNodeLostSpent, j.HostID, j.Attempts, maxAttempts(j))
				}
				tx.OnCommit(func() {
					r.log.Error("job interrupted (its claim's process or node is gone) and out of attempts", "job", j.ID, "type", j.Type, "attempts", j.Attempts, "node", j.HostID)
				})
			}
			if err := store.Jobs.Put(tx, j); err != nil {
				return err
			}
			if err := r.ended(tx, j); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// msgPinnedFollowed is recorded on a pending job that followed its project from a node without a lease to
// the node that hosts the project now (restored there); msgPinnedLost on one that could not.
const (
	msgPinnedFollowed = "node %s, which this job was to run on, holds no cluster lease; its project is on node %s now (restored there): it runs there"
	msgPinnedLost     = "failed: node %s, which this job was to run on, holds no cluster lease, and its project's node %s holds none either: enqueue it again once the project is available"
	msgPinnedGone     = "failed: node %s, which this job was to run on, holds no cluster lease, and its project is gone"
)

// repinPending, in a cluster, settles the pending jobs pinned (Job.Node) to a node that holds no lease:
// one of a project now placed on a live node (restored there) follows it; one of a project whose node holds
// no lease either (a restore elsewhere pinned to a leader lost since) fails with an error that says so;
// one of a project still on the pinned node waits for it (the node back, or the project restored elsewhere
// and the job following it); one of no project waits for its node.
func (r *Runner) repinPending(ctx context.Context) (int, error) {
	var pinned []*store.Job
	if err := r.db.View(func(tx *store.Tx) error {
		pending, err := store.Jobs.Lookup(tx, store.JobsByState, StatePending, store.Query{})
		for _, j := range pending {
			if j.Node != "" && j.ProjectID != "" {
				pinned = append(pinned, j)
			}
		}
		return err
	}); err != nil || len(pinned) == 0 {
		return 0, err
	}
	lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	live, err := r.opts.Members.Live(lctx)
	cancel()
	if err != nil {
		return 0, err
	}
	alive := map[string]bool{}
	for _, m := range live {
		alive[m.Node] = true
	}
	n := 0
	err = r.db.Update(func(tx *store.Tx) error {
		n = 0
		now := time.Now().UTC()
		for _, o := range pinned {
			if alive[o.Node] {
				continue
			}
			j, err := store.Jobs.Get(tx, o.ID)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if j.State != StatePending || j.Node != o.Node {
				continue
			}
			owner := ""
			p, err := store.Projects.Get(tx, j.ProjectID)
			switch {
			case errors.Is(err, store.ErrNotFound):
				j.State, j.CompletedAt, j.Error = StateFailed, &now, fmt.Sprintf(msgPinnedGone, j.Node)
			case err != nil:
				return err
			default:
				owner = store.ProjectNode(tx, p)
				switch {
				case owner == j.Node || owner == "":
					continue // it waits for its node, or for its project to move
				case alive[owner]:
					j.Error, j.Node = fmt.Sprintf(msgPinnedFollowed, j.Node, owner), owner
				default:
					j.State, j.CompletedAt, j.Error = StateFailed, &now, fmt.Sprintf(msgPinnedLost, j.Node, owner)
				}
			}
			j.UpdatedAt = now
			if err := store.Jobs.Put(tx, j); err != nil {
				return err
			}
			if err := r.ended(tx, j); err != nil {
				return err
			}
			tx.OnCommit(func() {
				r.log.Warn("a job pinned to a node without a lease", "job", j.ID, "type", j.Type, "state", j.State, "node", j.Node, "project_node", owner)
			})
			n++
		}
		return nil
	})
	return n, err
}

// sameClaim reports whether the stored job cur is still the running claim j (as read before).
func sameClaim(cur, j *store.Job) bool {
	if cur.State != StateRunning || cur.Attempts != j.Attempts || cur.HostID != j.HostID || cur.Lease != j.Lease ||
		(cur.ClaimedAt == nil) != (j.ClaimedAt == nil) {
		return false
	}
	return cur.ClaimedAt == nil || cur.ClaimedAt.Equal(*j.ClaimedAt)
}

// sweep, in a cluster, recovers the jobs of nodes that lost their lease: when the membership tells a node
// went down, when this node holds a lease again (jobs it claimed in its lost term), and every Sweep. A
// node that holds no lease sweeps nothing (it is the one cut off).
func (r *Runner) sweep(events <-chan lease.Event) {
	defer r.workers.Done()
	tick := time.NewTicker(r.opts.Sweep)
	defer tick.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if ev.Kind == lease.Held {
				r.Notify() // claims go on
			} else if ev.Kind != lease.NodeDown {
				continue
			}
		case <-tick.C:
		}
		if _, ok := r.opts.Members.Current(); !ok {
			continue
		}
		var n, m int
		var err, perr error
		r.opts.Lane.Do(func() {
			n, err = r.recoverOrphans(r.ctx, false)
			m, perr = r.repinPending(r.ctx)
		})
		if perr != nil && r.ctx.Err() == nil {
			r.log.Warn("jobs pinned to nodes that lost their lease", "err", perr)
		}
		n += m
		switch {
		case err != nil && r.ctx.Err() == nil:
			r.log.Warn("recover the jobs of nodes that lost their lease", "err", err)
		case n > 0:
			r.Notify()
		}
	}
}

// within is a context of parent that also ends when other does (with other's cause).
func within(parent, other context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	stop := context.AfterFunc(other, func() { cancel(context.Cause(other)) })
	return ctx, func() { stop(); cancel(nil) }
}

// Stop stops claiming, cancels the handlers' and periodic tasks' context, waits for them to return until
// ctx ends, and stops the cron. Idempotent: a later call waits again (with its own ctx) and returns nil once
// everything has returned.
//
// A job whose handler Stop cancelled goes back to pending without counting the attempt (unless the handler
// still managed to succeed): being stopped is not the job's fault, and jobs are idempotent steps, so the next
// Start runs it again from the top. If ctx ends first, Stop does the same to the jobs still running in the
// store, so none stays running after Stop returns; a late result of such a handler is then discarded.
func (r *Runner) Stop(ctx context.Context) error {
	r.claimMu.Lock()
	r.stopping = true
	r.claimMu.Unlock()

	r.mu.Lock()
	if r.phase == phaseStarted {
		r.cronDone = r.cron.Stop()
		r.log.Info("scheduler stopping")
	}
	r.phase = phaseStopped
	r.cancel()
	done, cronDone := r.done, r.cronDone
	r.mu.Unlock()
	if done == nil { // never started
		return nil
	}

	select {
	case <-done:
	case <-ctx.Done():
		r.mu.Lock()
		left := make([]*store.Job, 0, len(r.inflight))
		for _, j := range r.inflight {
			left = append(left, j)
		}
		r.mu.Unlock()
		for _, j := range left {
			if err := r.release(j); err != nil {
				r.log.Error("release job", "job", j.ID, "err", err)
			}
		}
		return fmt.Errorf("stop scheduler: %d job handlers still running: %w", len(left), ctx.Err())
	}
	select {
	case <-cronDone.Done():
	case <-ctx.Done():
		return fmt.Errorf("stop scheduler: periodic tasks still running: %w", ctx.Err())
	}
	return nil
}

// Notify wakes the workers after jobs were enqueued.
func (r *Runner) Notify() {
	for _, w := range r.wakes {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// Health reports the runner's state for /status.
func (r *Runner) Health(ctx context.Context) (status, message string) {
	r.mu.Lock()
	ph := r.phase
	r.mu.Unlock()
	switch ph {
	case phaseNew:
		return "down", "not started"
	case phaseStopped:
		return "down", "stopped"
	}
	if r.clustered { // a node cut off says so at once (its store is out of reach too, for etcd's timeout)
		if st := r.opts.Members.Status(); !st.Held {
			return "degraded", fmt.Sprintf("%d workers; node %s holds no cluster lease (%s): it claims no jobs and leads nothing until it holds one",
				r.opts.Workers, st.Node, st.Error)
		}
	}
	var running, pending int
	err := r.db.View(func(tx *store.Tx) error {
		rs, err := store.Jobs.Lookup(tx, store.JobsByState, StateRunning, store.Query{})
		if err != nil {
			return err
		}
		ps, err := store.Jobs.Lookup(tx, store.JobsByState, StatePending, store.Query{})
		running, pending = len(rs), len(ps)
		return err
	})
	if err != nil {
		return "degraded", fmt.Sprintf("%d workers; cannot read jobs: %v", r.opts.Workers, err)
	}
	msg := fmt.Sprintf("%d workers, %d running, %d pending", r.opts.Workers, running, pending)
	if !r.clustered {
		return "operational", msg
	}
	st := r.opts.Members.Status()
	return "operational", fmt.Sprintf("%s; node %s, leading: %v", msg, st.Node, st.Leader)
}

// work is one worker: it claims and runs jobs until none is due, then sleeps until Notify or the poll tick.
func (r *Runner) work(wake <-chan struct{}) {
	defer r.workers.Done()
	tick := time.NewTicker(r.opts.Poll)
	defer tick.Stop()
	for {
		for r.ctx.Err() == nil {
			j, term, err := r.claim()
			if err != nil {
				r.log.Error("claim job", "err", err)
				break
			}
			if j == nil {
				break
			}
			r.execute(j, term)
			if j.LockedResource != "" { // jobs waiting on this lock may run now on any worker
				r.Notify()
			}
		}
		select {
		case <-r.ctx.Done():
			return
		case <-wake:
		case <-tick.C:
		}
	}
}

// claim takes the oldest due pending job whose locked resource is free (and that may run on this node), in
// one transaction, under the lease this node holds (none held: no claim), and records it as in flight. It
// looks in a read-only transaction first: most wake-ups (the poll tick, a Notify that woke every worker
// for one job) find nothing, and a read-write transaction that changes nothing still writes and syncs the
// store's file twice, which a running job's own commits then wait behind. It returns nil when there is
// nothing to do.
func (r *Runner) claim() (*store.Job, lease.Term, error) {
	r.claimMu.Lock()
	defer r.claimMu.Unlock()
	if r.stopping {
		return nil, lease.Term{}, nil
	}
	term, ok := r.opts.Members.Current()
	if !ok {
		return nil, term, nil
	}
	var claimed *store.Job
	var err error
	r.opts.Lane.Do(func() { claimed, err = r.claimDue(term.Lease) })
	if err != nil || claimed == nil {
		return nil, term, err
	}
	r.mu.Lock()
	r.inflight[claimed.ID] = claimed
	r.mu.Unlock()
	return claimed, term, nil
}

// claimDue is claim's work in the store (in the runner's lane).
func (r *Runner) claimDue(leaseID string) (*store.Job, error) {
	var due *store.Job
	err := r.db.View(func(tx *store.Tx) (err error) {
		due, err = nextDue(tx, time.Now().UTC(), r.opts.HostID)
		return err
	})
	if err != nil || due == nil {
		return nil, err
	}
	var claimed *store.Job
	err = r.db.Update(func(tx *store.Tx) error {
		claimed = nil // a run again starts over
		now := time.Now().UTC()
		j, err := nextDue(tx, now, r.opts.HostID)
		if err != nil || j == nil {
			return err
		}
		j.State, j.ClaimedBy, j.HostID, j.Lease = StateRunning, r.opts.ID, r.opts.HostID, leaseID
		j.ClaimedAt, j.StartedAt, j.UpdatedAt = &now, &now, now
		j.Attempts++
		if err := store.Jobs.Put(tx, j); err != nil {
			return err
		}
		claimed = j
		return nil
	})
	return claimed, err
}

// nextDue is, in tx, the oldest pending job due at now whose locked resource is free and that may run on
// node (its Node empty or node) (nil when none). Jobs on one resource also run in order: a pending job
// waiting for its backoff keeps later jobs on its resource waiting too, and so does a due job left to
// another node.
func nextDue(tx *store.Tx, now time.Time, node string) (*store.Job, error) {
	running, err := store.Jobs.Lookup(tx, store.JobsByState, StateRunning, store.Query{})
	if err != nil {
		return nil, err
	}
	held := map[string]bool{}
	for _, j := range running {
		if j.LockedResource != "" {
			held[j.LockedResource] = true
		}
	}
	// The pending jobs are decoded one at a time, oldest first, up to the first that may run (a claim made
	// while many are queued reads few of them).
	var due *store.Job
	err = store.Jobs.Scan(tx, store.JobsByState, StatePending, StatePending+"\x00", func(id string) (bool, error) {
		j, err := store.Jobs.Get(tx, id)
		if err != nil {
			return false, err
		}
		if j.LockedResource != "" && held[j.LockedResource] {
			return true, nil
		}
		if j.RunAfter.After(now) {
			// A job waiting out a retry backoff keeps its resource's order: later jobs wait behind it.
			// A job merely scheduled for later (never attempted) holds nothing until it is due.
			if j.LockedResource != "" && j.Attempts > 0 {
				held[j.LockedResource] = true
			}
			return true, nil
		}
		if j.Node != "" && j.Node != node { // another node's: it keeps its place on its resource
			if j.LockedResource != "" {
				held[j.LockedResource] = true
			}
			return true, nil
		}
		due = j
		return false, nil
	})
	return due, err
}

// Holder is, in tx, the job that holds resource at now (nil when none): one running on it, or one pending
// that is due or was attempted already (a job waiting out a retry backoff keeps its place, see nextDue). A
// job merely scheduled for later holds nothing until it is due.
func Holder(tx *store.Tx, resource string, now time.Time) (*store.Job, error) {
	for _, state := range []string{StateRunning, StatePending} {
		jobs, err := store.Jobs.Lookup(tx, store.JobsByState, state, store.Query{})
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			if j.LockedResource == resource && (state == StateRunning || !j.RunAfter.After(now) || j.Attempts > 0) {
				return j, nil
			}
		}
	}
	return nil, nil
}

// execute runs the handler of a claimed job and records its outcome. The handler's context ends at Stop
// and when the term the job was claimed under ends (this node lost its lease).
func (r *Runner) execute(j *store.Job, term lease.Term) {
	defer func() {
		r.mu.Lock()
		delete(r.inflight, j.ID)
		r.mu.Unlock()
	}()
	log := r.log.With("job", j.ID, "type", j.Type, "attempt", j.Attempts)
	r.mu.Lock()
	h, before := r.handlers[j.Type], r.before
	r.mu.Unlock()
	if h == nil {
		r.fail(j, fmt.Sprintf("unknown job type %q: no handler is registered for it", j.Type), ClassPermanent, log)
		return
	}
	if r.ctx.Err() != nil {
		r.releaseLogged(j, log)
		return
	}
	if term.Ctx.Err() != nil { // the lease was lost as the claim committed: the handler never ran
		log.Warn("job claimed as this node lost its cluster lease; released", "err", context.Cause(term.Ctx))
		r.releaseUnrun(j, log)
		return
	}
	if r.clustered { // the claim stands only if the lease it was made under still does
		vctx, cancel := context.WithTimeout(r.ctx, 15*time.Second)
		err := r.opts.Members.Verify(vctx, term)
		cancel()
		if err != nil {
			log.Warn("job claimed under a lease no longer live (or not confirmed); released", "err", err)
			r.releaseUnrun(j, log)
			return
		}
	}
	ctx, stop := within(r.ctx, term.Ctx)
	defer stop()

	log.Debug("job started")
	run := &Run{Job: *j, runner: r, claim: j}
	var result any
	var err error
	if before != nil {
		_, err = call(ctx, before, run, log)
	}
	if err == nil {
		result, err = call(ctx, h, run, log)
	}

	if err != nil && r.ctx.Err() != nil { // Stop cancelled the handler: run it again at the next start
		log.Info("job interrupted by stop; it runs again at the next start", "err", err)
		r.releaseLogged(j, log)
		return
	}
	if err != nil && term.Ctx.Err() != nil { // this node lost its lease: the job is retried (by any node)
		cause := context.Cause(term.Ctx)
		log.Warn("job interrupted: this node lost its cluster lease", "err", err, "cause", cause)
		r.interrupted(j, log)
		return
	}
	if err == nil {
		res, merr := json.Marshal(result)
		if merr != nil {
			r.fail(j, fmt.Sprintf("encode result: %v", merr), ClassPermanent, log)
			return
		}
		_, serr := r.settle(j, func(cur *store.Job, now time.Time) {
			cur.State, cur.Result, cur.Error, cur.CompletedAt = StateCompleted, res, "", &now
		})
		if serr != nil {
			log.Error("record job completion", "err", serr)
			return
		}
		log.Info("job completed")
		return
	}
	if IsTransient(err) && j.Attempts < maxAttempts(j) {
		delay := r.opts.Backoff(j.Attempts)
		_, serr := r.settle(j, func(cur *store.Job, now time.Time) {
			cur.State, cur.RunAfter = StatePending, now.Add(delay)
			cur.Error, cur.RetryClassification = err.Error(), ClassTransient
		})
		if serr != nil {
			log.Error("record job retry", "err", serr)
			return
		}
		log.Warn("job failed; retrying", "err", err, "retry_in", delay)
		return
	}
	class := ClassPermanent
	if IsTransient(err) {
		class = ClassTransient // retryable, but out of attempts
	}
	r.fail(j, err.Error(), class, log)
}

// call runs the handler, turning a panic into an error.
func call(ctx context.Context, h Handler, run *Run, log *slog.Logger) (result any, err error) {
	defer func() {
		if v := recover(); v != nil {
			log.Error("job handler panicked", "panic", v, "stack", string(debug.Stack()))
			result, err = nil, fmt.Errorf("panic: %v", v)
		}
	}()
	return h(ctx, run)
}

func (r *Runner) fail(j *store.Job, msg, class string, log *slog.Logger) {
	_, err := r.settle(j, func(cur *store.Job, now time.Time) {
		cur.State, cur.Error, cur.RetryClassification, cur.CompletedAt = StateFailed, msg, class, &now
	})
	if err != nil {
		log.Error("record job failure", "err", err)
		return
	}
	log.Error("job failed", "err", msg, "classification", class)
}

// interrupted puts a job whose handler was cancelled when this node lost its lease back to pending, its
// attempt counted (failed when it was the last), unless a live node did so already (it is no longer this
// claim). Without a store to write to (the node is cut off), the live nodes' sweep does it.
func (r *Runner) interrupted(j *store.Job, log *slog.Logger) {
	_, err := r.settle(j, func(cur *store.Job, now time.Time) {
		cur.RetryClassification = ClassTransient
		if cur.Attempts < maxAttempts(cur) {
			cur.State, cur.RunAfter, cur.Error = StatePending, now, fmt.Sprintf(msgLeaseLost, r.opts.HostID)
		} else {
			cur.State, cur.CompletedAt = StateFailed, &now
			cur.Error = fmt.Sprintf(msgNodeLostSpent, r.opts.HostID, cur.Attempts, maxAttempts(cur))
		}
	})
	if err != nil {
		log.Warn("record the job's interruption (the live nodes' sweep retries it)", "err", err)
	}
}

// release puts a job whose handler Stop interrupted back to pending, giving back its attempt.
func (r *Runner) release(j *store.Job) error {
	return r.releaseWith(j, msgStopped)
}

// releaseWith is release recording msg as the job's error ("": the error it had when claimed).
func (r *Runner) releaseWith(j *store.Job, msg string) error {
	_, err := r.settle(j, func(cur *store.Job, now time.Time) {
		cur.State, cur.RunAfter = StatePending, now
		cur.Attempts = max(cur.Attempts-1, 0)
		if msg != "" {
			cur.Error = msg
		}
		cur.RetryClassification = ClassTransient
	})
	return err
}

func (r *Runner) releaseLogged(j *store.Job, log *slog.Logger) {
	if err := r.release(j); err != nil {
		log.Error("release job", "err", err)
	}
}

// releaseUnrun releases a claim whose handler never ran (made as the node's lease ended): the job keeps
// the error of its last attempt, which says why it is retried.
func (r *Runner) releaseUnrun(j *store.Job, log *slog.Logger) {
	if err := r.releaseWith(j, ""); err != nil {
		log.Error("release job", "err", err)
	}
}

// settle applies change to the stored job if it is still the claim j (running, same attempt and claim
// time), stamping updated_at. It reports whether it applied.
func (r *Runner) settle(j *store.Job, change func(cur *store.Job, now time.Time)) (bool, error) {
	applied := false
	var err error
	r.opts.Lane.Do(func() {
		err = r.db.Update(func(tx *store.Tx) error {
			applied = false // a run again starts over
			cur, err := store.Jobs.Get(tx, j.ID)
			if errors.Is(err, store.ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			if !owns(cur, j) {
				return nil
			}
			now := time.Now().UTC()
			change(cur, now)
			cur.UpdatedAt = now
			applied = true
			if err := store.Jobs.Put(tx, cur); err != nil {
				return err
			}
			return r.ended(tx, cur)
		})
	})
	if err == nil && !applied {
		r.log.Warn("job is no longer the claim its handler runs under (released by Stop?); change discarded", "job", j.ID)
	}
	return applied, err
}

// owns reports whether the stored job cur is still the running claim j.
func owns(cur, j *store.Job) bool {
	return cur.State == StateRunning && cur.Attempts == j.Attempts && cur.ClaimedAt != nil &&
		j.ClaimedAt != nil && cur.ClaimedAt.Equal(*j.ClaimedAt)
}

// OnEnd registers fn, called in the transaction that records a job's end (completed or failed), so that
// what it writes (an event) commits with the end or not at all. Set it before Start.
func (r *Runner) OnEnd(fn func(tx *store.Tx, j *store.Job) error) { r.onEnd = fn }

func (r *Runner) ended(tx *store.Tx, j *store.Job) error {
	if r.onEnd == nil || (j.State != StateCompleted && j.State != StateFailed) {
		return nil
	}
	return r.onEnd(tx, j)
}
