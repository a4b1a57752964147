package cmd

import (
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/appliance"
)

var _ = registerClientCommand(newCutoverCmd)

func newCutoverCmd(o *clientOpts) *cobra.Command {
	return groupCmd("cutover", []string{"cutovers"}, "Cutover requests: make a preview's data its project's (an organization admin approves)",
		newCutoverListCmd(o), newCutoverRequestCmd(o), newCutoverGetCmd(o), newCutoverApproveCmd(o), newCutoverRejectCmd(o))
}

func cutoverPath(projectID string) string { return projectPath(projectID) + "/cutover-requests" }

func newCutoverListCmd(o *clientOpts) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list PROJECT_ID",
		Aliases: []string{"ls"},
		Short:   "List a project's cutover requests, newest first",
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var list appliance.CutoverRequestList
			if done, err := o.show(c, cutoverPath(args[0]), asJSON, &list); done || err != nil {
				return err
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tPREVIEW\tSTATUS\tCREATED")
			for _, r := range list.CutoverRequests {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ID, r.PreviewDatabaseID, r.Status, r.CreatedAt.UTC().Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON answer")
	return cmd
}

func newCutoverRequestCmd(o *clientOpts) *cobra.Command {
	var req appliance.CreateCutoverRequest
	cmd := &cobra.Command{
		Use:     "request PROJECT_ID PREVIEW_ID",
		Short:   "Ask for the preview's data to become the project's",
		Example: `  appliance cutover request prj_... prv_... --note "schema v2 is ready"`,
		Args:    cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := o.authed()
			if err != nil {
				return err
			}
			req.PreviewID = args[1]
			var res appliance.CutoverRequestResponse
			if err := cl.do(c.Context(), http.MethodPost, cutoverPath(args[0]), &req, &res); err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "Cutover request %s is open: an organization admin approves it with appliance cutover approve %s %s\n",
				res.CutoverRequest.ID, args[0], res.CutoverRequest.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&req.CustomerNote, "note", "", "why, for whoever approves it")
	cmd.Flags().StringVar(&req.ExternalTicketRef, "ticket", "", "a change ticket elsewhere")
	return cmd
}

func newCutoverGetCmd(o *clientOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "get PROJECT_ID REQUEST_ID",
		Short: "Show a cutover request",
		Args:  cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := o.authed()
			if err != nil {
				return err
			}
			var res appliance.CutoverRequestResponse
			if err := cl.do(c.Context(), http.MethodGet, cutoverPath(args[0])+"/"+seg(args[1]), nil, &res); err != nil {
				return err
			}
			return printCutover(c.OutOrStdout(), res.CutoverRequest)
		},
	}
}

func printCutover(w io.Writer, r *appliance.CutoverRequest) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ID\t%s\nPREVIEW\t%s\nSTATUS\t%s\nREQUESTED BY\t%s %s\n", r.ID, r.PreviewDatabaseID, r.Status,
		r.RequestedByActorKind, r.RequestedByActorID)
	for _, f := range []struct{ name, v string }{{"NOTE", r.CustomerNote}, {"TICKET", r.ExternalTicketRef},
		{"ACKNOWLEDGED BY", r.AckByUserID}, {"OPERATOR NOTE", r.OperatorNote}, {"REJECTED", r.RejectedReason},
		{"BACKUP BEFORE", r.PreCutoverBackupID}, {"PROMOTION JOB", r.PromoteJobID}, {"LAST ERROR", r.LastError}} {
		if f.v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", f.name, f.v)
		}
	}
	return tw.Flush()
}

func newCutoverApproveCmd(o *clientOpts) *cobra.Command {
	var req appliance.ApproveCutoverRequest
	var wait bool
	cmd := &cobra.Command{
		Use:   "approve PROJECT_ID REQUEST_ID",
		Short: "Approve a cutover (admin role): the project is backed up, then the preview's data swapped in",
		Args:  cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := o.authed()
			if err != nil {
				return err
			}
			var res appliance.CutoverJobResponse
			if err := cl.do(c.Context(), http.MethodPost, cutoverPath(args[0])+"/"+seg(args[1])+"/approve", &req, &res); err != nil {
				return err
			}
			jobStarted(c, fmt.Sprintf("Cutover %s approved; backup %s first, then the promotion", res.CutoverRequest.ID,
				res.CutoverRequest.PreCutoverBackupID), res.Job, wait)
			if !wait {
				return nil
			}
			if _, err := waitJob(c, cl, res.Job); err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "The project's database holds the preview's data; backup %s holds what it had.\n", res.CutoverRequest.PreCutoverBackupID)
			return nil
		},
	}
	cmd.Flags().StringVar(&req.OperatorNote, "note", "", "a note on the approval")
	cmd.Flags().StringVar(&req.ExternalTicketRef, "ticket", "", "a change ticket elsewhere (replaces the request's)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the promotion ends")
	return cmd
}

func newCutoverRejectCmd(o *clientOpts) *cobra.Command {
	var req appliance.RejectCutoverRequest
	cmd := &cobra.Command{
		Use:   "reject PROJECT_ID REQUEST_ID --reason TEXT",
		Short: "Reject a cutover request (admin role)",
		Args:  cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := o.authed()
			if err != nil {
				return err
			}
			var res appliance.CutoverRequestResponse
			if err := cl.do(c.Context(), http.MethodPost, cutoverPath(args[0])+"/"+seg(args[1])+"/reject", &req, &res); err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "Cutover request %s is rejected.\n", res.CutoverRequest.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&req.RejectedReason, "reason", "", "why (required)")
	cmd.Flags().StringVar(&req.OperatorNote, "note", "", "a note on the rejection")
	return cmd
}
