package cmd

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
)

// Most client commands are one API call: resolve the credential, send a request built from the arguments
// and flags, check and decode the answer (Res), then print it as a table, as the API's JSON (--json), or
// follow the job it started (--wait). The others make several calls (Fetch) or follow an event stream
// (Stream). apiCmd describes such a command; newAPICmd builds it, so that every command checks its flags,
// its credential and its answer the same way.
type apiCmd[Res any] struct {
	Use, Short, Long, Example string
	Aliases                   []string
	Args                      cobra.PositionalArgs // default cobra.NoArgs
	Flags                     func(*pflag.FlagSet) // binds the command's own flags
	// Confirm adds --confirm (its help): without it the command is refused, before anything is sent, with
	// Unconfirmed (what it would do that has no undo).
	Confirm, Unconfirmed string
	// Validate checks the arguments and flags before anything is sent.
	Validate func(x *call) error
	// Prepare runs once the client is known, before the request (e.g. to look up the organization).
	Prepare func(x *call) error
	// Anonymous: the command needs no credential (no login), only the API's URL. Client, when set, turns
	// that anonymous client (x.cl) into the one the command uses (e.g. by signing in).
	Anonymous bool
	Client    func(x *call) (*apiClient, error)
	// Org adds --org: the command acts in that organization (x.org), by default the credential's.
	Org    bool
	Method string               // default GET
	Path   func(x *call) string // the request's path (with its query)
	Body   func(x *call) any    // the request's body; nil: none
	// NoAnswer: the answer's body is not read (Res is then struct{}).
	NoAnswer bool
	// JSON adds --json: print the API's answer as it came instead of the table or Print (JSONHelp, when
	// set, is the flag's help).
	JSON     bool
	JSONHelp string
	// OwnJSON adds --json (its help OwnJSON) that only sets x.json: the command prints the answer itself
	// (Print, Event), e.g. one JSON object per line.
	OwnJSON string
	// Fetch, when set, replaces the one request: it makes the command's calls itself (several, or a job
	// followed to its result), fills res and returns what --json prints.
	Fetch func(x *call, res *Res) ([]byte, error)
	// Stream, when it returns a path, has the command follow the text/event-stream there instead of the
	// request: each event goes to Event, until the stream ends (with reconnect, only when the API refuses)
	// or Ctrl-C, which is not an error. A reconnection resumes after the last event handed over (after
	// names where the first connection starts).
	Stream func(x *call) (path, after string, reconnect bool)
	Event  func(x *call, ev sseEvent) error
	// Exit gives the command's exit status from the answer, with --json too: the answer is then decoded and
	// checked (Need) before it is printed either way, and Exit runs last.
	Exit func(x *call, res *Res) error
	// Need names what a well-formed answer must hold and does not ("" when all is there): the answer is
	// then an "unexpected response" error, never a nil dereference.
	Need func(res *Res) string
	// Job is the job the answer started (a nil job is an unexpected response). The command prints it
	// (Started says what it does) and, with --wait (its help is Wait), follows it to its end.
	Job     func(res *Res) *api.Job
	Started func(x *call, res *Res) string
	Wait    string
	// Columns and Rows print the answer as a table.
	Columns []string
	Rows    func(res *Res) [][]string
	// Print prints the answer (after the table, if any; after the job ended, with --wait).
	Print func(x *call, res *Res) error
	// Failed may turn the API's error into a more helpful one.
	Failed func(x *call, err error) error
}

// call is one run of an apiCmd.
type call struct {
	c    *cobra.Command
	cl   *apiClient
	args []string
	org  string   // with Org, the organization
	wait bool     // --wait was given
	json bool     // --json was given
	raw  []byte   // the answer as it came
	job  *api.Job // with --wait, the job as it ended
	done []func() // run when the command ends
}

// onDone has f run when the command ends (e.g. to close a file Validate opened).
func (x *call) onDone(f func()) { x.done = append(x.done, f) }

func (x *call) out() io.Writer { return x.c.OutOrStdout() }

// printf prints to standard output; its error is the write's.
func (x *call) printf(format string, a ...any) error {
	_, err := fmt.Fprintf(x.c.OutOrStdout(), format, a...)
	return err
}

// newAPICmd builds the cobra command s describes.
func newAPICmd[Res any](o *clientOpts, s apiCmd[Res]) *cobra.Command {
	var (
		asJSON, wait, confirm bool
		org                   string
	)
	cmd := &cobra.Command{Use: s.Use, Aliases: s.Aliases, Short: s.Short, Long: s.Long, Example: s.Example, Args: s.Args}
	if cmd.Args == nil {
		cmd.Args = cobra.NoArgs
	}
	cmd.RunE = func(c *cobra.Command, args []string) error {
		x := &call{c: c, args: args, wait: wait, json: asJSON}
		defer func() {
			for _, f := range x.done {
				f()
			}
		}()
		if s.Confirm != "" && !confirm {
			return fmt.Errorf("%s; pass --confirm", s.Unconfirmed)
		}
		if s.Validate != nil {
			if err := s.Validate(x); err != nil {
				return err
			}
		}
		var err error
		x.cl, err = o.client(s.Anonymous || s.Client != nil, c.ErrOrStderr())
		if err == nil && s.Client != nil {
			x.cl, err = s.Client(x)
		}
		if err != nil {
			return err
		}
		if s.Org {
			if x.org, err = orgFor(c.Context(), x.cl, org); err != nil {
				return err
			}
		}
		if s.Prepare != nil {
			if err := s.Prepare(x); err != nil {
				return err
			}
		}
		if s.Stream != nil {
			if path, after, reconnect := s.Stream(x); path != "" {
				return followStream(c, x.cl, path, after, reconnect, func(ev sseEvent) error { return s.Event(x, ev) })
			}
		}
		method := firstNonEmpty(s.Method, http.MethodGet)
		res := new(Res)
		var path string
		if s.Fetch != nil {
			x.raw, err = s.Fetch(x, res)
		} else {
			path = s.Path(x)
			var body any
			if s.Body != nil {
				body = s.Body(x)
			}
			x.raw, err = x.cl.doRaw(c.Context(), method, path, body)
		}
		if err != nil {
			if s.Failed != nil {
				return s.Failed(x, err)
			}
			return err
		}
		what := method + " " + redactPath(path) // what answered, for errors
		if s.Fetch != nil {
			what = c.CommandPath()
		}
		printRaw := asJSON && s.OwnJSON == ""
		if printRaw && s.Exit == nil {
			return printJSON(c.OutOrStdout(), x.raw)
		}
		if !s.NoAnswer && s.Fetch == nil {
			if err := decode(method, path, x.raw, res); err != nil {
				return err
			}
		}
		if s.Need != nil {
			if missing := s.Need(res); missing != "" {
				return fmt.Errorf("%s: unexpected response: no %s", what, missing)
			}
		}
		if printRaw { // and Exit
			if err := printJSON(c.OutOrStdout(), x.raw); err != nil {
				return err
			}
			return s.Exit(x, res)
		}
		if s.Job != nil {
			j := s.Job(res)
			if j == nil {
				return fmt.Errorf("%s: unexpected response: no job", what)
			}
			jobStarted(c, s.Started(x, res), j, wait)
			if !wait {
				return nil
			}
			if x.job, err = waitJob(c, x.cl, j); err != nil {
				return err
			}
		}
		if s.Columns != nil {
			if err := writeTable(c.OutOrStdout(), s.Columns, s.Rows(res)); err != nil {
				return err
			}
		}
		if s.Print != nil {
			if err := s.Print(x, res); err != nil {
				return err
			}
		}
		if s.Exit != nil {
			return s.Exit(x, res)
		}
		return nil
	}
	if s.Flags != nil {
		s.Flags(cmd.Flags())
	}
	if s.Org {
		orgFlag(cmd, &org)
	}
	if s.Confirm != "" {
		cmd.Flags().BoolVar(&confirm, "confirm", false, s.Confirm)
	}
	switch {
	case s.OwnJSON != "":
		cmd.Flags().BoolVar(&asJSON, "json", false, s.OwnJSON)
	case s.JSON:
		cmd.Flags().BoolVar(&asJSON, "json", false, firstNonEmpty(s.JSONHelp, "print the API's JSON answer"))
	}
	if s.Wait != "" {
		cmd.Flags().BoolVar(&wait, "wait", false, s.Wait)
	}
	return cmd
}

// writeTable prints rows under a header (none when columns is nil: labelled values) as aligned columns,
// leaving out the rows opt left out.
func writeTable(w io.Writer, columns []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if columns != nil {
		fmt.Fprintln(tw, strings.Join(columns, "\t"))
	}
	for _, r := range rows {
		if r != nil {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
	}
	return tw.Flush()
}

// printFields prints labelled values, one a line, with format (e.g. "%-12s%s\n": the label, the value),
// leaving out the rows opt left out.
func printFields(w io.Writer, format string, rows [][]string) error {
	for _, r := range rows {
		if r != nil {
			if _, err := fmt.Fprintf(w, format, r[0], r[1]); err != nil {
				return err
			}
		}
	}
	return nil
}

// stamp is a time as the CLI shows it: RFC 3339 in UTC.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// timeOr is stamp of t, or def when there is none.
func timeOr(t *time.Time, def string) string {
	if t == nil {
		return def
	}
	return stamp(*t)
}

// opt is the row of a labelled value shown only when there is one.
func opt(label, value string) []string {
	if value == "" {
		return nil
	}
	return []string{label, value}
}

// rowsOf maps each item to its table row.
func rowsOf[T any](items []T, row func(T) []string) [][]string {
	rows := make([][]string, 0, len(items))
	for _, it := range items {
		rows = append(rows, row(it))
	}
	return rows
}

// missing is what for Need when absent holds, else "".
func missing(absent bool, what string) string {
	if absent {
		return what
	}
	return ""
}

// jobOf is the Job of a command answered with a job alone.
func jobOf(r *api.JobResponse) *api.Job { return r.Job }

// jobCmd is s, a request to base(its one argument)+suffix answered with the job it started; started, a
// format of the argument, says what the job does.
func jobCmd(o *clientOpts, s apiCmd[api.JobResponse], base func(string) string, suffix, started string) *cobra.Command {
	s.Args, s.Job = cobra.ExactArgs(1), jobOf
	s.Path = func(x *call) string { return base(x.args[0]) + suffix }
	s.Started = func(x *call, _ *api.JobResponse) string { return fmt.Sprintf(started, x.args[0]) }
	return newAPICmd(o, s)
}

// printProjectStateAfter is the Print of a command whose job changes a project (its first argument): the
// project's state once the job has ended.
func printProjectStateAfter[Res any](x *call, _ *Res) error {
	return printProjectState(x.c, x.cl, x.args[0])
}

// envFlag is a string flag that falls back to an environment variable, so that a secret (or a URL holding
// one) need not stand on a command line, which other local users can read.
type envFlag struct {
	name, env, usage string
	required         string // the error when neither holds a value ("": the flag is optional)
	flag, value      string
}

func (e *envFlag) bind(f *pflag.FlagSet) { f.StringVar(&e.flag, e.name, "", e.usage) }

// resolve is the Validate of a command that uses the value: the flag's, else the environment's.
func (e *envFlag) resolve(*call) error {
	if e.value = firstNonEmpty(e.flag, os.Getenv(e.env)); e.value == "" && e.required != "" {
		return errors.New(e.required)
	}
	return nil
}

// emailFlag is --email of the commands that sign in as a person.
func emailFlag() *envFlag {
	return &envFlag{name: "email", env: "APPLIANCE_EMAIL", usage: "your email address (APPLIANCE_EMAIL)",
		required: "--email is required (or set APPLIANCE_EMAIL)"}
}
