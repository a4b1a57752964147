package cmd

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
)

var (
	_ = registerClientCommand(newLogsCmd)
	_ = registerClientCommand(newTopCmd)
	_ = registerClientCommand(newAdvisorCmd)
)

func newLogsCmd(o *clientOpts) *cobra.Command {
	var (
		follow       bool
		severity     string
		hours, limit int
		search       = map[string]*string{"q": new(string), "user": new(string), "database": new(string), "sqlstate": new(string), "from": new(string), "to": new(string)}
	)
	query := func() string {
		q := url.Values{}
		q.Set("hours", strconv.Itoa(hours))
		q.Set("limit", strconv.Itoa(limit))
		if severity != "" {
			q.Set("severity", severity)
		}
		for k, v := range search {
			if *v != "" {
				q.Set(k, *v)
			}
		}
		return q.Encode()
	}
	return newAPICmd(o, apiCmd[api.LogsResponse]{
		Use:   "logs PROJECT_ID",
		Short: "Print a project's PostgreSQL server log (the newest entries, or a live tail with --follow)",
		Long: `Print the newest entries of a project's server log (passwords masked; the appliance's own sessions left
out). With --follow, keep printing new entries as the server writes them until Ctrl-C; a dropped
connection resumes after the last entry printed. Each line is "TIME SEVERITY MESSAGE"; with --json, one
JSON object per line.`,
		Example: `  appliance logs prj_...
  appliance logs prj_... --follow --severity error,fatal
  appliance logs prj_... --hours 24 --limit 500 --json
  appliance logs prj_... --search "does not exist" --sqlstate 42P01 --from 2026-11-25T08:00:00Z`,
		Args: cobra.ExactArgs(1), OwnJSON: "one JSON object per line",
		Flags: func(f *pflag.FlagSet) {
			f.BoolVarP(&follow, "follow", "f", false, "keep printing new entries (a live tail)")
			f.StringVar(&severity, "severity", "", "comma-separated severities to show (debug, log, info, notice, warning, error, fatal, panic, detail)")
			f.IntVar(&hours, "hours", api.LogsHoursDefault, "how far back to look, in hours (1-168; up to 720 with the server's log archive)")
			f.IntVar(&limit, "limit", api.LogsLimitDefault, "at most this many entries (1-500; the newest are kept)")
			f.StringVar(search["q"], "search", "", "only entries whose message, detail, hint or statement contain this text (ignoring case)")
			f.StringVar(search["user"], "user", "", "only the entries of this role")
			f.StringVar(search["database"], "database", "", "only the entries of this database")
			f.StringVar(search["sqlstate"], "sqlstate", "", "only the entries with this SQLSTATE (e.g. 42P01)")
			f.StringVar(search["from"], "from", "", "RFC 3339: entries from this time (replaces --hours; not with --follow)")
			f.StringVar(search["to"], "to", "", "RFC 3339: entries until this time (default: now; not with --follow)")
		},
		Stream: func(x *call) (string, string, bool) {
			if !follow {
				return "", "", false
			}
			return projectPath(x.args[0]) + "/logs/stream?" + query(), "", true
		},
		Event: func(x *call, ev sseEvent) error {
			var e api.Entry
			if err := json.Unmarshal(ev.Data, &e); err != nil {
				return fmt.Errorf("a log event that does not decode: %w", err)
			}
			return printLogEntry(x.out(), e, x.json)
		},
		Path: func(x *call) string { return projectPath(x.args[0]) + "/logs?" + query() },
		Print: func(x *call, res *api.LogsResponse) error {
			for _, e := range res.Logs.Entries {
				if err := printLogEntry(x.out(), e, x.json); err != nil {
					return err
				}
			}
			return nil
		},
	})
}

// printLogEntry writes one entry as "TIME SEVERITY MESSAGE" (the statement, detail and hint indented
// below it), or as a line of JSON.
func printLogEntry(w io.Writer, e api.Entry, asJSON bool) error {
	if asJSON {
		return printJSONLine(w, e)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-7s %s\n", e.Timestamp.UTC().Format("2006-01-02 15:04:05.000"), strings.ToUpper(e.Severity), e.Message)
	for _, x := range []struct{ name, v string }{{"DETAIL", e.Detail}, {"HINT", e.Hint}, {"STATEMENT", e.Statement}} {
		if x.v != "" {
			fmt.Fprintf(&b, "    %s: %s\n", x.name, x.v)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func newTopCmd(o *clientOpts) *cobra.Command {
	var (
		hours int
		hash  string
	)
	// The answer is the ranking, or with --query the one statement's detail.
	type topAnswer struct {
		api.TopQueriesResponse
		api.QueryDetailResponse
	}
	return newAPICmd(o, apiCmd[topAnswer]{
		Use:   "top PROJECT_ID",
		Short: "The statements that took the most time on a project's server (from pg_stat_statements)",
		Long: `Rank a project's statements by their total execution time over the last hours (snapshots of
pg_stat_statements every 5 minutes). With --query HASH, one statement's totals and its points.`,
		Example: `  appliance top prj_...
  appliance top prj_... --hours 168
  appliance top prj_... --query 3f2a…`,
		Args: cobra.ExactArgs(1), JSON: true,
		Flags: func(f *pflag.FlagSet) {
			f.IntVar(&hours, "hours", api.QueriesHoursDefault, "the trailing window in hours (1-168)")
			f.StringVar(&hash, "query", "", "show one statement by its query hash")
		},
		Path: func(x *call) string {
			q := "?hours=" + strconv.Itoa(hours)
			if hash != "" {
				return projectPath(x.args[0]) + "/observability/queries/" + seg(hash) + q
			}
			return projectPath(x.args[0]) + "/observability/queries" + q
		},
		Need: func(r *topAnswer) string { return missing(hash != "" && r.Query == nil, "query") },
		Print: func(x *call, r *topAnswer) error {
			if d := r.Query; hash != "" {
				x.printf("%s\n\ncalls %d  rows %d  total %s  mean %s\n\n", d.Query, d.WindowCalls, d.WindowRows, ms(d.WindowTotalExecMS), ms(d.WindowMeanExecMS))
				return writeTable(x.out(), []string{"CAPTURED", "CALLS", "CALLS/S", "MEAN", "TOTAL"}, rowsOf(d.Points, func(p api.QueryPoint) []string {
					return []string{p.CapturedAt.Format(time.DateTime), strconv.FormatInt(p.Calls, 10), fmt.Sprintf("%.2f", p.CallsPerSec), ms(p.MeanExecMS), ms(p.TotalExecMS)}
				}))
			}
			if len(r.Queries) == 0 {
				return x.printf("no statements ran in the last %d hours (or none was snapshotted yet: every 5 minutes)\n", hours)
			}
			return writeTable(x.out(), []string{"HASH", "CALLS", "TOTAL", "MEAN", "ROWS", "QUERY"}, rowsOf(r.Queries, func(q api.TopQuery) []string {
				return []string{q.QueryHash, strconv.FormatInt(q.Calls, 10), ms(q.TotalExecMS), ms(q.MeanExecMS), strconv.FormatInt(q.Rows, 10), oneLine(q.Query, 80)}
			}))
		},
	})
}

// ms formats milliseconds for people.
func ms(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.2fs", v/1000)
	case v >= 1:
		return fmt.Sprintf("%.1fms", v)
	}
	return fmt.Sprintf("%.3fms", v)
}

// oneLine collapses whitespace and cuts the text at n characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// advice is what advisor prints: the index advisor's suggestions and the index hygiene report.
type advice struct {
	Advisor *api.Advice  `json:"advisor"`
	Hygiene *api.Hygiene `json:"hygiene"`
}

func newAdvisorCmd(o *clientOpts) *cobra.Command {
	var minFilter, minSelectivity int
	return newAPICmd(o, apiCmd[advice]{
		Use:   "advisor PROJECT_ID",
		Short: "Index suggestions (pg_qualstats and hypopg) and unused or redundant indexes of a project",
		Example: `  appliance advisor prj_...
  appliance advisor prj_... --min-filter 100 --json`,
		Args: cobra.ExactArgs(1), JSON: true, JSONHelp: "print the API's JSON answers",
		Flags: func(f *pflag.FlagSet) {
			f.IntVar(&minFilter, "min-filter", api.AdvisorMinFilterDefault, "minimum average number of rows a predicate must filter (1-10000000)")
			f.IntVar(&minSelectivity, "min-selectivity", api.AdvisorMinSelectivityDefault, "minimum average selectivity percentage (1-100)")
		},
		Fetch: func(x *call, res *advice) ([]byte, error) {
			q := url.Values{"min_filter": {strconv.Itoa(minFilter)}, "min_selectivity": {strconv.Itoa(minSelectivity)}}
			// Each answer fills its half of res: {"advisor": …}, then {"hygiene": …}.
			if err := x.cl.do(x.c.Context(), "GET", projectPath(x.args[0])+"/advisor/indexes?"+q.Encode(), nil, res); err != nil {
				return nil, err
			}
			if err := x.cl.do(x.c.Context(), "GET", projectPath(x.args[0])+"/advisor/index-hygiene", nil, res); err != nil {
				return nil, err
			}
			return json.Marshal(res)
		},
		Need: func(r *advice) string { return missing(r.Advisor == nil || r.Hygiene == nil, "advisor or hygiene") },
		Print: func(x *call, r *advice) error {
			out := x.out()
			a := r.Advisor
			fmt.Fprintln(out, "Index suggestions")
			switch {
			case !a.Available:
				fmt.Fprintf(out, "  not available: %s\n", a.Reason)
			case len(a.Suggestions) == 0:
				fmt.Fprintln(out, "  none: no predicate filtered enough rows (pg_qualstats samples the statements as they run)")
			}
			for _, s := range a.Suggestions {
				est := ""
				if a.CostEstimatesAvailable {
					est = fmt.Sprintf("  (cost -%.0f%%", s.EstimatedCostReductionPct)
					if a.SizeEstimatesAvailable {
						est += ", ~" + humanBytes(s.EstimatedSizeBytes)
					}
					est += ")"
				}
				fmt.Fprintf(out, "  %s%s\n", s.DDL, est)
			}
			h := r.Hygiene
			fmt.Fprintf(out, "\nIndex hygiene (statistics since %s)\n", h.StatsResetAt.Format(time.DateTime))
			if !h.Available {
				fmt.Fprintf(out, "  not available: %s\n", h.Reason)
			}
			for _, x := range h.UnusedIndexes {
				fmt.Fprintf(out, "  unused     %s (%s, %d scans)\n    %s\n", x.Index, humanBytes(x.SizeBytes), x.IndexScans, x.DropStatement)
			}
			for _, x := range h.RedundantIndexes {
				fmt.Fprintf(out, "  redundant  %s (%s, covered by %s)\n    %s\n", x.Index, humanBytes(x.SizeBytes), x.CoveredBy, x.DropStatement)
			}
			if len(h.UnusedIndexes)+len(h.RedundantIndexes) == 0 && h.Available {
				fmt.Fprintln(out, "  no unused or redundant indexes")
			} else if h.ReclaimableBytes > 0 {
				fmt.Fprintf(out, "  reclaimable: %s\n", humanBytes(h.ReclaimableBytes))
			}
			return nil
		},
	})
}
