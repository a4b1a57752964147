package appliance

import (
	"path/filepath"

	"github.com/theappliance/appliance/appliance/upgrades"
)

// The upgrades area lives in appliance/upgrades (minor and major upgrades: their endpoints and jobs); the
// service holds it, built in New.

// PostgresDistDir is the directory, in the data directory, where the appliance unpacks the PostgreSQL
// distributions it obtains itself (up --pg-dist): <data-dir>/postgres/<major>/bin.
func PostgresDistDir(dataDir string) string { return filepath.Join(dataDir, "postgres") }

// DefaultPostgresRoot is where Debian installs PostgreSQL majors (/usr/lib/postgresql/<major>/bin).
const DefaultPostgresRoot = upgrades.DefaultPostgresRoot

// Upgrades is the upgrades area: httpapi's upgrade routes call its methods.
func (s *Service) Upgrades() *upgrades.Service { return s.upgrades }

// newUpgrades builds the area with the service's collaborators (New, after useDataPlane: it drives the
// instance engine).
func (s *Service) newUpgrades(cfg Config, deps Deps) *upgrades.Service {
	var plane *upgrades.Plane
	var eng upgrades.Engine
	if dp := deps.DataPlane; dp != nil {
		plane = &upgrades.Plane{User: dp.User}
		eng = s.eng
	}
	area := upgrades.New(upgrades.Config{PostgresRoot: cfg.PostgresRoot, DistRoot: PostgresDistDir(cfg.DataDir)},
		upgrades.Deps{DB: deps.DB, Box: deps.Box, Clock: s.now, Plane: plane, Engine: eng, Host: areaHost{s}, Step: deps.JobStepHook})
	if plane != nil {
		s.Probe.Register("postgres-majors", area.MajorsStatus)
	}
	return area
}
