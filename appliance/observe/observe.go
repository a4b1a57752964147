// Package observe is the observability area: the live snapshot of a project's server, the sampler's sweep
// and its stored history and statement snapshots (history, top queries, a query's detail), the alerts and
// their rules (raised by the sweep, by a failed backup, by a crash, by a start that finds data missing),
// the server's logs (read, tailed, kept) and the index advisor.
//
// It reaches the rest of the domain only through Host (declared here, given by the root's areaHost), the
// kernel packages (apperr, authz), the records (store) and the readers of a server (pgstat, pglog). It
// never imports `appliance`.
package observe

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/store"
)

// Host is what the area takes from the rest of the domain: the records and rules every area shares, which
// the root package keeps (appliance/areas.go gives them). Keep it small: what an area can own, it owns.
type Host interface {
	// VisibleProject is a project the caller may see (404 for another organization's or a preview's, 403
	// off a project-scoped key's own): projects and their visibility are one rule for every area.
	VisibleProject(tx *store.Tx, p *authz.Principal, projectID string) (*store.Project, error)
	// ActiveInstance is a visible project that is also active with an instance (else 409), and that
	// instance's record: what "active" means is the projects' rule.
	ActiveInstance(p *authz.Principal, projectID string) (*store.Project, *store.Instance, error)
	// QuietAdminConn is an admin session to db on the instance that leaves no trace in the tenant's
	// statistics or logs (a 503 when the server does not answer): the admin password is sealed with the
	// root's secret box, and the storage guard uses the same session.
	QuietAdminConn(ctx context.Context, inst *store.Instance, db string) (*pgx.Conn, error)
	// WithTenantSession runs fn on a session of the project's own role (the studio's pool), under the
	// studio's statement timeout: the advisor's estimates run as the tenant, never as a superuser, and
	// the studio owns that pool.
	WithTenantSession(ctx context.Context, p *authz.Principal, prj *store.Project, fn func(ctx context.Context, tenant *pgx.Conn) error) error
	// AppendEvent appends an event of the project in tx (alert.triggered, alert.resolved,
	// instance.crashed): the event log and its webhook deliveries are the root's.
	AppendEvent(tx *store.Tx, typ, orgID, projectID string, data any) error
	// Audit writes an audit event of the caller in tx: one event shape and one clock for every area.
	Audit(tx *store.Tx, p *authz.Principal, action, orgID, projectID string, metadata any) error
	// Plan is the sizes of a plan the history shows as quota lines (zero for an unknown plan): plans are
	// the root's table.
	Plan(name string) Plan
	// NewestBackup is, in tx, the project's newest backup (nil when none): the project summary's, the
	// backups area's records.
	NewestBackup(tx *store.Tx, projectID string) (*api.Backup, error)
}

// Plan is what the history shows of a project's plan: the memory and CPU its server is sized for.
type Plan struct {
	MemoryBytes int64
	CPUCores    float64
}

// Config is the deployment the area needs to know.
type Config struct {
	// LogArchiveDays keeps rotated server logs compressed this many days (0: no archive; logs are kept
	// LogRetention and the logs window is at most LogsHoursMax).
	LogArchiveDays int
}

// Deps are the area's collaborators; New takes them all.
type Deps struct {
	DB    *store.DB
	Log   *slog.Logger
	Clock func() time.Time // UTC
	Host  Host
}

// Service is the observability area.
type Service struct {
	cfg  Config
	db   *store.DB
	log  *slog.Logger
	now  func() time.Time
	host Host
	// sampler serializes the sweeps and keeps the last one's figures (sampler.go).
	sampler samplerState
	// advice keeps the index advisor's recent answers (advisor.go).
	advice adviceCache
}

// New returns the area built with its collaborators.
func New(cfg Config, deps Deps) *Service {
	return &Service{cfg: cfg, db: deps.DB, log: deps.Log, now: deps.Clock, host: deps.Host}
}
