package api

import "time"

// FollowRequest is the body of POST /v1/projects/{projectID}/imports/follow.
type FollowRequest struct {
	SourceURL string `json:"source_url" api:"required" schema:"format=uri,pattern=^postgres(ql)?://,example=postgres://app:secret@db.example.com:5432/shop?sslmode=require" doc:"the source database (see imports/preflight); its wal_level must be logical"`
	Confirm   bool   `json:"confirm" api:"required" schema:"const=true" doc:"must be true: the source's schema is copied over the project's database"`
}

// FollowCutoverRequest is the body of POST /v1/projects/{projectID}/imports/follow/cutover.
type FollowCutoverRequest struct {
	Confirm bool `json:"confirm" api:"required" schema:"const=true" doc:"must be true: after the cutover the project no longer follows the source"`
}

// Import follow states; see docs/api-decisions.md (Imports: follow).
const (
	FollowStarting    = "starting"     // import.follow is queued or running (after the pre-follow backup)
	FollowFollowing   = "following"    // the subscription exists: the initial copy runs, then changes stream
	FollowCuttingOver = "cutting_over" // import.follow_cutover is running
	FollowAborting    = "aborting"     // import.follow_abort is queued or running
	FollowCompleted   = "completed"    // cut over: the subscription is gone, the project is on its own
	FollowAborted     = "aborted"      // the subscription is gone and the pre-follow backup was restored
	FollowFailed      = "failed"       // import.follow failed; abort removes what it left and restores
)

// FollowReport is the result of import.follow_status (and part of the cutover's).
type FollowReport struct {
	FollowID      string        `json:"follow_id"`
	State         string        `json:"state"`
	Source        string        `json:"source"`
	Subscription  string        `json:"subscription"`
	Enabled       bool          `json:"enabled"`
	WorkerRunning bool          `json:"worker_running"`
	Tables        []FollowTable `json:"tables"`
	TablesReady   int           `json:"tables_ready"`
	LagBytes      *int64        `json:"lag_bytes" api:"nullable" doc:"WAL the source wrote that the subscription has not confirmed; null when the source cannot be reached"`
	SourceLSN     string        `json:"source_lsn,omitempty"`
	ConfirmedLSN  string        `json:"confirmed_lsn,omitempty"`
	LastMessageAt *time.Time    `json:"last_message_at,omitempty"`
	SourceError   string        `json:"source_error,omitempty"`
	Error         string        `json:"error,omitempty"`
}

// FollowTable is one subscribed table and its synchronization state.
type FollowTable struct {
	Table string `json:"table"`
	State string `json:"state" doc:"init, copying, copied, synchronized or ready"`
}
