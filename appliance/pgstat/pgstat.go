// Package pgstat reads the numbers of the observability API from a project's PostgreSQL server: a live
// snapshot (sessions, connections, size, the slowest statements), cumulative counters for history samples,
// pg_stat_statements totals for the top-queries history, the CPU and memory of the server's processes,
// index advice (pg_qualstats and hypopg) and index hygiene (unused and redundant indexes). Every number
// comes from the server or /proc; the readings of periodic samples (ReadCounters, ReadStatements, ReadProcs)
// are cheap: one statement, one pass over /proc.
//
// Sessions. Functions take a connection to the project's database: admin is the appliance's superuser
// session (postgres.AdminRole), tenant a session of the project's own role. The tenant owns its database
// and so its public schema, where it may create functions and operators that overload the built-in ones:
// a superuser session resolving names through a search_path that includes such a schema would run the
// tenant's code as superuser. So every query on admin runs with search_path = pg_catalog, pg_temp (set in
// the same round trip, local to it: the caller's session keeps its own), names objects of extensions by
// their schema, and nothing that could run the tenant's code (planning the tenant's queries, the
// pg_qualstats advisor's PL/pgSQL) ever runs on admin: that is done on tenant.
package pgstat

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// pinSearchPath makes name resolution of the statements after it, up to the end of the batch (one implicit
// transaction), ignore every schema but the catalog and the session's own temporary schema. A statement
// already prepared with another search_path is analysed again (the plan cache checks search_path).
const pinSearchPath = "SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true)"

// adminBatch returns a batch whose first statement pins the search_path; send it with sendAdmin.
func adminBatch() *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(pinSearchPath)
	return b
}

// sendAdmin sends b (made by adminBatch) on the admin session and reads the pin's result: the caller reads
// the results of its own statements, then closes them.
func sendAdmin(ctx context.Context, admin *pgx.Conn, b *pgx.Batch) (pgx.BatchResults, error) {
	br := admin.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, fmt.Errorf("pin search_path: %w", err)
	}
	return br, nil
}

// queryAdminRow runs one query on the admin session with the search_path pinned (one round trip once the
// statements are prepared on the connection) and scans its single row.
func queryAdminRow(ctx context.Context, admin *pgx.Conn, sql string, args []any, dest ...any) error {
	b := adminBatch()
	b.Queue(sql, args...)
	br, err := sendAdmin(ctx, admin, b)
	if err != nil {
		return err
	}
	if err := br.QueryRow().Scan(dest...); err != nil {
		br.Close()
		return err
	}
	return br.Close()
}

// adminRoleOID is a subquery for the OID of the role named by parameter $1, the admin role (0 when there is
// none, so that "userid <> ..." keeps every row).
const adminRoleOID = "coalesce((SELECT r.oid FROM pg_roles r WHERE r.rolname = $1::text), 0::oid)"

// currentDatabaseOID is a subquery for the OID of the session's database.
const currentDatabaseOID = "(SELECT d.oid FROM pg_database d WHERE d.datname = current_database())"

// pgssSchemaSQL finds the schema of pg_stat_statements in this database when its statistics can be read:
// the extension is installed at the version PostgreSQL 15 ships (1.10: the columns read here) and its library
// is preloaded (otherwise its functions raise). No row otherwise.
const pgssSchemaSQL = `SELECT n.nspname::text FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
WHERE e.extname = 'pg_stat_statements' AND string_to_array(e.extversion, '.')::int[] >= '{1,10}'
  AND 'pg_stat_statements' = ANY (string_to_array(replace(current_setting('shared_preload_libraries'), ' ', ''), ','))`

// ident quotes a schema-qualified name.
func ident(parts ...string) string { return pgx.Identifier(parts).Sanitize() }
