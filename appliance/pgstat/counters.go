package pgstat

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// SlowQueryThreshold is how long an active statement runs before Counters.SlowQueries counts it.
const SlowQueryThreshold = time.Second

// Counters is one reading for a history sample: cumulative counters, from which the caller computes rates
// between two readings (a change of PostmasterStart or StatsReset means they started again from zero), and
// gauges.
type Counters struct {
	At              time.Time  // the server's now(); all times UTC
	PostmasterStart time.Time  // pg_postmaster_start_time(): a change means a restart
	StatsReset      *time.Time // pg_stat_database.stats_reset of this database (nil: never reset)

	// pg_stat_database of this database.
	XactCommit, XactRollback int64
	BlksHit, BlksRead        int64
	TupReturned, TupFetched  int64
	TupInserted, TupUpdated  int64
	TupDeleted, Deadlocks    int64
	TempBytes                int64
	Calls                    int64   // pg_stat_statements: calls in this database, but the admin role's (0 when unavailable)
	ExecTimeMS               float64 // and their total execution time

	// Gauges. Sessions are client backends of the server (all databases) but the admin role's.
	Connections     int64
	ConnectionLimit int64 // max_connections minus superuser_reserved_connections
	ActiveQueries   int64 // sessions not idle (as Snapshot.ActiveQueries)
	BlockedQueries  int64 // sessions waiting for a lock another session holds (pg_blocking_pids not empty)
	SlowQueries     int64 // active statements running for longer than SlowQueryThreshold
	DeadTuples      int64 // n_dead_tup of this database's user tables
	// DatabaseSizeBytes is pg_database_size of this database.
	DatabaseSizeBytes int64
	// OldestXactSeconds is the age of the oldest open transaction of a session (0 when none).
	OldestXactSeconds float64
}

// countersSQL reads everything in one statement. pg_stat_statements may be missing from the database, so
// its totals are read by a statement built (and quoted) on the server and run by query_to_xml only when
// the extension is there: a query naming its function directly would not even parse without it.
// pg_blocking_pids, which takes the lock manager's locks, is only called for sessions waiting for a lock.
// $1: the admin role; $2: the slow-query threshold in seconds.
const countersSQL = `WITH act AS (
  SELECT count(*) AS connections,
         count(*) FILTER (WHERE a.state IS DISTINCT FROM 'idle') AS active,
         count(*) FILTER (WHERE CASE WHEN a.wait_event_type = 'Lock' THEN cardinality(pg_blocking_pids(a.pid)) > 0 ELSE false END) AS blocked,
         count(*) FILTER (WHERE a.state = 'active' AND extract(epoch FROM clock_timestamp() - a.query_start) > $2::float8) AS slow,
         coalesce(max(extract(epoch FROM clock_timestamp() - a.xact_start)), 0)::float8 AS oldest
  FROM pg_stat_activity a
  WHERE a.backend_type = 'client backend' AND a.usename IS DISTINCT FROM $1::text AND a.pid <> pg_backend_pid()
), pgss AS (
  SELECT query_to_xml(format('SELECT coalesce(sum(calls), 0) AS c, coalesce(sum(total_exec_time), 0) AS t FROM %I.pg_stat_statements(false) WHERE dbid = %s AND userid <> %s',
           s.nspname, ` + currentDatabaseOID + `, ` + adminRoleOID + `), false, true, '') AS x
  FROM (` + pgssSchemaSQL + `) s
)
SELECT now(), pg_postmaster_start_time(), d.stats_reset,
  d.xact_commit, d.xact_rollback, d.blks_hit, d.blks_read, d.tup_returned, d.tup_fetched,
  d.tup_inserted, d.tup_updated, d.tup_deleted, d.deadlocks, d.temp_bytes,
  coalesce((SELECT (xpath('/row/c/text()', x))[1]::text::bigint FROM pgss), 0),
  coalesce((SELECT (xpath('/row/t/text()', x))[1]::text::float8 FROM pgss), 0),
  act.connections, current_setting('max_connections')::bigint - current_setting('superuser_reserved_connections')::bigint,
  act.active, act.blocked, act.slow,
  (SELECT coalesce(sum(t.n_dead_tup), 0)::bigint FROM pg_stat_user_tables t),
  pg_database_size(current_database()),
  act.oldest
FROM pg_stat_database d, act
WHERE d.datname = current_database()`

// ReadCounters takes one reading of the database admin is connected to, in one statement (one round trip
// once it is prepared on the connection). adminRole (postgres.AdminRole) is the appliance's own role, whose
// sessions and statements are left out.
func ReadCounters(ctx context.Context, admin *pgx.Conn, adminRole string) (*Counters, error) {
	var c Counters
	err := queryAdminRow(ctx, admin, countersSQL, []any{adminRole, SlowQueryThreshold.Seconds()},
		&c.At, &c.PostmasterStart, &c.StatsReset,
		&c.XactCommit, &c.XactRollback, &c.BlksHit, &c.BlksRead, &c.TupReturned, &c.TupFetched,
		&c.TupInserted, &c.TupUpdated, &c.TupDeleted, &c.Deadlocks, &c.TempBytes,
		&c.Calls, &c.ExecTimeMS,
		&c.Connections, &c.ConnectionLimit, &c.ActiveQueries, &c.BlockedQueries, &c.SlowQueries,
		&c.DeadTuples, &c.DatabaseSizeBytes, &c.OldestXactSeconds)
	if err != nil {
		return nil, fmt.Errorf("read counters: %w", err)
	}
	c.At, c.PostmasterStart = c.At.UTC(), c.PostmasterStart.UTC()
	if c.StatsReset != nil {
		reset := c.StatsReset.UTC()
		c.StatsReset = &reset
	}
	return &c, nil
}
