package cmd

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
)

// The plans: anyone signed in (or a key) lists them; platform operators set and delete them, signing in as
// for the orgs commands.
var _ = registerClientGroup("plans", nil, "Project plans: list them; platform operators set and delete them (signs in as you)",
	newPlansListCmd, newPlansSetCmd, newPlansDeleteCmd)

const plansPath = "/v1/plans"

func newPlansListCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.PlanList]{
		Use: "list", Aliases: []string{"ls"}, Short: "List the plans in force, smallest first", JSON: true,
		Path:    func(*call) string { return plansPath },
		Columns: []string{"NAME", "CONNECTIONS", "STORAGE", "KV MiB", "PREVIEWS", "AI USES/MONTH", "MEMORY", "CPU"},
		Rows: func(l *api.PlanList) [][]string {
			return rowsOf(l.Plans, func(p api.Plan) []string {
				return []string{p.Name, strconv.Itoa(p.MaxConnections), humanBytes(p.StorageLimitBytes), strconv.Itoa(p.KVMemoryMB),
					strconv.Itoa(p.PreviewsLimit), strconv.Itoa(p.AIUsesPerMonth), humanBytes(p.MemoryBytes), strconv.FormatFloat(p.CPUCores, 'f', -1, 64)}
			})
		},
	})
}

func newPlansSetCmd(o *clientOpts) *cobra.Command {
	var req api.PutPlanRequest
	var flags *pflag.FlagSet
	return signedInCmd(o, apiCmd[api.PlanChange]{
		Use:   "set NAME [--max-connections N] [--storage-limit-bytes N] ...",
		Short: "Create or change a plan; a change is applied to every project on it",
		Long: `Create or change a plan. A flag not given keeps the plan's value (a new plan needs them all). A
changed plan is applied to every project on it: the connection and storage limits at once, and a
project.apply_plan job per active project for its server (max_connections, memory, CPU) and key-value
store (maxmemory).`,
		Example: `  appliance plans set pro --max-connections 150 --email operator@example.com`,
		Args:    cobra.ExactArgs(1), JSON: true, Method: http.MethodPut,
		Flags: func(f *pflag.FlagSet) {
			flags = f
			f.IntVar(&req.MaxConnections, "max-connections", 0, "the server's max_connections (at least 10)")
			f.Int64Var(&req.StorageLimitBytes, "storage-limit-bytes", 0, "a project's storage limit in bytes (at least 16 MiB)")
			f.IntVar(&req.KVMemoryMB, "kv-memory-mb", 0, "its key-value store's maxmemory in MiB")
			f.IntVar(&req.PreviewsLimit, "previews-limit", 0, "preview databases per project")
			f.IntVar(&req.AIUsesPerMonth, "ai-uses-per-month", 0, "the studio's AI uses per month")
			f.Int64Var(&req.MemoryBytes, "memory-bytes", 0, "the memory its server is held to, in bytes (at least 64 MiB)")
			f.Float64Var(&req.CPUCores, "cpu-cores", 0, "the CPU its server is held to, in cores")
		},
		Prepare: func(x *call) error {
			var list api.PlanList
			if err := x.cl.do(x.c.Context(), http.MethodGet, plansPath, nil, &list); err != nil {
				return err
			}
			i := slices.IndexFunc(list.Plans, func(p api.Plan) bool { return p.Name == x.args[0] })
			if i < 0 {
				for _, name := range []string{"max-connections", "storage-limit-bytes", "kv-memory-mb", "previews-limit", "ai-uses-per-month", "memory-bytes", "cpu-cores"} {
					if !flags.Changed(name) {
						return fmt.Errorf("plan %s is new: --%s is required (every flag is, for a new plan)", x.args[0], name)
					}
				}
				return nil
			}
			cur := list.Plans[i]
			keep := func(name string, set func()) {
				if !flags.Changed(name) {
					set()
				}
			}
			keep("max-connections", func() { req.MaxConnections = cur.MaxConnections })
			keep("storage-limit-bytes", func() { req.StorageLimitBytes = cur.StorageLimitBytes })
			keep("kv-memory-mb", func() { req.KVMemoryMB = cur.KVMemoryMB })
			keep("previews-limit", func() { req.PreviewsLimit = cur.PreviewsLimit })
			keep("ai-uses-per-month", func() { req.AIUsesPerMonth = cur.AIUsesPerMonth })
			keep("memory-bytes", func() { req.MemoryBytes = cur.MemoryBytes })
			keep("cpu-cores", func() { req.CPUCores = cur.CPUCores })
			return nil
		},
		Path: func(x *call) string { return plansPath + "/" + seg(x.args[0]) },
		Body: func(*call) any { return &req },
		Print: func(x *call, r *api.PlanChange) error {
			what := "Changed"
			if r.Created {
				what = "Created"
			}
			return x.printf("%s plan %s; %d project job(s) apply it (appliance jobs get ID).\n", what, r.Plan.Name, len(r.Jobs))
		},
	})
}

func newPlansDeleteCmd(o *clientOpts) *cobra.Command {
	return signedInCmd(o, apiCmd[api.DeletedPlan]{
		Use: "delete NAME", Aliases: []string{"rm"}, Args: cobra.ExactArgs(1), JSON: true, Method: http.MethodDelete,
		Short: "Delete a plan no project is on (never the free plan)",
		Path:  func(x *call) string { return plansPath + "/" + seg(x.args[0]) },
		Print: func(x *call, r *api.DeletedPlan) error { return x.printf("Deleted plan %s.\n", r.Name) },
	})
}

func newOrgsQuotaCmd(o *clientOpts) *cobra.Command {
	var (
		req                api.PatchOrganizationQuotaRequest
		projects, previews int
		storage            int64
		flags              *pflag.FlagSet
	)
	return signedInCmd(o, apiCmd[api.OrganizationQuotaResponse]{
		Use:     "quota ORG_ID [--projects N] [--previews N] [--storage-limit-bytes N | --default]",
		Short:   "Set an organization's quota (what it may hold); --default makes it follow the default again",
		Example: `  appliance orgs quota org_... --projects 50 --email operator@example.com`,
		Args:    cobra.ExactArgs(1), JSON: true, Method: http.MethodPatch,
		Flags: func(f *pflag.FlagSet) {
			flags = f
			f.IntVar(&projects, "projects", 0, "projects it may have (previews not counted)")
			f.IntVar(&previews, "previews", 0, "preview databases over all its projects")
			f.Int64Var(&storage, "storage-limit-bytes", 0, "the storage its projects may add up to, in bytes")
			f.BoolVar(&req.Default, "default", false, "drop its own quota: the default applies again")
		},
		Validate: func(*call) error {
			if flags.Changed("projects") {
				req.ProjectsLimit = &projects
			}
			if flags.Changed("previews") {
				req.PreviewsLimit = &previews
			}
			if flags.Changed("storage-limit-bytes") {
				req.StorageLimitBytes = &storage
			}
			some := req.ProjectsLimit != nil || req.PreviewsLimit != nil || req.StorageLimitBytes != nil
			switch {
			case req.Default && some:
				return errors.New("--default takes no limit with it")
			case !req.Default && !some:
				return errors.New("give --projects, --previews or --storage-limit-bytes, or --default (appliance orgs list shows the quotas)")
			}
			return nil
		},
		Path: func(x *call) string { return orgsPath + "/" + seg(x.args[0]) + "/quota" },
		Body: func(*call) any { return &req },
		Print: func(x *call, r *api.OrganizationQuotaResponse) error {
			whose := "its own"
			if r.IsDefault {
				whose = "the default"
			}
			return x.printf("Organization %s: %d project(s), %d preview(s), %s of storage (%s quota).\n", r.OrganizationID,
				r.Quota.ProjectsLimit, r.Quota.PreviewsLimit, humanBytes(r.Quota.StorageLimitBytes), whose)
		},
	})
}
