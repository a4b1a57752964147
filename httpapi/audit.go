package httpapi

import (
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
)

// auditParams are the audit listings' filters (docs/api-decisions.md, "audit filters").
var auditParams = []Param{
	limitParam(25),
	{Name: "action_prefix", Type: "string", Pattern: `^[a-z0-9_.]{1,64}$`, Doc: "events whose action starts with this (member. or project.create)"},
	{Name: "actor_id", Type: "string", Pattern: `^[a-z]+_[0-9a-z]{1,40}$`, Doc: "events of this actor (a user or API key ID)"},
	{Name: "from", Type: "string", Doc: "events created at or after this time (RFC 3339)"},
	{Name: "to", Type: "string", Doc: "events created before this time (RFC 3339)"},
	{Name: "before", Type: "string", Pattern: `^aud_[0-9a-z]{1,40}$`, Doc: "events older than this event ID: the next_before of the previous page"},
}

// auditQuery reads and checks the audit filters.
func auditQuery(r *Request) (appliance.AuditQuery, error) {
	q := appliance.AuditQuery{Limit: r.Int("limit"), ActionPrefix: r.Str("action_prefix"), ActorID: r.Str("actor_id"), Before: r.Str("before")}
	if !validAuditWord(q.ActionPrefix, ".") {
		return q, appliance.Invalid("query parameter action_prefix must be at most 64 lowercase letters, digits, dots and underscores")
	}
	if q.ActorID != "" && (!validAuditWord(q.ActorID, "") || !strings.Contains(q.ActorID, "_")) {
		return q, appliance.Invalid("query parameter actor_id must be a user or API key ID (usr_… or key_…)")
	}
	if q.Before != "" && (!strings.HasPrefix(q.Before, "aud_") || !validAuditWord(q.Before, "")) {
		return q, appliance.Invalid("query parameter before must be an audit event ID (aud_…): the next_before of the previous page")
	}
	for _, t := range []struct {
		name string
		to   *time.Time
	}{{"from", &q.From}, {"to", &q.To}} {
		if v := r.Str(t.name); v != "" {
			tm, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return q, appliance.Invalid("query parameter %s must be a time in RFC 3339 form (2026-01-02T15:04:05Z)", t.name)
			}
			*t.to = tm
		}
	}
	if !q.From.IsZero() && !q.To.IsZero() && !q.From.Before(q.To) {
		return q, appliance.Invalid("query parameter from must be before to")
	}
	return q, nil
}

// validAuditWord reports whether s is at most 64 bytes of lowercase letters, digits, underscores and extra.
func validAuditWord(s, extra string) bool {
	if len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || strings.ContainsRune(extra, c)) {
			return false
		}
	}
	return true
}

func (s *Server) orgAudit(r *Request) (*api.AuditEventList, error) {
	q, err := auditQuery(r)
	if err != nil {
		return nil, err
	}
	return s.svc.ListOrganizationAudit(r.Context(), r.Principal, r.PathValue("orgID"), q)
}

func (s *Server) projectAudit(r *Request) (*api.AuditEventList, error) {
	q, err := auditQuery(r)
	if err != nil {
		return nil, err
	}
	return s.svc.ListProjectAudit(r.Context(), r.Principal, r.PathValue("projectID"), q)
}
