package pgstat

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// StatementTotals are the cumulative totals of one statement (its pg_stat_statements rows summed), for
// the top-queries history: the caller keeps readings and computes the calls and time of a window from the
// differences.
type StatementTotals struct {
	Hash        string  `json:"query_hash"` // QueryHash of the database and Query
	Query       string  `json:"query"`      // pg_stat_statements' text (constants replaced by $1, $2, ...)
	Calls       int64   `json:"calls"`
	Rows        int64   `json:"rows"`
	TotalExecMS float64 `json:"total_exec_ms"`
}

// InternalMarker starts the statements the appliance runs in a tenant's session for its own purposes (the
// studio's session reset and catalog lookups): the top queries and the slowest statements leave them out.
const InternalMarker = "/* appliance internal */ "

// notInternal is the condition that leaves out statements starting with InternalMarker.
var notInternal = fmt.Sprintf("left(s.query, %d) <> '%s'", len(InternalMarker), InternalMarker)

var statementsSQL = `SELECT s.query, s.calls, s.rows, s.total_exec_time
FROM %s.pg_stat_statements s
WHERE s.dbid = ` + currentDatabaseOID + ` AND s.userid <> ` + adminRoleOID + ` AND s.calls > 0 AND s.query IS NOT NULL AND ` + notInternal

// Statements is one reading of a database's pg_stat_statements.
type Statements struct {
	// Available is false when pg_stat_statements is not installed in the database (or its library is not
	// preloaded); Totals is then empty.
	Available bool
	// Reset is pg_stat_statements_info.stats_reset: it moves when the statistics are reset, and when the
	// server comes back from a crash (the statistics are saved only by a clean shutdown), so a caller
	// comparing readings knows when counts started again from zero.
	Reset time.Time
	// Totals are sorted by total execution time, longest first; never nil.
	Totals []StatementTotals
}

// ReadStatements reads the pg_stat_statements totals of the database admin is connected to, which must be
// database: the statements of all users but adminRole, that were executed at least once. Statements of
// the same text (several users, or the same text naming a table dropped and created again) are summed
// under one hash.
func ReadStatements(ctx context.Context, admin *pgx.Conn, database, adminRole string) (*Statements, error) {
	var current string
	var schema *string
	if err := queryAdminRow(ctx, admin, "SELECT current_database()::text, ("+pgssSchemaSQL+")", nil, &current, &schema); err != nil {
		return nil, fmt.Errorf("read statements of %s: %w", database, err)
	}
	if current != database {
		return nil, fmt.Errorf("read statements of %s: the session is connected to %s", database, current)
	}
	out := &Statements{Totals: []StatementTotals{}}
	if schema == nil {
		return out, nil
	}
	out.Available = true

	b := adminBatch()
	b.Queue(fmt.Sprintf("SELECT stats_reset FROM %s.pg_stat_statements_info", ident(*schema)))
	b.Queue(fmt.Sprintf(statementsSQL, ident(*schema)), adminRole)
	br, err := sendAdmin(ctx, admin, b)
	if err != nil {
		return nil, fmt.Errorf("read statements of %s: %w", database, err)
	}
	defer br.Close()
	if err := br.QueryRow().Scan(&out.Reset); err != nil {
		return nil, fmt.Errorf("read statements of %s: stats_reset: %w", database, err)
	}
	out.Reset = out.Reset.UTC()
	rows, _ := br.Query()
	byHash := map[string]*StatementTotals{}
	var query string
	var calls, nrows int64
	var total float64
	_, err = pgx.ForEachRow(rows, []any{&query, &calls, &nrows, &total}, func() error {
		h := QueryHash(database, query)
		st := byHash[h]
		if st == nil {
			st = &StatementTotals{Hash: h, Query: query}
			byHash[h] = st
		}
		st.Calls += calls
		st.Rows += nrows
		st.TotalExecMS += total
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read statements of %s: %w", database, err)
	}
	for _, st := range byHash {
		out.Totals = append(out.Totals, *st)
	}
	slices.SortFunc(out.Totals, func(a, b StatementTotals) int {
		return cmp.Or(cmp.Compare(b.TotalExecMS, a.TotalExecMS), strings.Compare(a.Hash, b.Hash))
	})
	return out, nil
}

// QueryHash is a statement's stable identity: 32 lowercase hex characters, the first 16 bytes of the
// SHA-256 of the database name, a NUL and the statement's normalised text (pg_stat_statements' text,
// runs of white space made one space, trimmed). Unlike pg_stat_statements' queryid, which is computed from
// the OIDs of the objects it names, it depends on nothing but the text: the same statement has the same
// hash after a restart, a statistics reset, or a table dropped and created again.
func QueryHash(database, query string) string {
	h := sha256.New()
	h.Write([]byte(database))
	h.Write([]byte{0})
	h.Write([]byte(strings.Join(strings.Fields(query), " ")))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// StatementText is pg_stat_statements' text of the statement with queryid id in the database admin is
// connected to (the statements of adminRole and the appliance's internal ones left out, as in
// ReadStatements); found is false when pg_stat_statements is not there or has no such statement.
func StatementText(ctx context.Context, admin *pgx.Conn, adminRole string, id int64) (query string, found bool, err error) {
	var schema *string
	if err := queryAdminRow(ctx, admin, "SELECT ("+pgssSchemaSQL+")", nil, &schema); err != nil {
		return "", false, fmt.Errorf("read statement %d: %w", id, err)
	}
	if schema == nil {
		return "", false, nil
	}
	q := fmt.Sprintf(statementsSQL, ident(*schema)) + " AND s.queryid = $2 ORDER BY s.calls DESC LIMIT 1"
	var calls, rows int64
	var total float64
	err = queryAdminRow(ctx, admin, q, []any{adminRole, id}, &query, &calls, &rows, &total)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read statement %d: %w", id, err)
	}
	return query, true, nil
}
