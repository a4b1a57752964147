package api

import "time"

// CutoverRequest is the API resource.
type CutoverRequest struct {
	ID                   string     `json:"id"`
	OrganizationID       string     `json:"organization_id"`
	ProjectID            string     `json:"project_id"`
	PreviewDatabaseID    string     `json:"preview_database_id"`
	PreviewName          string     `json:"preview_name" doc:"the preview's name when the cutover was requested (a completed cutover deletes the preview)"`
	PreCutoverBackupID   string     `json:"pre_cutover_backup_id" doc:"the backup of the project taken before the promotion (set at approval); restore it to undo a cutover"`
	PromoteJobID         string     `json:"promote_job_id" doc:"the cutover.promote job (set at approval)"`
	RequestedByActorID   string     `json:"requested_by_actor_id"`
	RequestedByActorKind string     `json:"requested_by_actor_kind" enum:"CutoverActorKind"`
	AckByUserID          string     `json:"ack_by_user_id" doc:"the admin who approved or rejected it"`
	CustomerNote         string     `json:"customer_note"`
	OperatorNote         string     `json:"operator_note"`
	ExternalTicketRef    string     `json:"external_ticket_ref"`
	RejectedReason       string     `json:"rejected_reason"`
	LastError            string     `json:"last_error" doc:"why a failed request failed"`
	Status               string     `json:"status" enum:"CutoverStatus"`
	SchemaDiffURL        string     `json:"schema_diff_url" doc:"the path of the preview's schema diff against the project (GET; empty once the request ended): what an approval would change"`
	AckAt                *time.Time `json:"ack_at"`
	CompletedAt          *time.Time `json:"completed_at"`
	CreatedAt            time.Time  `json:"created_at"`
	UpdatedAt            time.Time  `json:"updated_at"`
}

// CutoverRequestList is the list response.
type CutoverRequestList struct {
	CutoverRequests []*CutoverRequest `json:"cutover_requests"`
}

// CutoverRequestResponse wraps one request.
type CutoverRequestResponse struct {
	CutoverRequest *CutoverRequest `json:"cutover_request"`
}

// CutoverJobResponse is the approval's answer: the request and its promotion job.
type CutoverJobResponse struct {
	CutoverRequest *CutoverRequest `json:"cutover_request"`
	Job            *Job            `json:"job"`
}

// CreateCutoverRequest is the body of POST /v1/projects/{projectID}/cutover-requests.
type CreateCutoverRequest struct {
	PreviewID         string `json:"preview_id" api:"required" doc:"an active preview database of this project"`
	CustomerNote      string `json:"customer_note" schema:"maxLength=1000" doc:"why, for whoever approves it"`
	ExternalTicketRef string `json:"external_ticket_ref" schema:"maxLength=200" doc:"a change ticket elsewhere"`
}

// ApproveCutoverRequest is the body of POST .../cutover-requests/{requestID}/approve.
type ApproveCutoverRequest struct {
	OperatorNote      string `json:"operator_note" schema:"maxLength=1000"`
	ExternalTicketRef string `json:"external_ticket_ref" schema:"maxLength=200" doc:"replaces the request's when given"`
}

// RejectCutoverRequest is the body of POST .../cutover-requests/{requestID}/reject.
type RejectCutoverRequest struct {
	RejectedReason string `json:"rejected_reason" api:"required" schema:"minLength=1,maxLength=1000"`
	OperatorNote   string `json:"operator_note" schema:"maxLength=1000"`
}
