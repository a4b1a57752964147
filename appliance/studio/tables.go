package studio

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/pgstat"
)

// systemSchemas are left out of the table list and refused by the table routes.
const systemSchemas = `n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%' AND n.nspname NOT LIKE 'pg\_temp\_%'`

// relkinds name the kinds of relation the table routes serve.
var relkinds = map[string]string{"r": "table", "v": "view", "m": "materialized view", "f": "foreign table", "p": "partitioned table"}

// Column is one column of a table.
type Column struct {
	Name         string  `json:"name"`
	DataType     string  `json:"data_type"`
	Default      *string `json:"default" api:"nullable" doc:"the default expression; null when the column has none"`
	IsNullable   bool    `json:"is_nullable"`
	IsPrimaryKey bool    `json:"is_primary_key"`
	Position     int     `json:"position"`
	// ForeignKey is what a one-column foreign key on the column references (nil: none).
	ForeignKey *api.ColumnRef `json:"foreign_key" api:"nullable" doc:"the column a one-column foreign key on this column references; null when none"`

	array bool // an array type: a JSON array given for it is bound as an array literal
	pkPos int  // its place in the primary key (1-based), 0 when not in it
}

// TableInfo is a table found by name: its kind and columns.
type TableInfo struct {
	Schema, Name, Kind string
	Columns            []Column
}

// ErrNoTable is returned for a schema and table the project's role cannot see (or a system table).
var ErrNoTable = errors.New("no such table")

// ListTables lists the tables, views, materialized views, foreign tables and partitioned tables outside
// the system schemas, by schema and name; not those of an extension (pg_stat_statements' views, PostGIS's
// spatial_ref_sys): they are the extension's, not the project's data.
func ListTables(ctx context.Context, conn *pgconn.PgConn) ([]TableEntry, error) {
	rr := conn.ExecParams(ctx, pgstat.InternalMarker+`SELECT n.nspname, c.relname, c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'v', 'm', 'f', 'p') AND NOT c.relispartition AND `+systemSchemas+`
  AND NOT EXISTS (SELECT 1 FROM pg_depend e WHERE e.classid = 'pg_class'::regclass AND e.objid = c.oid AND e.deptype = 'e')
ORDER BY 1, 2`, nil, nil, nil, nil)
	out := []TableEntry{}
	for rr.NextRow() {
		v := rr.Values()
		out = append(out, TableEntry{Schema: string(v[0]), Table: string(v[1]), Type: relkinds[string(v[2])]})
	}
	_, err := rr.Close()
	return out, err
}

// Describe finds schema.table and its columns (by position).
func Describe(ctx context.Context, conn *pgconn.PgConn, schema, table string) (*TableInfo, error) {
	rr := conn.ExecParams(ctx, pgstat.InternalMarker+`SELECT c.relkind::text, a.attname, format_type(a.atttypid, a.atttypmod), pg_get_expr(d.adbin, d.adrelid),
  NOT a.attnotnull, coalesce((SELECT k.n FROM unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) WHERE k.attnum = a.attnum), 0), a.attnum, t.typcategory = 'A',
  fk.nspname, fk.relname, fk.attname
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
LEFT JOIN LATERAL (SELECT rn.nspname, rc.relname, ra.attname FROM pg_constraint f
  JOIN pg_class rc ON rc.oid = f.confrelid JOIN pg_namespace rn ON rn.oid = rc.relnamespace
  JOIN pg_attribute ra ON ra.attrelid = f.confrelid AND ra.attnum = f.confkey[1]
  WHERE f.conrelid = c.oid AND f.contype = 'f' AND f.conkey = ARRAY[a.attnum] ORDER BY f.conname LIMIT 1) fk ON true
WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'v', 'm', 'f', 'p') AND `+systemSchemas+`
ORDER BY a.attnum`, [][]byte{[]byte(schema), []byte(table)}, nil, nil, nil)
	info := &TableInfo{Schema: schema, Name: table, Columns: []Column{}}
	found := false
	for rr.NextRow() {
		v := rr.Values()
		found, info.Kind = true, relkinds[string(v[0])]
		if v[1] == nil { // no columns
			continue
		}
		col := Column{Name: string(v[1]), DataType: string(v[2]), IsNullable: string(v[4]) == "t", array: string(v[7]) == "t"}
		if v[3] != nil {
			d := string(v[3])
			col.Default = &d
		}
		col.pkPos, _ = strconv.Atoi(string(v[5]))
		col.IsPrimaryKey = col.pkPos > 0
		col.Position, _ = strconv.Atoi(string(v[6]))
		if v[8] != nil {
			col.ForeignKey = &api.ColumnRef{Schema: string(v[8]), Table: string(v[9]), Column: string(v[10])}
		}
		info.Columns = append(info.Columns, col)
	}
	if _, err := rr.Close(); err != nil {
		return nil, err
	}
	if !found {
		return nil, ErrNoTable
	}
	return info, nil
}

// InputError is a write the table routes refuse before running anything: a column the table does not
// have, rows that name no column.
type InputError struct{ Msg string }

func (e *InputError) Error() string { return e.Msg }

func (t *TableInfo) ident() string { return pgx.Identifier{t.Schema, t.Name}.Sanitize() }

func (t *TableInfo) String() string { return t.Schema + "." + t.Name }

func (t *TableInfo) column(name string) (*Column, error) {
	for i := range t.Columns {
		if t.Columns[i].Name == name {
			return &t.Columns[i], nil
		}
	}
	return nil, &InputError{Msg: fmt.Sprintf("column %q does not exist in %s", name, t)}
}

// Read selects up to limit rows after offset that the selection's filters match, in its sort and then a
// stable order: by the primary key where there is one, else (tables and materialized views) by the rows'
// physical position, which holds while nobody writes. Views and foreign tables come in the order the
// server returns them.
func Read(ctx context.Context, conn *pgconn.PgConn, t *TableInfo, sel *Selection, limit, offset int, caps Caps) (*SQLResult, error) {
	cond, args, err := sel.where(nil)
	if err != nil {
		return nil, err
	}
	l, o := strconv.Itoa(limit), strconv.Itoa(offset)
	args = append(args, &l, &o)
	q := "SELECT * FROM " + t.ident() + cond + sel.orderBy(t) + " LIMIT $" + strconv.Itoa(len(args)-1) + " OFFSET $" + strconv.Itoa(len(args))
	return Params(ctx, conn, q, args, caps)
}

// param is a JSON value bound as a parameter of column c: nil stays NULL, a JSON array given for an array
// column becomes an array literal, anything else its Text.
func param(c *Column, v any) (*string, error) {
	if v == nil {
		return nil, nil
	}
	if a, ok := v.([]any); ok && c.array {
		s, err := ArrayLiteral(a)
		return &s, err
	}
	s, err := Text(v)
	return &s, err
}

// Insert inserts rows (objects keyed by column name; a column a row leaves out gets its default) in one
// statement, returning the inserted rows.
func Insert(ctx context.Context, conn *pgconn.PgConn, t *TableInfo, rows []map[string]any, caps Caps) (*SQLResult, error) {
	var cols []*Column
	for _, row := range rows {
		for name := range row {
			c, err := t.column(name)
			if err != nil {
				return nil, err
			}
			if !slices.Contains(cols, c) {
				cols = append(cols, c)
			}
		}
	}
	slices.SortFunc(cols, func(a, b *Column) int { return a.Position - b.Position })
	if len(cols) == 0 {
		if len(rows) != 1 {
			return nil, &InputError{Msg: "rows name no column: give at least one column, or insert one row of defaults ({})"}
		}
		return Params(ctx, conn, "INSERT INTO "+t.ident()+" DEFAULT VALUES RETURNING *", nil, caps)
	}
	var b strings.Builder
	b.WriteString("INSERT INTO " + t.ident() + " (")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pgx.Identifier{c.Name}.Sanitize())
	}
	b.WriteString(") VALUES ")
	var args []*string
	for i, row := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for j, c := range cols {
			if j > 0 {
				b.WriteString(", ")
			}
			v, ok := row[c.Name]
			if !ok {
				b.WriteString("DEFAULT")
				continue
			}
			p, err := param(c, v)
			if err != nil {
				return nil, err
			}
			args = append(args, p)
			b.WriteString("$" + strconv.Itoa(len(args)))
		}
		b.WriteByte(')')
	}
	b.WriteString(" RETURNING *")
	return Params(ctx, conn, b.String(), args, caps)
}

// where is the condition of match (every column equal to its value; null means IS NULL), its parameters
// numbered after args. An empty match is no condition.
func where(t *TableInfo, match map[string]any, args []*string) (string, []*string, error) {
	names := slices.Sorted(maps.Keys(match))
	var conds []string
	for _, name := range names {
		c, err := t.column(name)
		if err != nil {
			return "", nil, err
		}
		id := pgx.Identifier{c.Name}.Sanitize()
		p, err := param(c, match[name])
		if err != nil {
			return "", nil, err
		}
		if p == nil {
			conds = append(conds, id+" IS NULL")
			continue
		}
		args = append(args, p)
		conds = append(conds, id+" = $"+strconv.Itoa(len(args)))
	}
	if len(conds) == 0 {
		return "", args, nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args, nil
}

// Update sets the columns of set on the rows matching match, returning the updated rows.
func Update(ctx context.Context, conn *pgconn.PgConn, t *TableInfo, match, set map[string]any, caps Caps) (*SQLResult, error) {
	names := slices.Sorted(maps.Keys(set))
	var sets []string
	var args []*string
	for _, name := range names {
		c, err := t.column(name)
		if err != nil {
			return nil, err
		}
		p, err := param(c, set[name])
		if err != nil {
			return nil, err
		}
		args = append(args, p)
		sets = append(sets, pgx.Identifier{c.Name}.Sanitize()+" = $"+strconv.Itoa(len(args)))
	}
	cond, args, err := where(t, match, args)
	if err != nil {
		return nil, err
	}
	return Params(ctx, conn, "UPDATE "+t.ident()+" SET "+strings.Join(sets, ", ")+cond+" RETURNING *", args, caps)
}

// Delete deletes the rows matching match, returning them.
func Delete(ctx context.Context, conn *pgconn.PgConn, t *TableInfo, match map[string]any, caps Caps) (*SQLResult, error) {
	cond, args, err := where(t, match, nil)
	if err != nil {
		return nil, err
	}
	return Params(ctx, conn, "DELETE FROM "+t.ident()+cond+" RETURNING *", args, caps)
}

// DecodeObject decodes a JSON object keeping numbers exact (json.Number).
func DecodeObject(raw json.RawMessage) (map[string]any, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return map[string]any{}, nil
	}
	d := json.NewDecoder(strings.NewReader(string(raw)))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}
