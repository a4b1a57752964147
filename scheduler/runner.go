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
)

// Options configure a runner.
type Options struct {
	ID      string // recorded as claimed_by (default "scheduler")
	HostID  string // recorded as host_id
	Workers int    // concurrent jobs (default 4)
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
	inflight map[string]*store.Job // claimed jobs whose handler runs, as claimed
	done     chan struct{}         // closed when every worker returned (nil until Start)
	cronDone context.Context       // done when running periodic tasks returned (nil until Stop)

	// claimMu orders claims against Stop: once Stop set stopping, no claim commits.
	claimMu  sync.Mutex
	stopping bool

	workers sync.WaitGroup
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
	r := &Runner{db: db, opts: opts, log: opts.Log.With("component", "scheduler"),
		cron:     cron.New(cron.WithLocation(time.UTC)),
		handlers: map[string]Handler{}, inflight: map[string]*store.Job{}}
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

// Every registers a periodic task on a cron spec (five fields or a descriptor such as "@every 1m",
// evaluated in UTC). It may be called before or after Start. A run is skipped while the previous run of the
// same task is still going; a panic is logged. fn's ctx is cancelled by Stop.
func (r *Runner) Every(spec, name string, fn func(ctx context.Context)) error {
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
		fn(r.ctx)
		r.log.Debug("periodic task ran", "task", name, "took", time.Since(start))
	})
	if err != nil {
		return fmt.Errorf("schedule %s (%q): %w", name, spec, err)
	}
	return nil
}

// Start recovers jobs a previous process left running, then starts the workers and the cron.
//
// The appliance is one process, so a job found running at Start was interrupted by a crash (or a Stop that
// ran out of time). Its claim already counted an attempt: with attempts left it goes back to pending at
// once; otherwise it fails. Counting the crashed attempt bounds a job that itself brings the process down.
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
	if err := r.recoverInterrupted(); err != nil {
		return fmt.Errorf("start scheduler: recover interrupted jobs: %w", err)
	}
	r.phase = phaseStarted
	r.done = make(chan struct{})
	for i := range r.opts.Workers {
		r.workers.Add(1)
		go r.work(r.wakes[i])
	}
	go func() {
		r.workers.Wait()
		close(r.done)
	}()
	r.cron.Start()
	r.log.Info("scheduler started", "workers", r.opts.Workers, "id", r.opts.ID)
	return nil
}

// recoverInterrupted settles the jobs left running by a previous process.
func (r *Runner) recoverInterrupted() error {
	return r.db.Update(func(tx *store.Tx) error {
		running, err := store.Jobs.Lookup(tx, store.JobsByState, StateRunning, store.Query{})
		if err != nil {
			return err
		}
		now := time.Now().UTC()
		for _, j := range running {
			j.RetryClassification, j.UpdatedAt = ClassTransient, now
			if j.Attempts < maxAttempts(j) {
				j.State, j.RunAfter, j.Error = StatePending, now, msgCrashed
				tx.OnCommit(func() {
					r.log.Warn("job interrupted by a previous stop; retrying", "job", j.ID, "type", j.Type, "attempts", j.Attempts)
				})
			} else {
				j.State, j.CompletedAt = StateFailed, &now
				j.Error = fmt.Sprintf(msgCrashedSpent, j.Attempts, maxAttempts(j))
				tx.OnCommit(func() {
					r.log.Error("job interrupted by a previous stop and out of attempts", "job", j.ID, "type", j.Type, "attempts", j.Attempts)
				})
			}
			if err := store.Jobs.Put(tx, j); err != nil {
				return err
			}
			if err := r.ended(tx, j); err != nil {
				return err
			}
		}
		return nil
	})
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
	return "operational", fmt.Sprintf("%d workers, %d running, %d pending", r.opts.Workers, running, pending)
}

// work is one worker: it claims and runs jobs until none is due, then sleeps until Notify or the poll tick.
func (r *Runner) work(wake <-chan struct{}) {
	defer r.workers.Done()
	tick := time.NewTicker(r.opts.Poll)
	defer tick.Stop()
	for {
		for r.ctx.Err() == nil {
			j, err := r.claim()
			if err != nil {
				r.log.Error("claim job", "err", err)
				break
			}
			if j == nil {
				break
			}
			r.execute(j)
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

// claim takes the oldest due pending job whose locked resource is free, in one transaction, and records it
// as in flight. It looks in a read-only transaction first: most wake-ups (the poll tick, a Notify that
// woke every worker for one job) find nothing, and a read-write transaction that changes nothing still
// writes and syncs the store's file twice, which a running job's own commits then wait behind. It returns
// nil when there is nothing to do.
func (r *Runner) claim() (*store.Job, error) {
	r.claimMu.Lock()
	defer r.claimMu.Unlock()
	if r.stopping {
		return nil, nil
	}
	var claimed *store.Job
	var err error
	r.opts.Lane.Do(func() { claimed, err = r.claimDue() })
	if err != nil || claimed == nil {
		return nil, err
	}
	r.mu.Lock()
	r.inflight[claimed.ID] = claimed
	r.mu.Unlock()
	return claimed, nil
}

// claimDue is claim's work in the store (in the runner's lane).
func (r *Runner) claimDue() (*store.Job, error) {
	var due *store.Job
	err := r.db.View(func(tx *store.Tx) (err error) {
		due, err = nextDue(tx, time.Now().UTC())
		return err
	})
	if err != nil || due == nil {
		return nil, err
	}
	var claimed *store.Job
	err = r.db.Update(func(tx *store.Tx) error {
		claimed = nil // a run again starts over
		now := time.Now().UTC()
		j, err := nextDue(tx, now)
		if err != nil || j == nil {
			return err
		}
		j.State, j.ClaimedBy, j.HostID = StateRunning, r.opts.ID, r.opts.HostID
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

// nextDue is, in tx, the oldest pending job due at now whose locked resource is free (nil when none). Jobs
// on one resource also run in order: a pending job waiting for its backoff keeps later jobs on its resource
// waiting too.
func nextDue(tx *store.Tx, now time.Time) (*store.Job, error) {
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

// execute runs the handler of a claimed job and records its outcome.
func (r *Runner) execute(j *store.Job) {
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

	log.Debug("job started")
	run := &Run{Job: *j, runner: r, claim: j}
	var result any
	var err error
	if before != nil {
		_, err = call(r.ctx, before, run, log)
	}
	if err == nil {
		result, err = call(r.ctx, h, run, log)
	}

	if err != nil && r.ctx.Err() != nil { // Stop cancelled the handler: run it again at the next start
		log.Info("job interrupted by stop; it runs again at the next start", "err", err)
		r.releaseLogged(j, log)
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

// release puts a job whose handler Stop interrupted back to pending, giving back its attempt.
func (r *Runner) release(j *store.Job) error {
	_, err := r.settle(j, func(cur *store.Job, now time.Time) {
		cur.State, cur.RunAfter = StatePending, now
		cur.Attempts = max(cur.Attempts-1, 0)
		cur.Error, cur.RetryClassification = msgStopped, ClassTransient
	})
	return err
}

func (r *Runner) releaseLogged(j *store.Job, log *slog.Logger) {
	if err := r.release(j); err != nil {
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
