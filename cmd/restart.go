package cmd

import (
	"encoding/json"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/api"
)

// restartResult is the result of a completed project.restart job.
type restartResult struct {
	StartedAt     string `json:"started_at"`
	SessionsEnded int    `json:"sessions_ended"`
}

func newProjectsRestartCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.JobResponse]{
		Use:     "restart PROJECT_ID",
		Short:   "Restart a project's server and its pooler in a job (the sessions open end; administrators only)",
		Example: `  appliance projects restart prj_... --wait`,
		Args:    cobra.ExactArgs(1),
		Method:  http.MethodPost,
		Path:    func(x *call) string { return projectPath(x.args[0]) + "/restart" },
		Job:     jobOf,
		Started: func(x *call, _ *api.JobResponse) string { return "Restarting project " + x.args[0] },
		Wait:    "wait until the server and its pooler run again (or the restart failed)",
		Print: func(x *call, _ *api.JobResponse) error {
			var r restartResult
			if len(x.job.Result) == 0 || json.Unmarshal(x.job.Result, &r) != nil || r.StartedAt == "" {
				return nil
			}
			x.printf("Restarted: the server started at %s; %d client sessions ended.\n", r.StartedAt, r.SessionsEnded)
			return nil
		},
	})
}
