// Package scheduler runs durable jobs stored in the metadata store (claim, per-resource lock, retries with
// backoff, crash recovery) and the periodic work of the appliance (robfig/cron). It knows nothing of the
// domain: the appliance registers a handler per job type.
package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"os/exec"
	"time"

	"github.com/theappliance/appliance/store"
)

// Job states.
const (
	StatePending   = "pending"
	StateRunning   = "running"
	StateCompleted = "completed"
	StateFailed    = "failed"
)

// Retry classifications recorded on failed attempts.
const (
	Transient_ = "transient"
	Permanent  = "permanent"
)

// Handler does the work of one job type. It must be idempotent: after a crash it runs again from the top.
// A returned error marked with Transient is retried with backoff while attempts remain.
type Handler func(ctx context.Context, run *Run) (result any, err error)

// Run is what a handler gets: a copy of its job and helpers that record external commands on the job.
type Run struct {
	Job store.Job
}

// Exec runs an external command, recording its stdout, stderr (tails) and exit code on the job.
func (r *Run) Exec(ctx context.Context, cmd *exec.Cmd) error { return errors.New("not implemented") }

// Transient marks err as retryable.
func Transient(err error) error { return err }

// Enqueue adds a pending job inside tx (filling ID, state, attempts, timestamps); call Notify after commit.
func Enqueue(tx *store.Tx, j *store.Job) error { return errors.New("not implemented") }

// Options configure a runner.
type Options struct {
	ID      string // recorded as claimed_by
	HostID  string // recorded as host_id
	Workers int    // concurrent jobs (default 4)
	Backoff func(attempt int) time.Duration
	Log     *slog.Logger
}

// Runner claims and runs jobs, and runs periodic tasks.
type Runner struct{}

// New makes a runner over db.
func New(db *store.DB, opts Options) *Runner { return &Runner{} }

// Handle registers the handler of a job type (before Start).
func (r *Runner) Handle(jobType string, h Handler) {}

// Every registers a periodic task on a cron spec (before Start).
func (r *Runner) Every(spec, name string, fn func(ctx context.Context)) error { return nil }

// Start recovers jobs a previous process left running, then starts the workers and the cron.
func (r *Runner) Start(ctx context.Context) error { return errors.New("not implemented") }

// Stop stops claiming, waits for running handlers until ctx ends, and stops the cron. Idempotent.
func (r *Runner) Stop(ctx context.Context) error { return nil }

// Notify wakes the workers after jobs were enqueued.
func (r *Runner) Notify() {}

// Health reports the runner's state for /status.
func (r *Runner) Health(ctx context.Context) (status, message string) {
	return "down", "not implemented"
}
