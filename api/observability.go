package api

import "time"

// ActiveQuery is a client session that is not idle.
type ActiveQuery struct {
	PID           int    `json:"pid"`
	Username      string `json:"username"`
	State         string `json:"state"` // pg_stat_activity.state: active, idle in transaction, ...
	Query         string `json:"query"` // the running (or, when not active, the last) statement as pg_stat_activity shows it
	WaitEventType string `json:"wait_event_type"`
	WaitEvent     string `json:"wait_event"`
	// DurationMS is how long the statement has run when the session is active, and otherwise how long it
	// has been in its state (e.g. idle in transaction).
	DurationMS int64 `json:"duration_ms"`
}

// Statement is a statement of pg_stat_statements, its rows of all users but the admin role summed.
type Statement struct {
	QueryID         int64   `json:"query_id,string" doc:"pg_stat_statements' queryid, a 64-bit integer sent as a string (JavaScript numbers would round it)"`
	Query           string  `json:"query"`
	Calls           int64   `json:"calls"`
	Rows            int64   `json:"rows"`
	TotalTimeMS     float64 `json:"total_time_ms"` // execution time
	MeanTimeMS      float64 `json:"mean_time_ms"`
	JITTimeMS       float64 `json:"jit_time_ms"` // generation, inlining, optimization and emission
	SharedBlksHit   int64   `json:"shared_blks_hit"`
	SharedBlksRead  int64   `json:"shared_blks_read"`
	TempBlksRead    int64   `json:"temp_blks_read"`
	TempBlksWritten int64   `json:"temp_blks_written"`
}

// ObservabilitySnapshot is GET .../observability: what the project's server is doing now.
type ObservabilitySnapshot struct {
	ActiveQueries          []ActiveQuery `json:"active_queries" doc:"client sessions that are not idle, longest running first (the appliance's own sessions left out)"`
	Alerts                 []string      `json:"alerts" doc:"the messages of the alerts in force"`
	ConnectionCount        int64         `json:"connection_count"`
	ConnectionLimit        int64         `json:"connection_limit"`
	ConnectionUsagePercent float64       `json:"connection_usage_percent"`
	DatabaseSizeBytes      int64         `json:"database_size_bytes"`
	StorageLimitBytes      int64         `json:"storage_limit_bytes"`
	StorageUsagePercent    float64       `json:"storage_usage_percent"`
	PGStatStatements       bool          `json:"pg_stat_statements" doc:"pg_stat_statements is installed in the database (slow_queries and the top queries need it)"`
	SlowQueries            []Statement   `json:"slow_queries" doc:"the 10 statements with the highest mean execution time since the statistics were reset"`
	SampledAt              time.Time     `json:"sampled_at"`
}

// ObservabilityResponse wraps the snapshot.
type ObservabilityResponse struct {
	Observability *ObservabilitySnapshot `json:"observability"`
}

// HistoryResponse is GET .../observability/history.
type HistoryResponse struct {
	Samples []ObservabilitySample `json:"samples"`
	// Suspended are the periods of the window in which the project was suspended for idleness (scale to
	// zero: no server, so no samples), oldest first.
	Suspended []SuspendedInterval `json:"suspended"`
}

// SuspendedInterval is a period in which a project was suspended (scale to zero), clipped to the window
// asked for.
type SuspendedInterval struct {
	From    time.Time `json:"from"`
	To      time.Time `json:"to" doc:"the wake, or the window's end when it lasts still (ongoing)"`
	Ongoing bool      `json:"ongoing" doc:"suspended still"`
}

// TopQuery is one ranked statement of the top-queries window.
type TopQuery struct {
	QueryHash   string  `json:"query_hash" schema:"pattern=^[0-9a-f]{32}$,example=0123456789abcdef0123456789abcdef"`
	Query       string  `json:"query"`
	Calls       int64   `json:"calls"`
	Rows        int64   `json:"rows"`
	MeanExecMS  float64 `json:"mean_exec_ms"`
	TotalExecMS float64 `json:"total_exec_ms"`
}

// TopQueriesResponse is GET .../observability/queries.
type TopQueriesResponse struct {
	Queries []TopQuery `json:"queries"`
}

// QueryPoint is one snapshot of a statement in its detail.
type QueryPoint struct {
	CapturedAt  time.Time `json:"captured_at"`
	Calls       int64     `json:"calls"`
	Rows        int64     `json:"rows"`
	TotalExecMS float64   `json:"total_exec_ms"`
	MeanExecMS  float64   `json:"mean_exec_ms"`
	CallsPerSec float64   `json:"calls_per_sec"`
}

// QueryDetail is GET .../observability/queries/{queryHash}.
type QueryDetail struct {
	QueryHash         string       `json:"query_hash" schema:"pattern=^[0-9a-f]{32}$,example=0123456789abcdef0123456789abcdef"`
	Query             string       `json:"query"`
	WindowCalls       int64        `json:"window_calls"`
	WindowRows        int64        `json:"window_rows"`
	WindowTotalExecMS float64      `json:"window_total_exec_ms"`
	WindowMeanExecMS  float64      `json:"window_mean_exec_ms"`
	Points            []QueryPoint `json:"points" doc:"one per snapshot in the window (every 5 minutes), zero where the statement did not run"`
}

// QueryDetailResponse wraps the detail.
type QueryDetailResponse struct {
	Query *QueryDetail `json:"query"`
}

// QueryHashPattern is the shape of a query_hash (and of the queryHash path parameter).
const QueryHashPattern = `^[0-9a-f]{32}$`

// The observability windows (hours) and their defaults, as the spec bounds them.
const (
	HistoryHoursMax     = 720
	HistoryHoursDefault = 24
	QueriesHoursMax     = 168
	QueriesHoursDefault = 24
)

// ObservabilitySample is one history point of a project (the spec's Observability sample). Rates are over
// the minute before sampled_at, from the deltas of the server's cumulative counters.
type ObservabilitySample struct {
	SampledAt         time.Time `json:"sampled_at"`
	ActiveQueries     int64     `json:"active_queries"`
	BlockedQueries    int64     `json:"blocked_queries" doc:"sessions waiting for a lock another session holds"`
	ConnectionLimit   int64     `json:"connection_limit"`
	Connections       int64     `json:"connections"`
	DeadTuples        int64     `json:"dead_tuples"`
	Deadlocks         int64     `json:"deadlocks" doc:"deadlocks detected since the previous sample"`
	MemLimitBytes     int64     `json:"mem_limit_bytes" doc:"the plan's memory size"`
	MemUsageBytes     int64     `json:"mem_usage_bytes" doc:"proportional set size (PSS) of the server's processes"`
	SlowQueries       int64     `json:"slow_queries" doc:"statements running longer than 1 s when sampled"`
	StorageBytes      int64     `json:"storage_bytes"`
	StorageLimitBytes int64     `json:"storage_limit_bytes"`
	TempBytes         int64     `json:"temp_bytes" doc:"bytes written to temporary files since the previous sample"`
	AvgQueryMS        float64   `json:"avg_query_ms" doc:"mean execution time of the statements completed since the previous sample (pg_stat_statements)"`
	CacheHitRatio     float64   `json:"cache_hit_ratio" doc:"shared buffer hits over block reads since the previous sample (1 when nothing was read)"`
	CPUCoresUsed      float64   `json:"cpu_cores_used"`
	CPUQuotaCores     float64   `json:"cpu_quota_cores" doc:"the plan's CPU size"`
	RollbackRatio     float64   `json:"rollback_ratio"`
	RowsReadPerSec    float64   `json:"rows_read_per_sec"`
	RowsWrittenPerSec float64   `json:"rows_written_per_sec"`
	TPS               float64   `json:"tps"`
}

// StatementRef is GET .../observability/statements/{queryID}: a pg_stat_statements queryid (what a log
// line carries) as the top queries' query_hash, to open its detail.
type StatementRef struct {
	QueryID   int64  `json:"query_id,string" doc:"pg_stat_statements' queryid, a 64-bit integer sent as a string (JavaScript numbers would round it)"`
	QueryHash string `json:"query_hash" schema:"pattern=^[0-9a-f]{32}$,example=0123456789abcdef0123456789abcdef" doc:"the statement's identity in the top queries and their detail (GET .../observability/queries/{queryHash})"`
	Query     string `json:"query" doc:"pg_stat_statements' text (constants replaced by $1, $2, ...)"`
}

// StatementRefResponse wraps the StatementRef.
type StatementRefResponse struct {
	Statement StatementRef `json:"statement"`
}
