package api

import "time"

// Approval is the API resource; the token is shown only in the create response.
type Approval struct {
	ID        string    `json:"id"`
	Action    string    `json:"action" enum:"ApprovalAction"`
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// ApprovalRequest is the body of POST /v1/projects/{projectID}/approvals.
type ApprovalRequest struct {
	Action string `json:"action" api:"required" enum:"ApprovalAction" doc:"the action to approve"`
}

// ApprovalResponse wraps the approval.
type ApprovalResponse struct {
	Approval Approval `json:"approval"`
}

// Approval actions that exist.
const ActionProjectDelete = "project.delete"
