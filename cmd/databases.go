package cmd

import (
	"net/http"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
)

// The databases and login roles of a project's server (the API's …/databases and …/roles).
var (
	_ = registerClientGroup("databases", []string{"database", "db"}, "List, create and drop the databases of a project's server",
		newDatabasesListCmd, newDatabasesCreateCmd, newDatabasesDeleteCmd)
	_ = registerClientGroup("roles", []string{"role"}, "List, create and drop the login roles of a project's server, and reset their passwords",
		newRolesListCmd, newRolesCreateCmd, newRolesDeleteCmd, newRolesResetCmd)
)

func newDatabasesListCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.DatabaseList]{
		Use: "list PROJECT_ID", Aliases: []string{"ls"}, Short: "List the databases of a project's server (its own marked reserved)",
		Args: cobra.ExactArgs(1), JSON: true,
		Path:    func(x *call) string { return projectPath(x.args[0]) + "/databases" },
		Columns: []string{"NAME", "OWNER", "SIZE", "RESERVED"},
		Rows: func(l *api.DatabaseList) [][]string {
			return rowsOf(l.Databases, func(d api.Database) []string {
				return []string{d.Name, d.Owner, humanBytes(d.SizeBytes), map[bool]string{true: "yes", false: "-"}[d.Reserved]}
			})
		},
	})
}

func newDatabasesCreateCmd(o *clientOpts) *cobra.Command {
	var req api.CreateDatabaseRequest
	return newAPICmd(o, apiCmd[api.DatabaseResponse]{
		Use:     "create PROJECT_ID NAME",
		Short:   "Create a database, reachable directly and pooled at once",
		Example: `  appliance databases create prj_... analytics --owner reporter`,
		Args:    cobra.ExactArgs(2),
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&req.Owner, "owner", "", "the owning role: a role created with `appliance roles create` (default: the project's role)")
		},
		Method: http.MethodPost,
		Path:   func(x *call) string { return projectPath(x.args[0]) + "/databases" },
		Body:   func(x *call) any { req.Name = x.args[1]; return &req },
		Print: func(x *call, r *api.DatabaseResponse) error {
			return x.printf("Created database %s (owner %s).\n", r.Database.Name, r.Database.Owner)
		},
	})
}

func newDatabasesDeleteCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.DeletedResponse]{
		Use: "delete PROJECT_ID NAME --confirm", Aliases: []string{"drop"},
		Short:   "Drop a database created here, ending its sessions (admin role)",
		Args:    cobra.ExactArgs(2),
		Confirm: "confirm that the database and its data may be dropped", Unconfirmed: "dropping a database destroys its data",
		Method: http.MethodDelete,
		Path:   func(x *call) string { return projectPath(x.args[0]) + "/databases/" + seg(x.args[1]) },
		Print:  func(x *call, _ *api.DeletedResponse) error { return x.printf("Dropped database %s.\n", x.args[1]) },
	})
}

func newRolesListCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.RoleList]{
		Use: "list PROJECT_ID", Aliases: []string{"ls"}, Short: "List the project's role (reserved) and the login roles created here",
		Args: cobra.ExactArgs(1), JSON: true,
		Path:    func(x *call) string { return projectPath(x.args[0]) + "/roles" },
		Columns: []string{"NAME", "RESERVED"},
		Rows: func(l *api.RoleList) [][]string {
			return rowsOf(l.Roles, func(r api.DatabaseRole) []string {
				return []string{r.Name, map[bool]string{true: "yes (the project's role)", false: "-"}[r.Reserved]}
			})
		},
	})
}

// rolePasswordCmd is a call that answers a role's password, shown this once.
func rolePasswordCmd(o *clientOpts, use, short, what string, path func(x *call) string, body func(x *call) any) *cobra.Command {
	return newAPICmd(o, apiCmd[api.RolePassword]{
		Use: use, Short: short, Args: cobra.ExactArgs(2), JSON: true,
		Method: http.MethodPost, Path: path, Body: body,
		Need: func(r *api.RolePassword) string { return missing(r.Password == "", "password") },
		Print: func(x *call, r *api.RolePassword) error {
			return x.printf("%s %s. Its password, shown this once (the appliance keeps none of it):\n%s\n", what, r.Role.Name, r.Password)
		},
	})
}

func newRolesCreateCmd(o *clientOpts) *cobra.Command {
	return rolePasswordCmd(o, "create PROJECT_ID NAME", "Create a login role with a generated password (no superuser, CREATEROLE, CREATEDB or replication)", "Created role",
		func(x *call) string { return projectPath(x.args[0]) + "/roles" },
		func(x *call) any { return api.CreateRoleRequest{Name: x.args[1]} })
}

func newRolesResetCmd(o *clientOpts) *cobra.Command {
	return rolePasswordCmd(o, "reset-password PROJECT_ID NAME", "Give a role created here a new generated password; the old one stops logging in", "New password for role",
		func(x *call) string { return projectPath(x.args[0]) + "/roles/" + seg(x.args[1]) + "/reset-password" }, nil)
}

func newRolesDeleteCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.DeletedResponse]{
		Use: "delete PROJECT_ID NAME", Aliases: []string{"drop"},
		Short:  "Drop a role created here: what it owns passes to the project's role, its sessions end",
		Args:   cobra.ExactArgs(2),
		Method: http.MethodDelete,
		Path:   func(x *call) string { return projectPath(x.args[0]) + "/roles/" + seg(x.args[1]) },
		Print:  func(x *call, _ *api.DeletedResponse) error { return x.printf("Dropped role %s.\n", x.args[1]) },
	})
}
