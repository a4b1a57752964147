package cmd

import (
	"fmt"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/appliance"
)

var _ = registerClientCommand(newPreviewsCmd)

func newPreviewsCmd(o *clientOpts) *cobra.Command {
	return groupCmd("previews", []string{"preview"}, "Preview databases of a project: clones or empty copies with their own instance, deleted after a TTL",
		newPreviewsListCmd(o), newPreviewsCreateCmd(o), newPreviewsGetCmd(o), newPreviewsConnectionsCmd(o),
		newPreviewJobCmd(o, "reset", "Make a preview again from its source (its writes are gone; its URL stays)", http.MethodPost, "/reset"),
		newPreviewsExtendCmd(o),
		newPreviewJobCmd(o, "delete", "Delete a preview and everything it had", http.MethodDelete, ""))
}

func previewPath(id string) string { return "/v1/preview-databases/" + seg(id) }

// findPreview reads one preview of a project through the project's list.
func findPreview(c *cobra.Command, cl *apiClient, projectID, previewID string) (*appliance.PreviewDatabase, error) {
	var list appliance.PreviewList
	if err := cl.do(c.Context(), http.MethodGet, projectPath(projectID)+"/preview-databases", nil, &list); err != nil {
		return nil, err
	}
	for _, p := range list.PreviewDatabases {
		if p.ID == previewID {
			return p, nil
		}
	}
	return nil, fmt.Errorf("project %s has no preview %s", projectID, previewID)
}

func newPreviewsListCmd(o *clientOpts) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list PROJECT_ID",
		Aliases: []string{"ls"},
		Short:   "List a project's previews",
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var list appliance.PreviewList
			if done, err := o.show(c, projectPath(args[0])+"/preview-databases", asJSON, &list); done || err != nil {
				return err
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tMODE\tSTATE\tEXPIRES")
			for _, p := range list.PreviewDatabases {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.ID, p.Name, p.Mode, p.State, p.TTLExpiresAt.UTC().Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON answer")
	return cmd
}

func newPreviewsCreateCmd(o *clientOpts) *cobra.Command {
	var req appliance.CreatePreviewRequest
	var ttl int
	var wait bool
	cmd := &cobra.Command{
		Use:   "create PROJECT_ID",
		Short: "Create a preview: a clone of the project's data as of now (default) or an empty copy",
		Example: `  appliance previews create prj_... --name feature-x --ttl-hours 48 --wait
  psql "$(appliance previews connections <preview id>)"`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := o.authed()
			if err != nil {
				return err
			}
			if c.Flags().Changed("ttl-hours") {
				req.TTLHours = &ttl
			}
			var res appliance.PreviewJobResponse
			if err := cl.do(c.Context(), http.MethodPost, projectPath(args[0])+"/preview-databases", &req, &res); err != nil {
				return err
			}
			jobStarted(c, fmt.Sprintf("Creating preview %s (%s, %s)", res.Preview.ID, res.Preview.Name, res.Preview.Mode), res.Job, wait)
			if !wait {
				return nil
			}
			if _, err := waitJob(c, cl, res.Job); err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "Preview %s is active until %s; its URLs: appliance previews connections %s\n",
				res.Preview.ID, res.Preview.TTLExpiresAt.UTC().Format(time.RFC3339), res.Preview.ID)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Name, "name", "", "its name (default: generated)")
	f.StringVar(&req.Mode, "mode", "", "clone (default) or empty")
	f.StringVar(&req.SourceRestoreTime, "as-of", "", "a clone of the project as of this RFC 3339 time (within its point-in-time window)")
	f.IntVar(&ttl, "ttl-hours", appliance.DefaultPreviewTTLHours, "hours until it is deleted (1 to 720)")
	f.BoolVar(&wait, "wait", false, "wait until it accepts connections")
	return cmd
}

func newPreviewsGetCmd(o *clientOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "get PROJECT_ID PREVIEW_ID",
		Short: "Show a preview",
		Args:  cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := o.authed()
			if err != nil {
				return err
			}
			p, err := findPreview(c, cl, args[0], args[1])
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "ID\t%s\nNAME\t%s\nMODE\t%s (%s)\nSTATE\t%s\nDATABASE\t%s\nEXPIRES\t%s\n", p.ID, p.Name, p.Mode, p.SourceKind,
				p.State, p.DatabaseName, p.TTLExpiresAt.UTC().Format(time.RFC3339))
			if p.LastError != "" {
				fmt.Fprintf(tw, "LAST ERROR\t%s\n", p.LastError)
			}
			return tw.Flush()
		},
	}
}

func newPreviewsConnectionsCmd(o *clientOpts) *cobra.Command {
	var pooled bool
	cmd := &cobra.Command{
		Use:   "connections PREVIEW_ID",
		Short: "Print a preview's connection URL (its own credential)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := o.authed()
			if err != nil {
				return err
			}
			var res appliance.ConnectionsResponse
			if err := cl.do(c.Context(), http.MethodGet, previewPath(args[0])+"/connections", nil, &res); err != nil {
				return err
			}
			if pooled {
				fmt.Fprintln(c.OutOrStdout(), res.Connections.PooledURL)
			} else {
				fmt.Fprintln(c.OutOrStdout(), res.Connections.DirectURL)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&pooled, "pooled", false, "the PgBouncer URL instead of the direct one")
	return cmd
}

func newPreviewsExtendCmd(o *clientOpts) *cobra.Command {
	var ttl int
	cmd := &cobra.Command{
		Use:   "extend PREVIEW_ID --ttl-hours N",
		Short: "Move a preview's deletion to N hours from now",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := o.authed()
			if err != nil {
				return err
			}
			var res appliance.PreviewResponse
			if err := cl.do(c.Context(), http.MethodPost, previewPath(args[0])+"/extend", appliance.ExtendPreviewRequest{TTLHours: ttl}, &res); err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "Preview %s is kept until %s.\n", res.Preview.ID, res.Preview.TTLExpiresAt.UTC().Format(time.RFC3339))
			return nil
		},
	}
	cmd.Flags().IntVar(&ttl, "ttl-hours", appliance.DefaultPreviewTTLHours, "hours from now (1 to 720)")
	return cmd
}

// newPreviewJobCmd is reset or delete: a job on one preview.
func newPreviewJobCmd(o *clientOpts, use, short, method, suffix string) *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   use + " PREVIEW_ID",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := o.authed()
			if err != nil {
				return err
			}
			var res appliance.JobResponse
			if err := cl.do(c.Context(), method, previewPath(args[0])+suffix, nil, &res); err != nil {
				return err
			}
			jobStarted(c, fmt.Sprintf("Preview %s: %s", args[0], use), res.Job, wait)
			if wait {
				_, err = waitJob(c, cl, res.Job)
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the job ends")
	return cmd
}
