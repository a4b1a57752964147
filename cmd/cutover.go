package cmd

import (
	"fmt"
	"net/http"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
)

var _ = registerClientGroup("cutover", []string{"cutovers"}, "Cutover requests: make a preview's data its project's (an organization admin approves)",
	newCutoverListCmd, newCutoverRequestCmd, newCutoverGetCmd, newCutoverApproveCmd, newCutoverRejectCmd)

func cutoverPath(projectID string) string { return projectPath(projectID) + "/cutover-requests" }

func newCutoverListCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.CutoverRequestList]{
		Use: "list PROJECT_ID", Aliases: []string{"ls"}, Short: "List a project's cutover requests, newest first",
		Args: cobra.ExactArgs(1), JSON: true,
		Path:    func(x *call) string { return cutoverPath(x.args[0]) },
		Columns: []string{"ID", "PREVIEW", "STATUS", "CREATED"},
		Rows: func(l *api.CutoverRequestList) [][]string {
			return rowsOf(l.CutoverRequests, func(r *api.CutoverRequest) []string {
				return []string{r.ID, r.PreviewDatabaseID, r.Status, stamp(r.CreatedAt)}
			})
		},
	})
}

// needCutover is the Need of an answer holding a cutover request.
func needCutover(r *api.CutoverRequestResponse) string {
	return missing(r.CutoverRequest == nil, "cutover request")
}

func newCutoverRequestCmd(o *clientOpts) *cobra.Command {
	var req api.CreateCutoverRequest
	return newAPICmd(o, apiCmd[api.CutoverRequestResponse]{
		Use:     "request PROJECT_ID PREVIEW_ID",
		Short:   "Ask for the preview's data to become the project's",
		Example: `  appliance cutover request prj_... prv_... --note "schema v2 is ready"`,
		Args:    cobra.ExactArgs(2),
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&req.CustomerNote, "note", "", "why, for whoever approves it")
			f.StringVar(&req.ExternalTicketRef, "ticket", "", "a change ticket elsewhere")
		},
		Method: http.MethodPost,
		Path:   func(x *call) string { return cutoverPath(x.args[0]) },
		Body: func(x *call) any {
			req.PreviewID = x.args[1]
			return &req
		},
		Need: needCutover,
		Print: func(x *call, r *api.CutoverRequestResponse) error {
			return x.printf("Cutover request %s is open: an organization admin approves it with appliance cutover approve %s %s\n",
				r.CutoverRequest.ID, x.args[0], r.CutoverRequest.ID)
		},
	})
}

func newCutoverGetCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.CutoverRequestResponse]{
		Use: "get PROJECT_ID REQUEST_ID", Short: "Show a cutover request", Args: cobra.ExactArgs(2),
		Path: func(x *call) string { return cutoverPath(x.args[0]) + "/" + seg(x.args[1]) },
		Need: needCutover,
		Print: func(x *call, res *api.CutoverRequestResponse) error {
			r := res.CutoverRequest
			return writeTable(x.out(), nil, [][]string{{"ID", r.ID}, {"PREVIEW", r.PreviewDatabaseID}, {"STATUS", r.Status},
				{"REQUESTED BY", r.RequestedByActorKind + " " + r.RequestedByActorID}, opt("NOTE", r.CustomerNote),
				opt("TICKET", r.ExternalTicketRef), opt("ACKNOWLEDGED BY", r.AckByUserID), opt("OPERATOR NOTE", r.OperatorNote),
				opt("REJECTED", r.RejectedReason), opt("BACKUP BEFORE", r.PreCutoverBackupID), opt("PROMOTION JOB", r.PromoteJobID),
				opt("LAST ERROR", r.LastError)})
		},
	})
}

func newCutoverApproveCmd(o *clientOpts) *cobra.Command {
	var req api.ApproveCutoverRequest
	return newAPICmd(o, apiCmd[api.CutoverJobResponse]{
		Use:   "approve PROJECT_ID REQUEST_ID",
		Short: "Approve a cutover (admin role): the project is backed up, then the preview's data swapped in",
		Args:  cobra.ExactArgs(2),
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&req.OperatorNote, "note", "", "a note on the approval")
			f.StringVar(&req.ExternalTicketRef, "ticket", "", "a change ticket elsewhere (replaces the request's)")
		},
		Method: http.MethodPost,
		Path:   func(x *call) string { return cutoverPath(x.args[0]) + "/" + seg(x.args[1]) + "/approve" },
		Body:   func(*call) any { return &req },
		Need: func(r *api.CutoverJobResponse) string {
			return missing(r.CutoverRequest == nil, "cutover request")
		},
		Job: func(r *api.CutoverJobResponse) *api.Job { return r.Job },
		Started: func(_ *call, r *api.CutoverJobResponse) string {
			return fmt.Sprintf("Cutover %s approved; backup %s first, then the promotion", r.CutoverRequest.ID, r.CutoverRequest.PreCutoverBackupID)
		},
		Wait: "wait until the promotion ends",
		Print: func(x *call, r *api.CutoverJobResponse) error {
			return x.printf("The project's database holds the preview's data; backup %s holds what it had.\n", r.CutoverRequest.PreCutoverBackupID)
		},
	})
}

func newCutoverRejectCmd(o *clientOpts) *cobra.Command {
	var req api.RejectCutoverRequest
	return newAPICmd(o, apiCmd[api.CutoverRequestResponse]{
		Use: "reject PROJECT_ID REQUEST_ID --reason TEXT", Short: "Reject a cutover request (admin role)", Args: cobra.ExactArgs(2),
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&req.RejectedReason, "reason", "", "why (required)")
			f.StringVar(&req.OperatorNote, "note", "", "a note on the rejection")
		},
		Method: http.MethodPost,
		Path:   func(x *call) string { return cutoverPath(x.args[0]) + "/" + seg(x.args[1]) + "/reject" },
		Body:   func(*call) any { return &req },
		Need:   needCutover,
		Print: func(x *call, r *api.CutoverRequestResponse) error {
			return x.printf("Cutover request %s is rejected.\n", r.CutoverRequest.ID)
		},
	})
}
