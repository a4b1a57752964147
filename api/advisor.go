package api

import "time"

// Suggestion is an index the advisor proposes.
type Suggestion struct {
	DDL         string `json:"ddl"`          // CREATE INDEX ON schema.table USING method (columns)
	IndexMethod string `json:"index_method"` // btree, hash, ...
	Table       string `json:"table"`        // schema.table, quoted where needed
	// EstimatedCostReductionPct is how much cheaper the planner finds QueryID with the index than without
	// (0-100; 0 when it could not be estimated); EstimatedSizeBytes is the size of the index (hypopg).
	EstimatedCostReductionPct float64 `json:"estimated_cost_reduction_pct"`
	EstimatedSizeBytes        int64   `json:"estimated_size_bytes"`
	// QueryID is the pg_stat_statements queryid of the statement the index helps most (by estimate, or the
	// one whose predicates filtered most rows); 0 when unknown.
	QueryID int64 `json:"query_id,string" doc:"pg_stat_statements' queryid, a 64-bit integer sent as a string (JavaScript numbers would round it); \"0\" when unknown"`
}

// Advice is the index advisor's answer.
type Advice struct {
	Available              bool `json:"available"`
	CostEstimatesAvailable bool `json:"cost_estimates_available"`
	SizeEstimatesAvailable bool `json:"size_estimates_available"`
	MinFilter              int  `json:"min_filter"`
	MinSelectivity         int  `json:"min_selectivity"`
	// MissingExtensions lists pg_qualstats (needed) and hypopg (for the estimates) when they are not
	// installed in the database; never nil.
	MissingExtensions []string     `json:"missing_extensions"`
	Reason            string       `json:"reason"`      // why the advice is missing, partial or empty; "" otherwise
	Suggestions       []Suggestion `json:"suggestions"` // never nil; the largest estimated reduction first
	// ComputedAt is when the advice was computed: the appliance keeps an available advice for
	// AdvisorCacheSeconds (refresh=true computes it again).
	ComputedAt time.Time `json:"computed_at"`
}

// UnusedIndex is an index no scan has used since the statistics were reset.
type UnusedIndex struct {
	Schema        string `json:"schema"`
	Table         string `json:"table"`
	Index         string `json:"index"`
	Definition    string `json:"definition"`     // pg_get_indexdef
	DropStatement string `json:"drop_statement"` // DROP INDEX CONCURRENTLY "schema"."index";
	SizeBytes     int64  `json:"size_bytes"`
	IndexScans    int64  `json:"index_scans"`
}

// RedundantIndex is an index another index of the same table makes unnecessary: its key columns are the
// leading columns of CoveredBy, or it is an exact duplicate of it.
type RedundantIndex struct {
	Schema        string `json:"schema"`
	Table         string `json:"table"`
	Index         string `json:"index"`
	CoveredBy     string `json:"covered_by"`
	Definition    string `json:"definition"`
	DropStatement string `json:"drop_statement"`
	SizeBytes     int64  `json:"size_bytes"`
}

// Hygiene is the index hygiene report of a database.
type Hygiene struct {
	Available bool `json:"available"`
	// Reason says why the report is unavailable, or what to keep in mind when it is (a short observation
	// window); "" otherwise.
	Reason string `json:"reason"`
	// ObservationWindowSeconds is how long index scans have been counted: since StatsResetAt.
	ObservationWindowSeconds int64 `json:"observation_window_seconds"`
	MinIndexSizeBytes        int64 `json:"min_index_size_bytes"`
	// ReclaimableBytes is the size of the indexes of both lists, each counted once.
	ReclaimableBytes int64 `json:"reclaimable_bytes"`
	// StatsResetAt is the database's statistics reset (pg_stat_database.stats_reset) or, when they were
	// never reset, the server's start: a conservative start of the counting (PostgreSQL 15 keeps the
	// statistics across clean restarts, but discards them after a crash).
	StatsResetAt     *time.Time       `json:"stats_reset_at"`
	UnusedIndexes    []UnusedIndex    `json:"unused_indexes"`
	RedundantIndexes []RedundantIndex `json:"redundant_indexes"`
}

// AdvisorResponse is GET .../advisor/indexes.
type AdvisorResponse struct {
	Advisor *Advice `json:"advisor"`
}

// HygieneResponse is GET .../advisor/index-hygiene.
type HygieneResponse struct {
	Hygiene *Hygiene `json:"hygiene"`
}

// The index advisor's thresholds (the spec's Limits).
const (
	AdvisorMinFilterMax          = 10_000_000
	AdvisorMinFilterDefault      = 1000
	AdvisorMinSelectivityMax     = 100
	AdvisorMinSelectivityDefault = 30
	// AdvisorCacheSeconds is how long an available advice is served again before it is computed anew.
	AdvisorCacheSeconds = 300
)
