// Package migrate is the migration area's checks of an outside PostgreSQL source: the source URL, under
// the appliance's outbound policy (SourceURL), and the import preflight that inspects the source and
// compares it with the project (Preflight for the endpoint, Check for the follow's start job). The rest of
// the domain only through its Host interface.
package migrate

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/keyrate"
	"github.com/theappliance/appliance/appliance/outbound"
	"github.com/theappliance/appliance/store"
)

// Host is what the area needs of the rest of the domain; the root gives it (areaHost).
type Host interface {
	// ActiveInstance applies the projects' visibility and "active" rules and reads the project's instance.
	ActiveInstance(p *authz.Principal, projectID string) (*store.Project, *store.Instance, error)
	// AdminConn opens an admin connection to the instance's database (the admin password is sealed with
	// the root's box).
	AdminConn(ctx context.Context, inst *store.Instance, db string) (*pgx.Conn, error)
	// Audit records an event (one event shape, one clock).
	Audit(tx *store.Tx, p *authz.Principal, action, orgID, projectID string, metadata any) error
	// OffersExtension is the appliance's rule of which extensions projects may have.
	OffersExtension(name string) bool
	// PlanStorageLimitBytes is the plan's storage limit (0 for a plan the table does not have).
	PlanStorageLimitBytes(plan string) int64
}

// Deps are the area's collaborators.
type Deps struct {
	DB  *store.DB
	Log *slog.Logger
	// Policy is the outbound policy every connection to a source goes through.
	Policy *outbound.Policy
	Host   Host
}

// Service is the migration area.
type Service struct {
	db         *store.DB
	log        *slog.Logger
	policy     *outbound.Policy
	host       Host
	preflights *keyrate.Limiter // each project's import preflights (they connect out on the tenant's behalf)
}

// New builds the area.
func New(d Deps) *Service {
	return &Service{db: d.DB, log: d.Log, policy: d.Policy, host: d.Host,
		preflights: keyrate.New(time.Minute/PreflightsPerMinute, PreflightsPerMinute)}
}
