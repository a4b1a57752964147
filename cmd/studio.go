package cmd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/appliance"
)

var (
	_ = registerClientCommand(newSQLCmd)
	_ = registerClientCommand(newTablesCmd)
)

func newSQLCmd(o *clientOpts) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "sql PROJECT_ID [QUERY]",
		Short: "Run SQL on a project as its own role (the text from QUERY, or from standard input)",
		Long: "Run SQL on a project's database as the project's role, through the API's studio. Every statement of the\n" +
			"text runs in one transaction; the last one's result is printed as a table (at most 10,000 rows).\n" +
			"Without QUERY (or with -) the text is read from standard input.",
		Example: `  appliance sql prj_... "select * from orders limit 5"
  appliance sql prj_... < migrate.sql
  appliance sql prj_... --json "select now()"`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(c *cobra.Command, args []string) error {
			query := ""
			if len(args) == 2 && args[1] != "-" {
				query = args[1]
			} else {
				b, err := io.ReadAll(io.LimitReader(c.InOrStdin(), appliance.MaxQueryBytes+1))
				if err != nil {
					return fmt.Errorf("read the query from standard input: %w", err)
				}
				query = string(b)
			}
			if strings.TrimSpace(query) == "" {
				return errors.New("no query: give it as an argument or on standard input")
			}
			cl, err := o.authed()
			if err != nil {
				return err
			}
			path := projectPath(args[0]) + "/sql"
			raw, err := cl.doRaw(c.Context(), http.MethodPost, path, &appliance.SQLRequest{Query: query})
			if err != nil {
				return sqlErrorWithCaret(err, query)
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), raw)
			}
			var res appliance.SQLResultResponse
			if err := decode(http.MethodPost, path, raw, &res); err != nil {
				return err
			}
			return printResult(c.OutOrStdout(), res.Result.Columns, res.Result.Rows, res.Result.RowCount, res.Result.Command, res.Result.Truncated)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON answer")
	return cmd
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
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(columns, "\t"))
	for _, row := range rows {
		cells := make([]string, len(columns))
		for i, col := range columns {
			cells[i] = cellText(row[col])
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
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
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "tables PROJECT_ID",
		Short: "List a project's tables, views and materialized views",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var list appliance.TableList
			if done, err := o.show(c, projectPath(args[0])+"/tables", asJSON, &list); done || err != nil {
				return err
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SCHEMA\tTABLE\tTYPE")
			for _, t := range list.Tables {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Schema, t.Table, t.Type)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON answer")
	return cmd
}
