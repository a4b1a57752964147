package cmd

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
)

var _ = registerClientGroup("previews", []string{"preview"}, "Preview databases of a project: clones or empty copies with their own instance, deleted after a TTL",
	newPreviewsListCmd, newPreviewsCreateCmd, newPreviewsGetCmd, newPreviewsConnectionsCmd,
	previewJobCmd("reset", "Make a preview again from its source (its writes are gone; its URL stays)", http.MethodPost, "/reset"),
	newPreviewsExtendCmd,
	previewJobCmd("delete", "Delete a preview and everything it had", http.MethodDelete, ""))

func previewPath(id string) string { return "/v1/preview-databases/" + seg(id) }

func newPreviewsListCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.PreviewList]{
		Use: "list PROJECT_ID", Aliases: []string{"ls"}, Short: "List a project's previews", Args: cobra.ExactArgs(1), JSON: true,
		Path:    func(x *call) string { return projectPath(x.args[0]) + "/preview-databases" },
		Columns: []string{"ID", "NAME", "MODE", "STATE", "EXPIRES"},
		Rows: func(l *api.PreviewList) [][]string {
			return rowsOf(l.PreviewDatabases, func(p *api.PreviewDatabase) []string {
				return []string{p.ID, p.Name, p.Mode, p.State, stamp(p.TTLExpiresAt)}
			})
		},
	})
}

func newPreviewsCreateCmd(o *clientOpts) *cobra.Command {
	var req api.CreatePreviewRequest
	var ttl int
	return newAPICmd(o, apiCmd[api.PreviewJobResponse]{
		Use:   "create PROJECT_ID",
		Short: "Create a preview: a clone of the project's data as of now (default) or an empty copy",
		Example: `  appliance previews create prj_... --name feature-x --ttl-hours 48 --wait
  psql "$(appliance previews connections <preview id>)"`,
		Args: cobra.ExactArgs(1),
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&req.Name, "name", "", "its name (default: generated)")
			f.StringVar(&req.Mode, "mode", "", "clone (default) or empty")
			f.StringVar(&req.SourceRestoreTime, "as-of", "", "a clone of the project as of this RFC 3339 time (within its point-in-time window)")
			f.IntVar(&ttl, "ttl-hours", api.DefaultPreviewTTLHours, "hours until it is deleted (1 to 720)")
		},
		Method: http.MethodPost,
		Path:   func(x *call) string { return projectPath(x.args[0]) + "/preview-databases" },
		Body: func(x *call) any {
			if x.c.Flags().Changed("ttl-hours") {
				req.TTLHours = &ttl
			}
			return &req
		},
		Need: func(r *api.PreviewJobResponse) string { return missing(r.Preview == nil, "preview") },
		Job:  func(r *api.PreviewJobResponse) *api.Job { return r.Job },
		Started: func(_ *call, r *api.PreviewJobResponse) string {
			return fmt.Sprintf("Creating preview %s (%s, %s)", r.Preview.ID, r.Preview.Name, r.Preview.Mode)
		},
		Wait: "wait until it accepts connections",
		Print: func(x *call, r *api.PreviewJobResponse) error {
			return x.printf("Preview %s is active until %s; its URLs: appliance previews connections %s\n",
				r.Preview.ID, stamp(r.Preview.TTLExpiresAt), r.Preview.ID)
		},
	})
}

func newPreviewsGetCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.PreviewList]{
		Use: "get PROJECT_ID PREVIEW_ID", Short: "Show a preview", Args: cobra.ExactArgs(2),
		// One preview of a project, read through the project's list.
		Path: func(x *call) string { return projectPath(x.args[0]) + "/preview-databases" },
		Print: func(x *call, l *api.PreviewList) error {
			i := slices.IndexFunc(l.PreviewDatabases, func(p *api.PreviewDatabase) bool { return p.ID == x.args[1] })
			if i < 0 {
				return fmt.Errorf("project %s has no preview %s", x.args[0], x.args[1])
			}
			p := l.PreviewDatabases[i]
			return writeTable(x.out(), nil, [][]string{{"ID", p.ID}, {"NAME", p.Name}, {"MODE", p.Mode + " (" + p.SourceKind + ")"},
				{"STATE", p.State}, {"DATABASE", p.DatabaseName}, {"EXPIRES", stamp(p.TTLExpiresAt)},
				opt("LAST ERROR", p.LastError)})
		},
	})
}

func newPreviewsConnectionsCmd(o *clientOpts) *cobra.Command {
	var pooled bool
	return newAPICmd(o, apiCmd[api.ConnectionsResponse]{
		Use: "connections PREVIEW_ID", Short: "Print a preview's connection URL (its own credential)", Args: cobra.ExactArgs(1),
		Flags: func(f *pflag.FlagSet) {
			f.BoolVar(&pooled, "pooled", false, "the PgBouncer URL instead of the direct one")
		},
		Path: func(x *call) string { return previewPath(x.args[0]) + "/connections" },
		Print: func(x *call, r *api.ConnectionsResponse) error {
			if pooled {
				fmt.Fprintln(x.out(), r.Connections.PooledURL)
			} else {
				fmt.Fprintln(x.out(), r.Connections.DirectURL)
			}
			return nil
		},
	})
}

func newPreviewsExtendCmd(o *clientOpts) *cobra.Command {
	var ttl int
	return newAPICmd(o, apiCmd[api.PreviewResponse]{
		Use: "extend PREVIEW_ID --ttl-hours N", Short: "Move a preview's deletion to N hours from now", Args: cobra.ExactArgs(1),
		Flags: func(f *pflag.FlagSet) {
			f.IntVar(&ttl, "ttl-hours", api.DefaultPreviewTTLHours, "hours from now (1 to 720)")
		},
		Method: http.MethodPost,
		Path:   func(x *call) string { return previewPath(x.args[0]) + "/extend" },
		Body:   func(*call) any { return api.ExtendPreviewRequest{TTLHours: ttl} },
		Need:   func(r *api.PreviewResponse) string { return missing(r.Preview == nil, "preview") },
		Print: func(x *call, r *api.PreviewResponse) error {
			return x.printf("Preview %s is kept until %s.\n", r.Preview.ID, stamp(r.Preview.TTLExpiresAt))
		},
	})
}

// previewJobCmd is reset or delete: a job on one preview.
func previewJobCmd(use, short, method, suffix string) func(*clientOpts) *cobra.Command {
	return func(o *clientOpts) *cobra.Command {
		return jobCmd(o, apiCmd[api.JobResponse]{
			Use: use + " PREVIEW_ID", Short: short, Method: method, Wait: "wait until the job ends",
		}, previewPath, suffix, "Preview %s: "+use)
	}
}
