package studio

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/batch"
	"github.com/theappliance/appliance/store"
)

// The area was moved out of the root package `appliance` (issue 26): it reaches the rest of the domain only
// through Host (declared here, given by the root's Service), the kernel packages (apperr, authz), the
// records (store) and the batch writer. It never imports `appliance`.

// The studio's bounds (docs/api-decisions.md "Studio").
const (
	// Timeout is the statement timeout of the console and the table routes; a project whose own
	// statement_timeout is shorter (and not 0) gets that one.
	Timeout = 30 * time.Second
	// HistoryQueryChars is how much of a run's text its history entry keeps.
	HistoryQueryChars = 4000
	// HistoryKeep runs are kept per project, none older than HistoryRetention (the sweep prunes).
	HistoryKeep      = 1000
	HistoryRetention = 30 * 24 * time.Hour
	// MaxInsertRows bounds one insert's rows.
	MaxInsertRows = 1000
	// AISoftCapShare of a plan's monthly AI uses sets soft_cap_reached.
	AISoftCapShare = 0.8
)

// Host is what the area takes from the rest of the domain: the records and rules every area shares, which
// the root package keeps (appliance/areas.go gives them). Keep it small: what an area can own, it owns.
type Host interface {
	// ProjectTarget is what a studio session needs of a project's records, once the caller may see the
	// project (404 when there is none, 404/403 as projectVisible says): the project, and, once it is active,
	// its instance's port and its login's opened password (or why they could not be read). The projects,
	// instances and the secret box are the root's; it caches the targets until a project or an instance is
	// written.
	ProjectTarget(p *authz.Principal, projectID string) (*ProjectTarget, error)
	// StatementTimeout is the project's statement_timeout (0: none, or unreadable): the settings and their
	// parser are the root's.
	StatementTimeout(prj *store.Project) time.Duration
	// VisibleProject is a project the caller may see (404 for another organization's or a preview's, 403
	// off a project-scoped key's own): projects and their visibility are one rule for every area.
	VisibleProject(tx *store.Tx, p *authz.Principal, projectID string) (*store.Project, error)
	// Audit writes an audit event of the caller in tx: one event shape and one clock for every area.
	Audit(tx *store.Tx, p *authz.Principal, action, orgID, projectID string, metadata any) error
	// PlanAIUsesPerMonth is a plan's monthly AI uses: plans are the root's table.
	PlanAIUsesPerMonth(plan string) int
}

// ProjectTarget is what a studio session needs of a project's records: the project (shared by the requests
// that find it in the root's cache: read-only) and, once it is active, its instance's port and its login's
// password, or why they could not be read (Err, given only to a principal that may see the project).
type ProjectTarget struct {
	Project  *store.Project
	Port     int
	Password string
	Err      error
}

// Deps are the area's collaborators; New takes them all.
type Deps struct {
	DB    *store.DB
	Log   *slog.Logger
	Clock func() time.Time // UTC
	// RootCAs trusts the appliance CA, which issued the instances' certificates (nil in a process without a
	// data plane: sessions fail).
	RootCAs *x509.CertPool
	Host    Host
}

// Service is the studio area.
type Service struct {
	db    *store.DB
	log   *slog.Logger
	now   func() time.Time
	host  Host
	pools *Pools
	// runs are the console's named runs while they run (runs.go).
	runs runRegistry
	// tls trusts the appliance CA (nil: no data plane).
	tls *tls.Config
	// writer writes the console's history entries and the studio's audit events (history.go), started on
	// first use.
	writerOnce sync.Once
	writer     *batch.Writer[logEntry]
}

// New returns the area built with its collaborators; its pools start empty.
func New(deps Deps) *Service {
	s := &Service{db: deps.DB, log: deps.Log, now: deps.Clock, host: deps.Host, pools: NewPools()}
	if deps.RootCAs != nil {
		// The instances' certificates name 127.0.0.1.
		s.tls = &tls.Config{RootCAs: deps.RootCAs, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	}
	return s
}

// Forget closes the project's pool (its sessions are about to end: the project moves or goes).
func (s *Service) Forget(projectID string) { s.pools.Forget(projectID) }

// ClosePools closes every pool (the shutdown).
func (s *Service) ClosePools() { s.pools.Close() }

// PoolStats counts the studio's per-project pools and their open sessions on the projects' servers
// (Pools.Stats), for benchmarks and tests of how the pools shrink when idle.
func (s *Service) PoolStats() (pools, conns int) { return s.pools.Stats() }

// timeout is Timeout, or the project's statement_timeout when that is shorter and not 0.
func (s *Service) timeout(prj *store.Project) time.Duration {
	if d := s.host.StatementTimeout(prj); d > 0 && d < Timeout {
		return d
	}
	return Timeout
}

// Session is a session on the project's server as the project's own login (never the admin), from the
// project's studio pool. The context given to the statements should be QueryContext's.
func (s *Service) Session(ctx context.Context, p *authz.Principal, projectID string) (*store.Project, *pgxpool.Conn, error) {
	t, err := s.host.ProjectTarget(p, projectID)
	if err != nil {
		return nil, nil, err
	}
	prj := t.Project
	if prj.State != api.ProjectActive || prj.PrimaryInstanceID == "" {
		return nil, nil, apperr.Conflict("project %s is %s: the studio works once it is active", prj.ID, prj.State)
	}
	if t.Err != nil {
		return nil, nil, t.Err
	}
	if s.tls == nil {
		return nil, nil, errors.New("no data plane: PostgreSQL instances cannot run in this process")
	}
	conn, err := s.pools.Acquire(ctx, prj.ID, Target{Host: "127.0.0.1", Port: t.Port, Database: prj.DatabaseName,
		User: prj.Credential.Username, Password: t.Password, TLS: s.tls, Timeout: s.timeout(prj)})
	if err != nil {
		msg := "the project's server does not answer"
		var pge *pgconn.PgError
		if errors.As(err, &pge) {
			msg = "the project's server refused a studio session: " + pge.Message
		}
		return nil, nil, &apperr.Error{Kind: apperr.KindUnavailable, Msg: msg, Cause: err}
	}
	return prj, conn, nil
}

// QueryContext bounds a statement a little past the session's own statement_timeout: a text that turned
// the timeout off is still cancelled on the server when this context ends.
func (s *Service) QueryContext(ctx context.Context, prj *store.Project) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, s.timeout(prj)+2*time.Second, errTimeout)
}

var errTimeout = errors.New("studio statement timeout")

// withSession runs fn on a studio session of the project (Session), under QueryContext's bound; the
// session goes back to its pool after.
func (s *Service) withSession(ctx context.Context, p *authz.Principal, projectID string, fn func(context.Context, *store.Project, *pgconn.PgConn) error) error {
	prj, conn, err := s.Session(ctx, p, projectID)
	if err != nil {
		return err
	}
	defer conn.Release()
	qctx, cancel := s.QueryContext(ctx, prj)
	defer cancel()
	return fn(qctx, prj, conn.Conn().PgConn())
}

// withTable is withSession for a route on schema.table: fn gets the table found by name (404 when the
// project's role cannot see it); an error fn returns from the server is turned into the API's (sqlError).
func (s *Service) withTable(ctx context.Context, p *authz.Principal, projectID, schema, table string, fn func(context.Context, *store.Project, *pgconn.PgConn, *TableInfo) error) error {
	return s.withSession(ctx, p, projectID, func(ctx context.Context, prj *store.Project, conn *pgconn.PgConn) error {
		t, err := Describe(ctx, conn, schema, table)
		if errors.Is(err, ErrNoTable) {
			return apperr.NotFound("table %q.%q not found", schema, table)
		}
		if err == nil {
			err = fn(ctx, prj, conn, t)
		}
		if err != nil && apperr.KindOf(err) == apperr.KindInternal {
			return s.sqlError(ctx, prj, err)
		}
		return err
	})
}

// sqlError turns what a statement's run returned into the API's error: the server's message with its
// SQLSTATE, position, detail and hint (400); a timeout says so (400); a lost session is a 503.
func (s *Service) sqlError(ctx context.Context, prj *store.Project, err error) error {
	timeout := s.timeout(prj)
	if errors.Is(context.Cause(ctx), errTimeout) {
		return &apperr.Error{Kind: apperr.KindInvalid, Msg: fmt.Sprintf("the query ran past the studio's statement timeout of %v and was cancelled", timeout),
			Cause: err, Fields: map[string]any{"sqlstate": "57014"}}
	}
	var pge *pgconn.PgError
	if errors.As(err, &pge) {
		msg := pge.Message
		if pge.Code == "57014" && strings.Contains(pge.Message, "statement timeout") {
			msg = fmt.Sprintf("the query ran past the studio's statement timeout of %v and was cancelled (%s)", timeout, pge.Message)
		}
		fields := map[string]any{"sqlstate": pge.Code}
		if pge.Position > 0 {
			fields["position"] = pge.Position
		}
		if pge.Detail != "" {
			fields["detail"] = pge.Detail
		}
		if pge.Hint != "" {
			fields["hint"] = pge.Hint
		}
		return &apperr.Error{Kind: apperr.KindInvalid, Msg: msg, Cause: err, Fields: fields}
	}
	var ie *InputError
	if errors.As(err, &ie) {
		return apperr.Invalid("%s", ie.Msg)
	}
	var big *TooLargeError
	if errors.As(err, &big) {
		return &apperr.Error{Kind: apperr.KindInvalid, Cause: err, Fields: map[string]any{"max_row_bytes": big.Limit},
			Msg: fmt.Sprintf("the server sent a row (or message) of %d bytes; the studio refuses rows over %d bytes (an answer holds at most %d): "+
				"select less of it (e.g. left(column, n) or fewer columns), or use psql with the project's connection URL; "+
				"the session was closed, so a statement still running was rolled back unless it had already committed",
				big.Size, big.Limit, DefaultCaps.Bytes)}
	}
	if ctx.Err() != nil {
		return &apperr.Error{Kind: apperr.KindUnavailable, Msg: "the request ended before the query did; it was cancelled", Cause: err}
	}
	return &apperr.Error{Kind: apperr.KindUnavailable, Msg: "the session with the project's server was lost", Cause: err}
}
