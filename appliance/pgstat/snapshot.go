package pgstat

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Snapshot is the live state of a project's server, as its observability page shows it.
type Snapshot struct {
	// ActiveQueries are the client sessions of the server (all its databases) that are not idle, but not the
	// admin role's (the appliance's own) nor the reading session: longest first; never nil.
	ActiveQueries []ActiveQuery `json:"active_queries"`
	// ConnectionCount counts the client backends of all users but the admin role; ConnectionLimit is what
	// they may open: max_connections minus superuser_reserved_connections.
	ConnectionCount   int64 `json:"connection_count"`
	ConnectionLimit   int64 `json:"connection_limit"`
	DatabaseSizeBytes int64 `json:"database_size_bytes"`
	// PGStatStatements says whether pg_stat_statements is installed in this database and readable (its
	// library preloaded); SlowQueries is empty when it is not.
	PGStatStatements bool `json:"pg_stat_statements"`
	// SlowQueries are this database's ten statements of the highest mean execution time, the admin role's
	// left out; never nil.
	SlowQueries []Statement `json:"slow_queries"`
}

// SlowQueryLimit is the number of statements in Snapshot.SlowQueries.
const SlowQueryLimit = 10

const activeQueriesSQL = `SELECT a.pid, coalesce(a.usename::text, ''), coalesce(a.state, ''), coalesce(a.query, ''),
       coalesce(a.wait_event_type, ''), coalesce(a.wait_event, ''),
       coalesce(greatest(0, extract(epoch FROM clock_timestamp() - CASE WHEN a.state = 'active' THEN a.query_start ELSE a.state_change END) * 1000), 0)::bigint AS ms
FROM pg_stat_activity a
WHERE a.backend_type = 'client backend' AND a.state IS DISTINCT FROM 'idle'
  AND a.usename IS DISTINCT FROM $1::text AND a.pid <> pg_backend_pid()
ORDER BY ms DESC, a.pid`

const snapshotSQL = `SELECT
  (SELECT count(*) FROM pg_stat_activity a WHERE a.backend_type = 'client backend' AND a.usename IS DISTINCT FROM $1::text),
  current_setting('max_connections')::bigint - current_setting('superuser_reserved_connections')::bigint,
  pg_database_size(current_database()),
  (` + pgssSchemaSQL + `)`

// slowQueriesSQL reads pg_stat_statements in schema %s (quoted).
var slowQueriesSQL = `SELECT s.queryid, coalesce(min(s.query), ''), sum(s.calls)::bigint, sum(s.rows)::bigint,
       sum(s.total_exec_time), sum(s.total_exec_time) / sum(s.calls) AS mean,
       sum(s.jit_generation_time + s.jit_inlining_time + s.jit_optimization_time + s.jit_emission_time),
       sum(s.shared_blks_hit)::bigint, sum(s.shared_blks_read)::bigint, sum(s.temp_blks_read)::bigint, sum(s.temp_blks_written)::bigint
FROM %s.pg_stat_statements s
WHERE s.dbid = ` + currentDatabaseOID + ` AND s.userid <> %s AND s.calls > 0 AND s.queryid IS NOT NULL AND ` + notInternal + `
GROUP BY s.queryid ORDER BY mean DESC, s.queryid LIMIT %d`

// TakeSnapshot reads the live state of the server and of the database admin is connected to. adminRole
// (postgres.AdminRole) is the appliance's own role, whose sessions and statements are left out.
func TakeSnapshot(ctx context.Context, admin *pgx.Conn, adminRole string) (*Snapshot, error) {
	b := adminBatch()
	b.Queue(activeQueriesSQL, adminRole)
	b.Queue(snapshotSQL, adminRole)
	br, err := sendAdmin(ctx, admin, b)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	defer br.Close()
	rows, _ := br.Query()
	active, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ActiveQuery])
	if err != nil {
		return nil, fmt.Errorf("snapshot: read pg_stat_activity: %w", err)
	}
	s := &Snapshot{ActiveQueries: active, SlowQueries: []Statement{}}
	if s.ActiveQueries == nil {
		s.ActiveQueries = []ActiveQuery{}
	}
	var pgss *string
	if err := br.QueryRow().Scan(&s.ConnectionCount, &s.ConnectionLimit, &s.DatabaseSizeBytes, &pgss); err != nil {
		return nil, fmt.Errorf("snapshot: read connections and size: %w", err)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if pgss == nil {
		return s, nil
	}

	b = adminBatch()
	b.Queue(fmt.Sprintf(slowQueriesSQL, ident(*pgss), adminRoleOID, SlowQueryLimit), adminRole)
	br, err = sendAdmin(ctx, admin, b)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	defer br.Close()
	rows, _ = br.Query()
	slow, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Statement])
	if err != nil {
		return nil, fmt.Errorf("snapshot: read pg_stat_statements: %w", err)
	}
	s.PGStatStatements = true
	if slow != nil {
		s.SlowQueries = slow
	}
	return s, nil
}
