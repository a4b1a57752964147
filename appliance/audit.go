package appliance

import (
	"context"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/store"
)

// AuditEvent is the API resource (identical to the record).
type AuditEvent = store.AuditEvent

// AuditQuery selects audit events, newest first. Zero fields select everything.
type AuditQuery struct {
	Limit        int       // at most this many (0: all)
	ActionPrefix string    // actions that start with it ("member." or "project.create")
	ActorID      string    // events of this actor (a user or API key ID)
	From, To     time.Time // created at or after From, before To
	Before       string    // older than this event ID (the previous page's next_before)
}

func (q AuditQuery) matches(e *store.AuditEvent) bool {
	return strings.HasPrefix(e.Action, q.ActionPrefix) && (q.ActorID == "" || e.ActorID == q.ActorID) &&
		(q.From.IsZero() || !e.CreatedAt.Before(q.From)) && (q.To.IsZero() || e.CreatedAt.Before(q.To))
}

// auditPage reads the events filed under key in ix that q selects, and the before= of the next page.
// The walk goes by ID, newest first; created_at is not relied on to follow it (an event may be written
// after its time, as the studio's log is), so From and To filter rather than end the walk.
func auditPage(tx *store.Tx, ix *store.Index[store.AuditEvent], key string, q AuditQuery) (*AuditEventList, error) {
	const batch = 500
	out := &AuditEventList{AuditEvents: []*api.AuditEvent{}}
	before := q.Before
	for {
		evs, err := store.AuditEvents.Lookup(tx, ix, key, store.Query{Newest: true, Limit: batch, Before: before})
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			if !q.matches(e) {
				continue
			}
			if q.Limit > 0 && len(out.AuditEvents) == q.Limit {
				out.NextBefore = out.AuditEvents[q.Limit-1].ID
				return out, nil
			}
			out.AuditEvents = append(out.AuditEvents, (*api.AuditEvent)(e))
		}
		if len(evs) < batch {
			return out, nil
		}
		before = evs[len(evs)-1].ID
	}
}

// ListOrganizationAudit returns the organization's audit events that q selects, newest first.
func (s *Service) ListOrganizationAudit(ctx context.Context, p *Principal, orgID string, q AuditQuery) (*AuditEventList, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	if err := s.studio.FlushLog(ctx); err != nil {
		return nil, err
	}
	var out *AuditEventList
	err := s.db.View(func(tx *store.Tx) (err error) {
		if _, err := store.Organizations.Get(tx, orgID); err != nil {
			return notFoundAs(err, "organization %s not found", orgID)
		}
		out, err = auditPage(tx, store.AuditEventsByOrg, orgID, q)
		return err
	})
	return out, err
}

// ListProjectAudit returns the project's audit events that q selects, newest first.
func (s *Service) ListProjectAudit(ctx context.Context, p *Principal, projectID string, q AuditQuery) (*AuditEventList, error) {
	if err := s.studio.FlushLog(ctx); err != nil {
		return nil, err
	}
	var out *AuditEventList
	err := s.db.View(func(tx *store.Tx) (err error) {
		if _, err := s.visibleProject(tx, p, projectID); err != nil {
			return err
		}
		out, err = auditPage(tx, store.AuditEventsByProject, projectID, q)
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
