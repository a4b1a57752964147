package api

import "time"

// ScheduledBackup is the API resource.
type ScheduledBackup struct {
	ID             string     `json:"id"`
	Label          string     `json:"label"`
	LastJobID      string     `json:"last_job_id"`
	OrganizationID string     `json:"organization_id"`
	ProjectID      string     `json:"project_id"`
	CronHour       int        `json:"cron_hour" doc:"UTC hour of the daily backup, 0 to 23"`
	CronMinute     int        `json:"cron_minute" doc:"minute of the daily backup, 0 to 59"`
	RetentionDays  int        `json:"retention_days" doc:"backups older than this many days are deleted (the newest completed one is always kept)"`
	IsActive       bool       `json:"is_active"`
	CreatedAt      time.Time  `json:"created_at"`
	LastRunAt      *time.Time `json:"last_run_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	LastRunSkipped string     `json:"last_run_skipped,omitempty" doc:"why the last run took no backup (a suspended project with no data change since its last backup); absent when it took one"`
}

// ScheduledBackupList is the list response.
type ScheduledBackupList struct {
	ScheduledBackups []*ScheduledBackup `json:"scheduled_backups"`
}

// ScheduledBackupResponse is the response of PUT …/scheduled-backups/default.
type ScheduledBackupResponse struct {
	ScheduledBackup *ScheduledBackup `json:"scheduled_backup"`
}

// PutScheduledBackupRequest is the body of PUT /v1/projects/{projectID}/scheduled-backups/default.
type PutScheduledBackupRequest struct {
	CronHour      *int  `json:"cron_hour,omitempty" api:"required" schema:"minimum=0,maximum=23" doc:"UTC hour, 0 to 23"`
	CronMinute    *int  `json:"cron_minute,omitempty" api:"required" schema:"minimum=0,maximum=59" doc:"minute, 0 to 59"`
	IsActive      *bool `json:"is_active,omitempty" api:"required"`
	RetentionDays *int  `json:"retention_days,omitempty" schema:"minimum=1,maximum=365" doc:"1 to 365; default: the appliance's default retention, 7 unless its operator set another (a change keeps the current value)"`
}
