package instances

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// UntrackedSettings make an appliance session (a superuser's) leave no trace of what it runs: no
// pg_stat_statements entry, no pg_stat_activity text, no statement in the server's log even on error.
var UntrackedSettings = map[string]string{
	"pg_stat_statements.track":   "none",
	"track_activities":           "off",
	"log_statement":              "none",
	"log_min_duration_statement": "-1",
	"log_min_error_statement":    "panic",
}

// Untracked gives a session UntrackedSettings. Every connection that sends a secret (a role's password, a
// source's connection string) calls it first, or starts with them (ConnectAdmin with UntrackedSettings),
// and is used for nothing a tenant should later see. A session that started with them has them already
// (RESET and DISCARD ALL return to startup values; the appliance sets them to nothing else): no statement
// is sent.
func Untracked(ctx context.Context, conn *pgx.Conn) error {
	if startedUntracked(conn) {
		return nil
	}
	for name, value := range UntrackedSettings {
		if _, err := conn.Exec(ctx, "SET "+name+" = "+QuoteLiteral(value)); err != nil {
			return fmt.Errorf("untracked session: %w", err)
		}
	}
	return nil
}

// startedUntracked reports whether conn's session started with UntrackedSettings as startup parameters.
func startedUntracked(conn *pgx.Conn) bool {
	params := conn.Config().RuntimeParams
	for name, value := range UntrackedSettings {
		if params[name] != value {
			return false
		}
	}
	return true
}

// QuoteLiteral quotes s as an SQL string literal.
func QuoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// AltRole is the name of a project's second login.
func AltRole(role string) string { return role + "_alt" }

// SetPasswordSQL is the statement that gives role a password, as the SCRAM verifier the appliance
// computed (never the password itself; postgres.AdminVerifier's for the admin role). verb is CREATE ROLE
// or ALTER ROLE; options such as LOGIN follow the role's name.
func SetPasswordSQL(verb, role, options, password string) (string, error) {
	verifier := postgres.SCRAMVerifier
	if role == postgres.AdminRole {
		verifier = postgres.AdminVerifier
	}
	v, err := verifier(password)
	if err != nil {
		return "", err
	}
	stmt := verb + " " + pgx.Identifier{role}.Sanitize()
	if options != "" {
		stmt += " " + options
	}
	return stmt + " PASSWORD " + QuoteLiteral(v), nil
}

// PurgeSecretStatements removes from the database's pg_stat_statements whatever an older appliance let
// in with a password (ALTER ROLE … PASSWORD '…'): all of it, since a partial reset leaves the query texts
// in the text file until its next garbage collection. It reports whether it reset. The extension's objects
// are named in the schema it is in (db is an admin session: its search_path is the catalog's); without the
// extension there is nothing to purge.
func PurgeSecretStatements(ctx context.Context, db *pgx.Conn) (bool, error) {
	var schema string
	err := db.QueryRow(ctx, `SELECT n.nspname::text FROM pg_catalog.pg_extension e
		JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_stat_statements'`).Scan(&schema)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var n int
	view, reset := pgx.Identifier{schema, "pg_stat_statements"}.Sanitize(), pgx.Identifier{schema, "pg_stat_statements_reset"}.Sanitize()
	if err := db.QueryRow(ctx, "SELECT count(*) FROM "+view+" WHERE query ~* 'password|passwd'").Scan(&n); err != nil || n == 0 {
		return false, err
	}
	// Typed arguments (all zero: everything): an overload the tenant may add to the extension's schema cannot
	// make the call ambiguous.
	_, err = db.Exec(ctx, "SELECT "+reset+"(0::pg_catalog.oid, 0::pg_catalog.oid, 0::pg_catalog.int8)")
	return err == nil, err
}

// ConnectAdmin connects to db on the instance as the admin superuser over loopback, its session started
// with params (postgres.Instance.ConnectWith; UntrackedSettings for a quiet one). Its search_path is
// postgres.AdminSearchPath: the catalog only, never the tenant's schemas.
func ConnectAdmin(ctx context.Context, inst *store.Instance, password, db string, params map[string]string) (*pgx.Conn, error) {
	return (&postgres.Instance{ID: inst.ID, Port: inst.Port}).ConnectWith(ctx, password, db, params)
}

// WithDatabase is cfg for another database.
func WithDatabase(cfg *pgx.ConnConfig, db string) *pgx.ConnConfig {
	c := cfg.Copy()
	c.Database = db
	return c
}

// BringUpToDate brings an instance an older appliance provisioned up to today's rules: its project role
// no longer reads other roles' statements (pg_monitor), statements with passwords are purged from
// pg_stat_statements (the appliance now runs such statements untracked), and the admin role's verifier
// stretches its password no more than postgres.AdminSCRAMIterations. It reports whether it purged. Run
// when the appliance adopts a running instance.
func (m *Manager) BringUpToDate(ctx context.Context, inst *store.Instance, prj *store.Project, adminPW string) (bool, error) {
	conn, err := m.Instance(inst).ConnectWith(ctx, adminPW, "postgres", UntrackedSettings)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := cheapAdminLogin(ctx, conn, adminPW); err != nil {
		return false, err
	}
	role := pgx.Identifier{prj.RoleName}.Sanitize()
	for _, q := range []string{"REVOKE pg_monitor FROM " + role, "GRANT pg_read_all_settings TO " + role} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return false, fmt.Errorf("project role's rights: %w", err)
		}
	}
	db, err := pgx.ConnectConfig(ctx, WithDatabase(conn.Config(), prj.DatabaseName))
	if err != nil {
		return false, err
	}
	defer db.Close(context.WithoutCancel(ctx))
	return PurgeSecretStatements(ctx, db)
}

// cheapAdminLogin gives the admin role postgres.AdminVerifier's verifier of password when the one the
// server keeps stretches it more (a cluster whose initdb an earlier appliance ran: PostgreSQL's default,
// 4096 iterations). conn is an untracked superuser session (the statement carries the verifier).
func cheapAdminLogin(ctx context.Context, conn *pgx.Conn, password string) error {
	var secret string
	err := conn.QueryRow(ctx, "SELECT rolpassword FROM pg_catalog.pg_authid WHERE rolname = $1", postgres.AdminRole).Scan(&secret)
	if err != nil {
		return fmt.Errorf("read the admin role's verifier: %w", err)
	}
	if n, ok := postgres.SCRAMIterationsOf(secret); ok && n <= postgres.AdminSCRAMIterations {
		return nil
	}
	q, err := SetPasswordSQL("ALTER ROLE", postgres.AdminRole, "", password)
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("set the admin role's verifier: %w", err)
	}
	return nil
}
