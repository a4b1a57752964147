package pgstat

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Advisor limits.
const (
	examplesPerSuggestion = 5    // statements estimated per suggested index
	explainTimeoutMS      = 5000 // statement_timeout of each planning, so a pathological query cannot hold the advisor
	explainLockTimeoutMS  = 1000 // planning waits for a lock on the tables (behind an ALTER TABLE): give up soon
)

// exampleStatement names the prepared statement of the example being planned on the tenant's session.
const exampleStatement = "pgstat_advisor_example"

const advisorExtensionsSQL = `SELECT current_user::text, current_database()::text,
  (SELECT n.nspname::text FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_qualstats'),
  (SELECT n.nspname::text FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'hypopg'),
  'pg_qualstats' = ANY (string_to_array(replace(current_setting('shared_preload_libraries'), ' ', ''), ','))`

// queryIDsSQL lists the statements (other than the admin role's) whose predicates filtered rows of table
// $1 by columns $2, most filtered rows first; pg_qualstats in schema %s.
const queryIDsSQL = `SELECT q.queryid FROM %s.pg_qualstats() q
WHERE q.dbid = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
  AND q.queryid IS NOT NULL AND q.eval_type = 'f'
  AND q.userid <> coalesce((SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = $3::text), 0::oid)
  AND coalesce(q.lrelid, q.rrelid) = pg_catalog.to_regclass($1::text)
  AND coalesce(q.lattnum, q.rattnum) IN (SELECT a.attnum FROM pg_catalog.pg_attribute a
                                        WHERE a.attrelid = pg_catalog.to_regclass($1::text) AND a.attname = ANY ($2::text[]))
GROUP BY q.queryid ORDER BY sum(q.nbfiltered) DESC, q.queryid LIMIT $4::int`

// IndexAdvice proposes indexes for the database both sessions are connected to, from the predicates
// pg_qualstats sampled (pg_qualstats_index_advisor: predicates filtering at least minFilter rows on
// average with a selectivity of at least minSelectivity percent) and estimates, with hypopg, what each
// would save and weigh.
//
// admin only reads the catalogs. Everything else runs on tenant, as the project's role, in a read-only
// transaction rolled back at the end: the advisor is PL/pgSQL in a schema the tenant may own (its
// unqualified calls resolve through that schema: a tenant's overload would run with the caller's
// rights), and planning the tenant's statements runs the tenant's IMMUTABLE functions (constant folding).
// Each example statement is prepared as sent (one statement; no SQL is built from it) and planned with
// EXPLAIN EXECUTE as a generic plan, so statements with parameters ($1) can be estimated too; one that no
// longer prepares or plans is left without an estimate.
func IndexAdvice(ctx context.Context, admin, tenant *pgx.Conn, minFilter, minSelectivity int) (*Advice, error) {
	if minFilter < 0 || minSelectivity < 0 || minSelectivity > 100 {
		return nil, fmt.Errorf("index advice: invalid thresholds: min_filter %d, min_selectivity %d", minFilter, minSelectivity)
	}
	a := &Advice{MinFilter: minFilter, MinSelectivity: minSelectivity, MissingExtensions: []string{}, Suggestions: []Suggestion{}}
	var adminRole, database string
	var qualstats, hypopg *string
	var preloaded bool
	if err := queryAdminRow(ctx, admin, advisorExtensionsSQL, nil, &adminRole, &database, &qualstats, &hypopg, &preloaded); err != nil {
		return nil, fmt.Errorf("index advice: read extensions: %w", err)
	}
	if qualstats == nil {
		a.MissingExtensions = append(a.MissingExtensions, "pg_qualstats")
	}
	if hypopg == nil {
		a.MissingExtensions = append(a.MissingExtensions, "hypopg")
	}
	switch {
	case qualstats == nil:
		a.Reason = "index advice needs the pg_qualstats extension (and hypopg for cost and size estimates) in the project's database: enable " +
			strings.Join(a.MissingExtensions, " and ") + " with POST /v1/projects/{id}/extensions"
		return a, nil
	case !preloaded:
		a.Reason = "the server does not preload pg_qualstats (shared_preload_libraries), so it samples no predicates: restart the project's server"
		return a, nil
	}
	a.Available = true
	a.CostEstimatesAvailable, a.SizeEstimatesAvailable = hypopg != nil, hypopg != nil

	tx := &session{conn: tenant}
	if err := tx.exec(ctx, "BEGIN READ ONLY"); err != nil {
		return nil, fmt.Errorf("index advice: begin: %w", err)
	}
	defer tx.exec(context.WithoutCancel(ctx), "ROLLBACK")
	var tenantDB string
	if err := tx.queryRow(ctx, "SELECT pg_catalog.current_database()::text").Scan(&tenantDB); err != nil {
		return nil, fmt.Errorf("index advice: %w", err)
	}
	if tenantDB != database {
		return nil, fmt.Errorf("index advice: the admin session is connected to %s, the tenant's to %s", database, tenantDB)
	}
	cands, err := advise(ctx, tx, *qualstats, minFilter, minSelectivity)
	if err != nil {
		return nil, fmt.Errorf("index advice: %w", err)
	}
	// An index that an existing one already provides (the primary key's, or any with the same leading
	// columns and method) is no advice: pg_qualstats_index_advisor does not look at the existing indexes.
	if cands, err = dropCovered(ctx, admin, cands); err != nil {
		return nil, fmt.Errorf("index advice: %w", err)
	}
	if len(cands) == 0 {
		a.Reason = fmt.Sprintf("pg_qualstats has sampled no predicate without a suitable index filtering at least %d rows at %d%% selectivity or more (it samples a share of the statements: let the workload run)",
			minFilter, minSelectivity)
		return a, nil
	}
	if err := findQueries(ctx, tx, *qualstats, adminRole, cands); err != nil {
		return nil, fmt.Errorf("index advice: %w", err)
	}
	for _, c := range cands {
		if len(c.queryIDs) > examplesPerSuggestion {
			c.queryIDs = c.queryIDs[:examplesPerSuggestion]
		}
		if len(c.queryIDs) > 0 {
			c.QueryID = c.queryIDs[0] // until an estimate finds the one the index helps most
		}
	}
	if hypopg != nil {
		if err := estimate(ctx, tx, *qualstats, *hypopg, cands); err != nil {
			return nil, fmt.Errorf("index advice: %w", err)
		}
		// With estimates, a suggestion the planner finds no cheaper plan with (or none it could plan)
		// is no advice either.
		cands = slices.DeleteFunc(cands, func(c *candidate) bool { return c.EstimatedCostReductionPct <= 0 })
		if len(cands) == 0 {
			a.Reason = "no index would make the sampled statements cheaper by the planner's estimate (hypopg)"
		}
	} else {
		a.Reason = "enable the hypopg extension for cost and size estimates (POST /v1/projects/{id}/extensions)"
	}
	for _, c := range cands {
		a.Suggestions = append(a.Suggestions, c.Suggestion)
	}
	slices.SortStableFunc(a.Suggestions, func(x, y Suggestion) int {
		return cmp.Or(cmp.Compare(y.EstimatedCostReductionPct, x.EstimatedCostReductionPct), strings.Compare(x.DDL, y.DDL))
	})
	return a, nil
}

// candidate is a suggestion being worked out.
type candidate struct {
	Suggestion
	columns  []string // the index's columns (names), from the DDL
	queryIDs []int64  // the statements it would serve, most relevant first
	opclass  bool     // the DDL names an operator class: an index with the default one may not serve it
}

// session runs the advisor's statements on the tenant's connection, each starting with InternalMarker:
// pg_stat_statements records every top-level statement of the tenant's role (transaction control
// included), and the top queries and slowest statements leave the marked ones out. pgx's transactions
// send their own unmarked BEGIN and SAVEPOINT, so the advisor writes its own.
type session struct{ conn *pgx.Conn }

func (s *session) exec(ctx context.Context, sql string, args ...any) error {
	_, err := s.conn.Exec(ctx, InternalMarker+sql, args...)
	return err
}

func (s *session) queryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return s.conn.QueryRow(ctx, InternalMarker+sql, args...)
}

func (s *session) query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return s.conn.Query(ctx, InternalMarker+sql, args...)
}

// savepoint runs fn in a savepoint (one at a time: they are not nested), released when fn returns nil
// and keep is true, rolled back to otherwise. It returns fn's error.
func (s *session) savepoint(ctx context.Context, keep bool, fn func() error) (fnErr, err error) {
	if err := s.exec(ctx, "SAVEPOINT pgstat_advisor"); err != nil {
		return nil, fmt.Errorf("savepoint: %w", err)
	}
	fnErr = fn()
	if fnErr == nil && keep {
		if err := s.exec(ctx, "RELEASE SAVEPOINT pgstat_advisor"); err != nil {
			return fnErr, fmt.Errorf("release savepoint: %w", err)
		}
		return nil, nil
	}
	if err := s.exec(ctx, "ROLLBACK TO SAVEPOINT pgstat_advisor"); err != nil {
		return fnErr, fmt.Errorf("rollback to savepoint: %w", err)
	}
	if err := s.exec(ctx, "RELEASE SAVEPOINT pgstat_advisor"); err != nil {
		return fnErr, fmt.Errorf("release savepoint: %w", err)
	}
	return fnErr, nil
}

// advise calls pg_qualstats_index_advisor on the tenant's session. Its body names the extension's objects
// unqualified: the extension's schema goes first in the search_path during the call, in a savepoint rolled
// back after it (so the example statements are planned later with the session's own search_path).
func advise(ctx context.Context, tx *session, schema string, minFilter, minSelectivity int) ([]*candidate, error) {
	var raw string
	fnErr, err := tx.savepoint(ctx, false, func() error {
		if err := tx.exec(ctx, "SELECT pg_catalog.set_config('search_path', pg_catalog.quote_ident($1::text) || ', ' || pg_catalog.current_setting('search_path'), true)", schema); err != nil {
			return fmt.Errorf("set search_path: %w", err)
		}
		if err := tx.queryRow(ctx, "SELECT "+ident(schema, "pg_qualstats_index_advisor")+"($1::int, $2::int)::text", minFilter, minSelectivity).Scan(&raw); err != nil {
			return fmt.Errorf("pg_qualstats_index_advisor: %w", err)
		}
		return nil
	})
	if fnErr != nil {
		return nil, fnErr
	}
	if err != nil {
		return nil, err
	}
	// pg_qualstats 2.0 lists DDL strings; 2.1 objects with the DDL and the queryids.
	var out struct {
		Indexes []json.RawMessage `json:"indexes"`
	}
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		return nil, fmt.Errorf("pg_qualstats_index_advisor returned %q: %w", raw, err)
	}
	var cands []*candidate
	seen := map[string]bool{}
	for _, m := range out.Indexes {
		var idx struct {
			DDL      string  `json:"ddl"`
			QueryIDs []int64 `json:"queryids"`
		}
		if err := json.Unmarshal(m, &idx.DDL); err != nil {
			if err := json.Unmarshal(m, &idx); err != nil {
				return nil, fmt.Errorf("pg_qualstats_index_advisor returned an index %s: %w", m, err)
			}
		}
		if idx.DDL == "" || seen[idx.DDL] {
			continue
		}
		seen[idx.DDL] = true
		c := &candidate{Suggestion: Suggestion{DDL: idx.DDL}, queryIDs: idx.QueryIDs}
		if d, err := parseIndexDDL(idx.DDL); err == nil {
			c.Table, c.IndexMethod, c.columns, c.opclass = d.table, d.method, d.columns, d.opclass
		}
		cands = append(cands, c)
	}
	return cands, nil
}

// existingIndexesSQL lists the valid indexes without a predicate of table $1: their method and key
// columns in order ("" for an expression).
const existingIndexesSQL = `SELECT m.amname::text, ARRAY(
    SELECT coalesce(a.attname::text, '') FROM pg_catalog.unnest((string_to_array(i.indkey::text, ' ')::int2[])[1:i.indnkeyatts]) WITH ORDINALITY k(attnum, n)
    LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum ORDER BY k.n)
FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid JOIN pg_catalog.pg_am m ON m.oid = c.relam
WHERE i.indrelid = pg_catalog.to_regclass($1::text) AND i.indisvalid AND i.indpred IS NULL`

// existingIndex is an index of a table: its method and key columns.
type existingIndex struct {
	method  string
	columns []string
}

// covers says whether idx already provides an index on columns with method: the same method, and
// columns are its leading key columns (in any order: the advisor's columns come from AND-ed equality
// and range predicates, which an index on the same leading columns serves).
func (idx existingIndex) covers(method string, columns []string) bool {
	if idx.method != method || len(columns) == 0 || len(idx.columns) < len(columns) {
		return false
	}
	lead := slices.Clone(idx.columns[:len(columns)])
	want := slices.Clone(columns)
	slices.Sort(lead)
	slices.Sort(want)
	return slices.Equal(lead, want)
}

// dropCovered leaves out the candidates an existing index of their table already provides (read on the
// admin session: catalogs only). One naming an operator class is kept: the existing index's may differ.
func dropCovered(ctx context.Context, admin *pgx.Conn, cands []*candidate) ([]*candidate, error) {
	b := adminBatch()
	var asked []*candidate
	for _, c := range cands {
		if c.Table != "" && len(c.columns) > 0 && !c.opclass {
			b.Queue(existingIndexesSQL, c.Table)
			asked = append(asked, c)
		}
	}
	if len(asked) == 0 {
		return cands, nil
	}
	br, err := sendAdmin(ctx, admin, b)
	if err != nil {
		return nil, fmt.Errorf("read the existing indexes: %w", err)
	}
	defer br.Close()
	covered := map[*candidate]bool{}
	for _, c := range asked {
		rows, _ := br.Query()
		var idx existingIndex
		if _, err := pgx.ForEachRow(rows, []any{&idx.method, &idx.columns}, func() error {
			if idx.covers(c.IndexMethod, c.columns) {
				covered[c] = true
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("read the existing indexes of %s: %w", c.Table, err)
		}
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("read the existing indexes: %w", err)
	}
	return slices.DeleteFunc(cands, func(c *candidate) bool { return covered[c] }), nil
}

// findQueries fills in the statements of the candidates the advisor gave none (pg_qualstats 2.0): those
// whose sampled predicates on the index's columns filtered most rows.
func findQueries(ctx context.Context, tx *session, schema, adminRole string, cands []*candidate) error {
	for _, c := range cands {
		if len(c.queryIDs) != 0 || c.Table == "" {
			continue
		}
		rows, err := tx.query(ctx, fmt.Sprintf(queryIDsSQL, ident(schema)), c.Table, c.columns, adminRole, examplesPerSuggestion)
		if err != nil {
			return fmt.Errorf("read pg_qualstats: %w", err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return fmt.Errorf("read pg_qualstats: %w", err)
		}
		c.queryIDs = ids
	}
	return nil
}

// estimate plans each candidate's example statements without and with the index made hypothetical
// (hypopg, local to the session), and measures the index. The hypothetical indexes are dropped at the end.
func estimate(ctx context.Context, tx *session, qualstats, hypopg string, cands []*candidate) (err error) {
	reset := "SELECT " + ident(hypopg, "hypopg_reset") + "()"
	if err := tx.exec(ctx, reset); err != nil {
		return fmt.Errorf("hypopg_reset: %w", err)
	}
	defer func() {
		// hypopg's indexes are the session's, not the transaction's: drop them even when the transaction
		// failed (then with a statement of its own after the rollback).
		if rerr := tx.exec(ctx, reset); rerr != nil {
			tx.exec(context.WithoutCancel(ctx), "ROLLBACK")
			if rerr := tx.exec(context.WithoutCancel(ctx), reset); rerr != nil && err == nil {
				err = fmt.Errorf("hypopg_reset: %w", rerr)
			}
		}
	}()
	if err := tx.exec(ctx, "SELECT pg_catalog.set_config('plan_cache_mode', 'force_generic_plan', true), "+
		"pg_catalog.set_config('statement_timeout', $1::text, true), pg_catalog.set_config('lock_timeout', $2::text, true)",
		fmt.Sprint(explainTimeoutMS), fmt.Sprint(explainLockTimeoutMS)); err != nil {
		return fmt.Errorf("set planning parameters: %w", err)
	}

	// The example statements (pg_qualstats keeps one, with its constants, per queryid).
	var ids []int64
	for _, c := range cands {
		ids = append(ids, c.queryIDs...)
	}
	examples := map[int64]string{}
	if len(ids) > 0 {
		rows, _ := tx.query(ctx, "SELECT id, "+ident(qualstats, "pg_qualstats_example_query")+"(id) FROM pg_catalog.unnest($1::bigint[]) id", ids)
		var id int64
		var text *string
		if _, err := pgx.ForEachRow(rows, []any{&id, &text}, func() error {
			if text != nil {
				examples[id] = *text
			}
			return nil
		}); err != nil {
			return fmt.Errorf("read example statements: %w", err)
		}
	}
	before := map[int64]float64{}
	for id, text := range examples {
		if cost, ok, err := planCost(ctx, tx, text); err != nil {
			return err
		} else if ok {
			before[id] = cost
		}
	}

	for _, c := range cands {
		var size int64
		fnErr, err := tx.savepoint(ctx, true, func() error {
			return tx.queryRow(ctx, "SELECT "+ident(hypopg, "hypopg_relation_size")+"(h.indexrelid) FROM "+ident(hypopg, "hypopg_create_index")+"($1::text) h", c.DDL).Scan(&size)
		})
		if err != nil {
			return err
		}
		if fnErr != nil { // the advisor's DDL does not apply (the table changed meanwhile): no estimate
			continue
		}
		c.EstimatedSizeBytes = size
		for _, id := range c.queryIDs {
			b, ok := before[id]
			if !ok || b <= 0 {
				continue
			}
			after, ok, err := planCost(ctx, tx, examples[id])
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			pct := math.Round(max(0, min(100, (1-after/b)*100))*100) / 100
			if pct > c.EstimatedCostReductionPct {
				c.EstimatedCostReductionPct, c.QueryID = pct, id
			}
		}
		if err := tx.exec(ctx, reset); err != nil {
			return fmt.Errorf("hypopg_reset: %w", err)
		}
	}
	return nil
}

// planCost prepares statement on the tenant's session and returns the total cost of its generic plan
// (EXPLAIN EXECUTE; the parameters, if any, are NULL: a generic plan does not look at them). ok is false,
// with no error, when the statement does not prepare or plan (no longer valid, several statements, a
// timeout): the savepoint around it is rolled back. Preparing runs nothing, so pg_stat_statements does not
// record the statement; the EXPLAIN is marked.
func planCost(ctx context.Context, tx *session, statement string) (cost float64, ok bool, err error) {
	pg := tx.conn.PgConn()
	perr, err := tx.savepoint(ctx, true, func() error {
		sd, err := pg.Prepare(ctx, exampleStatement, statement, nil)
		if err != nil {
			return err
		}
		explain := "EXPLAIN (FORMAT JSON) EXECUTE " + exampleStatement
		if n := len(sd.ParamOIDs); n > 0 {
			explain += "(" + strings.TrimSuffix(strings.Repeat("NULL, ", n), ", ") + ")"
		}
		var plan string
		if err := tx.conn.QueryRow(ctx, InternalMarker+explain, pgx.QueryExecModeExec).Scan(&plan); err != nil {
			return err
		}
		cost, err = totalCost(plan)
		return err
	})
	if err != nil {
		return 0, false, err
	}
	if err := pg.Deallocate(ctx, exampleStatement); err != nil {
		return 0, false, fmt.Errorf("deallocate the example statement: %w", err)
	}
	if ctx.Err() != nil {
		return 0, false, ctx.Err()
	}
	return cost, perr == nil, nil
}

// totalCost reads the total cost of the top plan node of EXPLAIN (FORMAT JSON).
func totalCost(plan string) (float64, error) {
	var out []struct {
		Plan struct {
			TotalCost *float64 `json:"Total Cost"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(plan), &out); err != nil {
		return 0, fmt.Errorf("read plan: %w", err)
	}
	if len(out) == 0 || out[0].Plan.TotalCost == nil {
		return 0, errors.New("read plan: no total cost")
	}
	return *out[0].Plan.TotalCost, nil
}

// indexDDL is what parseIndexDDL reads from the advisor's DDL.
type indexDDL struct {
	table   string // as written: schema.table, quoted where needed
	method  string
	columns []string // names, unquoted
	opclass bool     // a column names its operator class (text_pattern_ops for LIKE, ...)
}

// parseIndexDDL reads the DDL pg_qualstats_index_advisor writes:
// CREATE INDEX ON <schema>.<table> USING <method> (<column> [<opclass>], ...), names as quote_ident writes them.
func parseIndexDDL(ddl string) (indexDDL, error) {
	var d indexDDL
	toks, err := tokenize(ddl)
	if err != nil {
		return d, err
	}
	bad := fmt.Errorf("unexpected index definition %q", ddl)
	next := func() (token, bool) {
		if len(toks) == 0 {
			return token{}, false
		}
		t := toks[0]
		toks = toks[1:]
		return t, true
	}
	for _, kw := range []string{"create", "index", "on"} {
		if t, ok := next(); !ok || t.quoted || strings.ToLower(t.text) != kw {
			return d, bad
		}
	}
	start, ok := next()
	if !ok || start.punct {
		return d, bad
	}
	end := start
	if len(toks) >= 2 && toks[0].text == "." && toks[0].punct {
		next()
		if end, ok = next(); !ok || end.punct {
			return d, bad
		}
	}
	d.table = ddl[start.pos:end.end]
	if t, ok := next(); !ok || t.quoted || strings.ToLower(t.text) != "using" {
		return d, bad
	}
	m, ok := next()
	if !ok || m.punct {
		return d, bad
	}
	d.method = m.text
	if t, ok := next(); !ok || !t.punct || t.text != "(" {
		return d, bad
	}
	for {
		col, ok := next()
		if !ok || col.punct {
			return d, bad
		}
		d.columns = append(d.columns, col.text)
		t, ok := next()
		if ok && !t.punct { // an operator class
			d.opclass = true
			t, ok = next()
		}
		if !ok || !t.punct {
			return d, bad
		}
		if t.text == ")" {
			break
		}
		if t.text != "," {
			return d, bad
		}
	}
	if len(toks) != 0 {
		return d, bad
	}
	return d, nil
}

// token is an identifier (its name: unquoted, or as written when bare) or punctuation.
type token struct {
	text          string
	quoted, punct bool
	pos, end      int // its bytes in the input
}

// tokenize splits SQL made of identifiers (bare or double-quoted) and the punctuation . , ( ).
func tokenize(s string) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == ' ' || c == '\t' || c == '\n':
			i++
		case c == '.' || c == ',' || c == '(' || c == ')':
			toks = append(toks, token{text: string(c), punct: true, pos: i, end: i + 1})
			i++
		case c == '"':
			var b strings.Builder
			j := i + 1
			for {
				if j >= len(s) {
					return nil, fmt.Errorf("unterminated quoted identifier in %q", s)
				}
				if s[j] == '"' {
					if j+1 < len(s) && s[j+1] == '"' {
						b.WriteByte('"')
						j += 2
						continue
					}
					break
				}
				b.WriteByte(s[j])
				j++
			}
			toks = append(toks, token{text: b.String(), quoted: true, pos: i, end: j + 1})
			i = j + 1
		case c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80:
			j := i
			for j < len(s) && (s[j] == '_' || s[j] == '$' || s[j] >= '0' && s[j] <= '9' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= 0x80) {
				j++
			}
			toks = append(toks, token{text: s[i:j], pos: i, end: j})
			i = j
		default:
			return nil, fmt.Errorf("unexpected %q in %q", c, s)
		}
	}
	return toks, nil
}
