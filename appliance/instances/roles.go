package instances

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// Credential is a project's current login with its password opened. NoLogin keeps its logins from
// connecting (the storage lock: a new password does not lift it).
type Credential struct {
	Username, Password string
	NoLogin            bool
}

// setLogins sets the current credential's password, and makes the second login act as the project's role
// (the role it sets is named by its name), in one transaction.
func setLogins(ctx context.Context, conn *pgx.Conn, prj *store.Project, cred Credential) error {
	stmts, err := loginStatements(prj, cred)
	if err != nil {
		return err
	}
	if err := Untracked(ctx, conn); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, strings.Join(stmts, "; ")); err != nil {
		return fmt.Errorf("set the logins: %w", err)
	}
	return nil
}

// loginStatements are setLogins' statements; the first carries the password's verifier (run them untracked).
func loginStatements(prj *store.Project, cred Credential) ([]string, error) {
	login := "LOGIN"
	if cred.NoLogin {
		login = "NOLOGIN"
	}
	setPW, err := SetPasswordSQL("ALTER ROLE", cred.Username, login, cred.Password)
	if err != nil {
		return nil, err
	}
	return []string{setPW, "ALTER ROLE " + pgx.Identifier{AltRole(prj.RoleName)}.Sanitize() + " SET role = " + QuoteLiteral(prj.RoleName)}, nil
}

// ensureRolesAndDatabase creates the project's login roles and database when missing, and sets the current
// credential's password.
func ensureRolesAndDatabase(ctx context.Context, conn *pgx.Conn, prj *store.Project, cred Credential) error {
	if err := ensureRoles(ctx, conn, prj, cred); err != nil {
		return err
	}
	return PrepareDatabase(ctx, conn, prj, prj.DatabaseName)
}

// ensureRoles is ensureRolesAndDatabase but PrepareDatabase: the roles, their logins and grants, and the
// database created when missing.
func ensureRoles(ctx context.Context, conn *pgx.Conn, prj *store.Project, cred Credential) error {
	role, alt := pgx.Identifier{prj.RoleName}.Sanitize(), pgx.Identifier{AltRole(prj.RoleName)}.Sanitize()
	if err := Untracked(ctx, conn); err != nil {
		return err
	}
	exists := func(q, name string) (bool, error) {
		var ok bool
		err := conn.QueryRow(ctx, q, name).Scan(&ok)
		return ok, err
	}
	// Both logins in one round trip.
	rows, err := conn.Query(ctx, "SELECT rolname::text FROM pg_catalog.pg_roles WHERE rolname = ANY($1)", []string{prj.RoleName, AltRole(prj.RoleName)})
	if err != nil {
		return err
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, r := range []struct{ ident, name string }{{role, prj.RoleName}, {alt, AltRole(prj.RoleName)}} {
		if !slices.Contains(found, r.name) {
			// The second login gets a random password nobody knows until a rotation sets its own.
			create, err := SetPasswordSQL("CREATE ROLE", r.name, "LOGIN", ids.Secret(20))
			if err != nil {
				return err
			}
			if _, err := conn.Exec(ctx, create); err != nil {
				return fmt.Errorf("create role %s: %w", r.name, err)
			}
		}
	}
	// The logins and the grants in one statement string: one round trip, one transaction (one commit to
	// flush, not four).
	stmts, err := loginStatements(prj, cred)
	if err != nil {
		return err
	}
	stmts = append(stmts,
		"GRANT "+role+" TO "+alt,
		// The project role reads the server's settings, not other roles' statements: older appliances
		// granted pg_monitor, whose pg_read_all_stats shows every role's query texts.
		"REVOKE pg_monitor FROM "+role,
		"GRANT pg_read_all_settings TO "+role,
	)
	// Run again when another session updated a role's row meanwhile (tuple concurrently updated): the
	// storage guard applies its lock (ALTER ROLE) the first time it sees a server, which for a rebuilt
	// or moved-in instance is as it starts; every statement here is idempotent.
	if err := postgres.ExecCatalog(ctx, conn, strings.Join(stmts, "; ")); err != nil {
		return fmt.Errorf("set the logins and configure roles: %w", err)
	}
	ok, err := exists("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", prj.DatabaseName)
	if err != nil {
		return err
	}
	if !ok {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{prj.DatabaseName}.Sanitize()+" OWNER "+role); err != nil {
			return fmt.Errorf("create database: %w", err)
		}
	}
	return nil
}

// PrepareDatabase gives database (the project's, or a cutover's staging database) what the platform
// keeps in a project's database: pg_stat_statements, the public schema owned by the project's role,
// connections for that role only. It connects to database with conn's admin login.
func PrepareDatabase(ctx context.Context, conn *pgx.Conn, prj *store.Project, database string) error {
	return prepareDatabase(ctx, conn.Config(), prj, database)
}

// prepareDatabase is PrepareDatabase with the admin session's configuration (conn.Config()): it may run
// beside other work on that session.
func prepareDatabase(ctx context.Context, admin *pgx.ConnConfig, prj *store.Project, database string) error {
	db, err := pgx.ConnectConfig(ctx, WithDatabase(admin, database))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", database, err)
	}
	defer db.Close(context.WithoutCancel(ctx))
	role := pgx.Identifier{prj.RoleName}.Sanitize()
	// One statement string: one round trip and one transaction; run again when the storage guard (its lock
	// on a server it first sees: a promoted cutover's, a moved-in one's) updated the database's row meanwhile
	// (tuple concurrently updated). Every statement is idempotent.
	if err := postgres.ExecCatalog(ctx, db, strings.Join([]string{
		"CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA public", // where it always was: not in the search_path
		"ALTER SCHEMA public OWNER TO " + role,
		"REVOKE ALL ON DATABASE " + pgx.Identifier{database}.Sanitize() + " FROM PUBLIC",
		"GRANT CONNECT, TEMPORARY ON DATABASE " + pgx.Identifier{database}.Sanitize() + " TO " + role,
	}, "; ")); err != nil {
		return fmt.Errorf("prepare database %s: %w", database, err)
	}
	_, err = PurgeSecretStatements(ctx, db)
	return err
}

// SyncPoolerUsers writes the SCRAM verifiers of the project's logins, and of the roles created through the
// roles endpoints (TenantRoles), for PgBouncer (conn: an admin session of its instance). The read and the
// write are one step per instance: the last writer has read every role changed before it.
func (m *Manager) SyncPoolerUsers(ctx context.Context, conn *pgx.Conn, inst *store.Instance, prj *store.Project) error {
	mu, _ := m.userLists.LoadOrStore(inst.ID, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	v, err := postgres.ScramVerifiers(ctx, conn, prj.RoleName, AltRole(prj.RoleName))
	if err != nil {
		return err
	}
	extra, err := TenantRoles(ctx, conn, prj)
	if err != nil {
		return err
	}
	if len(extra) > 0 {
		ev, err := postgres.ScramVerifiers(ctx, conn, extra...)
		if err != nil {
			return err
		}
		maps.Copy(v, ev)
	}
	return m.Pooler(inst, prj).WriteUsers(v)
}

// ReservedRoleName reports whether a role name is one the tenant may not create, alter or drop through the
// roles endpoints: PostgreSQL's (postgres, public, pg_…), the appliance's (appliance…, its admin), the
// project's two logins.
func ReservedRoleName(prj *store.Project, name string) bool {
	return name == "postgres" || name == "public" || name == "none" || strings.HasPrefix(name, "pg_") ||
		strings.HasPrefix(name, "appliance") || name == postgres.AdminRole || name == prj.RoleName || name == AltRole(prj.RoleName)
}

// TenantRoles are the roles created through the roles endpoints: those with a SCRAM password, neither
// superuser, replication, CREATEROLE nor BYPASSRLS, nor of a reserved name (ReservedRoleName); LOGIN or
// not (the storage guard's lock takes it away and gives it back). conn is an admin session (pg_authid).
func TenantRoles(ctx context.Context, conn *pgx.Conn, prj *store.Project) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT rolname::text FROM pg_catalog.pg_authid
		WHERE NOT rolsuper AND NOT rolreplication AND NOT rolcreaterole AND NOT rolbypassrls
		AND rolpassword LIKE 'SCRAM-SHA-256$%' ORDER BY rolname`)
	if err != nil {
		return nil, fmt.Errorf("read roles: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read roles: %w", err)
	}
	out := names[:0]
	for _, n := range names {
		if !ReservedRoleName(prj, n) {
			out = append(out, n)
		}
	}
	return out, nil
}
