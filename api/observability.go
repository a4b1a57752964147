package api

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
	QueryID         int64   `json:"query_id"`
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
