package migrate

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/store"
)

// Preflight check statuses: a fail makes ok false; a warn is worth reading but does not stop an import.
const (
	CheckPass = "pass"
	CheckWarn = "warn"
	CheckFail = "fail"
)

// ProviderSelfHosted is the provider of a source no hosting provider's signals were found in.
const ProviderSelfHosted = "self_hosted"

// provider is a hosting provider's fingerprint.
type provider struct {
	name    string
	hosts   []string // host name suffixes
	schemas []string // schemas it creates in every database
	roles   []string
	prefix  string // of its server settings (pg_settings names)
	exts    []string
}

var providers = []provider{
	{name: "supabase", hosts: []string{".supabase.co", ".supabase.com"},
		schemas: []string{"auth", "storage", "realtime", "_realtime", "graphql", "graphql_public", "supabase_functions", "supabase_migrations", "vault", "pgsodium", "pgsodium_masks", "extensions", "net", "_analytics", "pgbouncer", "cron"},
		roles:   []string{"supabase_admin", "supabase_auth_admin", "supabase_storage_admin", "authenticator", "anon", "authenticated", "service_role"}, exts: []string{"supabase_vault", "pg_graphql"}},
	{name: "neon", hosts: []string{".neon.tech"}, roles: []string{"neon_superuser"}, prefix: "neon.", exts: []string{"neon"}},
	{name: "aws_rds", hosts: []string{".rds.amazonaws.com"}, roles: []string{"rds_superuser", "rdsadmin", "rds_replication"}, prefix: "rds."},
	{name: "google_cloud_sql", hosts: []string{".cloudsql.goog"}, roles: []string{"cloudsqlsuperuser", "cloudsqladmin"}, prefix: "cloudsql."},
	{name: "azure", hosts: []string{".postgres.database.azure.com"}, roles: []string{"azure_pg_admin", "azuresu"}, prefix: "azure."},
	{name: "heroku", hosts: []string{".compute-1.amazonaws.com"}, schemas: []string{"heroku_ext"}},
	{name: "aiven", hosts: []string{".aivencloud.com"}, exts: []string{"aiven_extras"}},
	{name: "crunchy_bridge", hosts: []string{".postgresbridge.com"}},
	{name: "render", hosts: []string{".render.com"}},
	{name: "railway", hosts: []string{".railway.app", ".rlwy.net"}},
	{name: "digitalocean", hosts: []string{".db.ondigitalocean.com"}},
	{name: "timescale", hosts: []string{".tsdb.cloud.timescale.com"}, schemas: []string{"_timescaledb_catalog", "_timescaledb_internal", "_timescaledb_config", "timescaledb_information"}},
}

// Preflight connects to source_url and fills the preflight from it and from the project. A source
// that cannot be reached gives ok false with a failing connect check (and source null), not an error: the
// answer is about the source. A malformed URL is Invalid.
func (s *Service) Preflight(ctx context.Context, p *authz.Principal, projectID string, req *api.PreflightRequest) (*api.PreflightResponse, error) {
	if err := p.RequireAdminRole("importing into a project"); err != nil {
		return nil, err
	}
	src, err := s.ParseSource(req.SourceURL)
	if err != nil {
		return nil, err
	}
	prj, inst, err := s.host.ActiveInstance(p, projectID)
	if err != nil {
		return nil, err
	}
	if wait := s.preflights.Wait(prj.ID); wait > 0 {
		return nil, &apperr.Error{Kind: apperr.KindTooMany, RetryAfter: wait, Msg: fmt.Sprintf("import preflights of a project are limited to %d a minute: try again shortly", PreflightsPerMinute)}
	}
	target, err := s.host.AdminConn(ctx, inst, prj.DatabaseName)
	if err != nil {
		return nil, &apperr.Error{Kind: apperr.KindUnavailable, Msg: "the project's server does not answer", Cause: err}
	}
	defer target.Close(context.WithoutCancel(ctx))
	pf, err := s.Check(ctx, prj, target, src)
	if err != nil {
		return nil, err
	}
	// Recorded: it connects to a database with credentials given to the appliance.
	if err := s.db.Update(func(tx *store.Tx) error {
		return s.host.Audit(tx, p, "import.preflight", prj.OrganizationID, prj.ID, map[string]any{"source": src.Redacted(), "ok": pf.OK})
	}); err != nil {
		return nil, apperr.Internal(err, "audit")
	}
	return &api.PreflightResponse{Preflight: pf}, nil
}

// Check inspects the source and compares it with the target (an admin connection to the project's
// database).
func (s *Service) Check(ctx context.Context, prj *store.Project, target *pgx.Conn, src *SourceURL) (*api.Preflight, error) {
	pf := &api.Preflight{StorageLimitBytes: s.storageLimit(prj), TargetVersion: prj.PostgresVersion, Checks: []api.PreflightCheck{}}
	var targetNum int
	if err := target.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&targetNum); err != nil {
		return nil, apperr.Server(err, "read the project's version")
	}
	check := func(name, status, format string, args ...any) {
		pf.Checks = append(pf.Checks, api.PreflightCheck{Name: name, Status: status, Detail: fmt.Sprintf(format, args...)})
	}
	conn, err := src.Connect(ctx)
	if err != nil {
		s.log.Info("import source connection failed", "project", prj.ID, "source", src.Redacted(), "err", src.RedactErr(err))
		check("connect", CheckFail, "%v", src.ConnectErr(err))
		return pf, nil
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tlsNote := "without TLS"
	if connUsesTLS(conn) {
		tlsNote = "over TLS"
	}
	check("connect", CheckPass, "connected to database %s on %s as %s %s", src.Database(), src.Host(), src.User(), tlsNote)
	info, sourceNum, err := inspectSource(ctx, conn, src.Host())
	if err != nil {
		check("inspect", CheckFail, "reading the source's catalogs failed: %v", src.RedactErr(err))
		return pf, nil
	}
	pf.Source = info

	if sourceNum/10000 > targetNum/10000 {
		check("version", CheckFail, "the source runs PostgreSQL %s, newer than this project's %s: its dump may not restore", info.ServerVersion, pf.TargetVersion)
	} else {
		check("version", CheckPass, "PostgreSQL %s into %s", info.ServerVersion, pf.TargetVersion)
	}
	if pf.StorageLimitBytes > 0 && info.DatabaseSizeBytes > pf.StorageLimitBytes {
		check("size", CheckFail, "the source database is %d bytes, over the project's storage limit of %d bytes", info.DatabaseSizeBytes, pf.StorageLimitBytes)
	} else {
		check("size", CheckPass, "%d bytes of a %d-byte limit", info.DatabaseSizeBytes, pf.StorageLimitBytes)
	}
	missing, err := missingExtensions(ctx, target, info.Extensions, s.host.OffersExtension)
	if err != nil {
		return nil, apperr.Server(err, "list the project's extensions")
	}
	if len(missing) > 0 {
		check("extensions", CheckFail, "not available here: %s", strings.Join(missing, ", "))
	} else {
		check("extensions", CheckPass, "all %d extensions are available here", len(info.Extensions))
	}
	switch {
	case len(info.ProviderAuthFKs) > 0 || len(info.ProviderAuthPolicyTables) > 0:
		var refs []string
		for _, fk := range info.ProviderAuthFKs {
			refs = append(refs, fmt.Sprintf("%s (%s → %s)", fk.Constraint, fk.SourceTable, fk.TargetTable))
		}
		for _, t := range info.ProviderAuthPolicyTables {
			refs = append(refs, "policies on "+t)
		}
		check("provider_objects", CheckFail, "app objects refer to %s's schemas or roles, which are not copied; drop or change them first: %s",
			info.Provider, strings.Join(refs, "; "))
	case len(info.ProviderSchemas) > 0:
		check("provider_objects", CheckWarn, "%s's schemas are not copied: %s", info.Provider, strings.Join(info.ProviderSchemas, ", "))
	default:
		check("provider_objects", CheckPass, "no provider schemas")
	}
	if len(info.EventTriggers) > 0 {
		check("event_triggers", CheckWarn, "event triggers are not copied (they need a superuser): %s", strings.Join(info.EventTriggers, ", "))
	} else {
		check("event_triggers", CheckPass, "none")
	}
	if info.Replication.Ready {
		check("replication", CheckPass, "ready for imports/follow")
	} else {
		check("replication", CheckWarn, "imports/follow is not possible until: %s", strings.Join(info.Replication.Blockers, "; "))
	}
	pf.OK = !slices.ContainsFunc(pf.Checks, func(c api.PreflightCheck) bool { return c.Status == CheckFail })
	return pf, nil
}

// storageLimit is the project's storage limit, from its plan when the project has none of its own.
func (s *Service) storageLimit(prj *store.Project) int64 {
	if prj.StorageLimitBytes > 0 {
		return prj.StorageLimitBytes
	}
	return s.host.PlanStorageLimitBytes(prj.Plan)
}

// missingExtensions names the source's extensions the target's server does not offer or the appliance
// does not allow.
func missingExtensions(ctx context.Context, target *pgx.Conn, exts []api.SourceExtension, offered func(string) bool) ([]string, error) {
	rows, err := target.Query(ctx, "SELECT name FROM pg_available_extensions")
	if err != nil {
		return nil, err
	}
	avail, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	missing := []string{}
	for _, e := range exts {
		switch {
		case !offered(e.Name):
			missing = append(missing, e.Name+" (not allowed)")
		case !slices.Contains(avail, e.Name):
			missing = append(missing, e.Name)
		}
	}
	return missing, nil
}

var systemSchema = regexp.MustCompile(`^(pg_catalog|information_schema|pg_toast|pg_temp_\d+|pg_toast_temp_\d+)$`)

// inspectSource reads everything the preflight reports from the source's catalogs.
func inspectSource(ctx context.Context, conn *pgx.Conn, host string) (*api.SourceInfo, int, error) {
	info := &api.SourceInfo{Extensions: []api.SourceExtension{}, AppSchemas: []string{}, ProviderSchemas: []string{},
		ProviderAuthPolicyTables: []string{}, EventTriggers: []string{}, ProviderSignals: []string{},
		ProviderAuthFKs: []api.ProviderAuthFK{}, Replication: &api.ReplicationReadiness{Blockers: []string{}}}
	var num int
	var version string
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('server_version_num')::int,
		pg_database_size(current_database())`).Scan(&version, &num, &info.DatabaseSizeBytes); err != nil {
		return nil, 0, err
	}
	info.ServerVersion, _, _ = strings.Cut(version, " ")
	rows, err := conn.Query(ctx, "SELECT extname, extversion FROM pg_extension WHERE extname <> 'plpgsql' ORDER BY extname")
	if err != nil {
		return nil, 0, err
	}
	if info.Extensions, err = pgx.CollectRows(rows, pgx.RowToStructByPos[api.SourceExtension]); err != nil {
		return nil, 0, err
	}
	schemas, err := QueryStrings(ctx, conn, "SELECT nspname FROM pg_namespace ORDER BY nspname")
	if err != nil {
		return nil, 0, err
	}
	schemas = slices.DeleteFunc(schemas, systemSchema.MatchString)
	roles, err := QueryStrings(ctx, conn, "SELECT rolname FROM pg_roles")
	if err != nil {
		return nil, 0, err
	}
	settings, err := QueryStrings(ctx, conn, "SELECT name FROM pg_settings")
	if err != nil {
		return nil, 0, err
	}
	prov, provSchemas, provRoles := detectProvider(info, host, schemas, roles, settings)
	info.Provider = prov
	for _, n := range schemas {
		if slices.Contains(provSchemas, n) {
			info.ProviderSchemas = append(info.ProviderSchemas, n)
		} else {
			info.AppSchemas = append(info.AppSchemas, n)
		}
	}
	if info.EventTriggers, err = QueryStrings(ctx, conn, "SELECT evtname FROM pg_event_trigger ORDER BY evtname"); err != nil {
		return nil, 0, err
	}
	if len(info.ProviderSchemas) > 0 || len(provRoles) > 0 {
		// Policies whose expressions name a provider schema (auth.uid()) or that apply to a provider role.
		var pattern *string // NULL matches nothing
		if len(info.ProviderSchemas) > 0 {
			re := `\m(` + strings.Join(regexpQuoteAll(info.ProviderSchemas), "|") + `)\.`
			pattern = &re
		}
		if info.ProviderAuthPolicyTables, err = QueryStrings(ctx, conn, `SELECT DISTINCT schemaname || '.' || tablename FROM pg_policies
			WHERE schemaname = ANY($1) AND (coalesce(qual, '') || ' ' || coalesce(with_check, '') ~ $2 OR roles && $3::name[])
			ORDER BY 1`, info.AppSchemas, pattern, provRoles); err != nil {
			return nil, 0, err
		}
		rows, err := conn.Query(ctx, `SELECT c.conname::text, sn.nspname || '.' || s.relname, tn.nspname || '.' || t.relname
			FROM pg_constraint c
			JOIN pg_class s ON s.oid = c.conrelid JOIN pg_namespace sn ON sn.oid = s.relnamespace
			JOIN pg_class t ON t.oid = c.confrelid JOIN pg_namespace tn ON tn.oid = t.relnamespace
			WHERE c.contype = 'f' AND sn.nspname = ANY($1) AND tn.nspname = ANY($2) ORDER BY 2, 1`, info.AppSchemas, info.ProviderSchemas)
		if err != nil {
			return nil, 0, err
		}
		if info.ProviderAuthFKs, err = pgx.CollectRows(rows, pgx.RowToStructByPos[api.ProviderAuthFK]); err != nil {
			return nil, 0, err
		}
	}
	if err := replicationReadiness(ctx, conn, num, info); err != nil {
		return nil, 0, err
	}
	return info, num, nil
}

// detectProvider finds the hosting provider from the host name, roles, settings, extensions and schemas
// (schemas alone count only when two or more of one provider's are present: a lone "auth" schema may be
// the application's own). It returns the provider's schemas and roles present in the source.
func detectProvider(info *api.SourceInfo, host string, schemas, roles, settings []string) (string, []string, []string) {
	host = strings.ToLower(host)
	for _, pv := range providers {
		var signals, strong []string
		for _, h := range pv.hosts {
			if strings.HasSuffix(host, h) {
				strong = append(strong, "host:*"+h)
			}
		}
		var presentRoles []string
		for _, r := range pv.roles {
			if slices.Contains(roles, r) {
				strong = append(strong, "role:"+r)
				presentRoles = append(presentRoles, r)
			}
		}
		if pv.prefix != "" {
			for _, st := range settings {
				if strings.HasPrefix(st, pv.prefix) {
					strong = append(strong, "setting:"+st)
					break
				}
			}
		}
		for _, e := range pv.exts {
			if slices.ContainsFunc(info.Extensions, func(x api.SourceExtension) bool { return x.Name == e }) {
				strong = append(strong, "extension:"+e)
			}
		}
		var presentSchemas []string
		for _, n := range pv.schemas {
			if slices.Contains(schemas, n) {
				signals = append(signals, "schema:"+n)
				presentSchemas = append(presentSchemas, n)
			}
		}
		if len(strong) > 0 || len(presentSchemas) >= 2 {
			info.ProviderSignals = append(strong, signals...)
			return pv.name, presentSchemas, presentRoles
		}
	}
	return ProviderSelfHosted, nil, nil
}

// replicationReadiness fills info.Replication: the settings, and a blocker for everything that stops
// logical replication of the app schemas with the URL's role.
func replicationReadiness(ctx context.Context, conn *pgx.Conn, num int, info *api.SourceInfo) error {
	r := info.Replication
	var slots, senders, usedSenders int
	var user, db string
	var canCreate bool
	if err := conn.QueryRow(ctx, `SELECT current_setting('wal_level'), current_setting('max_replication_slots')::int,
		current_setting('max_wal_senders')::int, (SELECT count(*) FROM pg_replication_slots)::int,
		(SELECT count(*) FROM pg_stat_replication)::int, current_user, current_database(),
		has_database_privilege(current_database(), 'CREATE'),
		(SELECT rolsuper OR rolreplication FROM pg_roles WHERE rolname = current_user)
		  OR coalesce((SELECT pg_has_role(current_user, oid, 'member') FROM pg_roles WHERE rolname = 'rds_replication'), false)`).
		Scan(&r.WALLevel, &slots, &senders, &r.UsedReplicationSlots, &usedSenders, &user, &db, &canCreate, &r.RoleCanReplicate); err != nil {
		return err
	}
	r.MaxReplicationSlots, r.MaxWALSenders = slots, senders
	block := func(format string, args ...any) { r.Blockers = append(r.Blockers, fmt.Sprintf(format, args...)) }
	if num < 100000 {
		block("logical replication needs PostgreSQL 10 or later; the source runs %s", info.ServerVersion)
	}
	if r.WALLevel != "logical" {
		block("wal_level is %s: set wal_level = logical on the source and restart it", r.WALLevel)
	}
	if r.UsedReplicationSlots >= slots {
		block("all %d replication slots are in use: raise max_replication_slots or drop an unused slot", slots)
	}
	if usedSenders >= senders {
		block("all %d WAL senders are in use: raise max_wal_senders", senders)
	}
	if !r.RoleCanReplicate {
		block("role %s may not replicate: ALTER ROLE %s REPLICATION (or use a superuser)", user, pgx.Identifier{user}.Sanitize())
	}
	if !canCreate {
		block("role %s may not create a publication in database %s: GRANT CREATE ON DATABASE %s TO %s", user, db,
			pgx.Identifier{db}.Sanitize(), pgx.Identifier{user}.Sanitize())
	}
	notOwned, err := QueryStrings(ctx, conn, `SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p') AND n.nspname = ANY($1) AND NOT pg_has_role(current_user, c.relowner, 'USAGE')
		ORDER BY 1`, info.AppSchemas)
	if err != nil {
		return err
	}
	if len(notOwned) > 0 {
		block("role %s does not own %s: a publication needs the tables' owner", user, listSome(notOwned))
	}
	noIdentity, err := QueryStrings(ctx, conn, `SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind = 'r' AND n.nspname = ANY($1) AND (c.relreplident = 'n' OR (c.relreplident = 'd'
		  AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)))
		ORDER BY 1`, info.AppSchemas)
	if err != nil {
		return err
	}
	if len(noIdentity) > 0 {
		block("%s %s no primary key or replica identity, so the source would refuse their UPDATEs and DELETEs once published: add a primary key or ALTER TABLE ... REPLICA IDENTITY FULL",
			listSome(noIdentity), map[bool]string{true: "has", false: "have"}[len(noIdentity) == 1])
	}
	r.Ready = len(r.Blockers) == 0
	return nil
}

// listSome joins up to 10 names and says how many more there are.
func listSome(names []string) string {
	if len(names) <= 10 {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:10], ", ") + " and " + strconv.Itoa(len(names)-10) + " more"
}

func QueryStrings(ctx context.Context, conn *pgx.Conn, sql string, args ...any) ([]string, error) {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func regexpQuoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = regexp.QuoteMeta(n)
	}
	return out
}

// PreflightsPerMinute is each project's rate of import preflights: each connects somewhere on the
// tenant's behalf.
const PreflightsPerMinute = 10
