package studio

import (
	"context"
	"regexp"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/store"
)

// The console's runs that a client named (api.SQLRequest.RunID) are listed here while they run, by project,
// so POST .../sql/runs/{runID}/cancel can cancel one: it sends the run's backend PostgreSQL's cancel request
// (what pg_cancel_backend does, for that backend only: its process ID and secret key), and the statement
// ends with SQLSTATE 57014. A run leaves the list before its session goes back to the pool, so a cancel
// never reaches a session another request holds.

var runIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

type runKey struct{ projectID, runID string }

type running struct {
	conn      *pgconn.PgConn
	cancelled bool
}

type runRegistry struct {
	mu   sync.Mutex
	runs map[runKey]*running
}

// add lists a run (409 when the project already runs one of that ID); the returned func removes it.
func (r *runRegistry) add(projectID, runID string, conn *pgconn.PgConn) (*running, func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := runKey{projectID, runID}
	if r.runs[k] != nil {
		return nil, nil, apperr.Conflict("the project already runs a statement with run_id %q", runID)
	}
	if r.runs == nil {
		r.runs = map[runKey]*running{}
	}
	run := &running{conn: conn}
	r.runs[k] = run
	return run, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.runs, k)
	}, nil
}

// cancel asks the server to cancel the run's statement; false when the project runs none of that ID.
func (r *runRegistry) cancel(ctx context.Context, projectID, runID string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	run := r.runs[runKey{projectID, runID}]
	if run == nil {
		return false, nil
	}
	run.cancelled = true
	// Under the lock: the run cannot leave the list (and its session go back to the pool) meanwhile.
	return true, run.conn.CancelRequest(ctx)
}

// wasCancelled reports whether CancelSQL cancelled the run.
func (r *runRegistry) wasCancelled(run *running) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return run.cancelled
}

// CancelSQL cancels the project's running console run runID (one the caller may see: the project's own);
// cancelled is false when none of that ID runs.
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
	// None of that ID runs (it ended, or has not started yet): nothing to cancel, which is no error for a
	// client racing its run's end. Either way the request is audited, as every mutating call is.
	if err := s.db.Update(func(tx *store.Tx) error {
		return s.host.Audit(tx, p, "project.sql.cancel", prj.OrganizationID, prj.ID, map[string]any{"run_id": runID, "cancelled": ok})
	}); err != nil {
		return nil, err
	}
	return &api.SQLCancelResponse{RunID: runID, Cancelled: ok}, nil
}
