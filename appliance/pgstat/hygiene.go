package pgstat

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ShortObservationWindow is the observation window below which the report warns that an index used
// rarely may look unused.
const ShortObservationWindow = 7 * 24 * time.Hour

// indexesCTE describes the indexes of the database's own tables: not those of the system schemas, of
// other sessions' temporary tables, or of tables belonging to an extension. Partitions' indexes and
// partitioned indexes are left out (they cannot be dropped one by one, nor concurrently). Key columns,
// operator classes, collations and options as 1-based arrays of the key columns.
const indexesCTE = `WITH idx AS (
  SELECT i.indexrelid, i.indrelid, n.nspname::text AS schema, t.relname::text AS tbl, c.relname::text AS name, c.relam,
         i.indisvalid AS valid, i.indpred IS NOT NULL AS partial, i.indexprs IS NOT NULL AS exprs,
         i.indnatts > i.indnkeyatts AS includes,
         NOT (i.indisunique OR i.indisprimary OR i.indisexclusion OR i.indisreplident
              OR EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)) AS droppable,
         (string_to_array(i.indkey::text, ' ')::int2[])[1:i.indnkeyatts] AS keys,
         (string_to_array(i.indclass::text, ' ')::oid[])[1:i.indnkeyatts] AS opclasses,
         (string_to_array(i.indcollation::text, ' ')::oid[])[1:i.indnkeyatts] AS collations,
         (string_to_array(i.indoption::text, ' ')::int2[])[1:i.indnkeyatts] AS options
  FROM pg_index i
  JOIN pg_class c ON c.oid = i.indexrelid
  JOIN pg_class t ON t.oid = i.indrelid
  JOIN pg_namespace n ON n.oid = t.relnamespace
  WHERE n.nspname <> 'information_schema' AND n.nspname !~ '^pg_(catalog$|toast|temp_)'
    AND c.relkind = 'i' AND NOT c.relispartition
    AND NOT EXISTS (SELECT 1 FROM pg_depend e WHERE e.classid = 'pg_class'::regclass AND e.objid = i.indrelid AND e.deptype = 'e')
)
`

// unusedSQL: droppable valid indexes of at least $1 bytes with no scan.
const unusedSQL = indexesCTE + `SELECT x.schema, x.tbl, x.name, pg_get_indexdef(x.indexrelid), pg_relation_size(x.indexrelid) AS size, s.idx_scan
FROM idx x JOIN pg_stat_all_indexes s ON s.indexrelid = x.indexrelid
WHERE s.idx_scan = 0 AND x.droppable AND x.valid AND pg_relation_size(x.indexrelid) >= $1::bigint
ORDER BY size DESC, x.schema, x.name`

// redundantSQL: a droppable, valid, plain (no predicate, expression or included column) index a whose
// key columns — with their operator classes, collations and options — start the keys of a valid index b of
// the same method and table without a predicate. Only a B-tree's leading columns serve its queries as
// well as the whole index does, so other methods count only exact duplicates. Of exact duplicates that
// are both droppable, the one with the higher OID is reported. b is the tightest cover, then the oldest.
const redundantSQL = indexesCTE + `SELECT * FROM (
  SELECT DISTINCT ON (a.indexrelid) a.schema, a.tbl, a.name, b.name AS covered_by, pg_get_indexdef(a.indexrelid), pg_relation_size(a.indexrelid) AS size
  FROM idx a JOIN idx b ON b.indrelid = a.indrelid AND b.indexrelid <> a.indexrelid AND b.relam = a.relam
  WHERE a.droppable AND a.valid AND NOT a.partial AND NOT a.exprs AND NOT a.includes
    AND b.valid AND NOT b.partial
    AND cardinality(a.keys) <= cardinality(b.keys)
    AND b.keys[1:cardinality(a.keys)] = a.keys
    AND b.opclasses[1:cardinality(a.keys)] = a.opclasses
    AND b.collations[1:cardinality(a.keys)] = a.collations
    AND b.options[1:cardinality(a.keys)] = a.options
    AND CASE WHEN cardinality(a.keys) < cardinality(b.keys) THEN a.relam = (SELECT m.oid FROM pg_am m WHERE m.amname = 'btree')
             ELSE a.indexrelid > b.indexrelid OR NOT b.droppable END
  ORDER BY a.indexrelid, cardinality(b.keys), b.indexrelid
) r ORDER BY size DESC, schema, name`

const hygieneStatsSQL = `SELECT coalesce(d.stats_reset, pg_postmaster_start_time()),
  extract(epoch FROM now() - coalesce(d.stats_reset, pg_postmaster_start_time()))::bigint,
  current_setting('track_counts')::bool
FROM pg_stat_database d WHERE d.datname = current_database()`

// IndexHygiene reports the unused indexes (no scan since the statistics were reset, at least
// minIndexSize bytes, not backing a primary key, unique, exclusion or other constraint, nor the replica
// identity) and the redundant ones (any size) of the database admin is connected to, in one round trip.
func IndexHygiene(ctx context.Context, admin *pgx.Conn, minIndexSize int64) (*Hygiene, error) {
	if minIndexSize < 0 {
		return nil, fmt.Errorf("index hygiene: the minimum index size %d is negative", minIndexSize)
	}
	h := &Hygiene{MinIndexSizeBytes: minIndexSize, UnusedIndexes: []UnusedIndex{}, RedundantIndexes: []RedundantIndex{}}
	b := adminBatch()
	b.Queue(hygieneStatsSQL)
	b.Queue(unusedSQL, minIndexSize)
	b.Queue(redundantSQL)
	br, err := sendAdmin(ctx, admin, b)
	if err != nil {
		return nil, fmt.Errorf("index hygiene: %w", err)
	}
	defer br.Close()
	var since time.Time
	var counted bool
	if err := br.QueryRow().Scan(&since, &h.ObservationWindowSeconds, &counted); err != nil {
		return nil, fmt.Errorf("index hygiene: read the statistics reset: %w", err)
	}
	since = since.UTC()
	h.StatsResetAt = &since
	var unused UnusedIndex
	rows, _ := br.Query()
	_, err = pgx.ForEachRow(rows, []any{&unused.Schema, &unused.Table, &unused.Index, &unused.Definition, &unused.SizeBytes, &unused.IndexScans}, func() error {
		unused.DropStatement = dropStatement(unused.Schema, unused.Index)
		h.UnusedIndexes = append(h.UnusedIndexes, unused)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("index hygiene: read unused indexes: %w", err)
	}
	var red RedundantIndex
	rows, _ = br.Query()
	_, err = pgx.ForEachRow(rows, []any{&red.Schema, &red.Table, &red.Index, &red.CoveredBy, &red.Definition, &red.SizeBytes}, func() error {
		red.DropStatement = dropStatement(red.Schema, red.Index)
		h.RedundantIndexes = append(h.RedundantIndexes, red)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("index hygiene: read redundant indexes: %w", err)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("index hygiene: %w", err)
	}

	if !counted {
		// Without track_counts no scan is counted: every index would look unused.
		return &Hygiene{MinIndexSizeBytes: minIndexSize, Reason: "the server does not count index scans (track_counts is off)",
			UnusedIndexes: []UnusedIndex{}, RedundantIndexes: []RedundantIndex{}}, nil
	}
	h.Available = true
	seen := map[string]bool{}
	for _, u := range h.UnusedIndexes {
		seen[u.DropStatement] = true
		h.ReclaimableBytes += u.SizeBytes
	}
	for _, r := range h.RedundantIndexes {
		if !seen[r.DropStatement] {
			seen[r.DropStatement] = true
			h.ReclaimableBytes += r.SizeBytes
		}
	}
	if window := time.Duration(h.ObservationWindowSeconds) * time.Second; window < ShortObservationWindow {
		h.Reason = fmt.Sprintf("index scans have been counted for %s only (since %s): an index used rarely, by a weekly job for instance, may be listed as unused",
			window, since.Format(time.RFC3339))
	}
	return h, nil
}

// dropStatement drops an index without blocking writes to its table.
func dropStatement(schema, index string) string {
	return "DROP INDEX CONCURRENTLY " + ident(schema, index) + ";"
}
