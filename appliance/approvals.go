package appliance

import (
	"context"
	"slices"
	"time"

	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/store"
)

// ApprovalTTL is the lifetime of an approval token.
const ApprovalTTL = 10 * time.Minute

var approvalActions = []string{ActionProjectDelete}

// CreateApproval mints a single-use token for a dangerous action on the project.
func (s *Service) CreateApproval(ctx context.Context, p *Principal, projectID string, req *ApprovalRequest) (*ApprovalResponse, error) {
	if !slices.Contains(approvalActions, req.Action) {
		return nil, Invalid("action must be one of %v", approvalActions)
	}
	if req.Action == ActionProjectDelete {
		if err := p.RequireAdminRole("approving a project deletion"); err != nil {
			return nil, err
		}
	}
	var out *ApprovalResponse
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := s.visibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		if prj.DeletedAt != nil {
			return Gone("project %s has been deleted", projectID)
		}
		token := "apr_" + ids.Secret(24)
		kind, actor := p.Actor()
		a := &store.Approval{ID: ids.New("apr"), Action: req.Action, TokenHash: ids.Hash(token),
			OrganizationID: prj.OrganizationID, ProjectID: prj.ID, CreatedByKind: kind, CreatedByID: actor,
			CreatedAt: s.now(), ExpiresAt: s.now().Add(ApprovalTTL)}
		if err := store.Approvals.Put(tx, a); err != nil {
			return Internal(err, "store approval")
		}
		if err := s.audit(tx, p, "approval.create", prj.OrganizationID, prj.ID, map[string]any{"approval_id": a.ID, "action": a.Action}); err != nil {
			return Internal(err, "audit")
		}
		out = &ApprovalResponse{Approval: Approval{ID: a.ID, Action: a.Action, Token: token, ExpiresAt: a.ExpiresAt}}
		return nil
	})
	return out, err
}

// consumeApproval spends a token for action on projectID inside tx; it fails unless the token is valid,
// unexpired, unused and minted for exactly this action and project.
func (s *Service) consumeApproval(tx *store.Tx, token, action, projectID string) error {
	if token == "" {
		return Forbidden("%s requires an approval token: mint one with POST /v1/projects/%s/approvals", action, projectID)
	}
	a, err := store.Approvals.First(tx, store.ApprovalsByHash, ids.Hash(token))
	if err != nil || a.Action != action || a.ProjectID != projectID {
		return Forbidden("approval token is not valid for %s on project %s", action, projectID)
	}
	if a.UsedAt != nil {
		return Forbidden("approval token has already been used")
	}
	if !s.now().Before(a.ExpiresAt) {
		return Forbidden("approval token has expired")
	}
	a.UsedAt = ptr(s.now())
	return store.Approvals.Put(tx, a)
}
