package appliance

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/theappliance/appliance/appliance/batch"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/pglog"
	"github.com/theappliance/appliance/appliance/studio"
	"github.com/theappliance/appliance/store"
)

// The studio's bounds (docs/api-decisions.md "Studio").
const (
	// StudioTimeout is the statement timeout of the console and the table routes; a project whose own
	// statement_timeout is shorter (and not 0) gets that one.
	StudioTimeout = 30 * time.Second
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

// studioState is the service's studio machinery: the per-project pools, the trust for the instances'
// certificates, and the writer of history and audit entries.
type studioState struct {
	pools *studio.Pools
	mu    sync.Mutex
	tls   *tls.Config
	log   studioLog
	// targets caches the projects' studio targets by project ID (studioTargetOf).
	targets recordCache[*studioTarget]
}

// studioTLS trusts the appliance CA, which issued the instances' certificates (they name 127.0.0.1).
func (s *Service) studioTLS() (*tls.Config, error) {
	s.studio.mu.Lock()
	defer s.studio.mu.Unlock()
	if s.studio.tls == nil {
		dp, err := s.dataPlane()
		if err != nil {
			return nil, err
		}
		s.studio.tls = &tls.Config{RootCAs: dp.CA.Pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	}
	return s.studio.tls, nil
}

// studioTimeout is StudioTimeout, or the project's statement_timeout when that is shorter and not 0.
func studioTimeout(prj *store.Project) time.Duration {
	d, err := parsePGDuration(prj.StatementTimeout)
	if err == nil && d > 0 && d < StudioTimeout {
		return d
	}
	return StudioTimeout
}

// studioSession is a session on the project's server as the project's own login (never the admin), from
// the project's studio pool. The context given to the statements should be studioContext's.
func (s *Service) studioSession(ctx context.Context, p *Principal, projectID string) (*store.Project, *pgxpool.Conn, error) {
	t, err := s.studioTargetOf(projectID)
	if err != nil {
		return nil, nil, err
	}
	prj := t.prj
	if err := projectVisible(p, prj); err != nil {
		return nil, nil, err
	}
	if prj.State != ProjectActive || prj.PrimaryInstanceID == "" {
		return nil, nil, Conflict("project %s is %s: the studio works once it is active", prj.ID, prj.State)
	}
	if t.err != nil {
		return nil, nil, t.err
	}
	tlsConfig, err := s.studioTLS()
	if err != nil {
		return nil, nil, err
	}
	conn, err := s.studio.pools.Acquire(ctx, prj.ID, studio.Target{Host: "127.0.0.1", Port: t.port, Database: prj.DatabaseName,
		User: prj.Credential.Username, Password: t.password, TLS: tlsConfig, Timeout: studioTimeout(prj)})
	if err != nil {
		msg := "the project's server does not answer"
		var pge *pgconn.PgError
		if errors.As(err, &pge) {
			msg = "the project's server refused a studio session: " + pge.Message
		}
		return nil, nil, &Error{Kind: KindUnavailable, Msg: msg, Cause: err}
	}
	return prj, conn, nil
}

// studioTarget is what a studio session needs of a project's records: the project (shared by the requests
// that find it in the cache: read-only) and, once it is active, its instance's port and its login's
// password, or why they could not be read (given only to a principal that may see the project).
type studioTarget struct {
	prj      *store.Project
	port     int
	password string
	err      error
}

// studioTargetOf reads the project's studio target, from the cache when no write to the projects or
// instances table committed since (projectVersion); the caller checks who may see it.
func (s *Service) studioTargetOf(projectID string) (*studioTarget, error) {
	version := s.projectVersion()
	if t, ok := s.studio.targets.get(projectID, version); ok {
		return t, nil
	}
	t := &studioTarget{}
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := store.Projects.Get(tx, projectID)
		if err != nil {
			return notFoundAs(err, "project %s not found", projectID)
		}
		t.prj = prj
		if prj.State != ProjectActive || prj.PrimaryInstanceID == "" {
			return nil
		}
		inst, err := store.Instances.Get(tx, prj.PrimaryInstanceID)
		if err != nil {
			t.err = Internal(err, "read the project's instance")
			return nil
		}
		t.port = inst.Port
		pw, err := s.box.Open(prj.Credential.Password)
		if err != nil {
			t.err = Internal(err, "open the project's credential")
			return nil
		}
		t.password = string(pw)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if t.err == nil {
		s.studio.targets.put(projectID, version, t)
	}
	return t, nil
}

// studioContext bounds a statement a little past the session's own statement_timeout: a text that turned
// the timeout off is still cancelled on the server when this context ends.
func studioContext(ctx context.Context, prj *store.Project) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, studioTimeout(prj)+2*time.Second, errStudioTimeout)
}

var errStudioTimeout = errors.New("studio statement timeout")

// withStudio runs fn on a studio session of the project (studioSession), under studioContext's bound; the
// session goes back to its pool after.
func (s *Service) withStudio(ctx context.Context, p *Principal, projectID string, fn func(context.Context, *store.Project, *pgconn.PgConn) error) error {
	prj, conn, err := s.studioSession(ctx, p, projectID)
	if err != nil {
		return err
	}
	defer conn.Release()
	qctx, cancel := studioContext(ctx, prj)
	defer cancel()
	return fn(qctx, prj, conn.Conn().PgConn())
}

// withTable is withStudio for a route on schema.table: fn gets the table found by name (404 when the
// project's role cannot see it); an error fn returns from the server is turned into the API's (sqlError).
func (s *Service) withTable(ctx context.Context, p *Principal, projectID, schema, table string, fn func(context.Context, *store.Project, *pgconn.PgConn, *studio.TableInfo) error) error {
	return s.withStudio(ctx, p, projectID, func(ctx context.Context, prj *store.Project, conn *pgconn.PgConn) error {
		t, err := studio.Describe(ctx, conn, schema, table)
		if errors.Is(err, studio.ErrNoTable) {
			return NotFound("table %q.%q not found", schema, table)
		}
		if err == nil {
			err = fn(ctx, prj, conn, t)
		}
		if err != nil && KindOf(err) == KindInternal {
			return sqlError(ctx, prj, err)
		}
		return err
	})
}

// copyFromStdin finds a COPY that would wait for rows from the client (the console has none to send).
var copyFromStdin = regexp.MustCompile(`(?is)\bcopy\b.+\bfrom\s+stdin\b`)

// sqlError turns what a statement's run returned into the API's error: the server's message with its
// SQLSTATE, position, detail and hint (400); a timeout says so (400); a lost session is a 503.
func sqlError(ctx context.Context, prj *store.Project, err error) error {
	timeout := studioTimeout(prj)
	if errors.Is(context.Cause(ctx), errStudioTimeout) {
		return &Error{Kind: KindInvalid, Msg: fmt.Sprintf("the query ran past the studio's statement timeout of %v and was cancelled", timeout),
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
		return &Error{Kind: KindInvalid, Msg: msg, Cause: err, Fields: fields}
	}
	var ie *studio.InputError
	if errors.As(err, &ie) {
		return Invalid("%s", ie.Msg)
	}
	var big *studio.TooLargeError
	if errors.As(err, &big) {
		return &Error{Kind: KindInvalid, Cause: err, Fields: map[string]any{"max_row_bytes": big.Limit},
			Msg: fmt.Sprintf("the server sent a row (or message) of %d bytes; the studio refuses rows over %d bytes (an answer holds at most %d): "+
				"select less of it (e.g. left(column, n) or fewer columns), or use psql with the project's connection URL; "+
				"the session was closed, so a statement still running was rolled back unless it had already committed",
				big.Size, big.Limit, studio.DefaultCaps.Bytes)}
	}
	if ctx.Err() != nil {
		return &Error{Kind: KindUnavailable, Msg: "the request ended before the query did; it was cancelled", Cause: err}
	}
	return &Error{Kind: KindUnavailable, Msg: "the session with the project's server was lost", Cause: err}
}

// RunSQL runs the console's text as the project's role and records the run in the history.
func (s *Service) RunSQL(ctx context.Context, p *Principal, projectID string, req *SQLRequest) (*SQLResultResponse, error) {
	if strings.TrimSpace(req.Query) == "" {
		return nil, Invalid("query is empty")
	}
	if len(req.Query) > MaxQueryBytes {
		return nil, &Error{Kind: KindTooLarge, Msg: fmt.Sprintf("query is %d bytes; the studio runs at most %d", len(req.Query), MaxQueryBytes)}
	}
	if copyFromStdin.MatchString(req.Query) {
		return nil, Invalid("COPY … FROM STDIN needs a client that sends the rows: use INSERT here, or psql with the project's connection URL")
	}
	var out *SQLResultResponse
	err := s.withStudio(ctx, p, projectID, func(ctx context.Context, prj *store.Project, conn *pgconn.PgConn) error {
		started := s.now()
		inert := studio.Inert(conn, req.Query)
		res, err := studio.Run(ctx, conn, req.Query, studio.DefaultCaps)
		if err != nil {
			err = sqlError(ctx, prj, err)
		}
		// The history and the audit keep the text and the server's message with their passwords masked, as
		// the logs API shows them (pglog): a hash of the clear text would let a short password be guessed.
		var msg string
		var ae *Error
		if errors.As(err, &ae) {
			msg = ae.Msg
		}
		query, msg := pglog.RedactStatement(req.Query, msg)
		kind, actor := p.Actor()
		h := &store.SQLHistoryEntry{ID: ids.New("sqh"), OrganizationID: prj.OrganizationID, ProjectID: prj.ID, ActorID: actor, ActorKind: kind,
			Query: capText(query, HistoryQueryChars), Success: err == nil, CreatedAt: started}
		sum := sha256.Sum256([]byte(query))
		md := map[string]any{"query_sha256": hex.EncodeToString(sum[:]), "query_bytes": len(req.Query), "success": err == nil}
		if err != nil {
			h.Error = msg
			h.DurationMS = s.now().Sub(started).Milliseconds()
		} else {
			h.DurationMS, h.RowCount = res.DurationMS, res.RowCount
			out = &SQLResultResponse{Result: res}
		}
		// A text that may have changed data is on disk before its answer; only a provably inert one is not
		// waited for.
		if rerr := s.studioRecord(p, h, "project.sql.run", prj, md, !inert); rerr != nil && err == nil {
			out = nil
			return rerr
		}
		return err
	})
	return out, err
}

// capText keeps at most n characters of text (cut on a character boundary, marked with "…").
func capText(text string, n int) string {
	if utf8.RuneCountInString(text) <= n {
		return text
	}
	runes := []rune(text)
	return string(runes[:n-1]) + "…"
}

// SQLHistory lists the project's console runs, newest first.
func (s *Service) SQLHistory(ctx context.Context, p *Principal, projectID string, limit int) (*SQLHistoryList, error) {
	if err := s.FlushStudioLog(ctx); err != nil {
		return nil, err
	}
	out := &SQLHistoryList{}
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := s.visibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		hs, err := store.SQLHistory.Lookup(tx, store.SQLHistoryByProject, prj.ID, store.Query{Newest: true, Limit: limit})
		for _, h := range hs {
			maskHistory(h) // an entry stored before the history was masked, until the sweep rewrites it
		}
		out.History = wireSQLHistory(hs)
		return err
	})
	return out, err
}

// maskHistory masks the passwords of an entry's text and error (pglog, as RunSQL stores them) and reports
// whether that changed it.
func maskHistory(h *store.SQLHistoryEntry) bool {
	q, e := pglog.RedactStatement(h.Query, h.Error)
	if q == h.Query && e == h.Error {
		return false
	}
	h.Query, h.Error = q, e
	return true
}

// ListTables lists the project's tables, views, materialized views, foreign tables and partitioned tables
// (not the system schemas' nor partitions).
func (s *Service) ListTables(ctx context.Context, p *Principal, projectID string) (*TableList, error) {
	out := &TableList{}
	err := s.withStudio(ctx, p, projectID, func(ctx context.Context, prj *store.Project, conn *pgconn.PgConn) error {
		var err error
		if out.Tables, err = studio.ListTables(ctx, conn); err != nil {
			return sqlError(ctx, prj, err)
		}
		return nil
	})
	return out, err
}

// TableColumns lists a table's columns in order.
func (s *Service) TableColumns(ctx context.Context, p *Principal, projectID, schema, table string) (*ColumnList, error) {
	out := &ColumnList{}
	err := s.withTable(ctx, p, projectID, schema, table, func(_ context.Context, _ *store.Project, _ *pgconn.PgConn, t *studio.TableInfo) error {
		out.Columns = wireColumns(t.Columns)
		return nil
	})
	return out, err
}

// ReadRows reads a page of a table's rows in a stable order (studio.Read).
func (s *Service) ReadRows(ctx context.Context, p *Principal, projectID, schema, table string, limit, offset int) (*RowsReadResponse, error) {
	out := &RowsReadResponse{}
	err := s.withTable(ctx, p, projectID, schema, table, func(ctx context.Context, _ *store.Project, conn *pgconn.PgConn, t *studio.TableInfo) error {
		res, err := studio.Read(ctx, conn, t, limit, offset, studio.DefaultCaps)
		if err == nil {
			out.Result = RowsRead{Columns: res.Columns, ColumnTypes: res.ColumnTypes, Rows: res.Rows, Truncated: res.Truncated}
		}
		return err
	})
	return out, err
}

// decodeValues decodes a body's column → value object keeping numbers exact.
func decodeValues(field string, in map[string]json.RawMessage) (map[string]any, error) {
	out := make(map[string]any, len(in))
	for k, raw := range in {
		v, err := studio.DecodeObject(json.RawMessage(`{"v":` + string(raw) + `}`))
		if err != nil {
			return nil, Invalid("%s.%s is not a JSON value", field, k)
		}
		out[k] = v["v"]
	}
	return out, nil
}

// writeRows runs one row write (do) on the named table and audits it.
func (s *Service) writeRows(ctx context.Context, p *Principal, projectID, schema, table, action string,
	do func(context.Context, *pgconn.PgConn, *studio.TableInfo) (*studio.SQLResult, error)) (*RowsWriteResponse, error) {
	out := &RowsWriteResponse{}
	err := s.withTable(ctx, p, projectID, schema, table, func(ctx context.Context, prj *store.Project, conn *pgconn.PgConn, t *studio.TableInfo) error {
		res, err := do(ctx, conn, t)
		if big := (*studio.TooLargeError)(nil); errors.As(err, &big) {
			// The answer (RETURNING *) was refused and the session closed: the write may have committed before.
			if rerr := s.studioRecord(p, nil, action, prj, map[string]any{"schema": schema, "table": table, "answer_refused": true}, true); rerr != nil {
				return rerr
			}
		}
		if err != nil {
			return err
		}
		if err := s.studioRecord(p, nil, action, prj, map[string]any{"schema": schema, "table": table, "rows_affected": res.RowCount}, true); err != nil {
			return err
		}
		out.Result = RowsWritten{RowsAffected: res.RowCount, Rows: res.Rows, Truncated: res.Truncated}
		return nil
	})
	return out, err
}

// InsertRows inserts rows into a table in one statement.
func (s *Service) InsertRows(ctx context.Context, p *Principal, projectID, schema, table string, req *InsertRowsRequest) (*RowsWriteResponse, error) {
	if len(req.Rows) == 0 || len(req.Rows) > MaxInsertRows {
		return nil, Invalid("rows must hold 1 to %d rows", MaxInsertRows)
	}
	rows := make([]map[string]any, len(req.Rows))
	for i, r := range req.Rows {
		var err error
		if rows[i], err = decodeValues(fmt.Sprintf("rows[%d]", i), r); err != nil {
			return nil, err
		}
	}
	return s.writeRows(ctx, p, projectID, schema, table, "project.rows.insert", func(ctx context.Context, c *pgconn.PgConn, t *studio.TableInfo) (*studio.SQLResult, error) {
		return studio.Insert(ctx, c, t, rows, studio.DefaultCaps)
	})
}

// UpdateRows sets columns on the rows a match selects; an empty match needs all_rows.
func (s *Service) UpdateRows(ctx context.Context, p *Principal, projectID, schema, table string, req *UpdateRowsRequest) (*RowsWriteResponse, error) {
	if len(req.Set) == 0 {
		return nil, Invalid("set must name at least one column")
	}
	if len(req.Match) == 0 && !req.AllRows {
		return nil, Invalid("match is empty: it would change every row; name the rows in match, or send all_rows: true")
	}
	match, err := decodeValues("match", req.Match)
	if err != nil {
		return nil, err
	}
	set, err := decodeValues("set", req.Set)
	if err != nil {
		return nil, err
	}
	return s.writeRows(ctx, p, projectID, schema, table, "project.rows.update", func(ctx context.Context, c *pgconn.PgConn, t *studio.TableInfo) (*studio.SQLResult, error) {
		return studio.Update(ctx, c, t, match, set, studio.DefaultCaps)
	})
}

// DeleteRows deletes the rows a match selects; an empty match needs all_rows.
func (s *Service) DeleteRows(ctx context.Context, p *Principal, projectID, schema, table string, req *DeleteRowsRequest) (*RowsWriteResponse, error) {
	if len(req.Match) == 0 && !req.AllRows {
		return nil, Invalid("match is empty: it would delete every row; name the rows in match, or send all_rows: true")
	}
	match, err := decodeValues("match", req.Match)
	if err != nil {
		return nil, err
	}
	return s.writeRows(ctx, p, projectID, schema, table, "project.rows.delete", func(ctx context.Context, c *pgconn.PgConn, t *studio.TableInfo) (*studio.SQLResult, error) {
		return studio.Delete(ctx, c, t, match, studio.DefaultCaps)
	})
}

// studioLog writes the console's history entries and the studio's audit events, many per transaction (a
// batch.Writer lingering 5 ms after an entry for others to share its commit: a commit's fdatasync costs
// about as much CPU as tens of entries' encoding). A run that may have changed data waits until its entries
// are written, before its answer (the writer does not linger for it), so a crash cannot lose the record of
// a change the client was told of; only a provably inert one (studio.Inert) hands its entries over without
// waiting. A reader of either flushes it first (docs/api-decisions.md "Studio: answer caps, masked history, durable records").
type studioLog struct {
	once sync.Once
	w    *batch.Writer[studioEntry]
}

type studioEntry struct {
	history *store.SQLHistoryEntry
	audit   *store.AuditEvent
}

// studioRecord hands over a history entry (may be nil) and an audit event of action; with durable it waits
// until they are committed.
func (s *Service) studioRecord(p *Principal, h *store.SQLHistoryEntry, action string, prj *store.Project, metadata map[string]any, durable bool) error {
	kind, id := p.Actor()
	md, _ := json.Marshal(metadata)
	e := studioEntry{history: h, audit: &store.AuditEvent{ID: ids.New("aud"), Action: action, ActorKind: kind, ActorID: id,
		OrganizationID: prj.OrganizationID, ProjectID: prj.ID, Metadata: md, CreatedAt: s.now()}}
	if !durable {
		s.studioWriter().Add(e)
		return nil
	}
	if err := s.studioWriter().Write(e); err != nil {
		return Internal(err, "record the studio's audit event")
	}
	return nil
}

func (s *Service) studioWriter() *batch.Writer[studioEntry] {
	s.studio.log.once.Do(func() {
		s.studio.log.w = batch.New(s.db, nil, 512, studioLogLinger, 4096, s.log, "the studio's history and audit entries",
			func(tx *store.Tx, e studioEntry) error {
				if e.history != nil {
					if err := store.SQLHistory.Put(tx, e.history); err != nil {
						return err
					}
				}
				return store.AuditEvents.Put(tx, e.audit)
			})
		go s.studio.log.w.Run()
	})
	return s.studio.log.w
}

// FlushStudioLog waits until every history entry and audit event the studio queued before it is written.
func (s *Service) FlushStudioLog(ctx context.Context) error { return s.studioWriter().Flush(ctx) }

// studioLogLinger is how long the writer waits after an entry for more to share its commit.
const studioLogLinger = 5 * time.Millisecond

// pruneSQLHistory deletes history entries older than HistoryRetention and, per project, all but the newest
// HistoryKeep, and masks the passwords of those an earlier version stored in clear.
func (s *Service) pruneSQLHistory(ctx context.Context) (int, error) {
	if err := s.FlushStudioLog(ctx); err != nil {
		return 0, err
	}
	deleted := 0
	cutoff := s.now().Add(-HistoryRetention)
	err := s.db.Update(func(tx *store.Tx) error {
		all, err := store.SQLHistory.All(tx, nil)
		if err != nil {
			return err
		}
		perProject := map[string]int{}
		for i := len(all) - 1; i >= 0; i-- { // newest first
			h := all[i]
			perProject[h.ProjectID]++
			if perProject[h.ProjectID] > HistoryKeep || h.CreatedAt.Before(cutoff) {
				if err := store.SQLHistory.Delete(tx, h.ID); err != nil {
					return err
				}
				deleted++
			} else if maskHistory(h) { // stored in clear by an earlier version
				if err := store.SQLHistory.Put(tx, h); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return deleted, err
}

// aiPeriod is the calendar month (UTC) holding now.
func aiPeriod(now time.Time) (start, end time.Time) {
	start = time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	return start, start.AddDate(0, 1, 0)
}

func aiUsageOf(prj *store.Project, rec *store.AIUsage, start, end time.Time) AIUsage {
	plan, _ := PlanByName(prj.Plan)
	u := AIUsage{Used: rec.Used, Limit: plan.AIUsesPerMonth, PeriodStart: start, PeriodEnd: end}
	u.Remaining = max(u.Limit-u.Used, 0)
	u.SoftCapReached = float64(u.Used) >= AISoftCapShare*float64(u.Limit)
	return u
}

// GetAIUsage reads the project's AI uses this month.
func (s *Service) GetAIUsage(ctx context.Context, p *Principal, projectID string) (*AIUsageResponse, error) {
	start, end := aiPeriod(s.now())
	var out *AIUsageResponse
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := s.visibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		rec, err := monthAIUsage(tx, prj, start)
		if err != nil {
			return err
		}
		out = &AIUsageResponse{Usage: aiUsageOf(prj, rec, start, end)}
		return nil
	})
	return out, err
}

// monthAIUsage is the project's counter of the month starting at start (a new one, at 0, when it has none).
func monthAIUsage(tx *store.Tx, prj *store.Project, start time.Time) (*store.AIUsage, error) {
	id := prj.ID + "/" + start.Format("2006-01")
	rec, err := store.AIUsages.Get(tx, id)
	if errors.Is(err, store.ErrNotFound) {
		return &store.AIUsage{ID: id, ProjectID: prj.ID, PeriodStart: start}, nil
	}
	if err != nil {
		return nil, Internal(err, "read AI usage")
	}
	return rec, nil
}

// RecordAIUse counts one AI use; past the plan's monthly limit it is refused (429) and nothing counts.
func (s *Service) RecordAIUse(ctx context.Context, p *Principal, projectID string) (*AIUsageResponse, error) {
	now := s.now()
	start, end := aiPeriod(now)
	var out *AIUsageResponse
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := s.visibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		rec, err := monthAIUsage(tx, prj, start)
		if err != nil {
			return err
		}
		if u := aiUsageOf(prj, rec, start, end); u.Remaining == 0 {
			return &Error{Kind: KindTooMany, RetryAfter: end.Sub(now),
				Msg: fmt.Sprintf("the project used its %d AI uses of this month; the count starts again on %s", u.Limit, end.Format(time.DateOnly))}
		}
		rec.Used++
		rec.UpdatedAt = now
		if err := store.AIUsages.Put(tx, rec); err != nil {
			return Internal(err, "record AI use")
		}
		if err := s.audit(tx, p, "project.ai.use", prj.OrganizationID, prj.ID, map[string]any{"used": rec.Used}); err != nil {
			return Internal(err, "audit")
		}
		out = &AIUsageResponse{Usage: aiUsageOf(prj, rec, start, end)}
		return nil
	})
	return out, err
}

// StudioPoolStats counts the studio's per-project pools and their open sessions on the projects' servers
// (studio.Pools.Stats), for benchmarks and tests of how the pools shrink when idle.
func (s *Service) StudioPoolStats() (pools, conns int) {
	return s.studio.pools.Stats()
}
