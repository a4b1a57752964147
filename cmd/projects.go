package cmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/appliance"
)

var _ = registerClientCommand(newProjectsCmd)

func newProjectsCmd(o *clientOpts) *cobra.Command {
	return groupCmd("projects", []string{"project"}, "List, create and delete projects (PostgreSQL instances) and show their connection URLs",
		newProjectsListCmd(o), newProjectsGetCmd(o), newProjectsCreateCmd(o), newProjectsDeleteCmd(o),
		newProjectsConnectionsCmd(o))
}

func projectPath(id string) string { return "/v1/projects/" + seg(id) }

func newProjectsListCmd(o *clientOpts) *cobra.Command {
	var (
		org    string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the organization's projects",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			path := "/v1/projects"
			if org != "" {
				path += "?organization_id=" + url.QueryEscape(org)
			}
			var list appliance.ProjectList
			if done, err := o.show(c, path, asJSON, &list); done || err != nil {
				return err
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tSTATE\tRUNTIME\tPLAN\tENV\tVERSION\tCREATED")
			for _, p := range list.Projects {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.Name, p.State, p.RuntimeStatus, p.Plan,
					p.Environment, firstNonEmpty(p.PostgresVersion, "-"), p.CreatedAt.UTC().Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&org, "org", "", "organization ID (required for platform administrators; default: the credential's organization)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON answer")
	return cmd
}

func newProjectsGetCmd(o *clientOpts) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get PROJECT_ID",
		Short: "Show a project",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var res appliance.ProjectResponse
			if done, err := o.show(c, projectPath(args[0]), asJSON, &res); done || err != nil {
				return err
			}
			if res.Project == nil {
				return fmt.Errorf("GET %s: unexpected response: no project", projectPath(args[0]))
			}
			printProject(c.OutOrStdout(), res.Project)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON answer")
	return cmd
}

// printProject prints a project as an aligned block of labelled rows.
func printProject(w io.Writer, p *appliance.Project) {
	rows := [][2]string{
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
	}
	if p.StatementTimeout != "" {
		rows = append(rows, [2]string{"Statement timeout:", p.StatementTimeout})
	}
	if p.IdleTransactionTimeout != "" {
		rows = append(rows, [2]string{"Idle tx timeout:", p.IdleTransactionTimeout})
	}
	rows = append(rows, [2]string{"Latest job:", firstNonEmpty(p.LatestJobID, "-")})
	if p.LastError != "" {
		rows = append(rows, [2]string{"Last error:", p.LastError})
	}
	rows = append(rows, [2]string{"Created:", p.CreatedAt.UTC().Format(time.RFC3339)},
		[2]string{"Updated:", p.UpdatedAt.UTC().Format(time.RFC3339)})
	for _, r := range rows {
		fmt.Fprintf(w, "%-19s%s\n", r[0], r[1])
	}
}

func newProjectsCreateCmd(o *clientOpts) *cobra.Command {
	var (
		req  appliance.CreateProjectRequest
		wait bool
	)
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a project: a PostgreSQL instance of its own, provisioned by a job",
		Long: `Create a project. The appliance provisions its PostgreSQL instance in a project.provision job; the
command prints the project and job IDs at once, or with --wait waits until the job has ended.
New projects are production projects unless --environment says otherwise: deleting one needs an approval.`,
		Example: `  appliance projects create shop
  appliance projects create scratch --environment development --plan free --wait`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			req.Name = args[0]
			cl, err := o.authed()
			if err != nil {
				return err
			}
			var res appliance.ProjectJobResponse
			if err := cl.do(c.Context(), http.MethodPost, "/v1/projects", &req, &res); err != nil {
				return err
			}
			if res.Project == nil || res.Job == nil {
				return errors.New("POST /v1/projects: unexpected response: no project or job")
			}
			p := res.Project
			return projectJobStarted(c, cl, fmt.Sprintf("Creating project %s (%s), %s, plan %s", p.ID, p.Name, p.Environment, p.Plan), res.Job, wait, p.ID)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Plan, "plan", "", "plan: free (default), pro or scale")
	f.StringVar(&req.Environment, "environment", "", "environment: production (default), staging or development")
	f.StringVar(&req.OrganizationID, "org", "", "organization ID (platform administrators only; others create in their own organization)")
	f.BoolVar(&wait, "wait", false, "wait until the project is provisioned (or provisioning failed)")
	return cmd
}

// printProjectState prints a project's state after a job that changed it ended.
func printProjectState(c *cobra.Command, cl *apiClient, id string) error {
	var res appliance.ProjectResponse
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
		token         string
		approve, wait bool
	)
	cmd := &cobra.Command{
		Use:   "delete PROJECT_ID",
		Short: "Delete a project, its instance, its data and its backups",
		Long: `Delete a project: its PostgreSQL instance, its data and its backups, in a project.delete job.
A production project needs a single-use approval token: pass one minted earlier with --approval-token, or
--approve to mint one now (POST /v1/projects/<id>/approvals) and use it at once.`,
		Example: `  appliance projects delete prj_... --wait
  appliance projects delete prj_... --approve --wait`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			id := args[0]
			cl, err := o.authed()
			if err != nil {
				return err
			}
			if approve {
				var ap appliance.ApprovalResponse
				if err := cl.do(c.Context(), http.MethodPost, projectPath(id)+"/approvals",
					&appliance.ApprovalRequest{Action: appliance.ActionProjectDelete}, &ap); err != nil {
					return err
				}
				if ap.Approval.Token == "" {
					return fmt.Errorf("POST %s/approvals: unexpected response: no token", projectPath(id))
				}
				token = ap.Approval.Token
				fmt.Fprintf(c.ErrOrStderr(), "Minted approval %s for %s on project %s.\n", ap.Approval.ID, ap.Approval.Action, id)
			}
			path := projectPath(id)
			if token != "" {
				path += "?approval_token=" + url.QueryEscape(token)
			}
			var res appliance.JobResponse
			if err := cl.do(c.Context(), http.MethodDelete, path, nil, &res); err != nil {
				if token == "" && apiStatus(err) == http.StatusForbidden && strings.Contains(err.Error(), "approval token") {
					return fmt.Errorf("%w (pass --approve to mint one and delete)", err)
				}
				return err
			}
			if res.Job == nil {
				return fmt.Errorf("DELETE %s: unexpected response: no job", projectPath(id))
			}
			return projectJobStarted(c, cl, "Deleting project "+id, res.Job, wait, id)
		},
	}
	f := cmd.Flags()
	f.StringVar(&token, "approval-token", "", "single-use approval token for project.delete (production projects)")
	f.BoolVar(&approve, "approve", false, "mint a project.delete approval token and use it (production projects)")
	f.BoolVar(&wait, "wait", false, "wait until the project is deleted (or the deletion failed)")
	cmd.MarkFlagsMutuallyExclusive("approve", "approval-token")
	return cmd
}

func newProjectsConnectionsCmd(o *clientOpts) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "connections PROJECT_ID",
		Aliases: []string{"conn", "urls"},
		Short:   "Print a project's connection URLs (they hold the current password)",
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			path := projectPath(args[0]) + "/connections"
			var res appliance.ConnectionsResponse
			if done, err := o.show(c, path, asJSON, &res); done || err != nil {
				return err
			}
			out := c.OutOrStdout()
			fmt.Fprintf(out, "%-12s%s\n", "Direct:", res.Connections.DirectURL)
			fmt.Fprintf(out, "%-12s%s\n", "Pooled:", res.Connections.PooledURL)
			fmt.Fprintf(out, "%-12s%s\n", "Username:", res.Connections.Username)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON answer")
	return cmd
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

// show GETs path: with asJSON it prints the API's answer as it came and is done; otherwise it decodes the
// answer into out for the command to print.
func (o *clientOpts) show(c *cobra.Command, path string, asJSON bool, out any) (done bool, err error) {
	cl, err := o.authed()
	if err != nil {
		return true, err
	}
	raw, err := cl.doRaw(c.Context(), http.MethodGet, path, nil)
	if err != nil {
		return true, err
	}
	if asJSON {
		return true, printJSON(c.OutOrStdout(), raw)
	}
	return false, decode(http.MethodGet, path, raw, out)
}

// decode unmarshals an answer read with doRaw, with do's error.
func decode(method, path string, raw []byte, out any) error {
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: unexpected response: %w", method, redactPath(path), err)
	}
	return nil
}

// humanBytes formats a size in binary units: 0 B, 512 B, 1.5 KiB, 10.0 GiB.
func humanBytes(n int64) string { return appliance.FormatBytes(n) }
