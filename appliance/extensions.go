package appliance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/store"
)

// Job types of extensions.
const (
	JobExtensionEnable  = "extension.enable"
	JobExtensionDisable = "extension.disable"
	JobExtensionUpdate  = "extension.update"
)

// preloadLibraries names extensions that only work when their library is in shared_preload_libraries.
var preloadLibraries = map[string]string{
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

// offers reports whether the appliance offers an extension to projects.
func (s *Service) offers(name string) bool {
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

func extensionCategory(name string) string {
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

const listExtensionsSQL = `
SELECT a.name, coalesce(a.comment, ''), coalesce(a.default_version, ''), coalesce(a.installed_version, ''),
       coalesce((SELECT v.version FROM pg_available_extension_versions v WHERE v.name = a.name
                 ORDER BY string_to_array(regexp_replace(v.version, '[^0-9.]', '', 'g'), '.')::int[] DESC NULLS LAST LIMIT 1), a.default_version, ''),
       coalesce((SELECT v.trusted FROM pg_available_extension_versions v WHERE v.name = a.name AND v.version = a.default_version), false)
FROM pg_available_extensions a ORDER BY a.name`

// listExtensions reads what the server has, in the project database, keeping what offered accepts.
func listExtensions(ctx context.Context, conn *pgx.Conn, offered func(string) bool) ([]Extension, error) {
	rows, err := conn.Query(ctx, listExtensionsSQL)
	if err != nil {
		return nil, fmt.Errorf("list extensions: %w", err)
	}
	out := []Extension{}
	for rows.Next() {
		var e Extension
		if err := rows.Scan(&e.Name, &e.Description, &e.DefaultVersion, &e.InstalledVersion, &e.AvailableVersion, &e.Trusted); err != nil {
			return nil, err
		}
		if !offered(e.Name) {
			continue
		}
		e.Enabled = e.InstalledVersion != ""
		_, e.RequiresRestart = preloadLibraries[e.Name]
		e.UpdateAvailable = e.Enabled && e.InstalledVersion != e.AvailableVersion
		e.Category = extensionCategory(e.Name)
		out = append(out, e)
	}
	return out, rows.Err()
}

// ListExtensions asks the project's server.
func (s *Service) ListExtensions(ctx context.Context, p *Principal, projectID string) (*ExtensionList, error) {
	prj, inst, err := s.activeProject(p, projectID)
	if err != nil {
		return nil, err
	}
	conn, err := s.adminConn(ctx, inst, prj.DatabaseName)
	if err != nil {
		return nil, &Error{Kind: KindUnavailable, Msg: "the project's server does not answer", Cause: err}
	}
	defer conn.Close(context.Background())
	exts, err := listExtensions(ctx, conn, s.offers)
	if err != nil {
		return nil, Internal(err, "list extensions")
	}
	return &ExtensionList{Extensions: exts}, nil
}

// visibleActiveProject is a project the caller may act on, active with an instance (else a Conflict).
func (s *Service) visibleActiveProject(tx *store.Tx, p *Principal, projectID string) (*store.Project, error) {
	prj, err := s.visibleProject(tx, p, projectID)
	if err != nil {
		return nil, err
	}
	if prj.State != ProjectActive || prj.PrimaryInstanceID == "" {
		return nil, Conflict("project %s is %s, not active", prj.ID, prj.State)
	}
	return prj, nil
}

// activeProject loads a project the caller may act on, requiring it active with an instance.
func (s *Service) activeProject(p *Principal, projectID string) (*store.Project, *store.Instance, error) {
	var prj *store.Project
	var inst *store.Instance
	err := s.db.View(func(tx *store.Tx) error {
		var err error
		if prj, err = s.visibleActiveProject(tx, p, projectID); err != nil {
			return err
		}
		inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, Internal(err, "project instance record missing")
	}
	return prj, inst, err
}

// EnableExtension checks the name against the server's offer and enqueues extension.enable.
func (s *Service) EnableExtension(ctx context.Context, p *Principal, projectID string, req *ExtensionRequest) (*JobResponse, error) {
	if slices.Contains(networkExtensions, req.Name) && !s.cfg.NetworkExtensions {
		return nil, Forbidden("%s connects out from inside the database, past the appliance's outbound policy: it is offered only when the operator starts the appliance with --allow-network-extensions", req.Name)
	}
	return s.extensionJob(ctx, p, projectID, req.Name, JobExtensionEnable, func(e *Extension) error {
		if e.Enabled {
			return Conflict("extension %s is already enabled (version %s)", e.Name, e.InstalledVersion)
		}
		return nil
	})
}

// DisableExtension enqueues extension.disable for an enabled extension.
func (s *Service) DisableExtension(ctx context.Context, p *Principal, projectID, name string) (*JobResponse, error) {
	return s.extensionJob(ctx, p, projectID, name, JobExtensionDisable, func(e *Extension) error {
		if !e.Enabled {
			return Conflict("extension %s is not enabled", e.Name)
		}
		if e.Name == "plpgsql" {
			return Invalid("plpgsql cannot be disabled")
		}
		return nil
	})
}

// UpdateExtension enqueues extension.update when a newer version exists.
func (s *Service) UpdateExtension(ctx context.Context, p *Principal, projectID, name string) (*JobResponse, error) {
	return s.extensionJob(ctx, p, projectID, name, JobExtensionUpdate, func(e *Extension) error {
		if !e.Enabled {
			return Conflict("extension %s is not enabled", e.Name)
		}
		if !e.UpdateAvailable {
			return Conflict("extension %s is at the newest version (%s)", e.Name, e.InstalledVersion)
		}
		return nil
	})
}

type extensionPayload struct {
	Name string `json:"name"`
}

func (s *Service) extensionJob(ctx context.Context, p *Principal, projectID, name, jobType string, check func(*Extension) error) (*JobResponse, error) {
	exts, err := s.ListExtensions(ctx, p, projectID)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(exts.Extensions, func(e Extension) bool { return e.Name == name })
	if i < 0 {
		return nil, NotFound("extension %q is not available on this server", name)
	}
	if err := check(&exts.Extensions[i]); err != nil {
		return nil, err
	}
	var job *store.Job
	err = s.db.Update(func(tx *store.Tx) error {
		prj, err := s.visibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		j, err := s.enqueue(tx, prj, jobType, prj.ID, extensionPayload{Name: name})
		if err != nil {
			return err
		}
		if err := s.audit(tx, p, jobType, prj.OrganizationID, prj.ID, map[string]any{"extension": name, "job_id": j.ID}); err != nil {
			return Internal(err, "audit")
		}
		job = j
		return nil
	})
	return s.answerJob(job, err)
}
