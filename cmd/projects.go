package cmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
)

var _ = registerClientGroup("projects", []string{"project"}, "List, create and delete projects (PostgreSQL instances) and show their connection URLs",
	newProjectsListCmd, newProjectsGetCmd, newProjectsCreateCmd, newProjectsDeleteCmd, newProjectsConnectionsCmd, newProjectsRestartCmd,
	newProjectsUpdateCmd, newProjectsSuspendCmd, newProjectsResumeCmd)

func projectPath(id string) string { return "/v1/projects/" + seg(id) }

func newProjectsListCmd(o *clientOpts) *cobra.Command {
	var org string
	return newAPICmd(o, apiCmd[api.ProjectList]{
		Use: "list", Aliases: []string{"ls"}, Short: "List the organization's projects", JSON: true,
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&org, "org", "", "organization ID (required for platform administrators; default: the credential's organization)")
		},
		Path: func(*call) string {
			if org != "" {
				return "/v1/projects?organization_id=" + url.QueryEscape(org)
			}
			return "/v1/projects"
		},
		Columns: []string{"ID", "NAME", "STATE", "RUNTIME", "PLAN", "ENV", "VERSION", "CREATED"},
		Rows: func(l *api.ProjectList) [][]string {
			return rowsOf(l.Projects, func(p *api.Project) []string {
				return []string{p.ID, p.Name, p.State, p.RuntimeStatus, p.Plan, p.Environment,
					firstNonEmpty(p.PostgresVersion, "-"), stamp(p.CreatedAt)}
			})
		},
	})
}

func newProjectsGetCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.ProjectResponse]{
		Use: "get PROJECT_ID", Short: "Show a project", Args: cobra.ExactArgs(1), JSON: true,
		Path:  func(x *call) string { return projectPath(x.args[0]) },
		Need:  func(r *api.ProjectResponse) string { return missing(r.Project == nil, "project") },
		Print: func(x *call, r *api.ProjectResponse) error { return printProject(x.out(), r.Project) },
	})
}

// printProject prints a project as an aligned block of labelled rows.
func printProject(w io.Writer, p *api.Project) error {
	return printFields(w, "%-19s%s\n", [][]string{
		{"ID:", p.ID},
		{"Name:", p.Name + " (slug " + p.Slug + ")"},
		{"Organization:", p.OrganizationID},
		{"State:", p.State + " (runtime " + firstNonEmpty(p.RuntimeStatus, "-") + ")"},
		{"Environment:", p.Environment},
		{"Plan:", fmt.Sprintf("%s (max_connections %d, storage %s)", p.Plan, p.MaxConnections, humanBytes(p.StorageLimitBytes))},
		{"PostgreSQL:", firstNonEmpty(p.PostgresVersion, "-")},
		{"Region:", p.Region},
		{"Host:", fmt.Sprintf("%s (direct port %d, pooled port %d)", p.PublicHost, p.DirectPort, p.PooledPort)},
		{"Database:", p.DatabaseName},
		{"Role:", p.RoleName},
		opt("Statement timeout:", p.StatementTimeout),
		opt("Idle tx timeout:", p.IdleTransactionTimeout),
		{"Suspend after:", suspendAfterText(p.SuspendAfterSeconds)},
		{"Latest job:", firstNonEmpty(p.LatestJobID, "-")},
		opt("Last error:", p.LastError),
		{"Created:", stamp(p.CreatedAt)},
		{"Updated:", stamp(p.UpdatedAt)},
	})
}

func newProjectsCreateCmd(o *clientOpts) *cobra.Command {
	var req api.CreateProjectRequest
	return newAPICmd(o, apiCmd[api.ProjectJobResponse]{
		Use:   "create NAME",
		Short: "Create a project: a PostgreSQL instance of its own, provisioned by a job",
		Long: `Create a project. The appliance provisions its PostgreSQL instance in a project.provision job; the
command prints the project and job IDs at once, or with --wait waits until the job has ended.
New projects are production projects unless --environment says otherwise: deleting one needs an approval.`,
		Example: `  appliance projects create shop
  appliance projects create scratch --environment development --plan free --wait`,
		Args: cobra.ExactArgs(1),
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&req.Plan, "plan", "", "plan: free (default), or another of appliance plans list")
			f.StringVar(&req.Environment, "environment", "", "environment: production (default), staging or development")
			f.StringVar(&req.OrganizationID, "org", "", "organization ID (platform administrators only; others create in their own organization)")
		},
		Method: http.MethodPost,
		Path:   func(*call) string { return "/v1/projects" },
		Body: func(x *call) any {
			req.Name = x.args[0]
			return &req
		},
		Need: func(r *api.ProjectJobResponse) string {
			return missing(r.Project == nil || r.Job == nil, "project or job")
		},
		Job: func(r *api.ProjectJobResponse) *api.Job { return r.Job },
		Started: func(_ *call, r *api.ProjectJobResponse) string {
			p := r.Project
			return fmt.Sprintf("Creating project %s (%s), %s, plan %s", p.ID, p.Name, p.Environment, p.Plan)
		},
		Wait: "wait until the project is provisioned (or provisioning failed)",
		Print: func(x *call, r *api.ProjectJobResponse) error {
			return printProjectState(x.c, x.cl, r.Project.ID)
		},
	})
}

// printProjectState prints a project's state after a job that changed it ended.
func printProjectState(c *cobra.Command, cl *apiClient, id string) error {
	var res api.ProjectResponse
	if err := cl.do(c.Context(), http.MethodGet, projectPath(id), nil, &res); err != nil {
		return err
	}
	if res.Project == nil {
		return fmt.Errorf("GET %s: unexpected response: no project", projectPath(id))
	}
	p := res.Project
	fmt.Fprintf(c.OutOrStdout(), "Project %s (%s) is %s (runtime %s).\n", p.ID, p.Name, p.State, firstNonEmpty(p.RuntimeStatus, "-"))
	return nil
}

func newProjectsDeleteCmd(o *clientOpts) *cobra.Command {
	var (
		token   string
		approve bool
	)
	cmd := newAPICmd(o, apiCmd[api.JobResponse]{
		Use:   "delete PROJECT_ID",
		Short: "Delete a project, its instance, its data and its backups",
		Long: `Delete a project: its PostgreSQL instance, its data and its backups, in a project.delete job.
A production project needs a single-use approval token: pass one minted earlier with --approval-token, or
--approve to mint one now (POST /v1/projects/<id>/approvals) and use it at once.`,
		Example: `  appliance projects delete prj_... --wait
  appliance projects delete prj_... --approve --wait`,
		Args: cobra.ExactArgs(1),
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&token, "approval-token", "", "single-use approval token for project.delete (production projects)")
			f.BoolVar(&approve, "approve", false, "mint a project.delete approval token and use it (production projects)")
		},
		Prepare: func(x *call) error {
			if !approve {
				return nil
			}
			id := x.args[0]
			var ap api.ApprovalResponse
			if err := x.cl.do(x.c.Context(), http.MethodPost, projectPath(id)+"/approvals",
				&api.ApprovalRequest{Action: api.ActionProjectDelete}, &ap); err != nil {
				return err
			}
			if ap.Approval.Token == "" {
				return fmt.Errorf("POST %s/approvals: unexpected response: no token", projectPath(id))
			}
			token = ap.Approval.Token
			fmt.Fprintf(x.c.ErrOrStderr(), "Minted approval %s for %s on project %s.\n", ap.Approval.ID, ap.Approval.Action, id)
			return nil
		},
		Method: http.MethodDelete,
		Path: func(x *call) string {
			if token != "" {
				return projectPath(x.args[0]) + "?approval_token=" + url.QueryEscape(token)
			}
			return projectPath(x.args[0])
		},
		Failed: func(_ *call, err error) error {
			if token == "" && apiStatus(err) == http.StatusForbidden && strings.Contains(err.Error(), "approval token") {
				return fmt.Errorf("%w (pass --approve to mint one and delete)", err)
			}
			return err
		},
		Job:     jobOf,
		Started: func(x *call, _ *api.JobResponse) string { return "Deleting project " + x.args[0] },
		Wait:    "wait until the project is deleted (or the deletion failed)",
		Print:   printProjectStateAfter[api.JobResponse],
	})
	cmd.MarkFlagsMutuallyExclusive("approve", "approval-token")
	return cmd
}

func newProjectsConnectionsCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.ConnectionsResponse]{
		Use: "connections PROJECT_ID", Aliases: []string{"conn", "urls"}, Args: cobra.ExactArgs(1), JSON: true,
		Short: "Print a project's connection URLs (they hold the current password)",
		Path:  func(x *call) string { return projectPath(x.args[0]) + "/connections" },
		Print: func(x *call, r *api.ConnectionsResponse) error {
			c := r.Connections
			return printFields(x.out(), "%-12s%s\n", [][]string{{"Direct:", c.DirectURL}, {"Pooled:", c.PooledURL}, {"Username:", c.Username}})
		},
	})
}

// ---- output helpers shared by the client commands ---------------------------------------------------

// printJSON writes an API answer indented (as it came when it is not JSON).
func printJSON(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	if json.Indent(&buf, bytes.TrimSpace(raw), "", "  ") != nil {
		buf.Reset()
		buf.Write(bytes.TrimSpace(raw))
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// decode unmarshals an answer read with doRaw, with do's error.
func decode(method, path string, raw []byte, out any) error {
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: unexpected response: %w", method, redactPath(path), err)
	}
	return nil
}

// humanBytes formats a size in binary units: 0 B, 512 B, 1.5 KiB, 10.0 GiB.
func humanBytes(n int64) string { return api.FormatBytes(n) }
