package studio

import (
	"context"
	"regexp"
	"sync"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/store"
)

// The console's runs that a client named (api.SQLRequest.RunID) are listed here while they run, by project,
// so POST .../sql/runs/{runID}/cancel can cancel one: it sends the run's backend PostgreSQL's cancel request
// (what pg_cancel_backend does, for that backend only: its process ID and secret key), and the statement
// ends with SQLSTATE 57014. A run stops taking cancels before its session goes back to the pool, so a
// cancel never reaches a session another request holds.
//
// A cancel can come before its run: the client names the run before its POST is answered, and the run
// waits for a session (a wake, a busy pool) before it is listed. Such a cancel is held for earlyCancelTTL;
// a run of that ID starting meanwhile ends at once without sending its text. A cancel sent while the
// statement is on its way to the server (its backend still idle, which ignores a cancel) is sent again
// every resendEvery until the statement answers.

var runIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

const (
	// earlyCancelTTL is how long a cancel of a run not seen yet waits for it.
	earlyCancelTTL = 30 * time.Second
	// endedTTL is how long a run's end is remembered: a cancel of it then answers false (it ended) instead
	// of waiting for a run of that ID.
	endedTTL = time.Minute
	// maxEarlyPerProject bounds the cancels waiting for their runs, per project; beyond it a cancel of a
	// run not seen answers false.
	maxEarlyPerProject = 100
	// resendEvery is how often a cancel is sent again while its statement has not answered, at most
	// maxResends times.
	resendEvery = 200 * time.Millisecond
	maxResends  = 25
)

type runKey struct{ projectID, runID string }

// canceller sends a session's cancel request (a *pgconn.PgConn).
type canceller interface {
	CancelRequest(ctx context.Context) error
}

type running struct {
	conn canceller
	mu   sync.Mutex // held while a cancel request is sent, and to mark the run over
	// cancelled: a cancel was asked for; over: its statements have answered (or it left the list), so no
	// cancel is sent any more.
	cancelled, over, resending bool
}

// finish marks the run's statements answered: no cancel is sent to its session after it returns.
func (r *running) finish() {
	r.mu.Lock()
	r.over = true
	r.mu.Unlock()
}

type runRegistry struct {
	mu    sync.Mutex
	now   func() time.Time
	runs  map[runKey]*running
	ended map[runKey]time.Time // runs that left the list, when
	early map[runKey]time.Time // cancels of runs not seen yet, when
	// earlyOf counts early's entries by project.
	earlyOf map[string]int
}

func (r *runRegistry) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

// maps makes the registry's maps on first use. Under r.mu.
func (r *runRegistry) maps() {
	if r.runs == nil {
		r.runs, r.ended, r.early, r.earlyOf = map[runKey]*running{}, map[runKey]time.Time{}, map[runKey]time.Time{}, map[string]int{}
	}
}

// prune forgets ended runs and early cancels past their time. Under r.mu.
func (r *runRegistry) prune(now time.Time) {
	for k, at := range r.ended {
		if now.Sub(at) >= endedTTL {
			delete(r.ended, k)
		}
	}
	for k, at := range r.early {
		if now.Sub(at) >= earlyCancelTTL {
			r.dropEarly(k)
		}
	}
}

func (r *runRegistry) dropEarly(k runKey) {
	delete(r.early, k)
	if r.earlyOf[k.projectID]--; r.earlyOf[k.projectID] <= 0 {
		delete(r.earlyOf, k.projectID)
	}
}

// add lists a run (409 when the project already runs one of that ID); the returned func removes it. A run
// whose cancel came first is listed as cancelled: the caller does not send its text.
func (r *runRegistry) add(projectID, runID string, conn canceller) (*running, func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock()
	r.prune(now)
	k := runKey{projectID, runID}
	if r.runs[k] != nil {
		return nil, nil, apperr.Conflict("the project already runs a statement with run_id %q", runID)
	}
	r.maps()
	run := &running{conn: conn}
	if _, ok := r.early[k]; ok {
		r.dropEarly(k)
		run.cancelled = true
	}
	delete(r.ended, k)
	r.runs[k] = run
	return run, func() {
		run.finish() // a cancel in flight has been sent, and none follows
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.runs, k)
		r.ended[k] = r.clock()
	}, nil
}

// cancel asks the server to cancel the run's statement. It reports false when the run's statements have
// answered (or it ended lately); a run not seen yet is cancelled when it starts, within earlyCancelTTL.
func (r *runRegistry) cancel(ctx context.Context, projectID, runID string) (bool, error) {
	k := runKey{projectID, runID}
	r.mu.Lock()
	now := r.clock()
	r.prune(now)
	run := r.runs[k]
	if run == nil {
		defer r.mu.Unlock()
		if _, ok := r.ended[k]; ok {
			return false, nil
		}
		if _, ok := r.early[k]; ok {
			return true, nil
		}
		if r.earlyOf[projectID] >= maxEarlyPerProject {
			return false, nil
		}
		r.maps()
		r.early[k] = now
		r.earlyOf[projectID]++
		return true, nil
	}
	r.mu.Unlock()
	run.mu.Lock()
	defer run.mu.Unlock()
	if run.over {
		return false, nil
	}
	run.cancelled = true
	if !run.resending {
		run.resending = true
		go run.resend()
	}
	// Under run.mu: the run cannot be marked over (and its session go back to the pool) meanwhile.
	return true, run.conn.CancelRequest(ctx)
}

// resend sends the cancel request again every resendEvery until the run's statements answer: a cancel that
// reached the backend before the statement did was ignored.
func (r *running) resend() {
	for range maxResends {
		time.Sleep(resendEvery)
		r.mu.Lock()
		if r.over {
			r.mu.Unlock()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = r.conn.CancelRequest(ctx)
		cancel()
		r.mu.Unlock()
	}
}

// wasCancelled reports whether CancelSQL cancelled the run.
func (r *runRegistry) wasCancelled(run *running) bool {
	run.mu.Lock()
	defer run.mu.Unlock()
	return run.cancelled
}

// CancelSQL cancels the project's console run runID (one the caller may see: the project's own); cancelled
// is false when a run of that ID has ended (or too many cancels wait for their runs), true when one was
// cancelled or, not seen yet, will be if it starts within earlyCancelTTL.
func (s *Service) CancelSQL(ctx context.Context, p *authz.Principal, projectID, runID string) (*api.SQLCancelResponse, error) {
	if !runIDPattern.MatchString(runID) {
		return nil, apperr.Invalid("run ID must be 1 to 64 letters, digits, _ or -")
	}
	var prj *store.Project
	if err := s.db.View(func(tx *store.Tx) (err error) {
		prj, err = s.host.VisibleProject(tx, p, projectID)
		return err
	}); err != nil {
		return nil, err
	}
	ok, err := s.runs.cancel(ctx, prj.ID, runID)
	if err != nil {
		return nil, &apperr.Error{Kind: apperr.KindUnavailable, Msg: "could not send the cancel request to the project's server", Cause: err}
	}
	// A run that ended is nothing to cancel, which is no error for a client racing its run's end. Either
	// way the request is audited, as every mutating call is.
	if err := s.db.Update(func(tx *store.Tx) error {
		return s.host.Audit(tx, p, "project.sql.cancel", prj.OrganizationID, prj.ID, map[string]any{"run_id": runID, "cancelled": ok})
	}); err != nil {
		return nil, err
	}
	return &api.SQLCancelResponse{RunID: runID, Cancelled: ok}, nil
}
