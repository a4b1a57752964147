package api

import "time"

// Export is the API resource.
type Export struct {
	ID           string     `json:"id"`
	DatabaseName string     `json:"database_name"`
	ProjectID    string     `json:"project_id"`
	SizeBytes    int64      `json:"size_bytes"`
	State        string     `json:"state" enum:"ExportState"`
	CreatedAt    time.Time  `json:"created_at"`
	ExpiresAt    *time.Time `json:"expires_at" doc:"7 days after completion; null until completed"`
}

// ExportList is the list response.
type ExportList struct {
	Exports []*Export `json:"exports"`
}

// CreateExportRequest is the body of POST /v1/projects/{projectID}/exports (no fields; may be absent).
type CreateExportRequest struct{}

// ExportJobResponse is the response of POST /v1/projects/{projectID}/exports.
type ExportJobResponse struct {
	ExportID string `json:"export_id"`
	Job      *Job   `json:"job"`
}

// Download is a signed, short-lived URL served by the appliance itself.
type Download struct {
	DownloadURL string    `json:"download_url" schema:"format=uri,pattern=^https?://,example=https://appliance.example.com/v1/downloads/exports/exp_123?expires=1769860800&sig=0a1b"`
	ExpiresAt   time.Time `json:"expires_at"`
}

// DownloadResponse is the response of GET .../exports/{exportID}/download.
type DownloadResponse struct {
	Download *Download `json:"download"`
}
