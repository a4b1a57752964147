package extensions

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// jobHandler enables, disables or updates an extension in the project database. An extension that needs
// preloading gets its library added to shared_preload_libraries first (a restart).
func (s *Service) jobHandler(ctx context.Context, run *scheduler.Run) (any, error) {
	var in payload
	prj, inst, err := s.host.ActiveTarget(run, &in)
	if err != nil {
		return nil, err
	}
	lib, preload := PreloadLibraries[in.Name]
	restarted := false
	if run.Job.Type == JobEnable && preload && !slices.Contains(prj.PreloadLibraries, lib) {
		if err := s.host.UpdateProject(prj.ID, func(p *store.Project) error {
			p.PreloadLibraries = append(p.PreloadLibraries, lib)
			return nil
		}); err != nil {
			return nil, err
		}
		if prj, inst, err = s.host.LoadProject(prj.ID); err != nil {
			return nil, err
		}
		action, err := s.host.ApplySettings(ctx, run, prj, inst)
		if err != nil {
			return nil, err
		}
		restarted = action.String() == "restart"
	}
	conn, err := Conn(ctx, s.box, inst, prj.DatabaseName)
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ident := pgx.Identifier{in.Name}.Sanitize()
	var stmt string
	switch run.Job.Type {
	case JobEnable:
		stmt = CreateSQL(ident)
	case JobDisable:
		stmt = "DROP EXTENSION IF EXISTS " + ident // no CASCADE: objects that use it are never dropped silently
	case JobUpdate:
		stmt = "ALTER EXTENSION " + ident + " UPDATE"
	}
	if err := DDL(ctx, conn, stmt); err != nil {
		return nil, err
	}
	if run.Job.Type == JobDisable && preload && !slices.Contains(defaultLibraries, lib) && slices.Contains(prj.PreloadLibraries, lib) {
		if err := s.host.UpdateProject(prj.ID, func(p *store.Project) error {
			p.PreloadLibraries = slices.DeleteFunc(p.PreloadLibraries, func(x string) bool { return x == lib })
			return nil
		}); err != nil {
			return nil, err
		}
		if prj, inst, err = s.host.LoadProject(prj.ID); err != nil {
			return nil, err
		}
		action, err := s.host.ApplySettings(ctx, run, prj, inst)
		if err != nil {
			return nil, err
		}
		restarted = action.String() == "restart"
	}
	var version string
	conn.QueryRow(ctx, "SELECT coalesce((SELECT extversion FROM pg_extension WHERE extname = $1), '')", in.Name).Scan(&version)
	return map[string]any{"extension": in.Name, "installed_version": version, "restarted": restarted}, nil
}

// CreateSQL creates extension ident (quoted), and the extensions it needs, where a project's extensions
// have always gone: public, unless the control file fixes the schema (plpgsql's pg_catalog,
// postgis_topology's topology). The admin sessions' search_path (postgres.AdminSearchPath) has no public
// in it, so SCHEMA is explicit. With CASCADE, PostgreSQL takes a SCHEMA that contradicts the control file's
// as the schema of the extensions CASCADE creates only, instead of failing (CREATE EXTENSION, "SCHEMA"), so
// one statement serves both kinds. Run it on a Conn.
func CreateSQL(ident string) string {
	return "CREATE EXTENSION IF NOT EXISTS " + ident + " SCHEMA public CASCADE"
}

// Conn is the admin session for creating and updating extensions (postgres.Instance.ConnectForExtensions):
// run CREATE, ALTER and DROP EXTENSION on it through DDL, which pins its search_path again after each.
func Conn(ctx context.Context, box Opener, inst *store.Instance, db string) (*pgx.Conn, error) {
	pw, err := box.Open(inst.AdminPassword)
	if err != nil {
		return nil, fmt.Errorf("open admin password of %s: %w", inst.ID, err)
	}
	return (&postgres.Instance{ID: inst.ID, Port: inst.Port}).ConnectForExtensions(ctx, string(pw), db)
}

// DDL runs stmt (CREATE, ALTER or DROP EXTENSION) on a Conn, then sets its search_path back to
// postgres.AdminSearchPath: an extension script's SET outlives the script (postgis_topology's leaves the
// database's default search_path, with public, on the session).
func DDL(ctx context.Context, conn *pgx.Conn, stmt string) error {
	if _, err := conn.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("%s: %w", stmt, err)
	}
	if _, err := conn.Exec(ctx, "SET search_path = "+postgres.AdminSearchPath); err != nil {
		return fmt.Errorf("pin search_path after %s: %w", stmt, err)
	}
	return nil
}

// defaultLibraries are preloaded on every instance; disabling their extension keeps them loaded.
var defaultLibraries = []string{"pg_stat_statements", "pg_qualstats"}
