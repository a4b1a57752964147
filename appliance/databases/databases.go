// Package databases is the databases and roles area of a project's server (GET/POST …/databases, DELETE
// …/databases/{name}, GET/POST …/roles, POST …/roles/{name}/reset-password, DELETE …/roles/{name}). The
// statements run at once on an admin session (they are short: no job); names are checked against
// plainName and quoted, passwords generated here and sent as SCRAM verifiers on an untracked session,
// returned once and kept nowhere. Roles made here log in and nothing more (no superuser, replication,
// CREATEROLE, CREATEDB, BYPASSRLS); PgBouncer's user list follows every change (instances.TenantRoles), and
// it serves every database of the server, so a new database is reachable pooled at once.
//
// It reaches the rest of the domain only through Host (declared here, given by the root's areaHost), the
// kernel packages (apperr, authz), the records (store) and the instance engine's statements (instances).
// It never imports `appliance`.
package databases

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// Host is what the area takes from the rest of the domain, which the root package keeps
// (appliance/areas.go gives it).
type Host interface {
	// ActiveInstance is a visible project that is active, with its instance record: the projects'
	// visibility and "active" rules.
	ActiveInstance(p *authz.Principal, projectID string) (*store.Project, *store.Instance, error)
	// QuietAdminConn is an admin session to db on the instance that leaves no trace in the tenant's
	// statistics or logs (the admin password is sealed with the root's box).
	QuietAdminConn(ctx context.Context, inst *store.Instance, db string) (*pgx.Conn, error)
	// Audit writes an audit event of the caller in tx.
	Audit(tx *store.Tx, p *authz.Principal, action, orgID, projectID string, metadata any) error
	// SyncPooler gives the project's PgBouncer the roles as they are now (conn is an admin session) and
	// reloads it: the pooler is the instance engine's, which the root holds.
	SyncPooler(ctx context.Context, conn *pgx.Conn, inst *store.Instance, prj *store.Project) error
}

// Deps are the area's collaborators; New takes them all.
type Deps struct {
	DB   *store.DB
	Host Host
}

// Service is the area: httpapi's databases and roles routes call its methods.
type Service struct {
	db   *store.DB
	host Host
}

// New builds the area.
func New(d Deps) *Service { return &Service{db: d.DB, host: d.Host} }

// plainName is what a database or role created here may be called: no quoting surprises anywhere
// (PgBouncer's files, URLs, shells). The statements quote it all the same.
var plainName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// reservedDatabase reports whether a database name is PostgreSQL's or the appliance's.
func reservedDatabase(prj *store.Project, name string) bool {
	return name == "postgres" || name == "template0" || name == "template1" || name == prj.DatabaseName ||
		strings.HasPrefix(name, "pg_") || strings.HasPrefix(name, "appliance")
}

// checkName refuses a name that is not plain or is reserved.
func checkName(kind, name string, reserved bool) error {
	if !plainName.MatchString(name) {
		return apperr.Invalid("%s name %q: use 1 to 63 lowercase letters, digits and underscores, starting with a letter or underscore", kind, name)
	}
	if reserved {
		return apperr.Invalid("%s name %q is reserved (PostgreSQL's, the appliance's or the project's own)", kind, name)
	}
	return nil
}

// projectServer is an active project visible to p, its instance and an untracked admin session on its
// database (close it).
func (s *Service) projectServer(ctx context.Context, p *authz.Principal, projectID string) (*store.Project, *store.Instance, *pgx.Conn, error) {
	prj, inst, err := s.host.ActiveInstance(p, projectID)
	if err != nil {
		return nil, nil, nil, err
	}
	conn, err := s.host.QuietAdminConn(ctx, inst, prj.DatabaseName)
	if err != nil {
		return nil, nil, nil, err
	}
	return prj, inst, conn, nil
}

// auditProject records an action on a project in its own transaction.
func (s *Service) auditProject(p *authz.Principal, prj *store.Project, action string, md map[string]any) error {
	return s.db.Update(func(tx *store.Tx) error {
		if err := s.host.Audit(tx, p, action, prj.OrganizationID, prj.ID, md); err != nil {
			return apperr.Internal(err, "audit")
		}
		return nil
	})
}

const listDatabasesSQL = `SELECT d.datname::text, pg_catalog.pg_get_userbyid(d.datdba)::text, pg_catalog.pg_database_size(d.oid)
	FROM pg_catalog.pg_database d WHERE d.datallowconn AND NOT d.datistemplate AND d.datname <> 'postgres' %s ORDER BY d.datname`

func (s *Service) readDatabases(ctx context.Context, conn *pgx.Conn, prj *store.Project, name string) ([]api.Database, error) {
	q, args := strings.Replace(listDatabasesSQL, "%s", "", 1), []any{}
	if name != "" {
		q, args = strings.Replace(listDatabasesSQL, "%s", "AND d.datname = $1", 1), []any{name}
	}
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return nil, apperr.Server(err, "list the databases")
	}
	out := []api.Database{}
	var d api.Database
	_, err = pgx.ForEachRow(rows, []any{&d.Name, &d.Owner, &d.SizeBytes}, func() error {
		d.Reserved = reservedDatabase(prj, d.Name)
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, apperr.Server(err, "list the databases")
	}
	return out, nil
}

// List lists the project's databases (its own first flagged reserved).
func (s *Service) List(ctx context.Context, p *authz.Principal, projectID string) (*api.DatabaseList, error) {
	prj, _, conn, err := s.projectServer(ctx, p, projectID)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	dbs, err := s.readDatabases(ctx, conn, prj, "")
	if err != nil {
		return nil, err
	}
	return &api.DatabaseList{Databases: dbs}, nil
}

// Create creates a database owned by the project's role or a role made here (the project's role
// may then act as that owner), reachable directly and pooled, connections for its owner and the project's
// role only.
func (s *Service) Create(ctx context.Context, p *authz.Principal, projectID string, req *api.CreateDatabaseRequest) (*api.DatabaseResponse, error) {
	prj, inst, err := s.host.ActiveInstance(p, projectID)
	if err != nil {
		return nil, err
	}
	if err := checkName("database", req.Name, reservedDatabase(prj, req.Name)); err != nil {
		return nil, err
	}
	if prj.StorageLock != "" {
		return nil, apperr.Conflict("project %s is over its storage limit: no new database until it is under", prj.ID)
	}
	conn, err := s.host.QuietAdminConn(ctx, inst, prj.DatabaseName)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	owner := prj.RoleName
	if req.Owner != "" && req.Owner != prj.RoleName {
		tenants, err := instances.TenantRoles(ctx, conn, prj)
		if err != nil {
			return nil, apperr.Server(err, "read the roles")
		}
		if !slices.Contains(tenants, req.Owner) {
			return nil, apperr.Invalid("owner %q is neither the project's role nor a role created through the roles endpoint", req.Owner)
		}
		owner = req.Owner
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_database WHERE datname = $1)", req.Name).Scan(&exists); err != nil {
		return nil, apperr.Server(err, "read the databases")
	}
	if exists {
		return nil, apperr.Conflict("database %q already exists", req.Name)
	}
	// Another owner is a role made here, which the project's role may act as (CreateRole): the project's
	// login keeps reaching all of the project's data.
	db, own := pgx.Identifier{req.Name}.Sanitize(), pgx.Identifier{owner}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+db+" OWNER "+own); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42P04" {
			return nil, apperr.Conflict("database %q already exists", req.Name)
		}
		return nil, apperr.Server(err, "create the database")
	}
	if err := s.prepareNewDatabase(ctx, conn, req.Name, owner, prj.RoleName); err != nil {
		// Not half made: a database the next attempt could not create again.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+db)
		return nil, err
	}
	if err := s.auditProject(p, prj, "project.database.create", map[string]any{"database": req.Name, "owner": owner}); err != nil {
		return nil, err
	}
	dbs, err := s.readDatabases(ctx, conn, prj, req.Name)
	if err != nil || len(dbs) != 1 {
		return nil, errors.Join(err, apperr.Internal(errors.New("database not found after its creation"), "read the new database"))
	}
	return &api.DatabaseResponse{Database: dbs[0]}, nil
}

// prepareNewDatabase: connections for the owner and the project's role only, the public schema the owner's.
func (s *Service) prepareNewDatabase(ctx context.Context, conn *pgx.Conn, name, owner, projectRole string) error {
	db, err := pgx.ConnectConfig(ctx, instances.WithDatabase(conn.Config(), name))
	if err != nil {
		return apperr.Server(err, "connect to the new database")
	}
	defer db.Close(context.WithoutCancel(ctx))
	d, own, prole := pgx.Identifier{name}.Sanitize(), pgx.Identifier{owner}.Sanitize(), pgx.Identifier{projectRole}.Sanitize()
	for _, q := range []string{
		"ALTER SCHEMA public OWNER TO " + own,
		"REVOKE ALL ON DATABASE " + d + " FROM PUBLIC",
		"GRANT CONNECT, TEMPORARY ON DATABASE " + d + " TO " + own + ", " + prole,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			return apperr.Server(err, "prepare the new database")
		}
	}
	return nil
}

// Drop drops a database created here (its sessions ended first). Admin role: it destroys data.
func (s *Service) Drop(ctx context.Context, p *authz.Principal, projectID, name string) (*api.DeletedResponse, error) {
	if err := p.RequireAdminRole("dropping a database"); err != nil {
		return nil, err
	}
	prj, _, conn, err := s.projectServer(ctx, p, projectID)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if reservedDatabase(prj, name) {
		return nil, apperr.Invalid("database %q is reserved (PostgreSQL's, the appliance's or the project's own) and cannot be dropped", name)
	}
	dbs, err := s.readDatabases(ctx, conn, prj, name)
	if err != nil {
		return nil, err
	}
	if len(dbs) == 0 {
		return nil, apperr.NotFound("database %q not found", name)
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return nil, apperr.Server(err, "drop the database")
	}
	if err := s.auditProject(p, prj, "project.database.drop", map[string]any{"database": name}); err != nil {
		return nil, err
	}
	return &api.DeletedResponse{Deleted: true}, nil
}

// ListRoles lists the project's role (reserved) and the roles created here.
func (s *Service) ListRoles(ctx context.Context, p *authz.Principal, projectID string) (*api.RoleList, error) {
	prj, _, conn, err := s.projectServer(ctx, p, projectID)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	names, err := instances.TenantRoles(ctx, conn, prj)
	if err != nil {
		return nil, apperr.Server(err, "read the roles")
	}
	out := []api.DatabaseRole{{Name: prj.RoleName, Reserved: true}}
	for _, n := range names {
		out = append(out, api.DatabaseRole{Name: n})
	}
	return &api.RoleList{Roles: out}, nil
}

// CreateRole creates a login role with a generated password (returned once): it may connect to the
// project's database and to those it is given; no other privilege.
func (s *Service) CreateRole(ctx context.Context, p *authz.Principal, projectID string, req *api.CreateRoleRequest) (*api.RolePassword, error) {
	prj, inst, err := s.host.ActiveInstance(p, projectID)
	if err != nil {
		return nil, err
	}
	if err := checkName("role", req.Name, instances.ReservedRoleName(prj, req.Name)); err != nil {
		return nil, err
	}
	conn, err := s.host.QuietAdminConn(ctx, inst, prj.DatabaseName)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = $1)", req.Name).Scan(&exists); err != nil {
		return nil, apperr.Server(err, "read the roles")
	}
	if exists {
		return nil, apperr.Conflict("role %q already exists", req.Name)
	}
	password := ids.Secret(20)
	create, err := instances.SetPasswordSQL("CREATE ROLE", req.Name, "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS INHERIT", password)
	if err != nil {
		return nil, apperr.Internal(err, "role password")
	}
	role, prole := pgx.Identifier{req.Name}.Sanitize(), pgx.Identifier{prj.RoleName}.Sanitize()
	_, err = conn.Exec(ctx, create)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42710" {
			return nil, apperr.Conflict("role %q already exists", req.Name)
		}
		return nil, apperr.Server(err, "create the role")
	}
	// The project's role may act as it (grant it tables, own its objects); it connects to the project's database.
	for _, q := range []string{
		"GRANT " + role + " TO " + prole,
		"GRANT CONNECT, TEMPORARY ON DATABASE " + pgx.Identifier{prj.DatabaseName}.Sanitize() + " TO " + role,
	} {
		if err := postgres.ExecCatalog(ctx, conn, q); err != nil {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "DROP ROLE IF EXISTS "+role)
			return nil, apperr.Server(err, "grant the role")
		}
	}
	if err := s.host.SyncPooler(ctx, conn, inst, prj); err != nil {
		return nil, err
	}
	if err := s.auditProject(p, prj, "project.role.create", map[string]any{"role": req.Name}); err != nil {
		return nil, err
	}
	return &api.RolePassword{Role: api.DatabaseRole{Name: req.Name}, Password: password}, nil
}

// ResetRolePassword gives a role created here a new generated password (returned once); the old one no
// longer logs in, directly or pooled. The project's own role changes through the credential rotation.
func (s *Service) ResetRolePassword(ctx context.Context, p *authz.Principal, projectID, name string) (*api.RolePassword, error) {
	prj, inst, conn, err := s.projectServer(ctx, p, projectID)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if instances.ReservedRoleName(prj, name) {
		return nil, apperr.Invalid("role %q is reserved: the project's own login changes through POST /v1/projects/%s/credentials/rotate", name, prj.ID)
	}
	tenants, err := instances.TenantRoles(ctx, conn, prj)
	if err != nil {
		return nil, apperr.Server(err, "read the roles")
	}
	if !slices.Contains(tenants, name) {
		return nil, apperr.NotFound("role %q not found", name)
	}
	password := ids.Secret(20)
	alter, err := instances.SetPasswordSQL("ALTER ROLE", name, "", password)
	if err != nil {
		return nil, apperr.Internal(err, "role password")
	}
	if _, err := conn.Exec(ctx, alter); err != nil {
		return nil, apperr.Server(err, "set the password")
	}
	if err := s.host.SyncPooler(ctx, conn, inst, prj); err != nil {
		return nil, err
	}
	if err := s.auditProject(p, prj, "project.role.reset_password", map[string]any{"role": name}); err != nil {
		return nil, err
	}
	return &api.RolePassword{Role: api.DatabaseRole{Name: name}, Password: password}, nil
}

// DropRole drops a role created here. What it owns in any database of the server passes to the project's
// role (REASSIGN OWNED, databases included), its privileges go (DROP OWNED), then the role, and its open
// sessions are ended: nothing it made is lost, and it logs in nowhere, directly or pooled. The project's
// own role and the appliance's are refused.
func (s *Service) DropRole(ctx context.Context, p *authz.Principal, projectID, name string) (*api.DeletedResponse, error) {
	prj, inst, conn, err := s.projectServer(ctx, p, projectID)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if instances.ReservedRoleName(prj, name) {
		return nil, apperr.Invalid("role %q is reserved (PostgreSQL's, the appliance's or the project's own) and cannot be dropped", name)
	}
	tenants, err := instances.TenantRoles(ctx, conn, prj)
	if err != nil {
		return nil, apperr.Server(err, "read the roles")
	}
	if !slices.Contains(tenants, name) {
		return nil, apperr.NotFound("role %q not found", name)
	}
	var oid uint32
	if err := conn.QueryRow(ctx, "SELECT oid FROM pg_catalog.pg_roles WHERE rolname = $1", name).Scan(&oid); err != nil {
		return nil, apperr.Server(err, "read the role")
	}
	rows, err := conn.Query(ctx, "SELECT datname::text FROM pg_catalog.pg_database WHERE datallowconn ORDER BY datname")
	if err != nil {
		return nil, apperr.Server(err, "list the databases")
	}
	dbs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, apperr.Server(err, "list the databases")
	}
	role, prole := pgx.Identifier{name}.Sanitize(), pgx.Identifier{prj.RoleName}.Sanitize()
	for _, d := range dbs {
		if err := s.disownRole(ctx, conn, d, role, prole); err != nil {
			return nil, err
		}
	}
	if _, err := conn.Exec(ctx, "DROP ROLE "+role); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "2BP01" {
			return nil, apperr.Conflict("role %q still has objects or privileges: %s", name, pe.Detail)
		}
		return nil, apperr.Server(err, "drop the role")
	}
	// Sessions the role had open end now that it cannot log in again.
	if _, err := conn.Exec(ctx, "SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity WHERE usesysid = $1", oid); err != nil {
		return nil, apperr.Server(err, "end the role's sessions")
	}
	if err := s.host.SyncPooler(ctx, conn, inst, prj); err != nil {
		return nil, err
	}
	if err := s.auditProject(p, prj, "project.role.drop", map[string]any{"role": name}); err != nil {
		return nil, err
	}
	return &api.DeletedResponse{Deleted: true}, nil
}

// disownRole gives what role owns in database db to prole and revokes role's privileges there (both
// identifiers quoted).
func (s *Service) disownRole(ctx context.Context, conn *pgx.Conn, db, role, prole string) error {
	c, err := pgx.ConnectConfig(ctx, instances.WithDatabase(conn.Config(), db))
	if err != nil {
		return apperr.Server(err, "connect to database "+db)
	}
	defer c.Close(context.WithoutCancel(ctx))
	for _, q := range []string{"REASSIGN OWNED BY " + role + " TO " + prole, "DROP OWNED BY " + role} {
		if _, err := c.Exec(ctx, q); err != nil {
			return apperr.Server(err, "hand over the role's objects in database "+db)
		}
	}
	return nil
}
