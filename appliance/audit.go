package appliance

import (
	"context"

	"github.com/theappliance/appliance/store"
)

// AuditEvent is the API resource (identical to the record).
type AuditEvent = store.AuditEvent

// ListOrganizationAudit returns the organization's newest audit events.
func (s *Service) ListOrganizationAudit(ctx context.Context, p *Principal, orgID string, limit int) (*AuditEventList, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	if err := s.studio.FlushLog(ctx); err != nil {
		return nil, err
	}
	out := &AuditEventList{}
	err := s.db.View(func(tx *store.Tx) error {
		if _, err := store.Organizations.Get(tx, orgID); err != nil {
			return notFoundAs(err, "organization %s not found", orgID)
		}
		evs, err := store.AuditEvents.Lookup(tx, store.AuditEventsByOrg, orgID, store.Query{Newest: true, Limit: limit})
		out.AuditEvents = wireAuditEvents(evs)
		return err
	})
	return out, err
}

// ListProjectAudit returns the project's newest audit events.
func (s *Service) ListProjectAudit(ctx context.Context, p *Principal, projectID string, limit int) (*AuditEventList, error) {
	if err := s.studio.FlushLog(ctx); err != nil {
		return nil, err
	}
	out := &AuditEventList{}
	err := s.db.View(func(tx *store.Tx) error {
		if _, err := s.visibleProject(tx, p, projectID); err != nil {
			return err
		}
		evs, err := store.AuditEvents.Lookup(tx, store.AuditEventsByProject, projectID, store.Query{Newest: true, Limit: limit})
		out.AuditEvents = wireAuditEvents(evs)
		return err
	})
	return out, err
}

// visibleProject loads a project the caller may act on.
func (s *Service) visibleProject(tx *store.Tx, p *Principal, projectID string) (*store.Project, error) {
	prj, err := store.Projects.Get(tx, projectID)
	if err != nil {
		return nil, notFoundAs(err, "project %s not found", projectID)
	}
	if err := projectVisible(p, prj); err != nil {
		return nil, err
	}
	return prj, nil
}

// projectVisible refuses a project the principal may not see (as not found) or not act on.
func projectVisible(p *Principal, prj *store.Project) error {
	if prj.PreviewOf != "" { // a preview database is reached through /v1/preview-databases only
		return NotFound("project %s not found", prj.ID)
	}
	return p.CheckProject(prj.ID, prj.OrganizationID)
}
