package cmd

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
)

// The project commands of scale to zero (issue 33) and the project's settings: `projects update`,
// `projects suspend`, `projects resume` (in the projects group, cmd/projects.go).

func newProjectsUpdateCmd(o *clientOpts) *cobra.Command {
	var req api.PatchProjectRequest
	var name, env, plan, stmt, idleTx string
	var suspendAfter int
	return newAPICmd(o, apiCmd[api.ProjectResponse]{
		Use:   "update PROJECT_ID",
		Short: "Change a project's settings (only the flags given change)",
		Example: `  appliance projects update prj_... --suspend-after-seconds 600
  appliance projects update prj_... --suspend-after-seconds 0     # never suspend
  appliance projects update prj_... --name shop --statement-timeout 30s`,
		Args: cobra.ExactArgs(1), JSON: true, Method: http.MethodPatch,
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&name, "name", "", "display name, 1 to 63 characters")
			f.StringVar(&env, "environment", "", "production, staging or development")
			f.StringVar(&plan, "plan", "", "free, pro or scale (max_connections changes with a restart)")
			f.StringVar(&stmt, "statement-timeout", "", "PostgreSQL duration such as 30s, 5min or 0 (no limit)")
			f.StringVar(&idleTx, "idle-transaction-timeout", "", "idle_in_transaction_session_timeout, a PostgreSQL duration")
			f.IntVar(&suspendAfter, "suspend-after-seconds", 0, "suspend the project after this many idle seconds (0: never; 60 to 2592000); the next connection wakes it")
		},
		Validate: func(x *call) error {
			f := x.c.Flags()
			for flag, dst := range map[string]**string{"name": &req.Name, "environment": &req.Environment, "plan": &req.Plan,
				"statement-timeout": &req.StatementTimeout, "idle-transaction-timeout": &req.IdleTransactionTimeout} {
				if f.Changed(flag) {
					v, _ := f.GetString(flag)
					*dst = &v
				}
			}
			if f.Changed("suspend-after-seconds") {
				req.SuspendAfterSeconds = &suspendAfter
			}
			if f.NFlag() == 0 || (req == api.PatchProjectRequest{}) {
				return errors.New("nothing to change: give at least one of --name, --environment, --plan, --statement-timeout, --idle-transaction-timeout, --suspend-after-seconds")
			}
			return nil
		},
		Path:  func(x *call) string { return projectPath(x.args[0]) },
		Body:  func(*call) any { return &req },
		Need:  func(r *api.ProjectResponse) string { return missing(r.Project == nil, "project") },
		Print: func(x *call, r *api.ProjectResponse) error { return printProject(x.out(), r.Project) },
	})
}

// suspendAfterText is suspend_after_seconds for people.
func suspendAfterText(secs int) string {
	if secs == 0 {
		return "never"
	}
	return fmt.Sprintf("%d s idle", secs)
}

func newProjectsSuspendCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.ProjectResponse]{
		Use:     "suspend PROJECT_ID",
		Short:   "Suspend a project now: its server and pooler stop (sessions end; administrators only) until the next connection wakes it",
		Example: `  appliance projects suspend prj_...`,
		Args:    cobra.ExactArgs(1), JSON: true, Method: http.MethodPost,
		Path: func(x *call) string { return projectPath(x.args[0]) + "/suspend" },
		Need: func(r *api.ProjectResponse) string { return missing(r.Project == nil, "project") },
		Print: func(x *call, r *api.ProjectResponse) error {
			return x.printf("Project %s is %s: the next connection to its ports wakes it.\n", r.Project.ID, r.Project.RuntimeStatus)
		},
	})
}

func newProjectsResumeCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.ProjectResponse]{
		Use:     "resume PROJECT_ID",
		Short:   "Wake a suspended project now (a running one is left as it is)",
		Example: `  appliance projects resume prj_...`,
		Args:    cobra.ExactArgs(1), JSON: true, Method: http.MethodPost,
		Path: func(x *call) string { return projectPath(x.args[0]) + "/resume" },
		Need: func(r *api.ProjectResponse) string { return missing(r.Project == nil, "project") },
		Print: func(x *call, r *api.ProjectResponse) error {
			return x.printf("Project %s is %s.\n", r.Project.ID, r.Project.RuntimeStatus)
		},
	})
}
