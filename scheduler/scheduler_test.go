package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/theappliance/appliance/scheduler/lane"
	"github.com/theappliance/appliance/store"
)

const waitFor = 15 * time.Second

// setup returns a runner over a fresh store (fast backoff and poll unless opts say otherwise) and its store.
// The runner is not started; start does that and stops it at cleanup.
func setup(t *testing.T, opts Options) (*Runner, *store.DB) {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.RerunUpdates(os.Getenv(store.RerunUpdatesEnv) == "1")
	return newRunner(t, db, opts), db
}

func newRunner(t *testing.T, db *store.DB, opts Options) *Runner {
	if opts.ID == "" {
		opts.ID = "test-runner"
	}
	if opts.HostID == "" {
		opts.HostID = "test-host"
	}
	if opts.Backoff == nil {
		opts.Backoff = func(int) time.Duration { return 10 * time.Millisecond }
	}
	if opts.Poll == 0 {
		opts.Poll = 20 * time.Millisecond
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return New(db, opts)
}

// start starts r and stops it (checking the stop) at cleanup.
func start(t *testing.T, r *Runner) {
	t.Helper()
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
}

func enqueue(t *testing.T, db *store.DB, r *Runner, j *store.Job) string {
	t.Helper()
	if err := db.Update(func(tx *store.Tx) error { return Enqueue(tx, j) }); err != nil {
		t.Fatal(err)
	}
	if r != nil {
		r.Notify()
	}
	return j.ID
}

func getJob(t *testing.T, db *store.DB, id string) *store.Job {
	t.Helper()
	var j *store.Job
	if err := db.View(func(tx *store.Tx) (err error) { j, err = store.Jobs.Get(tx, id); return err }); err != nil {
		t.Fatal(err)
	}
	return j
}

// waitJob polls the store until the job satisfies cond, failing the test at the deadline.
func waitJob(t *testing.T, db *store.DB, id string, what string, cond func(*store.Job) bool) *store.Job {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		j := getJob(t, db, id)
		if cond(j) {
			return j
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(j, "", "  ")
			t.Fatalf("job %s: timed out waiting until %s; job is:\n%s", id, what, b)
		}
		<-tick.C
	}
}

func isFinal(j *store.Job) bool { return j.State == StateCompleted || j.State == StateFailed }

func waitFinal(t *testing.T, db *store.DB, id string) *store.Job {
	t.Helper()
	return waitJob(t, db, id, "completed or failed", isFinal)
}

func wantState(t *testing.T, j *store.Job, state, class string, attempts int) {
	t.Helper()
	if j.State != state || j.RetryClassification != class || j.Attempts != attempts {
		t.Fatalf("job %s: state %q class %q attempts %d, want %q %q %d (error %q)", j.ID, j.State,
			j.RetryClassification, j.Attempts, state, class, attempts, j.Error)
	}
}

// recv waits for a value on ch, failing the test at the deadline.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitFor):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func TestEnqueue(t *testing.T) {
	t.Parallel()
	_, db := setup(t, Options{})
	j := &store.Job{Type: "x", OrganizationID: "org_1", Payload: json.RawMessage(`{"a":1}`), Attempts: 7,
		State: StateFailed, Error: "stale"}
	before := time.Now().UTC()
	id := enqueue(t, db, nil, j)
	if !strings.HasPrefix(id, "job_") {
		t.Fatalf("id %q", id)
	}
	got := getJob(t, db, id)
	wantState(t, got, StatePending, "", 0)
	if got.MaxAttempts != DefaultMaxAttempts || string(got.Result) != "null" || got.Error != "" ||
		string(got.Payload) != `{"a":1}` || got.OrganizationID != "org_1" {
		t.Fatalf("enqueued job: %+v", got)
	}
	for name, ts := range map[string]time.Time{"created_at": got.CreatedAt, "updated_at": got.UpdatedAt, "run_after": got.RunAfter} {
		if ts.Location() != time.UTC || ts.Before(before) || ts.After(time.Now()) {
			t.Errorf("%s = %v, want UTC now", name, ts)
		}
	}
	if n := len(lookupState(t, db, StatePending)); n != 1 {
		t.Errorf("pending index holds %d jobs, want 1", n)
	}

	err := db.Update(func(tx *store.Tx) error { return Enqueue(tx, &store.Job{}) })
	if err == nil || !strings.Contains(err.Error(), "type is required") {
		t.Errorf("enqueue without type: %v", err)
	}
	err = db.Update(func(tx *store.Tx) error { return Enqueue(tx, &store.Job{ID: id, Type: "x"}) })
	if err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("enqueue duplicate id: %v", err)
	}
	got2 := getJob(t, db, enqueue(t, db, nil, &store.Job{Type: "x", MaxAttempts: 5}))
	if got2.MaxAttempts != 5 {
		t.Errorf("max_attempts %d, want 5", got2.MaxAttempts)
	}
}

func lookupState(t *testing.T, db *store.DB, state string) []*store.Job {
	t.Helper()
	var out []*store.Job
	if err := db.View(func(tx *store.Tx) (err error) {
		out, err = store.Jobs.Lookup(tx, store.JobsByState, state, store.Query{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSuccessRecordsResult(t *testing.T) {
	t.Parallel()
	r, db := setup(t, Options{})
	r.Handle("greet", func(ctx context.Context, run *Run) (any, error) {
		var p struct{ Name string }
		if err := run.DecodePayload(&p); err != nil {
			return nil, err
		}
		return map[string]any{"hello": p.Name, "attempt": run.Job.Attempts}, nil
	})
	start(t, r)
	id := enqueue(t, db, r, &store.Job{Type: "greet", Payload: json.RawMessage(`{"Name":"ada"}`)})
	j := waitFinal(t, db, id)
	wantState(t, j, StateCompleted, "", 1)
	if string(j.Result) != `{"attempt":1,"hello":"ada"}` {
		t.Errorf("result %s", j.Result)
	}
	if j.ClaimedBy != "test-runner" || j.HostID != "test-host" || j.ClaimedAt == nil || j.StartedAt == nil ||
		j.CompletedAt == nil || j.Error != "" {
		t.Errorf("completed job: %+v", j)
	}
	if j.CompletedAt.Before(*j.StartedAt) || j.UpdatedAt.Before(*j.CompletedAt) {
		t.Errorf("timestamps out of order: started %v completed %v updated %v", j.StartedAt, j.CompletedAt, j.UpdatedAt)
	}
}

func TestTransientRetryThenSuccess(t *testing.T) {
	t.Parallel()
	var backoffs []int
	var mu sync.Mutex
	r, db := setup(t, Options{Backoff: func(attempt int) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		backoffs = append(backoffs, attempt)
		return 50 * time.Millisecond
	}})
	var calls atomic.Int32
	retried := make(chan *store.Job, 1)
	r.Handle("flaky", func(ctx context.Context, run *Run) (any, error) {
		if calls.Add(1) == 1 {
			return nil, fmt.Errorf("connect: %w", Transient(errors.New("connection refused")))
		}
		retried <- &run.Job
		return "ok", nil
	})
	start(t, r)
	id := enqueue(t, db, r, &store.Job{Type: "flaky"})
	second := recv(t, retried, "the second attempt")
	if second.Attempts != 2 || second.Error != "connect: connection refused" || second.RetryClassification != ClassTransient {
		t.Errorf("job as the retry saw it: attempts %d error %q class %q", second.Attempts, second.Error, second.RetryClassification)
	}
	if second.StartedAt.Sub(second.CreatedAt) < 50*time.Millisecond {
		t.Errorf("retry started %v after creation, before the 50ms backoff", second.StartedAt.Sub(second.CreatedAt))
	}
	j := waitFinal(t, db, id)
	wantState(t, j, StateCompleted, ClassTransient, 2)
	if string(j.Result) != `"ok"` || j.Error != "" {
		t.Errorf("result %s error %q", j.Result, j.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(backoffs, []int{1}) {
		t.Errorf("backoff called with %v, want [1]", backoffs)
	}
}

func TestPermanentFailure(t *testing.T) {
	t.Parallel()
	r, db := setup(t, Options{})
	var calls atomic.Int32
	r.Handle("broken", func(ctx context.Context, run *Run) (any, error) {
		calls.Add(1)
		return nil, errors.New("disk is on fire")
	})
	start(t, r)
	id := enqueue(t, db, r, &store.Job{Type: "broken"})
	j := waitFinal(t, db, id)
	wantState(t, j, StateFailed, ClassPermanent, 1)
	if j.Error != "disk is on fire" || j.CompletedAt == nil || string(j.Result) != "null" {
		t.Errorf("failed job: %+v", j)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

func TestTransientOutOfAttempts(t *testing.T) {
	t.Parallel()
	r, db := setup(t, Options{})
	var calls atomic.Int32
	r.Handle("never", func(ctx context.Context, run *Run) (any, error) {
		return nil, Transient(fmt.Errorf("try %d: still down", calls.Add(1)))
	})
	start(t, r)
	id := enqueue(t, db, r, &store.Job{Type: "never", MaxAttempts: 2})
	j := waitFinal(t, db, id)
	wantState(t, j, StateFailed, ClassTransient, 2)
	if j.Error != "try 2: still down" || j.CompletedAt == nil {
		t.Errorf("failed job: %+v", j)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2", n)
	}
}

func TestUnknownType(t *testing.T) {
	t.Parallel()
	r, db := setup(t, Options{})
	start(t, r)
	id := enqueue(t, db, r, &store.Job{Type: "no.such"})
	j := waitFinal(t, db, id)
	wantState(t, j, StateFailed, ClassPermanent, 1)
	if j.Error != `unknown job type "no.such": no handler is registered for it` || j.CompletedAt == nil {
		t.Errorf("failed job: %+v", j)
	}
}

func TestPanicIsPermanentFailure(t *testing.T) {
	t.Parallel()
	r, db := setup(t, Options{})
	r.Handle("panics", func(ctx context.Context, run *Run) (any, error) { panic("kaboom") })
	r.Handle("fine", func(ctx context.Context, run *Run) (any, error) { return nil, nil })
	start(t, r)
	id := enqueue(t, db, r, &store.Job{Type: "panics"})
	j := waitFinal(t, db, id)
	wantState(t, j, StateFailed, ClassPermanent, 1)
	if j.Error != "panic: kaboom" {
		t.Errorf("error %q", j.Error)
	}
	// The worker survived the panic.
	j = waitFinal(t, db, enqueue(t, db, r, &store.Job{Type: "fine"}))
	if j.State != StateCompleted || string(j.Result) != "null" {
		t.Errorf("job after the panic: %+v", j)
	}
}

func TestUnencodableResult(t *testing.T) {
	t.Parallel()
	r, db := setup(t, Options{})
	r.Handle("chan", func(ctx context.Context, run *Run) (any, error) { return make(chan int), nil })
	start(t, r)
	j := waitFinal(t, db, enqueue(t, db, r, &store.Job{Type: "chan"}))
	wantState(t, j, StateFailed, ClassPermanent, 1)
	if !strings.HasPrefix(j.Error, "encode result: ") {
		t.Errorf("error %q", j.Error)
	}
}

// Jobs on one locked resource never overlap and run in creation order, while other work goes on.
func TestSameResourceNeverOverlaps(t *testing.T) {
	t.Parallel()
	r, db := setup(t, Options{Workers: 8})
	var (
		active  = map[string]*atomic.Int32{"a": {}, "b": {}}
		overlap atomic.Int32
		mu      sync.Mutex
		order   = map[string][]string{}
	)
	r.Handle("work", func(ctx context.Context, run *Run) (any, error) {
		res := run.Job.LockedResource
		if active[res].Add(1) > 1 {
			overlap.Add(1)
		}
		defer active[res].Add(-1)
		mu.Lock()
		order[res] = append(order[res], run.Job.ID)
		mu.Unlock()
		select { // simulated work, long enough for other workers to try to claim
		case <-time.After(3 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil, nil
	})
	start(t, r)
	var want = map[string][]string{}
	var all []string
	for i := range 30 {
		res := []string{"a", "b"}[i%2]
		id := enqueue(t, db, r, &store.Job{Type: "work", LockedResource: res})
		want[res] = append(want[res], id)
		all = append(all, id)
	}
	for _, id := range all {
		if j := waitFinal(t, db, id); j.State != StateCompleted {
			t.Fatalf("job %s: %s %s", id, j.State, j.Error)
		}
	}
	if n := overlap.Load(); n != 0 {
		t.Errorf("%d times a job started while another held its resource", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for res := range want {
		if !slices.Equal(order[res], want[res]) {
			t.Errorf("resource %s ran %v, want creation order %v", res, order[res], want[res])
		}
	}
}

// Jobs on different resources, and jobs without a lock, do run at the same time.
func TestDifferentResourcesRunConcurrently(t *testing.T) {
	t.Parallel()
	r, db := setup(t, Options{Workers: 3})
	arrived := make(chan struct{}, 3)
	release := make(chan struct{})
	r.Handle("meet", func(ctx context.Context, run *Run) (any, error) {
		arrived <- struct{}{}
		select {
		case <-release:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	start(t, r)
	ids := []string{
		enqueue(t, db, r, &store.Job{Type: "meet", LockedResource: "x"}),
		enqueue(t, db, r, &store.Job{Type: "meet", LockedResource: "y"}),
		enqueue(t, db, r, &store.Job{Type: "meet"}),
	}
	for i := range 3 {
		recv(t, arrived, fmt.Sprintf("handler %d of 3 to run at once", i+1))
	}
	close(release)
	for _, id := range ids {
		if j := waitFinal(t, db, id); j.State != StateCompleted {
			t.Errorf("job %s: %s", id, j.State)
		}
	}
}

// A retry waiting for its backoff keeps later jobs on its resource waiting: one resource, one order.
func TestBackoffKeepsResourceOrder(t *testing.T) {
	t.Parallel()
	r, db := setup(t, Options{Backoff: func(int) time.Duration { return 200 * time.Millisecond }})
	var mu sync.Mutex
	var order []string
	var first atomic.Bool
	r.Handle("step", func(ctx context.Context, run *Run) (any, error) {
		mu.Lock()
		order = append(order, run.Job.ID)
		mu.Unlock()
		if first.CompareAndSwap(false, true) {
			return nil, Transient(errors.New("not yet"))
		}
		return nil, nil
	})
	a := enqueue(t, db, nil, &store.Job{Type: "step", LockedResource: "p"})
	b := enqueue(t, db, nil, &store.Job{Type: "step", LockedResource: "p"})
	start(t, r)
	waitFinal(t, db, a)
	waitFinal(t, db, b)
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(order, []string{a, a, b}) {
		t.Errorf("ran %v, want [%s %s %s]", order, a, a, b)
	}
}

// TestScheduledJobHoldsNothingUntilDue: a job enqueued to run later (a credential's end of overlap, say)
// must not hold back the jobs enqueued after it on the same resource.
func TestScheduledJobHoldsNothingUntilDue(t *testing.T) {
	t.Parallel()
	r, db := setup(t, Options{})
	r.Handle("step", func(ctx context.Context, run *Run) (any, error) { return nil, nil })
	later := enqueue(t, db, nil, &store.Job{Type: "step", LockedResource: "p", RunAfter: time.Now().Add(time.Hour)})
	now := enqueue(t, db, nil, &store.Job{Type: "step", LockedResource: "p"})
	start(t, r)
	waitFinal(t, db, now)
	var j *store.Job
	db.View(func(tx *store.Tx) (err error) { j, err = store.Jobs.Get(tx, later); return err })
	if j.State != StatePending {
		t.Fatalf("the scheduled job is %s, want pending until due", j.State)
	}
}

// Wake-ups that find nothing due (the poll tick, Notify) commit nothing to the store: from the enqueue of a
// job due a little later to its end, the store sees three commits (the enqueue, the claim, the end) however
// often the workers looked meanwhile.
func TestIdleWakeupsCommitNothing(t *testing.T) {
	t.Parallel()
	r, db := setup(t, Options{Poll: 2 * time.Millisecond, Workers: 4})
	r.Handle("step", func(ctx context.Context, run *Run) (any, error) { return nil, nil })
	start(t, r)
	waitFinal(t, db, enqueue(t, db, r, &store.Job{Type: "step"}))
	generation := func() int {
		var g int
		db.View(func(tx *store.Tx) error { g = tx.Generation(); return nil })
		return g
	}
	before := generation()
	id := enqueue(t, db, nil, &store.Job{Type: "step", RunAfter: time.Now().Add(200 * time.Millisecond)})
	for range 10 {
		r.Notify()
	}
	waitFinal(t, db, id)
	if n := generation() - before; n != 3 {
		t.Fatalf("%d commits from the enqueue to the job's end, want 3 (enqueue, claim, end)", n)
	}
}

func TestRecoveryAtStart(t *testing.T) {
	t.Parallel()
	r, db := setup(t, Options{})
	claimed := time.Now().UTC().Add(-time.Minute)
	crashed := func(id string, attempts int) *store.Job {
		return &store.Job{ID: id, Type: "resume", State: StateRunning, Attempts: attempts, MaxAttempts: 3,
			ClaimedBy: "old-process", ClaimedAt: &claimed, StartedAt: &claimed, Result: json.RawMessage("null"),
			CreatedAt: claimed, UpdatedAt: claimed, RunAfter: claimed}
	}
	if err := db.Update(func(tx *store.Tx) error {
		for _, j := range []*store.Job{crashed("job_retry", 1), crashed("job_spent", 3)} {
			if err := store.Jobs.Put(tx, j); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	seen := make(chan store.Job, 2)
	r.Handle("resume", func(ctx context.Context, run *Run) (any, error) {
		seen <- run.Job
		return "resumed", nil
	})
	start(t, r)

	// Recovery happened inside Start: no job is running any more before a worker claims one.
	spent := getJob(t, db, "job_spent")
	wantState(t, spent, StateFailed, ClassTransient, 3)
	// Its error is final: it says the job failed, never that it is retried.
	if spent.Error != "failed: the appliance stopped while the job ran, and that was its last attempt (3 of 3)" ||
		strings.Contains(spent.Error, "retry") || spent.CompletedAt == nil {
		t.Errorf("out-of-attempts job: %+v", spent)
	}
	j := waitFinal(t, db, "job_retry")
	wantState(t, j, StateCompleted, ClassTransient, 2)
	if j.ClaimedBy != "test-runner" || string(j.Result) != `"resumed"` {
		t.Errorf("recovered job: %+v", j)
	}
	run := recv(t, seen, "the recovered job to run")
	if run.ID != "job_retry" || run.Error != msgCrashed {
		t.Errorf("handler saw job %s with error %q", run.ID, run.Error)
	}
	select {
	case extra := <-seen:
		t.Errorf("handler also ran %s", extra.ID)
	default:
	}
}

// Recover makes an interrupted job pending without running it: the process's start adopts its instances
// between Recover and Start, and no job may run beside that.
func TestRecoverBeforeStart(t *testing.T) {
	t.Parallel()
	r, db := setup(t, Options{})
	claimed := time.Now().UTC().Add(-time.Minute)
	if err := db.Update(func(tx *store.Tx) error {
		return store.Jobs.Put(tx, &store.Job{ID: "job_cut", Type: "resume", State: StateRunning, Attempts: 1, MaxAttempts: 3,
			ClaimedBy: "old-process", ClaimedAt: &claimed, StartedAt: &claimed, Result: json.RawMessage("null"),
			CreatedAt: claimed, UpdatedAt: claimed, RunAfter: claimed})
	}); err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 1)
	r.Handle("resume", func(ctx context.Context, run *Run) (any, error) {
		ran <- struct{}{}
		return nil, nil
	})
	if err := r.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantState(t, getJob(t, db, "job_cut"), StatePending, ClassTransient, 1)
	r.Notify()
	select {
	case <-ran:
		t.Fatal("a job ran before Start")
	case <-time.After(300 * time.Millisecond):
	}
	start(t, r)
	recv(t, ran, "the recovered job to run after Start")
	if j := waitFinal(t, db, "job_cut"); j.State != StateCompleted || j.Attempts != 2 {
		t.Errorf("recovered job: %+v", j)
	}
	if err := r.Recover(context.Background()); err == nil {
		t.Error("Recover after Start: no error")
	}
}

func TestExecRecordsOutput(t *testing.T) {
	t.Parallel()
	r, db := setup(t, Options{})
	during := make(chan *store.Job, 1)
	r.Handle("cmd", func(ctx context.Context, run *Run) (any, error) {
		err := run.Exec(ctx, exec.Command("sh", "-c", "echo out; echo err >&2; exit 3"))
		var mid *store.Job
		if verr := db.View(func(tx *store.Tx) (e error) { mid, e = store.Jobs.Get(tx, run.Job.ID); return e }); verr != nil {
			return nil, verr
		}
		during <- mid
		if run.Job.LastExitCode == nil || *run.Job.LastExitCode != 3 || run.Job.LastStdout != "out\n" {
			return nil, fmt.Errorf("run.Job not updated: %+v", run.Job)
		}
		return nil, err
	})
	start(t, r)
	id := enqueue(t, db, r, &store.Job{Type: "cmd"})

	mid := recv(t, during, "the command to end")
	if mid.State != StateRunning || mid.LastStdout != "out\n" || mid.LastStderr != "err\n" ||
		mid.LastExitCode == nil || *mid.LastExitCode != 3 {
		t.Errorf("job while its handler goes on: state %s stdout %q stderr %q exit %v", mid.State, mid.LastStdout,
			mid.LastStderr, mid.LastExitCode)
	}
	j := waitFinal(t, db, id)
	wantState(t, j, StateFailed, ClassPermanent, 1)
	if j.Error != "sh exited with code 3: err" {
		t.Errorf("error %q", j.Error)
	}
	if j.LastStdout != "out\n" || j.LastStderr != "err\n" || j.LastExitCode == nil || *j.LastExitCode != 3 {
		t.Errorf("final job: stdout %q stderr %q exit %v", j.LastStdout, j.LastStderr, j.LastExitCode)
	}
}

func TestExecCannotStartOrKilled(t *testing.T) {
	t.Parallel()
	run := &Run{} // outside a runner: only run.Job is updated
	err := run.Exec(t.Context(), exec.Command(filepath.Join(t.TempDir(), "missing-binary"), "arg"))
	if err == nil || !strings.HasPrefix(err.Error(), "start missing-binary: ") {
		t.Errorf("missing binary: %v", err)
	}
	if run.Job.LastExitCode == nil || *run.Job.LastExitCode != -1 {
		t.Errorf("exit code %v, want -1", run.Job.LastExitCode)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cmd := exec.Command("sh", "-c", "echo started; exec sleep 60")
	var mu sync.Mutex
	var seen strings.Builder
	cmd.Stdout = writerFunc(func(p []byte) (int, error) { // the caller's writer still gets the output
		mu.Lock()
		defer mu.Unlock()
		seen.Write(p)
		cancel()
		return len(p), nil
	})
	err = run.Exec(ctx, cmd)
	if err == nil || !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "sh was stopped") {
		t.Errorf("killed command: %v", err)
	}
	if run.Job.LastExitCode == nil || *run.Job.LastExitCode != -1 || run.Job.LastStdout != "started\n" {
		t.Errorf("killed command: exit %v stdout %q", run.Job.LastExitCode, run.Job.LastStdout)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen.String() != "started\n" {
		t.Errorf("caller's writer got %q", seen.String())
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestTailBuffer(t *testing.T) {
	t.Parallel()
	tb := &tailBuffer{max: 10}
	for range 7 {
		tb.Write([]byte("0123456789"))
	}
	tb.Write([]byte("abc"))
	if got := tb.Tail(10); got != "3456789abc" {
		t.Errorf("tail %q", got)
	}
	tb.Write([]byte(strings.Repeat("x", 25)))
	if got := tb.Tail(10); got != strings.Repeat("x", 10) {
		t.Errorf("tail after a large write %q", got)
	}
	tb = &tailBuffer{max: 10}
	tb.Write([]byte("ab€€€")) // € is three bytes: a cut inside one starts at the next character
	if got := tb.Tail(8); got != "€€" {
		t.Errorf("tail %q, want whole characters", got)
	}
}

func TestEvery(t *testing.T) {
	t.Parallel()
	r, _ := setup(t, Options{})
	before := make(chan struct{}, 10)
	if err := r.Every("@every 1s", "before-start", func(ctx context.Context) { before <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	if err := r.Every("not a spec", "bad", func(ctx context.Context) {}); err == nil {
		t.Error("a bad spec was accepted")
	}
	start(t, r)
	after := make(chan error, 10)
	if err := r.Every("@every 1s", "after-start", func(ctx context.Context) { after <- ctx.Err() }); err != nil {
		t.Fatal(err)
	}
	recv(t, before, "the task registered before Start")
	if err := recv(t, after, "the task registered after Start"); err != nil {
		t.Errorf("task ctx: %v", err)
	}
}

func TestEveryPanicAndStop(t *testing.T) {
	t.Parallel()
	r, _ := setup(t, Options{})
	ran := make(chan struct{}, 10)
	if err := r.Every("@every 1s", "panics", func(ctx context.Context) { ran <- struct{}{}; panic("tick") }); err != nil {
		t.Fatal(err)
	}
	start(t, r)
	recv(t, ran, "the panicking task")
	recv(t, ran, "the task to run again after its panic")
	if err := r.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := r.Every("@every 1s", "late", func(ctx context.Context) {}); err == nil {
		t.Error("Every after Stop was accepted")
	}
}

// A clean Stop cancels the handler and puts its job back to pending without spending the attempt; the next
// runner over the same store runs it from the top.
func TestStopMidRunReleasesJob(t *testing.T) {
	t.Parallel()
	r, db := setup(t, Options{})
	started := make(chan struct{}, 1)
	r.Handle("long", func(ctx context.Context, run *Run) (any, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	id := enqueue(t, db, r, &store.Job{Type: "long", LockedResource: "p"})
	recv(t, started, "the handler to start")
	if status, msg := r.Health(t.Context()); status != "operational" || msg != "4 workers, 1 running, 0 pending" {
		t.Errorf("health while running: %s %q", status, msg)
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	j := getJob(t, db, id)
	wantState(t, j, StatePending, ClassTransient, 0)
	if j.Error != msgStopped || j.CompletedAt != nil {
		t.Errorf("released job: %+v", j)
	}
	if err := r.Stop(ctx); err != nil { // idempotent
		t.Errorf("second stop: %v", err)
	}

	next := newRunner(t, db, Options{})
	next.Handle("long", func(ctx context.Context, run *Run) (any, error) { return "done", nil })
	start(t, next)
	j = waitFinal(t, db, id)
	wantState(t, j, StateCompleted, ClassTransient, 1)
}

// When Stop runs out of time it still leaves no job running in the store, and the late outcome of the
// handler that ignored its context is discarded.
func TestStopTimeoutReleasesJob(t *testing.T) {
	t.Parallel()
	r, db := setup(t, Options{})
	started := make(chan struct{}, 1)
	unblock := make(chan struct{})
	r.Handle("stubborn", func(ctx context.Context, run *Run) (any, error) {
		started <- struct{}{}
		<-unblock // ignores ctx
		return "late", nil
	})
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	id := enqueue(t, db, r, &store.Job{Type: "stubborn"})
	recv(t, started, "the handler to start")
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := r.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("stop: %v, want deadline exceeded", err)
	}
	j := getJob(t, db, id)
	wantState(t, j, StatePending, ClassTransient, 0)

	close(unblock)
	ctx2, cancel2 := context.WithTimeout(t.Context(), waitFor)
	defer cancel2()
	if err := r.Stop(ctx2); err != nil { // waits for the handler this time
		t.Errorf("second stop: %v", err)
	}
	j = getJob(t, db, id)
	wantState(t, j, StatePending, ClassTransient, 0)
	if string(j.Result) != "null" {
		t.Errorf("late result recorded: %s", j.Result)
	}
}

func TestLifecycleAndHealth(t *testing.T) {
	t.Parallel()
	r, db := setup(t, Options{})
	if status, msg := r.Health(t.Context()); status != "down" || msg != "not started" {
		t.Errorf("before start: %s %q", status, msg)
	}
	enqueue(t, db, nil, &store.Job{Type: "later", RunAfter: time.Now().Add(time.Hour)})
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err == nil {
		t.Error("second Start succeeded")
	}
	if status, msg := r.Health(t.Context()); status != "operational" || msg != "4 workers, 0 running, 1 pending" {
		t.Errorf("started: %s %q", status, msg)
	}
	for range 2 {
		if err := r.Stop(t.Context()); err != nil {
			t.Errorf("stop: %v", err)
		}
	}
	if status, msg := r.Health(t.Context()); status != "down" || msg != "stopped" {
		t.Errorf("after stop: %s %q", status, msg)
	}
	if err := r.Start(t.Context()); err == nil {
		t.Error("Start after Stop succeeded")
	}

	never, _ := setup(t, Options{})
	if err := never.Stop(t.Context()); err != nil {
		t.Errorf("stop before start: %v", err)
	}
}

func TestTransientMarker(t *testing.T) {
	t.Parallel()
	if Transient(nil) != nil {
		t.Error("Transient(nil) is not nil")
	}
	base := errors.New("timeout")
	err := fmt.Errorf("step 2: %w", Transient(base))
	if !IsTransient(err) || !errors.Is(err, base) || err.Error() != "step 2: timeout" {
		t.Errorf("wrapped transient: %v transient=%v", err, IsTransient(err))
	}
	if IsTransient(base) {
		t.Error("a plain error is transient")
	}
}

func TestDefaultBackoff(t *testing.T) {
	t.Parallel()
	for attempt, want := range map[int]time.Duration{0: 2 * time.Second, 1: 2 * time.Second, 2: 4 * time.Second,
		3: 8 * time.Second, 8: 256 * time.Second, 9: 5 * time.Minute, 100: 5 * time.Minute} {
		if got := DefaultBackoff(attempt); got != want {
			t.Errorf("DefaultBackoff(%d) = %v, want %v", attempt, got, want)
		}
	}
}

// TestBookkeepingInTheLane: claiming a job and recording its end happen in the runner's lane (its handler
// does not): while other work holds a lane one wide, a due job is not claimed; a job whose handler runs
// does not keep others out of the lane; its end waits for the lane.
func TestBookkeepingInTheLane(t *testing.T) {
	t.Parallel()
	ln := lane.New(1)
	t.Cleanup(ln.Close) // after the runner's stop (cleanups run last first)
	// hold keeps other work in the lane until release.
	hold := func() (release func()) {
		in, out := make(chan struct{}), make(chan struct{})
		go ln.Do(func() { close(in); <-out })
		<-in
		var once sync.Once
		return func() { once.Do(func() { close(out) }) }
	}
	r, db := setup(t, Options{Poll: 5 * time.Millisecond, Lane: ln})
	inHandler, finish := make(chan struct{}), make(chan struct{})
	var finishOnce sync.Once
	r.Handle("step", func(ctx context.Context, run *Run) (any, error) {
		close(inHandler)
		<-finish
		return nil, nil
	})
	start(t, r)
	release := hold()
	defer func() { // a failure below must not leave the handler or the lane blocking the runner's stop
		release()
		finishOnce.Do(func() { close(finish) })
	}()
	id := enqueue(t, db, r, &store.Job{Type: "step"})
	time.Sleep(50 * time.Millisecond)
	if j := getJob(t, db, id); j.State != StatePending {
		t.Fatalf("claimed while the lane was held: %s", j.State)
	}
	release()
	<-inHandler
	ln.Do(func() {}) // the handler runs outside the lane
	release = hold()
	finishOnce.Do(func() { close(finish) })
	time.Sleep(50 * time.Millisecond)
	if j := getJob(t, db, id); j.State != StateRunning {
		t.Fatalf("its end was recorded while the lane was held: %s", j.State)
	}
	release()
	wantState(t, waitFinal(t, db, id), StateCompleted, "", 1)
}

// TestProgressIsReadWhileTheJobRuns: Run.Progress stores the running job's result, which the handler's
// own result replaces at the end.
func TestProgressIsReadWhileTheJobRuns(t *testing.T) {
	r, db := setup(t, Options{})
	release := make(chan struct{})
	r.Handle("progress", func(ctx context.Context, run *Run) (any, error) {
		if err := run.Progress(map[string]any{"step": "catch-up", "tables_synchronized": 2}); err != nil {
			return nil, err
		}
		<-release
		return map[string]any{"done": true}, nil
	})
	start(t, r)
	id := enqueue(t, db, r, &store.Job{Type: "progress"})
	j := waitJob(t, db, id, "its progress is stored", func(j *store.Job) bool {
		return j.State == StateRunning && len(j.Result) > 0 && string(j.Result) != "null"
	})
	if j.State != StateRunning || string(j.Result) != `{"step":"catch-up","tables_synchronized":2}` {
		t.Fatalf("while running: %s %s", j.State, j.Result)
	}
	close(release)
	j = waitJob(t, db, id, "it ends", isFinal)
	if j.State != StateCompleted || string(j.Result) != `{"done":true}` {
		t.Fatalf("at the end: %s %s", j.State, j.Result)
	}
}

// TestNodeAffinityOnOneNode: a job naming another node is never claimed here (and keeps its place on its
// resource: a later job on it waits), one naming this node runs; a single node's claims record no lease.
func TestNodeAffinityOnOneNode(t *testing.T) {
	t.Parallel()
	r, db := setup(t, Options{HostID: "here"})
	r.Handle("step", func(ctx context.Context, run *Run) (any, error) { return nil, nil })
	start(t, r)
	elsewhere := enqueue(t, db, r, &store.Job{Type: "step", Node: "there", LockedResource: "prj_1"})
	behind := enqueue(t, db, r, &store.Job{Type: "step", LockedResource: "prj_1"})
	mine := enqueue(t, db, r, &store.Job{Type: "step", Node: "here"})
	j := waitFinal(t, db, mine)
	if j.State != StateCompleted || j.HostID != "here" || j.Lease != "" || j.Node != "here" {
		t.Fatalf("pinned job: %+v", j)
	}
	free := enqueue(t, db, r, &store.Job{Type: "step"})
	wantState(t, waitFinal(t, db, free), StateCompleted, "", 1)
	for _, id := range []string{elsewhere, behind} {
		if j := getJob(t, db, id); j.State != StatePending || j.Attempts != 0 {
			t.Fatalf("job %s: %s after %d attempts, want pending (it waits for node there)", id, j.State, j.Attempts)
		}
	}
}

// TestJobRecordsOfOlderVersions: a job stored before jobs had a node and a lease decodes with neither, and
// a job with neither is stored as before (no new keys: the same bytes, the same checksum).
func TestJobRecordsOfOlderVersions(t *testing.T) {
	old := `{"id":"job_1","type":"step","state":"running","organization_id":"","project_id":"","preview_database_id":"","instance_id":"","host_id":"h","locked_resource":"","claimed_by":"h/1","attempts":1,"max_attempts":3,"error":"","retry_classification":"","last_stdout":"","last_stderr":"","last_exit_code":null,"payload":null,"result":null,"run_after":"2026-01-01T00:00:00Z","claimed_at":"2026-01-01T00:00:00Z","started_at":"2026-01-01T00:00:00Z","completed_at":null,"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}`
	var j store.Job
	if err := json.Unmarshal([]byte(old), &j); err != nil {
		t.Fatal(err)
	}
	if j.Node != "" || j.Lease != "" || j.HostID != "h" || j.Attempts != 1 {
		t.Fatalf("decoded %+v", j)
	}
	b, err := json.Marshal(&j)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != old {
		t.Fatalf("encoded again:\n%s\nwant\n%s", b, old)
	}
}
