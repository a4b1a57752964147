package appliance

import "github.com/theappliance/appliance/appliance/extensions"

// The extensions area lives in appliance/extensions (its endpoints and jobs); the service holds it, built
// in New. The migration jobs (appliance/migrate: cutover, follow) create extensions with its session and
// statements (extensions.Conn, DDL, CreateSQL, PreloadLibraries).

// Extensions is the extensions area: httpapi's extension routes call its methods.
func (s *Service) Extensions() *extensions.Service { return s.extensions }

// newExtensions builds the area with the service's collaborators (New).
func (s *Service) newExtensions(cfg Config, deps Deps) *extensions.Service {
	return extensions.New(extensions.Config{NetworkExtensions: cfg.NetworkExtensions},
		extensions.Deps{DB: deps.DB, Box: deps.Box, Host: areaHost{s}})
}
