package api

import "time"

// Entry is one log entry as the API shows it.
type Entry struct {
	Timestamp   time.Time `json:"timestamp"`
	Severity    string    `json:"severity" enum:"LogSeverity" doc:"PostgreSQL's, mapped: DEBUG1-5 → debug, LOG → log, … PANIC → panic"`
	Message     string    `json:"message"`
	Cursor      string    `json:"cursor"`
	SQLState    string    `json:"sqlstate,omitempty"`
	Detail      string    `json:"detail,omitempty"`
	Hint        string    `json:"hint,omitempty"`
	Statement   string    `json:"statement,omitempty"`
	User        string    `json:"user,omitempty"`
	Database    string    `json:"database,omitempty"`
	PID         int       `json:"pid,omitempty"`
	Application string    `json:"application_name,omitempty"`
	BackendType string    `json:"backend_type,omitempty"`
	QueryID     string    `json:"query_id,omitempty" doc:"the pg_stat_statements queryid of the statement the server ran when it logged the line (decimal; a string, as it can exceed what a JSON number holds exactly); absent when it had none"`
}

// Logs is the logs resource: entries oldest first, and the cursor to resume after.
type Logs struct {
	Entries    []Entry `json:"entries"`
	NextCursor string  `json:"next_cursor" doc:"pass as cursor to read what comes after the last entry (also when there were none)"`
}

// LogsResponse is GET .../logs.
type LogsResponse struct {
	Logs Logs `json:"logs"`
}

// The logs API's bounds (the spec's Limits).
const (
	LogsHoursMax        = 168 // without the archive
	LogsHoursArchiveMax = 720 // with up --log-archive-days
	LogsHoursDefault    = 1
	LogsLimitMax        = 500
	LogsLimitDefault    = 200
)
