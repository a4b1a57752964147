// Package scheduler runs durable jobs stored in the metadata store (claim, per-resource lock, retries with
// backoff, crash recovery) and the periodic work of the appliance (robfig/cron). It knows nothing of the
// domain: the appliance registers a handler per job type.
//
// A job's life: Enqueue writes it pending; a worker claims it (pending → running, attempts+1) in one bbolt
// transaction; the handler's outcome moves it to completed, failed, or back to pending with a backoff when
// the error is Transient and attempts remain. Nothing is ever left running for good: a job the runner was
// running when the process died is found by the next Start and retried (or failed when out of attempts),
// and a clean Stop puts the jobs it interrupts back to pending.
package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/theappliance/appliance/appliance/ids"
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
	ClassTransient = "transient"
	ClassPermanent = "permanent"
)

// DefaultMaxAttempts is the max_attempts of a job enqueued without one.
const DefaultMaxAttempts = 3

// Handler does the work of one job type. It must be idempotent: after a crash it runs again from the top.
// A returned error marked with Transient is retried with backoff while attempts remain.
type Handler func(ctx context.Context, run *Run) (result any, err error)

// transientError marks an error as retryable; errors.As finds it through any wrapping.
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

// Transient marks err as retryable. Transient(nil) is nil.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &transientError{err: err}
}

// IsTransient reports whether err (or an error it wraps) was marked with Transient.
func IsTransient(err error) bool {
	var t *transientError
	return errors.As(err, &t)
}

// Enqueue adds a pending job inside tx (filling ID, state, attempts, timestamps); call Notify after commit.
// The caller sets Type (required), Payload, the organization/project fields, LockedResource and optionally
// MaxAttempts (default 3), RunAfter (a later start; default now) and Node (the node it must run on: where
// its instance lives; default: the node hosting the project ProjectID names, any node for other jobs).
// Runtime fields are reset.
func Enqueue(tx *store.Tx, j *store.Job) error {
	if j.Type == "" {
		return errors.New("enqueue job: type is required")
	}
	if j.MaxAttempts < 0 {
		return fmt.Errorf("enqueue %s job: max_attempts must not be negative", j.Type)
	}
	if j.ID == "" {
		j.ID = ids.New("job")
	} else if _, err := store.Jobs.Get(tx, j.ID); err == nil {
		return fmt.Errorf("enqueue %s job: job %s already exists", j.Type, j.ID)
	} else if !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("enqueue %s job: %w", j.Type, err)
	}
	if j.Node == "" && j.ProjectID != "" {
		// A project's job runs where its instances live: in a cluster, the node that hosts the project
		// (store.ProjectNode); "" on a single node. A project not stored yet is its caller's to pin.
		if p, err := store.Projects.Get(tx, j.ProjectID); err == nil {
			j.Node = store.ProjectNode(tx, p)
		} else if !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("enqueue %s job: %w", j.Type, err)
		}
	}
	now := time.Now().UTC()
	j.State = StatePending
	j.Attempts = 0
	if j.MaxAttempts == 0 {
		j.MaxAttempts = DefaultMaxAttempts
	}
	j.ClaimedBy, j.HostID, j.Lease, j.Error, j.RetryClassification = "", "", "", "", ""
	j.LastStdout, j.LastStderr, j.LastExitCode = "", "", nil
	j.ClaimedAt, j.StartedAt, j.CompletedAt = nil, nil, nil
	j.Result = json.RawMessage("null")
	j.CreatedAt, j.UpdatedAt = now, now
	if j.RunAfter.Before(now) {
		j.RunAfter = now
	} else {
		j.RunAfter = j.RunAfter.UTC()
	}
	if err := store.Jobs.Put(tx, j); err != nil {
		return fmt.Errorf("enqueue %s job: %w", j.Type, err)
	}
	return nil
}

// DefaultBackoff is the delay before retry number attempt+1 of a transient failure: 2s, 4s, 8s … capped at
// five minutes.
func DefaultBackoff(attempt int) time.Duration {
	const ceiling = 5 * time.Minute
	if attempt < 1 {
		attempt = 1
	}
	if attempt > 9 { // 2s<<8 already exceeds the ceiling
		return ceiling
	}
	return min(2*time.Second<<(attempt-1), ceiling)
}

func maxAttempts(j *store.Job) int {
	if j.MaxAttempts <= 0 {
		return DefaultMaxAttempts
	}
	return j.MaxAttempts
}
