package appliance

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// extensionJobHandler enables, disables or updates an extension in the project database. An extension
// that needs preloading gets its library added to shared_preload_libraries first (a restart).
func (s *Service) extensionJobHandler(ctx context.Context, run *scheduler.Run) (any, error) {
	var in extensionPayload
	dp, prj, inst, err := s.activeTarget(run, &in)
	if err != nil {
		return nil, err
	}
	lib, preload := preloadLibraries[in.Name]
	restarted := false
	if run.Job.Type == JobExtensionEnable && preload && !slices.Contains(prj.PreloadLibraries, lib) {
		if err := s.updateProject(prj.ID, func(p *store.Project) error {
			p.PreloadLibraries = append(p.PreloadLibraries, lib)
			return nil
		}); err != nil {
			return nil, err
		}
		if prj, inst, err = s.loadProject(prj.ID); err != nil {
			return nil, err
		}
		action, err := s.writeSettingsAndApply(ctx, run, dp, prj, inst)
		if err != nil {
			return nil, err
		}
		restarted = action.String() == "restart"
	}
	conn, err := s.adminConn(ctx, inst, prj.DatabaseName)
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ident := pgx.Identifier{in.Name}.Sanitize()
	var stmt string
	switch run.Job.Type {
	case JobExtensionEnable:
		stmt = "CREATE EXTENSION IF NOT EXISTS " + ident + " CASCADE"
	case JobExtensionDisable:
		stmt = "DROP EXTENSION IF EXISTS " + ident // no CASCADE: objects that use it are never dropped silently
	case JobExtensionUpdate:
		stmt = "ALTER EXTENSION " + ident + " UPDATE"
	}
	if _, err := conn.Exec(ctx, stmt); err != nil {
		return nil, fmt.Errorf("%s: %w", stmt, err)
	}
	if run.Job.Type == JobExtensionDisable && preload && !slices.Contains(defaultLibraries, lib) && slices.Contains(prj.PreloadLibraries, lib) {
		if err := s.updateProject(prj.ID, func(p *store.Project) error {
			p.PreloadLibraries = slices.DeleteFunc(p.PreloadLibraries, func(x string) bool { return x == lib })
			return nil
		}); err != nil {
			return nil, err
		}
		if prj, inst, err = s.loadProject(prj.ID); err != nil {
			return nil, err
		}
		action, err := s.writeSettingsAndApply(ctx, run, dp, prj, inst)
		if err != nil {
			return nil, err
		}
		restarted = action.String() == "restart"
	}
	var version string
	conn.QueryRow(ctx, "SELECT coalesce((SELECT extversion FROM pg_extension WHERE extname = $1), '')", in.Name).Scan(&version)
	return map[string]any{"extension": in.Name, "installed_version": version, "restarted": restarted}, nil
}

// defaultLibraries are preloaded on every instance; disabling their extension keeps them loaded.
var defaultLibraries = []string{"pg_stat_statements", "pg_qualstats"}
