// Package studio runs the SQL console's text and the table editor's statements on a project's server, as the
// project's own role, over small per-project pools, and turns what comes back into JSON (values.go). It is
// also the studio area (Service, service.go): the endpoints of the routes tagged "studio", the console's
// history and the studio's audit log (history.go), the AI usage counter (endpoints.go).
package studio

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/pgstat"
)

// Caps bound what one answer holds; the statement still runs to its end (its effects are not cut short),
// and rows past a cap are read and dropped. Values are turned into JSON one at a time and a row is dropped
// as soon as it would take the answer past Bytes, so what is kept never exceeds the cap.
type Caps struct {
	Rows  int // rows kept
	Bytes int // the JSON kept (names and values, with a few bytes of punctuation each)
}

// DefaultCaps are the console's: 10,000 rows or 8 MiB of JSON, whichever comes first.
var DefaultCaps = Caps{Rows: 10_000, Bytes: 8 << 20}

// MaxRows is the most rows a console run may ask to keep (api.SQLRequest.MaxRows), still within
// DefaultCaps.Bytes.
const MaxRows = 100_000

// resultBuilder collects the results of a text's statements within the caps, which bound the answer as a
// whole (the rows and bytes of every statement together).
type resultBuilder struct {
	caps  Caps
	res   SQLResult
	all   []*api.SQLStatementResult
	oids  []uint32
	types [][]uint32 // every result's column type OIDs, as all
	bytes int        // kept so far, over every statement
	kept  int        // rows kept so far, over every statement
}

func (b *resultBuilder) start(fields []pgconn.FieldDescription) {
	b.res = SQLResult{Columns: make([]string, len(fields)), ColumnTypes: make([]string, len(fields)), Rows: []map[string]json.RawMessage{}}
	b.oids = make([]uint32, len(fields))
	seen := map[string]bool{}
	for i, f := range fields {
		name := f.Name
		for n := 2; seen[name]; n++ {
			name = f.Name + "_" + strconv.Itoa(n)
		}
		seen[name] = true
		b.res.Columns[i], b.oids[i], b.res.ColumnTypes[i] = name, f.DataTypeOID, TypeName(f.DataTypeOID)
		b.bytes += len(name)
	}
}

// row keeps one row unless a cap is reached (then the result is marked truncated).
func (b *resultBuilder) row(values [][]byte) {
	b.res.RowCount++
	if b.res.Truncated {
		return
	}
	// The server's text is about as long as its JSON (shorter when JSON escapes it): a row whose text is
	// already past the cap is dropped without turning it into JSON.
	size := 2
	for i, v := range values {
		size += len(b.res.Columns[i]) + len(v) + 6
	}
	if b.kept >= b.caps.Rows || b.bytes+size > b.caps.Bytes {
		b.res.Truncated = true
		return
	}
	size = 2
	row := make(map[string]json.RawMessage, len(values))
	for i, v := range values {
		j := value(b.oids[i], v)
		size += len(b.res.Columns[i]) + len(j) + 6
		if b.bytes+size > b.caps.Bytes {
			b.res.Truncated = true
			return
		}
		row[b.res.Columns[i]] = j
	}
	b.bytes += size
	b.kept++
	b.res.Rows = append(b.res.Rows, row)
}

func (b *resultBuilder) end(tag pgconn.CommandTag) {
	b.res.Command = tag.String()
	if len(b.res.Columns) == 0 {
		b.res.RowCount = tag.RowsAffected()
	}
	r := b.res
	b.all = append(b.all, &api.SQLStatementResult{Columns: r.Columns, ColumnTypes: r.ColumnTypes, Rows: r.Rows, RowCount: r.RowCount,
		Command: r.Command, Truncated: r.Truncated})
	b.types = append(b.types, b.oids)
}

// Run sends text as one simple query: every statement in it runs, in order, in one implicit transaction
// (unless the text holds its own BEGIN/COMMIT), so a failing statement undoes the ones before it. The
// result is the last statement's, and every statement's result is in results, in order (the caps bound
// them together). An error is the server's (*pgconn.PgError) or the connection's; cancelling ctx cancels
// the statement on the server.
func Run(ctx context.Context, conn *pgconn.PgConn, text string, caps Caps) (*SQLResult, []*api.SQLStatementResult, error) {
	started := time.Now()
	// Whether the session may skip DISCARD ALL after this use (clean.go).
	inert := Inert(conn, text)
	var reported []string
	if inert {
		reported = reportedSnapshot(conn)
	}
	b := &resultBuilder{caps: caps}
	b.start(nil)
	statements := 0
	mrr := conn.Exec(ctx, text)
	for mrr.NextResult() {
		rr := mrr.ResultReader()
		statements++
		b.start(rr.FieldDescriptions())
		for rr.NextRow() {
			b.row(rr.Values())
		}
		tag, err := rr.Close()
		if err != nil {
			mrr.Close()
			return nil, nil, checkSize(conn, err)
		}
		b.end(tag)
	}
	if err := mrr.Close(); err != nil {
		return nil, nil, checkSize(conn, err)
	}
	b.res.Statements = statements
	b.res.DurationMS = time.Since(started).Milliseconds()
	if err := b.nameTypes(ctx, conn); err != nil {
		return nil, nil, err
	}
	if inert {
		markKept(conn, reported)
	}
	return &b.res, b.all, nil
}

// Inert reports whether text, run on conn, provably changes nothing: neither the session (clean.go) nor
// any data. The text is read with standard strings, as the server reads it only when
// standard_conforming_strings is on.
func Inert(conn *pgconn.PgConn, text string) bool {
	return conn.ParameterStatus("standard_conforming_strings") == "on" && inertText(text)
}

// Params runs one statement with text parameters ($1 … as strings, nil for NULL, their types inferred by
// the server) and returns its result within caps.
func Params(ctx context.Context, conn *pgconn.PgConn, sql string, args []*string, caps Caps) (*SQLResult, error) {
	started := time.Now()
	values := make([][]byte, len(args))
	for i, a := range args {
		if a != nil {
			values[i] = []byte(*a)
		}
	}
	rr := conn.ExecParams(ctx, sql, values, nil, nil, nil)
	b := &resultBuilder{caps: caps}
	b.start(rr.FieldDescriptions())
	for rr.NextRow() {
		b.row(rr.Values())
	}
	tag, err := rr.Close()
	if err != nil {
		return nil, checkSize(conn, err)
	}
	b.end(tag)
	b.res.Statements = 1
	b.res.DurationMS = time.Since(started).Milliseconds()
	return &b.res, b.nameTypes(ctx, conn)
}

// nameTypes asks the server for the names of the column types TypeName does not know (one round trip, only
// when there are such columns).
func (b *resultBuilder) nameTypes(ctx context.Context, conn *pgconn.PgConn) error {
	var unknown []string
	for i, r := range b.all {
		for j, t := range r.ColumnTypes {
			if t == "" {
				unknown = append(unknown, strconv.FormatUint(uint64(b.types[i][j]), 10))
			}
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	list := "{" + strings.Join(unknown, ",") + "}"
	rr := conn.ExecParams(ctx, pgstat.InternalMarker+"SELECT t.oid::text, format_type(t.oid, NULL) FROM unnest($1::oid[]) AS t(oid)", [][]byte{[]byte(list)}, nil, nil, nil)
	names := map[string]string{}
	for rr.NextRow() {
		v := rr.Values()
		names[string(v[0])] = string(v[1])
	}
	if _, err := rr.Close(); err != nil {
		return err
	}
	// The last result's types are res's too (one slice).
	for i, r := range b.all {
		for j, t := range r.ColumnTypes {
			if t == "" {
				r.ColumnTypes[j] = names[strconv.FormatUint(uint64(b.types[i][j]), 10)]
			}
		}
	}
	return nil
}
