package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
)

// Moving data in and out: dumps (exports, uploads and imports) and following a source by logical
// replication (preflight, follow, status, cutover, abort).

var (
	_ = registerClientCommand(newExportsCmd)
	_ = registerClientCommand(newImportsCmd)
)

// sourceURLEnv holds a source URL, so that its password need not be on a command line (which other local
// users can read).
const sourceURLEnv = "APPLIANCE_SOURCE_URL"

func newExportsCmd(o *clientOpts) *cobra.Command {
	return groupCmd("exports", []string{"export"}, "Dump a project's database (pg_dump -Fc) and download the dumps",
		newExportsListCmd(o), newExportsCreateCmd(o), newExportsDownloadCmd(o))
}

func newExportsListCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.ExportList]{
		Use: "list PROJECT_ID", Aliases: []string{"ls"}, Short: "List a project's exports, newest first", Args: cobra.ExactArgs(1), JSON: true,
		Path:    func(x *call) string { return projectPath(x.args[0]) + "/exports" },
		Columns: []string{"ID", "STATE", "SIZE", "CREATED", "EXPIRES"},
		Rows: func(l *api.ExportList) [][]string {
			return rowsOf(l.Exports, func(e *api.Export) []string {
				return []string{e.ID, e.State, humanBytes(e.SizeBytes), stamp(e.CreatedAt), timeOr(e.ExpiresAt, "-")}
			})
		},
	})
}

func newExportsCreateCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.ExportJobResponse]{
		Use:     "create PROJECT_ID",
		Short:   "Dump the project's database in a job (kept 7 days)",
		Example: `  appliance exports create prj_... --wait && appliance exports download prj_... <export id> -o shop.dump`,
		Args:    cobra.ExactArgs(1), Method: http.MethodPost,
		Path: func(x *call) string { return projectPath(x.args[0]) + "/exports" },
		Job:  func(r *api.ExportJobResponse) *api.Job { return r.Job },
		Started: func(x *call, r *api.ExportJobResponse) string {
			return "Exporting project " + x.args[0] + " as " + r.ExportID
		},
		Wait: "wait until the dump is written (or failed)",
	})
}

func newExportsDownloadCmd(o *clientOpts) *cobra.Command {
	var output string
	return newAPICmd(o, apiCmd[api.DownloadResponse]{
		Use: "download PROJECT_ID EXPORT_ID", Short: "Download a completed export's dump through a signed URL", Args: cobra.ExactArgs(2),
		Flags: func(f *pflag.FlagSet) {
			f.StringVarP(&output, "output", "o", "", "file to write (default <export id>.dump; - for standard output is not supported)")
		},
		Path: func(x *call) string { return projectPath(x.args[0]) + "/exports/" + seg(x.args[1]) + "/download" },
		Need: func(r *api.DownloadResponse) string { return missing(r.Download == nil, "download") },
		Print: func(x *call, r *api.DownloadResponse) error {
			output = firstNonEmpty(output, x.args[1]+".dump")
			n, err := x.cl.download(x.c.Context(), r.Download.DownloadURL, output)
			if err != nil {
				return err
			}
			return x.printf("Wrote %s (%s): restore it with pg_restore, or import it with `appliance imports upload`.\n", output, humanBytes(n))
		},
	})
}

func newImportsCmd(o *clientOpts) *cobra.Command {
	cmd := groupCmd("imports", []string{"import"}, "Bring a database in: check a source, follow it by logical replication and cut over, or restore a dump",
		newImportsPreflightCmd(o), newImportsFollowCmd(o), newImportsStatusCmd(o), newImportsCutoverCmd(o),
		newImportsAbortCmd(o), newImportsUploadCmd(o), newImportsRestoreCmd(o))
	cmd.Long = `Bring a database into a project.

From a running source (wal_level = logical), without downtime until the cutover:
  appliance imports preflight PROJECT_ID      what the import would meet, and what blocks following
  appliance imports follow PROJECT_ID --confirm   copy the schema and subscribe (a backup is taken first)
  appliance imports status PROJECT_ID         tables and lag
  appliance imports cutover PROJECT_ID --confirm  after writes to the source stopped: zero lag, sequences, detach
  appliance imports abort PROJECT_ID          stop following and restore the pre-follow backup

From a dump (pg_dump -Fc):
  appliance imports upload PROJECT_ID FILE
  appliance imports restore PROJECT_ID --confirm

The source URL comes from --source or, better (a command line is visible to other local users),
` + sourceURLEnv + `: postgres://user:password@host:5432/dbname?sslmode=require.`
	return cmd
}

func importsPath(projectID string) string { return projectPath(projectID) + "/imports" }

// sourceFlag is --source, else $APPLIANCE_SOURCE_URL.
func sourceFlag() *envFlag {
	return &envFlag{name: "source", env: sourceURLEnv, usage: "source database URL (default $" + sourceURLEnv + ")",
		required: "no source: pass --source or set " + sourceURLEnv}
}

func newImportsPreflightCmd(o *clientOpts) *cobra.Command {
	src := sourceFlag()
	return newAPICmd(o, apiCmd[api.PreflightResponse]{
		Use:   "preflight PROJECT_ID",
		Short: "Connect to a source and report what importing or following it would meet (exit 1 when a check fails)",
		Args:  cobra.ExactArgs(1), JSON: true,
		Flags: src.bind, Validate: src.resolve,
		Method: http.MethodPost,
		Path:   func(x *call) string { return importsPath(x.args[0]) + "/preflight" },
		Body:   func(*call) any { return api.PreflightRequest{SourceURL: src.value} },
		Need:   func(r *api.PreflightResponse) string { return missing(r.Preflight == nil, "preflight") },
		Print:  func(x *call, r *api.PreflightResponse) error { return printPreflight(x.out(), r.Preflight) },
		Exit: func(_ *call, r *api.PreflightResponse) error {
			if !r.Preflight.OK {
				return errors.New("the preflight found a failing check")
			}
			return nil
		},
	})
}

func printPreflight(w io.Writer, pf *api.Preflight) error {
	if s := pf.Source; s != nil {
		fmt.Fprintf(w, "Source:      PostgreSQL %s, %s, provider %s\n", s.ServerVersion, humanBytes(s.DatabaseSizeBytes), s.Provider)
		fmt.Fprintf(w, "Schemas:     %s (copied)", firstNonEmpty(strings.Join(s.AppSchemas, ", "), "-"))
		if len(s.ProviderSchemas) > 0 {
			fmt.Fprintf(w, "; %s (the provider's, not copied)", strings.Join(s.ProviderSchemas, ", "))
		}
		fmt.Fprintln(w)
		var exts []string
		for _, e := range s.Extensions {
			exts = append(exts, e.Name+" "+e.Version)
		}
		fmt.Fprintf(w, "Extensions:  %s\n", firstNonEmpty(strings.Join(exts, ", "), "-"))
		r := s.Replication
		fmt.Fprintf(w, "Replication: wal_level %s, slots %d/%d used, ready for follow: %t\n", r.WALLevel, r.UsedReplicationSlots,
			r.MaxReplicationSlots, r.Ready)
		for _, b := range r.Blockers {
			fmt.Fprintf(w, "  - %s\n", b)
		}
	}
	fmt.Fprintf(w, "Target:      PostgreSQL %s, storage limit %s\n", pf.TargetVersion, humanBytes(pf.StorageLimitBytes))
	if err := writeTable(w, []string{"CHECK", "STATUS", "DETAIL"}, rowsOf(pf.Checks, func(ch api.PreflightCheck) []string {
		return []string{ch.Name, ch.Status, ch.Detail}
	})); err != nil {
		return err
	}
	verdict := "OK: nothing stops an import."
	if !pf.OK {
		verdict = "NOT OK: fix the failing checks first."
	}
	_, err := fmt.Fprintln(w, verdict)
	return err
}

// importJobCmd is s, a POST to one of a project's import paths (suffix) that starts a job (what says
// which).
func importJobCmd(o *clientOpts, s apiCmd[api.JobResponse], suffix, what string) *cobra.Command {
	s.Method = http.MethodPost
	return jobCmd(o, s, importsPath, suffix, what)
}

func newImportsFollowCmd(o *clientOpts) *cobra.Command {
	src := sourceFlag()
	return importJobCmd(o, apiCmd[api.JobResponse]{
		Use:         "follow PROJECT_ID --confirm",
		Short:       "Back up the project, copy the source's schema over it and subscribe to the source's tables",
		Confirm:     "confirm that the project's database may be overwritten",
		Unconfirmed: "follow copies the source's schema over the project's database",
		Flags:       src.bind, Validate: src.resolve,
		Body: func(*call) any { return api.FollowRequest{SourceURL: src.value, Confirm: true} },
		Wait: "wait until the subscription exists (the initial copy then runs on)",
	}, "/follow", "Following the source into project %s")
}

func newImportsStatusCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.FollowReport]{
		Use:   "status PROJECT_ID",
		Short: "Measure the follow: each table's sync state and the lag in bytes",
		Args:  cobra.ExactArgs(1), JSON: true, JSONHelp: "print the status job's result as JSON",
		// The status is a job's result: start the job, follow it to its end (quietly), read its result.
		Fetch: func(x *call, rep *api.FollowReport) ([]byte, error) {
			var res api.JobResponse
			path := importsPath(x.args[0]) + "/follow/status"
			if err := x.cl.do(x.c.Context(), http.MethodPost, path, nil, &res); err != nil {
				return nil, err
			}
			if res.Job == nil {
				return nil, fmt.Errorf("POST %s: unexpected response: no job", path)
			}
			j, err := waitJob(quiet(x.c), x.cl, res.Job)
			if err != nil {
				return nil, err
			}
			if x.json {
				return j.Result, nil
			}
			if err := json.Unmarshal(j.Result, rep); err != nil {
				return nil, fmt.Errorf("job %s: unexpected result: %w", j.ID, err)
			}
			return j.Result, nil
		},
		Print: func(x *call, rep *api.FollowReport) error { return printFollowReport(x.out(), rep) },
	})
}

// quiet is c with its standard output discarded (waitJob's "completed" line is not wanted there).
func quiet(c *cobra.Command) *cobra.Command {
	q := &cobra.Command{}
	q.SetContext(c.Context())
	q.SetOut(io.Discard)
	q.SetErr(c.ErrOrStderr())
	return q
}

func printFollowReport(w io.Writer, r *api.FollowReport) error {
	fmt.Fprintf(w, "Follow %s: %s, from %s\n", r.FollowID, r.State, r.Source)
	if r.Error != "" {
		fmt.Fprintf(w, "Error: %s\n", r.Error)
	}
	if r.State != api.FollowFollowing && r.State != api.FollowCuttingOver {
		return nil
	}
	lag := "unknown (" + r.SourceError + ")"
	if r.LagBytes != nil {
		lag = humanBytes(*r.LagBytes)
	}
	fmt.Fprintf(w, "Tables ready: %d of %d; lag %s; worker running: %t\n", r.TablesReady, len(r.Tables), lag, r.WorkerRunning)
	return writeTable(w, []string{"TABLE", "STATE"}, rowsOf(r.Tables, func(t api.FollowTable) []string {
		return []string{t.Table, t.State}
	}))
}

func newImportsCutoverCmd(o *clientOpts) *cobra.Command {
	return importJobCmd(o, apiCmd[api.JobResponse]{
		Use:         "cutover PROJECT_ID --confirm",
		Short:       "Wait for zero lag, copy sequence values and stop following (stop writes to the source first)",
		Confirm:     "confirm the cutover",
		Unconfirmed: "after the cutover the project no longer follows the source",
		Body:        func(*call) any { return api.FollowCutoverRequest{Confirm: true} },
		Wait:        "wait until the cutover is done (or failed)",
	}, "/follow/cutover", "Cutting project %s over")
}

func newImportsAbortCmd(o *clientOpts) *cobra.Command {
	return importJobCmd(o, apiCmd[api.JobResponse]{
		Use:   "abort PROJECT_ID",
		Short: "Stop following and restore the backup taken before follow started",
		Wait:  "wait until the follow is gone and the project restored",
		Print: func(x *call, _ *api.JobResponse) error {
			var res struct {
				RestoreJobID string   `json:"restore_job_id"`
				Warnings     []string `json:"warnings"`
			}
			if err := json.Unmarshal(x.job.Result, &res); err != nil {
				return fmt.Errorf("job %s: unexpected result: %w", x.job.ID, err)
			}
			for _, w := range res.Warnings {
				fmt.Fprintf(x.c.ErrOrStderr(), "Warning: %s\n", w)
			}
			if res.RestoreJobID == "" {
				return nil
			}
			j := &api.Job{ID: res.RestoreJobID, Type: api.JobBackupRestore}
			jobStarted(x.c, "Restoring the pre-follow backup", j, true)
			if _, err := waitJob(x.c, x.cl, j); err != nil {
				return err
			}
			return printProjectState(x.c, x.cl, x.args[0])
		},
	}, "/follow/abort", "Aborting the follow of project %s")
}

func newImportsUploadCmd(o *clientOpts) *cobra.Command {
	var (
		f  *os.File
		fi os.FileInfo
	)
	return newAPICmd(o, apiCmd[api.UploadResponse]{
		Use: "upload PROJECT_ID FILE", Short: "Upload a dump (pg_dump -Fc) for `imports restore` through a signed URL", Args: cobra.ExactArgs(2),
		Validate: func(x *call) (err error) {
			if f, err = os.Open(x.args[1]); err != nil {
				return err
			}
			x.onDone(func() { f.Close() })
			fi, err = f.Stat()
			return err
		},
		Method: http.MethodPost,
		Path:   func(x *call) string { return importsPath(x.args[0]) + "/uploads" },
		Need: func(r *api.UploadResponse) string {
			return missing(r.Upload == nil || r.Upload.UploadURL == "", "upload URL")
		},
		Print: func(x *call, res *api.UploadResponse) error {
			var up api.UploadResponse
			if err := x.cl.transfer(x.c.Context(), http.MethodPut, res.Upload.UploadURL, f, fi.Size(), &up); err != nil {
				return err
			}
			return x.printf("Uploaded %s (%s) as %s: restore it with `appliance imports restore %s --confirm`.\n",
				filepath.Base(x.args[1]), humanBytes(fi.Size()), res.Upload.ID, x.args[0])
		},
	})
}

func newImportsRestoreCmd(o *clientOpts) *cobra.Command {
	var req api.ImportRequest
	return importJobCmd(o, apiCmd[api.JobResponse]{
		Use:         "restore PROJECT_ID --confirm [--upload ID]",
		Short:       "Restore an uploaded dump over the project's database (one transaction: a failure changes nothing)",
		Confirm:     "confirm that the project's database may be overwritten",
		Unconfirmed: "an import overwrites the project's database",
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&req.UploadID, "upload", "", "the upload to restore (default: the newest uploaded one)")
		},
		Body: func(*call) any {
			req.Confirm = true
			return &req
		},
		Wait: "wait until the restore is done (or failed)",
	}, "", "Importing into project %s")
}

// transferClient is the API client's transport without its overall timeout: a dump may take long to move;
// the command's context bounds it instead.
func (c *apiClient) transferClient() *http.Client { return &http.Client{Transport: c.http.Transport} }

// signedDo sends a request to a signed URL the API handed out (the URL is the credential) with body (size
// bytes; nil: none) and returns its 2xx answer; any other answer is an *APIError.
func (c *apiClient) signedDo(ctx context.Context, method, signedURL string, body io.Reader, size int64) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, signedURL, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "appliance-cli/"+Version)
	if body != nil {
		req.ContentLength = size
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := c.transferClient().Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, redactPath(signedURL), err)
	}
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, apiError(method, signedURL, resp, raw)
	}
	return resp, nil
}

// transfer sends body (size bytes) to a signed URL and decodes its JSON answer into out.
func (c *apiClient) transfer(ctx context.Context, method, signedURL string, body io.Reader, size int64, out any) error {
	resp, err := c.signedDo(ctx, method, signedURL, body, size)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

// download writes what a signed URL serves to path (through a temporary file renamed at the end).
func (c *apiClient) download(ctx context.Context, signedURL, path string) (int64, error) {
	resp, err := c.signedDo(ctx, http.MethodGet, signedURL, nil, 0)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var n int64
	err = replaceFile(path, func(w io.Writer) (err error) {
		n, err = io.Copy(w, resp.Body)
		return err
	})
	return n, err
}
