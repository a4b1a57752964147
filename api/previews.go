package api

import "time"

// PreviewDatabase is the API resource.
type PreviewDatabase struct {
	ID                string     `json:"id"`
	ProjectID         string     `json:"project_id"`
	Name              string     `json:"name"`
	DatabaseName      string     `json:"database_name"`
	RoleName          string     `json:"role_name"`
	PublicHost        string     `json:"public_host"`
	SSLMode           string     `json:"ssl_mode"`
	Mode              string     `json:"mode" enum:"PreviewMode"`
	SourceKind        string     `json:"source_kind" enum:"PreviewSourceKind" doc:"none for an empty preview; live: a copy of the project's running server when it was made; backup: a base backup recovered to source_restore_time"`
	SourceBackupKey   string     `json:"source_backup_key" doc:"the base backup a clone as of a past time starts from (empty otherwise)"`
	SourceRestoreTime *time.Time `json:"source_restore_time" doc:"the moment the data is as of (a clone); null for an empty preview"`
	SourceDatabase    string     `json:"source_database" doc:"the project's database a clone holds"`
	// SourceRestorePointID is set for a clone as of a named restore point.
	SourceRestorePointID    string    `json:"source_restore_point_id" doc:"the restore point a clone was recovered to (empty otherwise)"`
	SourceRestorePointLabel string    `json:"source_restore_point_label" doc:"that restore point's label"`
	State                   string    `json:"state" enum:"ProjectState"`
	LastError               string    `json:"last_error"`
	DirectPort              int       `json:"direct_port"`
	PooledPort              int       `json:"pooled_port"`
	TTLExpiresAt            time.Time `json:"ttl_expires_at" doc:"when it is deleted unless extended"`
	CreatedAt               time.Time `json:"created_at"`
	UpdatedAt               time.Time `json:"updated_at"`
}

// PreviewList is the list response.
type PreviewList struct {
	PreviewDatabases []*PreviewDatabase `json:"preview_databases"`
}

// PreviewJobResponse is the create response.
type PreviewJobResponse struct {
	Job     *Job             `json:"job"`
	Preview *PreviewDatabase `json:"preview"`
}

// PreviewResponse is the extend response.
type PreviewResponse struct {
	Preview *PreviewDatabase `json:"preview"`
}

// CreatePreviewRequest is the body of POST /v1/projects/{projectID}/preview-databases.
type CreatePreviewRequest struct {
	Name     string `json:"name" schema:"maxLength=63" doc:"1 to 63 characters; default preview-<random>"`
	Mode     string `json:"mode" enum:"PreviewMode" doc:"clone (default): the project's data as of now; empty: its database and role names, no data"`
	TTLHours *int   `json:"ttl_hours,omitempty" schema:"minimum=1,maximum=720" doc:"hours until it is deleted, 1 to 720; default 24"`
	// SourceRestoreTime makes a clone of the project as it was then (within its point-in-time window).
	SourceRestoreTime string `json:"source_restore_time" schema:"format=date-time" doc:"a clone of the project as of this RFC 3339 time, within its point-in-time window (400 outside); default: now"`
	// SourceRestorePointID makes a clone of the project as of one of its named restore points.
	SourceRestorePointID string `json:"source_restore_point_id" doc:"a clone of the project as of this restore point of it (400 for another's, a deleted one, or with source_restore_time or mode empty)"`
}

// ExtendPreviewRequest is the body of POST /v1/preview-databases/{previewID}/extend.
type ExtendPreviewRequest struct {
	TTLHours int `json:"ttl_hours" api:"required" schema:"minimum=1,maximum=720" doc:"hours from now until it is deleted, 1 to 720"`
}

// Preview lifetimes.
const (
	DefaultPreviewTTLHours = 24
	MaxPreviewTTLHours     = 30 * 24
)
