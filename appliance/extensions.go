package appliance

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/extensions"
	"github.com/theappliance/appliance/store"
)

// The extensions area lives in appliance/extensions (its endpoints and jobs); the service holds it, built
// in New. The migration jobs (cutover, follow) create extensions with its session and statements, through
// the names below.

// Extensions is the extensions area: httpapi's extension routes call its methods.
func (s *Service) Extensions() *extensions.Service { return s.extensions }

// newExtensions builds the area with the service's collaborators (New).
func (s *Service) newExtensions(cfg Config, deps Deps) *extensions.Service {
	return extensions.New(extensions.Config{NetworkExtensions: cfg.NetworkExtensions},
		extensions.Deps{DB: deps.DB, Box: deps.Box, Host: areaHost{s}})
}

// preloadLibraries names extensions that only work when their library is in shared_preload_libraries.
var preloadLibraries = extensions.PreloadLibraries

// offers reports whether the appliance offers an extension to projects.
func (s *Service) offers(name string) bool { return s.extensions.Offers(name) }

// extensionConn is the admin session for creating extensions (extensions.Conn).
func (s *Service) extensionConn(ctx context.Context, inst *store.Instance, db string) (*pgx.Conn, error) {
	return extensions.Conn(ctx, s.box, inst, db)
}

// extensionDDL runs a CREATE, ALTER or DROP EXTENSION on an extensionConn (extensions.DDL).
func extensionDDL(ctx context.Context, conn *pgx.Conn, stmt string) error {
	return extensions.DDL(ctx, conn, stmt)
}

// createExtensionSQL is extensions.CreateSQL.
func createExtensionSQL(ident string) string { return extensions.CreateSQL(ident) }
