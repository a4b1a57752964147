package api

import "time"

// Entry is one log entry as the API shows it.
type Entry struct {
	Timestamp   time.Time `json:"timestamp"`
	Severity    string    `json:"severity"` // mapped: DEBUG1-5→debug, LOG→log, ... PANIC→panic
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
}
