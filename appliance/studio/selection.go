package studio

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/pgstat"
)

// A Selection is the table editor's filters and sort, checked against the table's real columns: the
// columns go in the statement as quoted identifiers, the operators from a fixed table, and the values
// only as bound parameters.
type Selection struct {
	filters []filter
	sorts   []sortKey
}

type filter struct {
	col   *Column
	op    string
	value string
}

type sortKey struct {
	col  *Column
	desc bool
}

// filterOps are the operators' SQL; "" for those that take no value.
var filterOps = map[string]string{"eq": "=", "neq": "<>", "lt": "<", "lte": "<=", "gt": ">", "gte": ">=",
	"like": "LIKE", "ilike": "ILIKE", "is_null": "", "not_null": "", "in": ""}

// ParseSelection reads filter items (column:op:value; a column name cannot hold ':') and sort items
// (column or -column) against t's columns.
func ParseSelection(t *TableInfo, filters, sorts []string) (*Selection, error) {
	if len(filters) > api.MaxRowFilters {
		return nil, &InputError{Msg: fmt.Sprintf("at most %d filters", api.MaxRowFilters)}
	}
	if len(sorts) > api.MaxRowSorts {
		return nil, &InputError{Msg: fmt.Sprintf("at most %d sort columns", api.MaxRowSorts)}
	}
	sel := &Selection{}
	for _, f := range filters {
		name, rest, ok := strings.Cut(f, ":")
		if !ok {
			return nil, &InputError{Msg: fmt.Sprintf("filter %q is not column:op:value", f)}
		}
		op, value, _ := strings.Cut(rest, ":")
		if _, known := filterOps[op]; !known {
			return nil, &InputError{Msg: fmt.Sprintf("filter %q: unknown operator %q (one of %s)", f, op, strings.Join(api.RowFilterOps, ", "))}
		}
		c, err := t.column(name)
		if err != nil {
			return nil, err
		}
		if (op == "is_null" || op == "not_null") && value != "" {
			return nil, &InputError{Msg: fmt.Sprintf("filter %q: %s takes no value", f, op)}
		}
		if strings.ContainsRune(value, 0) {
			return nil, &InputError{Msg: fmt.Sprintf("filter on %q: a value cannot hold a NUL character", name)}
		}
		sel.filters = append(sel.filters, filter{col: c, op: op, value: value})
	}
	for _, s := range sorts {
		name, desc := strings.CutPrefix(s, "-")
		c, err := t.column(name)
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(sel.sorts, func(k sortKey) bool { return k.col == c }) {
			return nil, &InputError{Msg: fmt.Sprintf("column %q is sorted on twice", name)}
		}
		sel.sorts = append(sel.sorts, sortKey{col: c, desc: desc})
	}
	return sel, nil
}

// where is the filters' condition (" WHERE …", or "" for none), its values appended to args as
// parameters.
func (s *Selection) where(args []*string) (string, []*string, error) {
	var conds []string
	for _, f := range s.filters {
		id := pgx.Identifier{f.col.Name}.Sanitize()
		switch f.op {
		case "is_null":
			conds = append(conds, id+" IS NULL")
			continue
		case "not_null":
			conds = append(conds, id+" IS NOT NULL")
			continue
		}
		v := f.value
		if f.op == "in" {
			items := []any{}
			for _, s := range strings.Split(f.value, ",") {
				items = append(items, s)
			}
			lit, err := ArrayLiteral(items)
			if err != nil {
				return "", nil, err
			}
			v = lit
		}
		args = append(args, &v)
		p := "$" + strconv.Itoa(len(args))
		switch f.op {
		case "in":
			conds = append(conds, id+" = ANY ("+p+")")
		case "like", "ilike": // on the column's text, whatever its type
			conds = append(conds, id+"::text "+filterOps[f.op]+" "+p)
		default:
			conds = append(conds, id+" "+filterOps[f.op]+" "+p)
		}
	}
	if len(conds) == 0 {
		return "", args, nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args, nil
}

// orderBy is the sort's ORDER BY, then the table's stable order (Read) for rows the sort leaves equal.
func (s *Selection) orderBy(t *TableInfo) string {
	var order []string
	for _, k := range s.sorts {
		o := pgx.Identifier{k.col.Name}.Sanitize()
		if k.desc {
			o += " DESC"
		}
		order = append(order, o)
	}
	pk := slices.Clone(t.Columns)
	slices.SortFunc(pk, func(a, b Column) int { return a.pkPos - b.pkPos })
	var stable []string
	for _, c := range pk {
		if c.pkPos > 0 && !slices.ContainsFunc(s.sorts, func(k sortKey) bool { return k.col.Name == c.Name }) {
			stable = append(stable, pgx.Identifier{c.Name}.Sanitize())
		}
	}
	if !slices.ContainsFunc(t.Columns, func(c Column) bool { return c.pkPos > 0 }) {
		switch t.Kind {
		case "table", "materialized view":
			stable = []string{"ctid"}
		case "partitioned table":
			stable = []string{"tableoid", "ctid"}
		}
	}
	order = append(order, stable...)
	if len(order) == 0 {
		return ""
	}
	return " ORDER BY " + strings.Join(order, ", ")
}

// Count counts the rows the selection's filters match: exactly up to api.CountExactMax, else (estimate
// true) the planner's estimate of the filtered rows, and at least api.CountExactMax+1.
func Count(ctx context.Context, conn *pgconn.PgConn, t *TableInfo, sel *Selection) (n int64, estimate bool, err error) {
	cond, args, err := sel.where(nil)
	if err != nil {
		return 0, false, err
	}
	limit := strconv.Itoa(api.CountExactMax + 1)
	args = append(args, &limit)
	q := pgstat.InternalMarker + "SELECT count(*) FROM (SELECT FROM " + t.ident() + cond + " LIMIT $" + strconv.Itoa(len(args)) + ") AS s"
	res, err := Params(ctx, conn, q, args, DefaultCaps)
	if err != nil {
		return 0, false, err
	}
	n, err = strconv.ParseInt(strings.Trim(string(res.Rows[0]["count"]), `"`), 10, 64)
	if err != nil || n <= api.CountExactMax {
		return n, false, err
	}
	// More than the bound: the planner's estimate of the same selection (EXPLAIN runs nothing).
	res, err = Params(ctx, conn, pgstat.InternalMarker+"EXPLAIN (FORMAT JSON) SELECT FROM "+t.ident()+cond, args[:len(args)-1], DefaultCaps)
	if err != nil {
		return 0, false, err
	}
	var plan []struct {
		Plan struct {
			Rows float64 `json:"Plan Rows"`
		} `json:"Plan"`
	}
	for _, raw := range res.Rows[0] {
		var text string
		if json.Unmarshal(raw, &text) == nil {
			raw = json.RawMessage(text) // json is sent as a value; a string when the type is text
		}
		if err := json.Unmarshal(raw, &plan); err != nil || len(plan) == 0 {
			return 0, false, fmt.Errorf("read the planner's estimate: %w", err)
		}
	}
	return max(int64(plan[0].Plan.Rows), api.CountExactMax+1), true, nil
}
