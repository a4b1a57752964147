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
	State             string     `json:"state" enum:"BackupState"`
	VerificationState string     `json:"verification_state" enum:"BackupVerificationState" doc:"pg_verifybackup's verdict"`
	VerificationError string     `json:"verification_error"`
	SizeBytes         int64      `json:"size_bytes"`
	CreatedAt         time.Time  `json:"created_at"`
	VerifiedAt        *time.Time `json:"verified_at"`
	PostgresMajor     int        `json:"postgres_major,omitempty" doc:"the PostgreSQL major of the cluster it copies: a restore from it runs that major (absent: taken before backups recorded it, the project's first major)"`
}

// BackupList is the list response: the backups, and where they live.
type BackupList struct {
	Backups []*Backup      `json:"backups"`
	Storage *BackupStorage `json:"storage" doc:"where this project's backups live, and how its WAL archiving keeps up"`
}

// Backup storage kinds (BackupStorage.Kind).
const (
	BackupStorageBucket = "bucket" // an S3-compatible bucket, off this machine
	BackupStorageLocal  = "local"  // a directory on the appliance's own disk
)

// BackupStorage is where a project's base backups and WAL archive live, and its WAL archiving as the
// observability sampler last read it.
type BackupStorage struct {
	Kind      string        `json:"kind" enum:"BackupStorageKind" doc:"bucket: an S3-compatible bucket, off this machine; local: the appliance's own disk, so losing that disk loses the backups with the database"`
	Location  string        `json:"location" doc:"the project's place in the store: s3://BUCKET/PREFIX/PROJECT_ID/ (never the endpoint or credentials), or the directory on the appliance's disk"`
	Archiving *WALArchiving `json:"archiving" api:"nullable" doc:"null until the sampler read the project's server (it samples each active project every minute)"`
}

// WALArchiving is a project's WAL archiving as pg_stat_archiver told the sampler at sampled_at.
type WALArchiving struct {
	SampledAt       time.Time  `json:"sampled_at"`
	LastArchivedWAL string     `json:"last_archived_wal" doc:"the last WAL file archived (empty when none since the server's statistics began)"`
	LastArchivedAt  *time.Time `json:"last_archived_at" api:"nullable" doc:"when the archive last advanced; null when no WAL file was archived since the server's statistics began"`
	Failing         bool       `json:"failing" doc:"the last archiving attempt failed (WAL is not reaching the store; it waits on the local disk)"`
	LastFailedWAL   string     `json:"last_failed_wal" doc:"the last WAL file whose archiving failed (empty when none)"`
	LastFailedAt    *time.Time `json:"last_failed_at" api:"nullable" doc:"when; null when no attempt failed"`
	PendingBytes    int64      `json:"pending_bytes" doc:"WAL written past the end of the last archived segment, waiting on the local disk (it includes the segment being written, archived once full or, with a bucket, within a minute)"`
	LagSeconds      *int64     `json:"lag_seconds" api:"nullable" doc:"while WAL waits: seconds from the archive's last advance to sampled_at; null when nothing waits or nothing was archived yet"`
}

// CreateBackupRequest is the body of POST /v1/projects/{projectID}/backups (an empty object is fine).
type CreateBackupRequest struct {
	Label string `json:"label" schema:"maxLength=100" doc:"at most 100 characters"`
}
