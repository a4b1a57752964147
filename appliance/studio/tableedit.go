package studio

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/store"
)

// The table editor's endpoints beyond the row writes (endpoints.go): the rows read with filters, sort and
// count, the CSV export and import, and the schema changes (ddl.go) with their dry runs.

// ReadRows reads a page of a table's rows the query's filters match, in its sort (Read), with their count.
func (s *Service) ReadRows(ctx context.Context, p *authz.Principal, projectID, schema, table string, q *api.RowsQuery) (*api.RowsReadResponse, error) {
	out := &api.RowsReadResponse{}
	err := s.withTable(ctx, p, projectID, schema, table, func(ctx context.Context, _ *store.Project, conn *pgconn.PgConn, t *TableInfo) error {
		sel, err := ParseSelection(t, q.Filter, q.Sort)
		if err != nil {
			return err
		}
		res, err := Read(ctx, conn, t, sel, q.Limit, q.Offset, DefaultCaps)
		if err != nil {
			return err
		}
		out.Result = api.RowsRead{Columns: res.Columns, ColumnTypes: res.ColumnTypes, Rows: res.Rows, Truncated: res.Truncated}
		out.Result.Total, out.Result.CountIsEstimate, err = Count(ctx, conn, t, sel)
		return err
	})
	return out, err
}

// ExportCSV writes the rows the query selects (every one; its limit and offset are ignored) as CSV with a
// header row to the writer open gives once the statement has started: NULL as an empty unquoted field,
// every other value quoted, in PostgreSQL's text form, so COPY … FROM (FORMAT csv) and ImportCSV read it
// back. The statement timeout bounds it.
func (s *Service) ExportCSV(ctx context.Context, p *authz.Principal, projectID, schema, table string, q *api.RowsQuery, open func(name string) io.Writer) error {
	return s.withTable(ctx, p, projectID, schema, table, func(ctx context.Context, _ *store.Project, conn *pgconn.PgConn, t *TableInfo) error {
		sel, err := ParseSelection(t, q.Filter, q.Sort)
		if err != nil {
			return err
		}
		cond, args, err := sel.where(nil)
		if err != nil {
			return err
		}
		values := make([][]byte, len(args))
		for i, a := range args {
			values[i] = []byte(*a)
		}
		rr := conn.ExecParams(ctx, "SELECT * FROM "+t.ident()+cond+sel.orderBy(t), values, nil, nil, nil)
		var w *bufio.Writer
		fields := rr.FieldDescriptions()
		if fields != nil { // the statement was accepted: the download starts
			w = bufio.NewWriterSize(open(t.Name+".csv"), 64<<10)
			names := make([][]byte, len(fields))
			for i, f := range fields {
				names[i] = []byte(f.Name)
			}
			writeCSVRecord(w, names)
		}
		for rr.NextRow() {
			writeCSVRecord(w, rr.Values())
		}
		if _, err := rr.Close(); err != nil {
			return checkSize(conn, err)
		}
		if w != nil {
			return w.Flush()
		}
		return nil
	})
}

// writeCSVRecord writes one CSV line: nil as an empty unquoted field (NULL to COPY), every other value
// quoted with its quotes doubled (an empty string stays an empty string).
func writeCSVRecord(w *bufio.Writer, values [][]byte) {
	for i, v := range values {
		if i > 0 {
			w.WriteByte(',')
		}
		if v == nil {
			continue
		}
		w.WriteByte('"')
		w.Write(bytes.ReplaceAll(v, []byte(`"`), []byte(`""`)))
		w.WriteByte('"')
	}
	w.WriteString("\r\n")
}

// copyLine finds the line of the input in a COPY error's context ("COPY items, line 3, column price: …").
var copyLine = regexp.MustCompile(`\bline ([0-9]+)\b`)

// ImportCSV adds the rows of a CSV file to a table, all or none, in one COPY: the header row names the
// columns (each one of the table's, once; those it leaves out get their defaults), an empty unquoted field
// is NULL, a quoted one an empty string. A file over api.MaxCSVImportBytes is refused (413) unread; a
// value the column's type refuses is a 400 naming its row (1 for the first row after the header).
func (s *Service) ImportCSV(ctx context.Context, p *authz.Principal, projectID, schema, table string, body io.Reader) (*api.CSVImportResponse, error) {
	data, err := io.ReadAll(io.LimitReader(body, api.MaxCSVImportBytes+1))
	if err != nil {
		return nil, apperr.Invalid("read the CSV file: %v", err)
	}
	if len(data) > api.MaxCSVImportBytes {
		return nil, &apperr.Error{Kind: apperr.KindTooLarge, Msg: fmt.Sprintf("the CSV file is over %d bytes: import it in parts, or with psql's \\copy", api.MaxCSVImportBytes)}
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a byte order mark some spreadsheets write
	header, err := csv.NewReader(bytes.NewReader(data)).Read()
	if err != nil {
		return nil, apperr.Invalid("the CSV file has no header row of column names: %v", err)
	}
	out := &api.CSVImportResponse{}
	err = s.withTable(ctx, p, projectID, schema, table, func(ctx context.Context, prj *store.Project, conn *pgconn.PgConn, t *TableInfo) error {
		if t.Kind != "table" && t.Kind != "partitioned table" {
			return &InputError{Msg: fmt.Sprintf("%s is a %s: rows are imported into tables", t, t.Kind)}
		}
		cols := make([]string, len(header))
		seen := map[string]bool{}
		for i, name := range header {
			c, err := t.column(strings.TrimSpace(name))
			if err != nil {
				return err
			}
			if seen[c.Name] {
				return &InputError{Msg: fmt.Sprintf("the header names column %q twice", c.Name)}
			}
			seen[c.Name] = true
			cols[i] = pgx.Identifier{c.Name}.Sanitize()
		}
		tag, err := conn.CopyFrom(ctx, bytes.NewReader(data), "COPY "+t.ident()+" ("+strings.Join(cols, ", ")+") FROM STDIN WITH (FORMAT csv, HEADER true)")
		if err != nil {
			var pge *pgconn.PgError
			if errors.As(err, &pge) {
				if m := copyLine.FindStringSubmatch(pge.Where); m != nil {
					line, _ := strconv.Atoi(m[1])
					apiErr := s.sqlError(ctx, prj, err).(*apperr.Error)
					apiErr.Msg = fmt.Sprintf("row %d (line %d of the file): %s; nothing was imported", line-1, line, apiErr.Msg)
					apiErr.Fields["row"] = line - 1
					return apiErr
				}
			}
			return checkSize(conn, err)
		}
		out.RowsImported = tag.RowsAffected()
		return s.record(p, nil, "project.rows.import", prj, map[string]any{"schema": schema, "table": table, "rows_affected": out.RowsImported, "bytes": len(data)}, true)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// schemaChange builds a change's DDL on a studio session and, unless dryRun, runs it and audits it.
func (s *Service) schemaChange(ctx context.Context, p *authz.Principal, projectID, action string, dryRun bool, md map[string]any,
	build func(context.Context, *pgconn.PgConn) (string, error)) (*api.DDLResponse, error) {
	out := &api.DDLResponse{}
	err := s.withSession(ctx, p, projectID, func(ctx context.Context, prj *store.Project, conn *pgconn.PgConn) error {
		ddl, err := build(ctx, conn)
		if err == nil && !dryRun {
			err = RunDDL(ctx, conn, ddl)
		}
		if err != nil {
			if apperr.KindOf(err) == apperr.KindInternal {
				return s.sqlError(ctx, prj, err)
			}
			return err
		}
		out.DDL, out.Executed = ddl, !dryRun
		if dryRun {
			return nil
		}
		md["ddl"] = capText(ddl, HistoryQueryChars)
		return s.record(p, nil, action, prj, md, true)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// onTable is build for a change of an existing table: it finds the table first (404 when the role cannot).
func onTable(schema, table string, build func(context.Context, *pgconn.PgConn, *TableInfo) (string, error)) func(context.Context, *pgconn.PgConn) (string, error) {
	return func(ctx context.Context, conn *pgconn.PgConn) (string, error) {
		t, err := Describe(ctx, conn, schema, table)
		if errors.Is(err, ErrNoTable) {
			return "", apperr.NotFound("table %q.%q not found", schema, table)
		}
		if err != nil {
			return "", err
		}
		if t.Kind != "table" && t.Kind != "partitioned table" {
			return "", &InputError{Msg: fmt.Sprintf("%s is a %s: its columns change with SQL", t, t.Kind)}
		}
		return build(ctx, conn, t)
	}
}

// CreateTable creates a table (dryRun: only returns the DDL it would run).
func (s *Service) CreateTable(ctx context.Context, p *authz.Principal, projectID string, dryRun bool, req *api.CreateTableRequest) (*api.DDLResponse, error) {
	md := map[string]any{"schema": req.Schema, "table": req.Name}
	return s.schemaChange(ctx, p, projectID, "project.table.create", dryRun, md, func(ctx context.Context, conn *pgconn.PgConn) (string, error) {
		return CreateTableDDL(ctx, conn, req)
	})
}

// AddColumn adds a column to a table.
func (s *Service) AddColumn(ctx context.Context, p *authz.Principal, projectID, schema, table string, dryRun bool, req *api.ColumnDef) (*api.DDLResponse, error) {
	md := map[string]any{"schema": schema, "table": table, "column": req.Name}
	return s.schemaChange(ctx, p, projectID, "project.column.add", dryRun, md, onTable(schema, table, func(ctx context.Context, conn *pgconn.PgConn, t *TableInfo) (string, error) {
		return AddColumnDDL(ctx, conn, t, req)
	}))
}

// AlterColumn renames a column, changes its type, nullability or default.
func (s *Service) AlterColumn(ctx context.Context, p *authz.Principal, projectID, schema, table, column string, dryRun bool, req *api.AlterColumnRequest) (*api.DDLResponse, error) {
	md := map[string]any{"schema": schema, "table": table, "column": column}
	return s.schemaChange(ctx, p, projectID, "project.column.alter", dryRun, md, onTable(schema, table, func(ctx context.Context, conn *pgconn.PgConn, t *TableInfo) (string, error) {
		return AlterColumnDDL(ctx, conn, t, column, req)
	}))
}

// DropColumn drops a column (PostgreSQL refuses when something depends on it: the 400 says what).
func (s *Service) DropColumn(ctx context.Context, p *authz.Principal, projectID, schema, table, column string, dryRun bool) (*api.DDLResponse, error) {
	md := map[string]any{"schema": schema, "table": table, "column": column}
	return s.schemaChange(ctx, p, projectID, "project.column.drop", dryRun, md, onTable(schema, table, func(_ context.Context, _ *pgconn.PgConn, t *TableInfo) (string, error) {
		return DropColumnDDL(t, column)
	}))
}
