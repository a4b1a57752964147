package cmd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/api"
)

var (
	_ = registerClientCommand(newSQLCmd)
	_ = registerClientCommand(newTablesCmd)
)

func newSQLCmd(o *clientOpts) *cobra.Command {
	var query string
	return newAPICmd(o, apiCmd[api.SQLResultResponse]{
		Use:   "sql PROJECT_ID [QUERY]",
		Short: "Run SQL on a project as its own role (the text from QUERY, or from standard input)",
		Long: "Run SQL on a project's database as the project's role, through the API's studio. Every statement of the\n" +
			"text runs in one transaction; the last one's result is printed as a table (at most 10,000 rows).\n" +
			"Without QUERY (or with -) the text is read from standard input.",
		Example: `  appliance sql prj_... "select * from orders limit 5"
  appliance sql prj_... < migrate.sql
  appliance sql prj_... --json "select now()"`,
		Args: cobra.RangeArgs(1, 2), JSON: true,
		Validate: func(x *call) error {
			if len(x.args) == 2 && x.args[1] != "-" {
				query = x.args[1]
			} else {
				b, err := io.ReadAll(io.LimitReader(x.c.InOrStdin(), api.MaxQueryBytes+1))
				if err != nil {
					return fmt.Errorf("read the query from standard input: %w", err)
				}
				query = string(b)
			}
			if strings.TrimSpace(query) == "" {
				return errors.New("no query: give it as an argument or on standard input")
			}
			return nil
		},
		Method: http.MethodPost,
		Path:   func(x *call) string { return projectPath(x.args[0]) + "/sql" },
		Body:   func(*call) any { return &api.SQLRequest{Query: query} },
		Failed: func(_ *call, err error) error { return sqlErrorWithCaret(err, query) },
		Need:   func(r *api.SQLResultResponse) string { return missing(r.Result == nil, "result") },
		Print: func(x *call, res *api.SQLResultResponse) error {
			r := res.Result
			return printResult(x.out(), r.Columns, r.Rows, r.RowCount, r.Command, r.Truncated)
		},
	})
}

// sqlErrorWithCaret adds, to a SQL error that names a position, the line of the text it points at with a
// caret under it (as psql does).
func sqlErrorWithCaret(err error, query string) error {
	var ae *APIError
	if !errors.As(err, &ae) || ae.SQLState == "" {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "ERROR: %s (SQLSTATE %s)", ae.Message, ae.SQLState)
	if ae.Position > 0 {
		runes := []rune(query)
		pos := min(ae.Position-1, len(runes))
		start := strings.LastIndex(string(runes[:pos]), "\n") + 1
		line := strings.Count(string(runes[:pos]), "\n") + 1
		text, _, _ := strings.Cut(string(runes[:pos])[start:]+string(runes[pos:]), "\n")
		prefix := fmt.Sprintf("LINE %d: ", line)
		fmt.Fprintf(&b, "\n%s%s\n%s^", prefix, text, strings.Repeat(" ", len([]rune(prefix))+len([]rune(string(runes[:pos])[start:]))))
	}
	if ae.Detail != "" {
		fmt.Fprintf(&b, "\nDETAIL: %s", ae.Detail)
	}
	if ae.Hint != "" {
		fmt.Fprintf(&b, "\nHINT: %s", ae.Hint)
	}
	return errors.New(b.String())
}

// printResult writes rows as an aligned table (NULL for null, strings without quotes, newlines and tabs
// escaped) with a footer: the row count, or the command tag of a statement without rows.
func printResult(w io.Writer, columns []string, rows []map[string]json.RawMessage, count int64, command string, truncated bool) error {
	if len(columns) == 0 {
		_, err := fmt.Fprintln(w, command)
		return err
	}
	cells := rowsOf(rows, func(row map[string]json.RawMessage) []string {
		r := make([]string, len(columns))
		for i, col := range columns {
			r[i] = cellText(row[col])
		}
		return r
	})
	if err := writeTable(w, columns, cells); err != nil {
		return err
	}
	switch {
	case truncated:
		fmt.Fprintf(w, "(%d rows; the first %d shown)\n", count, len(rows))
	case count == 1:
		fmt.Fprintln(w, "(1 row)")
	default:
		fmt.Fprintf(w, "(%d rows)\n", count)
	}
	return nil
}

func cellText(v json.RawMessage) string {
	var s string
	switch {
	case len(v) == 0 || string(v) == "null":
		return "NULL"
	case json.Unmarshal(v, &s) == nil:
	default:
		s = string(v)
	}
	return strings.NewReplacer("\n", `\n`, "\t", `\t`, "\r", `\r`).Replace(s)
}

func newTablesCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.TableList]{
		Use: "tables PROJECT_ID", Short: "List a project's tables, views and materialized views", Args: cobra.ExactArgs(1), JSON: true,
		Path:    func(x *call) string { return projectPath(x.args[0]) + "/tables" },
		Columns: []string{"SCHEMA", "TABLE", "TYPE"},
		Rows: func(l *api.TableList) [][]string {
			return rowsOf(l.Tables, func(t api.TableEntry) []string { return []string{t.Schema, t.Table, t.Type} })
		},
	})
}
