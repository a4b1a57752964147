// Package storageguard holds the projects' storage limits between samples and keeps the disk reserve
// (docs/api-decisions.md "Storage limits held, ephemeral bounds, disk reserve"): the guard measures the
// files of every active database with a storage limit and locks one over it (read-only, then no logins),
// and the disk monitor reads the data directory's free space, under whose reserve the appliance is degraded
// (every database read-only through the same locks, writes refused with 507, the status page's disk row).
//
// It reaches the rest of the domain only through Host (declared here, given by the root's areaHost), the
// kernel packages (apperr, authz) and the records (store). It never imports `appliance`.
package storageguard

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/store"
)

// Host is what the guard takes from the rest of the domain, which the root package keeps
// (appliance/areas.go gives it). Keep it small: what the guard can own, it owns.
type Host interface {
	// LoadProject reads a project and its primary instance (nil when it has none yet): the records of the
	// lock being applied.
	LoadProject(id string) (*store.Project, *store.Instance, error)
	// AdminConn is a superuser session of the project's server (the admin password is sealed with the
	// root's box): the lock's statements.
	AdminConn(ctx context.Context, inst *store.Instance, db string) (*pgx.Conn, error)
	// QuietAdminConn is the same session, left out of the server's statement statistics (the sampler's):
	// the guard's lookup of a database's directory.
	QuietAdminConn(ctx context.Context, inst *store.Instance, db string) (*pgx.Conn, error)
	// Audit writes an audit event in tx (project.storage_lock, project.storage_unlock): one event shape
	// and one clock for every area.
	Audit(tx *store.Tx, p *authz.Principal, action, orgID, projectID string, metadata any) error
}

// Config is the guard's settings.
type Config struct {
	// DataDir is the appliance's data directory, whose file system's free space the disk monitor reads.
	DataDir string
	// DiskReserve is the free space under which the appliance runs degraded (0: DefaultDiskReserve).
	DiskReserve int64
}

// Deps are the guard's collaborators, given at New.
type Deps struct {
	DB    *store.DB
	Log   *slog.Logger
	Clock func() time.Time
	Host  Host
}

// Guard is the storage guard and the disk monitor. Its state: one pass at a time, and where each
// database's files are; the disk's last reading.
type Guard struct {
	db      *store.DB
	log     *slog.Logger
	now     func() time.Time
	host    Host
	dataDir string

	mu sync.Mutex
	// dirsMu guards dirs alone: a lock being applied (lock) measures too, outside mu.
	dirsMu sync.Mutex
	dirs   map[string]databaseDir // project ID → its database's directory
	// applied names, by project ID, the instance whose lock this process has applied (or confirmed).
	applied map[string]string
	// due is when a database is measured next (Rate); retry when a lock that failed is tried again (not
	// every pass: each failure is logged).
	due   map[string]guardDue
	retry map[string]time.Time
	// locking names the projects whose lock is being applied: one database's lock (ending its sessions can
	// take seconds) never holds up the measures of the others; wg waits for them.
	locking map[string]bool
	wg      sync.WaitGroup

	disk diskMonitor
}

// New returns the guard built with its collaborators.
func New(cfg Config, deps Deps) *Guard {
	g := &Guard{db: deps.DB, log: deps.Log, now: deps.Clock, host: deps.Host, dataDir: cfg.DataDir}
	g.disk.free = -1
	g.setDiskReserve(cfg.DiskReserve)
	return g
}

// Lift lifts the project's storage lock (a claim of an ephemeral database, whose limit becomes its plan's).
func (g *Guard) Lift(ctx context.Context, projectID string) error { return g.lock(ctx, projectID, "") }
