// Package extensions is the extensions area: the extensions a project's server offers (list), and the
// jobs that enable, disable and update one in the project database, preloading its library first when it
// needs one (a restart).
//
// It reaches the rest of the domain only through Host (declared here, given by the root's areaHost), the
// kernel packages (apperr, authz), the records (store), the PostgreSQL sessions (postgres) and the job
// runner (scheduler). It never imports `appliance`. The migration jobs (import cutover, follow) create
// extensions with the same session and statements: Conn, DDL, CreateSQL, PreloadLibraries and Offers.
package extensions

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Job types of extensions.
const (
	JobEnable  = "extension.enable"
	JobDisable = "extension.disable"
	JobUpdate  = "extension.update"
)

// Host is what the area takes from the rest of the domain: the records and rules every area shares, which
// the root package keeps (appliance/areas.go gives them).
type Host interface {
	// ActiveInstance is a visible project that is active, with its instance record: the projects'
	// visibility and "active" rules.
	ActiveInstance(p *authz.Principal, projectID string) (*store.Project, *store.Instance, error)
	// AdminConn is a superuser session in the project's database: the admin password is sealed with the
	// root's box, and the instance engine makes the session.
	AdminConn(ctx context.Context, inst *store.Instance, db string) (*pgx.Conn, error)
	// VisibleProject is a project the caller may see: one visibility rule for every area.
	VisibleProject(tx *store.Tx, p *authz.Principal, projectID string) (*store.Project, error)
	// Enqueue adds a job of the project in tx and makes it the project's latest_job_id.
	Enqueue(tx *store.Tx, prj *store.Project, jobType, lock string, payload any) (*store.Job, error)
	// AnswerJob is a job-returning call's answer once its transaction committed.
	AnswerJob(job *store.Job, err error) (*api.JobResponse, error)
	// Audit writes an audit event of the caller in tx.
	Audit(tx *store.Tx, p *authz.Principal, action, orgID, projectID string, metadata any) error
	// ActiveTarget starts a project job: the data plane must exist, the payload is decoded, and the
	// project must be active with an instance (the root's rule for every project job).
	ActiveTarget(run *scheduler.Run, payload any) (*store.Project, *store.Instance, error)
	// UpdateProject applies fn to the stored project in one transaction (the project record is the
	// root's).
	UpdateProject(id string, fn func(*store.Project) error) error
	// LoadProject reads a project and its primary instance.
	LoadProject(id string) (*store.Project, *store.Instance, error)
	// ApplySettings writes the server's settings from the records and applies them (reload or restart):
	// the settings and the instance engine are the root's.
	ApplySettings(ctx context.Context, run *scheduler.Run, prj *store.Project, inst *store.Instance) (postgres.Action, error)
}

// Opener opens sealed secrets (the root's SecretBox).
type Opener interface {
	Open(sealed []byte) ([]byte, error)
}

// Config is the deployment the area needs to know.
type Config struct {
	// NetworkExtensions offers dblink and postgres_fdw (the operator's --allow-network-extensions).
	NetworkExtensions bool
}

// Deps are the area's collaborators; New takes them all.
type Deps struct {
	DB   *store.DB
	Box  Opener
	Host Host
}

// Service is the extensions area.
type Service struct {
	cfg  Config
	db   *store.DB
	box  Opener
	host Host
}

// New returns the area built with its collaborators.
func New(cfg Config, deps Deps) *Service {
	return &Service{cfg: cfg, db: deps.DB, box: deps.Box, host: deps.Host}
}

// RegisterJobs registers the area's job handlers on the runner (the root's RegisterJobs calls it).
func (s *Service) RegisterJobs(r *scheduler.Runner) {
	r.Handle(JobEnable, s.jobHandler)
	r.Handle(JobDisable, s.jobHandler)
	r.Handle(JobUpdate, s.jobHandler)
}

// PreloadLibraries names extensions that only work when their library is in shared_preload_libraries.
var PreloadLibraries = map[string]string{
	"pg_stat_statements": "pg_stat_statements",
	"pg_qualstats":       "pg_qualstats",
	"pg_cron":            "pg_cron",
	"pgaudit":            "pgaudit",
	"timescaledb":        "timescaledb",
	"pg_squeeze":         "pg_squeeze",
	"pg_prewarm":         "pg_prewarm", // its autoprewarm worker (buffer cache kept across restarts) is preloaded
}

// deniedExtensions give database users access to the server's files or untrusted languages.
var deniedExtensions = []string{"adminpack", "file_fdw", "plperlu", "plpython3u", "pltclu", "pg_surgery", "old_snapshot"}

// networkExtensions connect out from inside the database, past the appliance's outbound policy (to
// loopback, other projects' servers, the metadata service), with no limit or audit: offered only when the
// operator allows them (--allow-network-extensions).
var networkExtensions = []string{"dblink", "postgres_fdw"}

// Offers reports whether the appliance offers an extension to projects.
func (s *Service) Offers(name string) bool {
	if slices.Contains(deniedExtensions, name) {
		return false
	}
	return s.cfg.NetworkExtensions || !slices.Contains(networkExtensions, name)
}

// contribExtensions are the extensions shipped with PostgreSQL itself (category core).
var contribExtensions = []string{"amcheck", "autoinc", "bloom", "btree_gin", "btree_gist", "citext", "cube",
	"dblink", "dict_int", "dict_xsyn", "earthdistance", "fuzzystrmatch", "hstore", "insert_username", "intagg",
	"intarray", "isn", "lo", "ltree", "moddatetime", "pageinspect", "pg_buffercache", "pg_freespacemap",
	"pg_prewarm", "pg_stat_statements", "pg_trgm", "pg_visibility", "pg_walinspect", "pgcrypto", "pgrowlocks",
	"pgstattuple", "plpgsql", "postgres_fdw", "refint", "seg", "sslinfo", "tablefunc", "tcn", "tsm_system_rows",
	"tsm_system_time", "unaccent", "uuid-ossp", "xml2"}

func category(name string) string {
	switch {
	case strings.HasPrefix(name, "postgis") || name == "address_standardizer" || name == "address_standardizer_data_us" || name == "earthdistance":
		return "geospatial"
	case name == "pg_stat_statements" || name == "hypopg" || name == "pg_qualstats" || name == "pg_prewarm" || name == "pg_buffercache":
		return "performance"
	case strings.HasPrefix(name, "pl"):
		return "language"
	case slices.Contains(contribExtensions, name):
		return "core"
	}
	return "other"
}

const listSQL = `
SELECT a.name, coalesce(a.comment, ''), coalesce(a.default_version, ''), coalesce(a.installed_version, ''),
       coalesce((SELECT v.version FROM pg_available_extension_versions v WHERE v.name = a.name
                 ORDER BY string_to_array(regexp_replace(v.version, '[^0-9.]', '', 'g'), '.')::int[] DESC NULLS LAST LIMIT 1), a.default_version, ''),
       coalesce((SELECT v.trusted FROM pg_available_extension_versions v WHERE v.name = a.name AND v.version = a.default_version), false)
FROM pg_available_extensions a ORDER BY a.name`

// list reads what the server has, in the project database, keeping what offered accepts.
func list(ctx context.Context, conn *pgx.Conn, offered func(string) bool) ([]api.Extension, error) {
	rows, err := conn.Query(ctx, listSQL)
	if err != nil {
		return nil, fmt.Errorf("list extensions: %w", err)
	}
	out := []api.Extension{}
	for rows.Next() {
		var e api.Extension
		if err := rows.Scan(&e.Name, &e.Description, &e.DefaultVersion, &e.InstalledVersion, &e.AvailableVersion, &e.Trusted); err != nil {
			return nil, err
		}
		if !offered(e.Name) {
			continue
		}
		e.Enabled = e.InstalledVersion != ""
		_, e.RequiresRestart = PreloadLibraries[e.Name]
		e.UpdateAvailable = e.Enabled && e.InstalledVersion != e.AvailableVersion
		e.Category = category(e.Name)
		out = append(out, e)
	}
	return out, rows.Err()
}
