package api

import "time"

// Backup states (Backup.State); see docs/api-decisions.md.
const (
	BackupPending   = "pending"   // recorded, its backup.create job not started yet
	BackupRunning   = "running"   // pg_basebackup is copying
	BackupCompleted = "completed" // the copy is complete in the backup store
	BackupFailed    = "failed"    // pg_basebackup failed; the job carries its output
)

// Backup is the API resource.
type Backup struct {
	ID                string     `json:"id"`
	BackupKey         string     `json:"backup_key" doc:"names the backup in a restore"`
	DatabaseName      string     `json:"database_name"`
	Label             string     `json:"label"`
	ProjectID         string     `json:"project_id"`
	State             string     `json:"state" doc:"pending, running, completed or failed"`
	VerificationState string     `json:"verification_state" doc:"pending, verified or failed (pg_verifybackup)"`
	VerificationError string     `json:"verification_error"`
	SizeBytes         int64      `json:"size_bytes"`
	CreatedAt         time.Time  `json:"created_at"`
	VerifiedAt        *time.Time `json:"verified_at"`
}

// BackupList is the list response.
type BackupList struct {
	Backups []*Backup `json:"backups"`
}

// CreateBackupRequest is the body of POST /v1/projects/{projectID}/backups (an empty object is fine).
type CreateBackupRequest struct {
	Label string `json:"label" schema:"maxLength=100" doc:"at most 100 characters"`
}
