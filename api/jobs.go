package api

import (
	"encoding/json"
	"time"
)

// Job is the API resource of a durable job.
type Job struct {
	ID                  string          `json:"id"`
	Type                string          `json:"type"`
	State               string          `json:"state" enum:"JobState"`
	OrganizationID      string          `json:"organization_id"`
	ProjectID           string          `json:"project_id"`
	PreviewDatabaseID   string          `json:"preview_database_id"`
	InstanceID          string          `json:"instance_id"`
	HostID              string          `json:"host_id"`
	LockedResource      string          `json:"locked_resource"`
	ClaimedBy           string          `json:"claimed_by"`
	Attempts            int             `json:"attempts"`
	MaxAttempts         int             `json:"max_attempts"`
	Error               string          `json:"error"`
	RetryClassification string          `json:"retry_classification" doc:"transient (retried with backoff) or permanent; empty until a failure"`
	LastStdout          string          `json:"last_stdout"`
	LastStderr          string          `json:"last_stderr"`
	LastExitCode        *int            `json:"last_exit_code" api:"nullable" doc:"null until a step ran a program"`
	Result              json.RawMessage `json:"result" doc:"free-form result of the job; null until it completes"`
	ClaimedAt           *time.Time      `json:"claimed_at"`
	StartedAt           *time.Time      `json:"started_at"`
	CompletedAt         *time.Time      `json:"completed_at"`
	CreatedAt           time.Time       `json:"created_at"`
	UpdatedAt           time.Time       `json:"updated_at"`
}

// JobResponse wraps one job (also the 202 answer of every job-returning endpoint).
type JobResponse struct {
	Job *Job `json:"job"`
}

// JobList is the list response.
type JobList struct {
	Jobs []*Job `json:"jobs"`
}
