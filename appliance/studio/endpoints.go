package studio

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/pglog"
	"github.com/theappliance/appliance/store"
)

// copyFromStdin finds a COPY that would wait for rows from the client (the console has none to send).
var copyFromStdin = regexp.MustCompile(`(?is)\bcopy\b.+\bfrom\s+stdin\b`)

// RunSQL runs the console's text as the project's role and records the run in the history.
func (s *Service) RunSQL(ctx context.Context, p *authz.Principal, projectID string, req *api.SQLRequest) (*api.SQLResultResponse, error) {
	if strings.TrimSpace(req.Query) == "" {
		return nil, apperr.Invalid("query is empty")
	}
	if len(req.Query) > api.MaxQueryBytes {
		return nil, &apperr.Error{Kind: apperr.KindTooLarge, Msg: fmt.Sprintf("query is %d bytes; the studio runs at most %d", len(req.Query), api.MaxQueryBytes)}
	}
	if copyFromStdin.MatchString(req.Query) {
		return nil, apperr.Invalid("COPY … FROM STDIN needs a client that sends the rows: use INSERT here, or psql with the project's connection URL")
	}
	if req.RunID != "" && !runIDPattern.MatchString(req.RunID) {
		return nil, apperr.Invalid("run_id must be 1 to 64 letters, digits, _ or -")
	}
	caps := DefaultCaps
	if req.MaxRows < 0 || req.MaxRows > MaxRows {
		return nil, apperr.Invalid("max_rows must be 0 to %d", MaxRows)
	} else if req.MaxRows > 0 {
		caps.Rows = req.MaxRows
	}
	var out *api.SQLResultResponse
	err := s.withSession(ctx, p, projectID, func(ctx context.Context, prj *store.Project, conn *pgconn.PgConn) error {
		var run *running
		if req.RunID != "" {
			r, done, err := s.runs.add(prj.ID, req.RunID, conn)
			if err != nil {
				return err
			}
			defer done()
			run = r
		}
		started := s.now()
		inert := Inert(conn, req.Query)
		var res *SQLResult
		var results []*api.SQLStatementResult
		var err error
		if run != nil && s.runs.wasCancelled(run) { // its cancel came first
			run.finish()
			err = &apperr.Error{Kind: apperr.KindInvalid, Fields: map[string]any{"sqlstate": "57014"},
				Msg: "the run was cancelled before it started: none of its text was sent to the server"}
		} else {
			res, results, err = Run(ctx, conn, req.Query, caps)
			if run != nil {
				run.finish()
			}
			if err != nil {
				err = s.sqlError(ctx, prj, err)
				if run != nil && s.runs.wasCancelled(run) {
					if ae := (*apperr.Error)(nil); errors.As(err, &ae) {
						ae.Msg = "the run was cancelled (" + ae.Msg + "); the text's statements were rolled back unless they had committed"
					}
				}
			}
		}
		// The history and the audit keep the text and the server's message with their passwords masked, as
		// the logs API shows them (pglog): a hash of the clear text would let a short password be guessed.
		var msg string
		var ae *apperr.Error
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
			out = &api.SQLResultResponse{Result: res, Results: results}
		}
		// A text that may have changed data is on disk before its answer; only a provably inert one is not
		// waited for.
		if rerr := s.record(p, h, "project.sql.run", prj, md, !inert); rerr != nil && err == nil {
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
func (s *Service) SQLHistory(ctx context.Context, p *authz.Principal, projectID string, limit int) (*api.SQLHistoryList, error) {
	if err := s.FlushLog(ctx); err != nil {
		return nil, err
	}
	out := &api.SQLHistoryList{}
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		hs, err := store.SQLHistory.Lookup(tx, store.SQLHistoryByProject, prj.ID, store.Query{Newest: true, Limit: limit})
		for _, h := range hs {
			maskHistory(h) // an entry stored before the history was masked, until the sweep rewrites it
		}
		out.History = wireHistory(hs)
		return err
	})
	return out, err
}

// ListTables lists the project's tables, views, materialized views, foreign tables and partitioned tables
// (not the system schemas' nor partitions).
func (s *Service) ListTables(ctx context.Context, p *authz.Principal, projectID string) (*api.TableList, error) {
	out := &api.TableList{}
	err := s.withSession(ctx, p, projectID, func(ctx context.Context, prj *store.Project, conn *pgconn.PgConn) error {
		var err error
		if out.Tables, err = ListTables(ctx, conn); err != nil {
			return s.sqlError(ctx, prj, err)
		}
		return nil
	})
	return out, err
}

// TableColumns lists a table's columns in order.
func (s *Service) TableColumns(ctx context.Context, p *authz.Principal, projectID, schema, table string) (*api.ColumnList, error) {
	out := &api.ColumnList{}
	err := s.withTable(ctx, p, projectID, schema, table, func(_ context.Context, _ *store.Project, _ *pgconn.PgConn, t *TableInfo) error {
		out.Columns = wireColumns(t.Columns)
		return nil
	})
	return out, err
}

// decodeValues decodes a body's column → value object keeping numbers exact.
func decodeValues(field string, in map[string]json.RawMessage) (map[string]any, error) {
	out := make(map[string]any, len(in))
	for k, raw := range in {
		v, err := DecodeObject(json.RawMessage(`{"v":` + string(raw) + `}`))
		if err != nil {
			return nil, apperr.Invalid("%s.%s is not a JSON value", field, k)
		}
		out[k] = v["v"]
	}
	return out, nil
}

// writeRows runs one row write (do) on the named table and audits it.
func (s *Service) writeRows(ctx context.Context, p *authz.Principal, projectID, schema, table, action string,
	do func(context.Context, *pgconn.PgConn, *TableInfo) (*SQLResult, error)) (*api.RowsWriteResponse, error) {
	out := &api.RowsWriteResponse{}
	err := s.withTable(ctx, p, projectID, schema, table, func(ctx context.Context, prj *store.Project, conn *pgconn.PgConn, t *TableInfo) error {
		res, err := do(ctx, conn, t)
		if big := (*TooLargeError)(nil); errors.As(err, &big) {
			// The answer (RETURNING *) was refused and the session closed: the write may have committed before.
			if rerr := s.record(p, nil, action, prj, map[string]any{"schema": schema, "table": table, "answer_refused": true}, true); rerr != nil {
				return rerr
			}
		}
		if err != nil {
			return err
		}
		if err := s.record(p, nil, action, prj, map[string]any{"schema": schema, "table": table, "rows_affected": res.RowCount}, true); err != nil {
			return err
		}
		out.Result = api.RowsWritten{RowsAffected: res.RowCount, Rows: res.Rows, Truncated: res.Truncated}
		return nil
	})
	return out, err
}

// InsertRows inserts rows into a table in one statement.
func (s *Service) InsertRows(ctx context.Context, p *authz.Principal, projectID, schema, table string, req *api.InsertRowsRequest) (*api.RowsWriteResponse, error) {
	if len(req.Rows) == 0 || len(req.Rows) > MaxInsertRows {
		return nil, apperr.Invalid("rows must hold 1 to %d rows", MaxInsertRows)
	}
	rows := make([]map[string]any, len(req.Rows))
	for i, r := range req.Rows {
		var err error
		if rows[i], err = decodeValues(fmt.Sprintf("rows[%d]", i), r); err != nil {
			return nil, err
		}
	}
	return s.writeRows(ctx, p, projectID, schema, table, "project.rows.insert", func(ctx context.Context, c *pgconn.PgConn, t *TableInfo) (*SQLResult, error) {
		return Insert(ctx, c, t, rows, DefaultCaps)
	})
}

// UpdateRows sets columns on the rows a match selects; an empty match needs all_rows.
func (s *Service) UpdateRows(ctx context.Context, p *authz.Principal, projectID, schema, table string, req *api.UpdateRowsRequest) (*api.RowsWriteResponse, error) {
	if len(req.Set) == 0 {
		return nil, apperr.Invalid("set must name at least one column")
	}
	if len(req.Match) == 0 && !req.AllRows {
		return nil, apperr.Invalid("match is empty: it would change every row; name the rows in match, or send all_rows: true")
	}
	match, err := decodeValues("match", req.Match)
	if err != nil {
		return nil, err
	}
	set, err := decodeValues("set", req.Set)
	if err != nil {
		return nil, err
	}
	return s.writeRows(ctx, p, projectID, schema, table, "project.rows.update", func(ctx context.Context, c *pgconn.PgConn, t *TableInfo) (*SQLResult, error) {
		return Update(ctx, c, t, match, set, DefaultCaps)
	})
}

// DeleteRows deletes the rows a match selects; an empty match needs all_rows.
func (s *Service) DeleteRows(ctx context.Context, p *authz.Principal, projectID, schema, table string, req *api.DeleteRowsRequest) (*api.RowsWriteResponse, error) {
	if len(req.Match) == 0 && !req.AllRows {
		return nil, apperr.Invalid("match is empty: it would delete every row; name the rows in match, or send all_rows: true")
	}
	match, err := decodeValues("match", req.Match)
	if err != nil {
		return nil, err
	}
	return s.writeRows(ctx, p, projectID, schema, table, "project.rows.delete", func(ctx context.Context, c *pgconn.PgConn, t *TableInfo) (*SQLResult, error) {
		return Delete(ctx, c, t, match, DefaultCaps)
	})
}

// aiPeriod is the calendar month (UTC) holding now.
func aiPeriod(now time.Time) (start, end time.Time) {
	start = time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	return start, start.AddDate(0, 1, 0)
}

func (s *Service) aiUsageOf(prj *store.Project, rec *store.AIUsage, start, end time.Time) api.AIUsage {
	u := api.AIUsage{Used: rec.Used, Limit: s.host.PlanAIUsesPerMonth(prj.Plan), PeriodStart: start, PeriodEnd: end}
	u.Remaining = max(u.Limit-u.Used, 0)
	u.SoftCapReached = float64(u.Used) >= AISoftCapShare*float64(u.Limit)
	return u
}

// GetAIUsage reads the project's AI uses this month.
func (s *Service) GetAIUsage(ctx context.Context, p *authz.Principal, projectID string) (*api.AIUsageResponse, error) {
	start, end := aiPeriod(s.now())
	var out *api.AIUsageResponse
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		rec, err := monthAIUsage(tx, prj, start)
		if err != nil {
			return err
		}
		out = &api.AIUsageResponse{Usage: s.aiUsageOf(prj, rec, start, end)}
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
		return nil, apperr.Internal(err, "read AI usage")
	}
	return rec, nil
}

// RecordAIUse counts one AI use; past the plan's monthly limit it is refused (429) and nothing counts.
func (s *Service) RecordAIUse(ctx context.Context, p *authz.Principal, projectID string) (*api.AIUsageResponse, error) {
	now := s.now()
	start, end := aiPeriod(now)
	var out *api.AIUsageResponse
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		rec, err := monthAIUsage(tx, prj, start)
		if err != nil {
			return err
		}
		if u := s.aiUsageOf(prj, rec, start, end); u.Remaining == 0 {
			return &apperr.Error{Kind: apperr.KindTooMany, RetryAfter: end.Sub(now),
				Msg: fmt.Sprintf("the project used its %d AI uses of this month; the count starts again on %s", u.Limit, end.Format(time.DateOnly))}
		}
		rec.Used++
		rec.UpdatedAt = now
		if err := store.AIUsages.Put(tx, rec); err != nil {
			return apperr.Internal(err, "record AI use")
		}
		if err := s.host.Audit(tx, p, "project.ai.use", prj.OrganizationID, prj.ID, map[string]any{"used": rec.Used}); err != nil {
			return apperr.Internal(err, "audit")
		}
		out = &api.AIUsageResponse{Usage: s.aiUsageOf(prj, rec, start, end)}
		return nil
	})
	return out, err
}
