package api

import "time"

// Upload is the API resource of an import upload.
type Upload struct {
	ID        string    `json:"id"`
	UploadURL string    `json:"upload_url" schema:"format=uri,pattern=^https?://,example=https://appliance.example.com/v1/uploads/imports/upl_123?expires=1769860800&sig=0a1b" doc:"the signed URL to PUT the dump to (pg_dump -Fc), valid until expires_at"`
	ObjectKey string    `json:"object_key" doc:"imports/<id>.dump in the project's backup store"`
	State     string    `json:"state" enum:"UploadState"`
	SizeBytes int64     `json:"size_bytes"`
	ExpiresAt time.Time `json:"expires_at" doc:"the upload URL's expiry (1 hour after creation)"`
}

// CreateUploadRequest is the body of POST /v1/projects/{projectID}/imports/uploads (no fields; may be absent).
type CreateUploadRequest struct{}

// UploadResponse wraps an upload.
type UploadResponse struct {
	Upload *Upload `json:"upload"`
}

// ImportRequest is the body of POST /v1/projects/{projectID}/imports.
type ImportRequest struct {
	Confirm  bool   `json:"confirm" api:"required" schema:"const=true" doc:"must be true: an import overwrites the project's database"`
	UploadID string `json:"upload_id,omitempty" doc:"the upload to restore; default the newest uploaded one"`
}
