package api

import "time"

// RestorePoint is the API resource.
type RestorePoint struct {
	ID                 string    `json:"id"`
	BackupID           string    `json:"backup_id" doc:"the base backup a restore to this point starts from (empty: none was complete yet)"`
	BackupKey          string    `json:"backup_key"`
	CreatedByActorID   string    `json:"created_by_actor_id"`
	CreatedByActorKind string    `json:"created_by_actor_kind"`
	Label              string    `json:"label"`
	Note               string    `json:"note"`
	OrganizationID     string    `json:"organization_id"`
	ProjectID          string    `json:"project_id"`
	Kind               string    `json:"kind" enum:"RestorePointKind"`
	State              string    `json:"state" enum:"RestorePointState" doc:"deleted points are not listed"`
	PITRTime           time.Time `json:"pitr_time"`
	CreatedAt          time.Time `json:"created_at"`
	UpdatedAt          time.Time `json:"updated_at"`
}

// RestorePointRequest is the body of POST /v1/projects/{projectID}/restore-points.
type RestorePointRequest struct {
	Label string `json:"label" api:"required" schema:"minLength=1,maxLength=100" doc:"1 to 100 characters"`
}

// RestorePointResponse wraps one restore point.
type RestorePointResponse struct {
	RestorePoint *RestorePoint `json:"restore_point"`
}

// RestorePointList is the list response.
type RestorePointList struct {
	RestorePoints  []*RestorePoint `json:"restore_points"`
	PITRWindowDays int             `json:"pitr_window_days" doc:"whole days from the oldest completed backup to now (0: no backup yet)"`
}

// DeletedResponse answers a delete.
type DeletedResponse struct {
	Deleted bool `json:"deleted"`
}
