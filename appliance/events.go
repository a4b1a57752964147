package appliance

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/theappliance/appliance/appliance/exports"
	"github.com/theappliance/appliance/appliance/kv"
	"github.com/theappliance/appliance/appliance/observe"
	"github.com/theappliance/appliance/appliance/previews"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// EventType is a kind of event of the log: its name, when it is appended, and its payload (data).
type EventType struct {
	Name    string
	When    string
	Payload string // the JSON shape of data
}

// JobEvent is the data of the job events and of the events a job's end tells.
type JobEvent struct {
	Job *Job `json:"job"`
}

// EventTypes are every event the appliance appends; docs/api-decisions.md shows this table
// (UPDATE_DOCS=1 go test ./appliance -run TestEventTableDoc).
var EventTypes = []EventType{
	{"job.completed", "a job completed (every job)", "{job}"},
	{"job.failed", "a job failed after its last attempt (every job)", "{job}"},
	{"project.ready", "a project's provisioning completed: it accepts connections", "{job}"},
	{"project.deleted", "a project's deletion completed: its instance, data and backups are gone", "{job}"},
	{"backup.completed", "a backup was taken (its verification follows in the job's result)", "{job}"},
	{"restore.completed", "a restore replaced the project's database", "{job}"},
	{"export.completed", "an export's dump is ready to download", "{job}"},
	{"import.completed", "an uploaded dump was restored, or a follow was cut over", "{job}"},
	{"credentials.rotated", "a rotation made a new credential current (the old one works until the overlap ends)", "{job}"},
	{"preview.ready", "a preview database's instance accepts connections", "{job}"},
	{"preview.reset", "a preview database was made again from its source", "{job}"},
	{"preview.deleted", "a preview database was deleted: its instance and data are gone", "{job}"},
	{"cutover.requested", "a cutover request was opened: it waits for an organization admin", "{cutover_request}"},
	{"cutover.completed", "a cutover's promotion swapped the preview's data in: the project's database holds it (the preview is deleted next)", "{cutover_request}"},
	{"ephemeral.claimed", "an ephemeral database was claimed into an organization: it is a normal project now", "{project}"},
	{"kv.ready", "a key-value store's server runs: it accepts its token", "{job}"},
	{"kv.deleted", "a key-value store's deletion completed: its server and data are gone", "{job}"},
	{"instance.crashed", "a project's PostgreSQL server or its pooler exited without being stopped (killed, crashed); the supervisor starts it again, and an instance_crashed alert stays open until both serve", "{project_id, process, pid, error, at}"},
	{observe.EventBackupStoreUnreachable, "a project's WAL is not reaching the backup store (its archiving failed at a sample: the store is unreachable, refuses or is full); the WAL waits on the local disk, and a backup_store_unreachable alert stays open until archiving succeeds", "{project_id, failed_wal, failed_at, last_archived_at, pending_bytes}"},
	{"alert.triggered", "an observability alert was raised on a project (storage or connections near the limit, a long-open transaction, a failed backup, a crashed instance, WAL not reaching the backup store)", "{alert}"},
	{"alert.resolved", "an alert's condition cleared (resolved_at set)", "{alert}"},
	{"webhook.test", "POST .../webhook-endpoints/{endpointID}/test: sent to that endpoint only, whatever its event_types (never in the log or a stream)", "{webhook_endpoint_id, organization_id}"},
	{"webhook_endpoint.disabled", "a webhook endpoint was disabled: through the API, on a 410 Gone, or after failing for 5 days (organization event: on no project stream)", "{webhook_endpoint, reason}"},
}

// jobEvents are the events a job type's completion tells besides job.completed.
var jobEvents = map[string]string{
	JobProjectProvision:    "project.ready",
	JobProjectDelete:       "project.deleted",
	JobBackupCreate:        "backup.completed",
	JobBackupRestore:       "restore.completed",
	exports.JobCreate:      "export.completed",
	JobImportRestore:       "import.completed",
	JobImportFollowCutover: "import.completed",
	JobProjectRotate:       "credentials.rotated",
	kv.JobCreate:           "kv.ready",
	previews.JobCreate:     "preview.ready",
	previews.JobDelete:     "preview.deleted",
	previews.JobReset:      "preview.reset",
	kv.JobDelete:           "kv.deleted",
}

// EventRetention is how long the log keeps an event (a stream resuming from an older position starts
// at the oldest event kept).
const EventRetention = 7 * 24 * time.Hour

// appendEvent adds an event to the log inside tx, and queues its webhook deliveries.
func (s *Service) appendEvent(tx *store.Tx, typ, orgID, projectID string, data any) error {
	raw, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("event %s: %w", typ, err)
	}
	e := &store.Event{Type: typ, OrganizationID: orgID, ProjectID: projectID, Data: raw, CreatedAt: s.now()}
	if err := store.AppendEvent(tx, e); err != nil {
		return err
	}
	return s.hooks.FanOut(tx, e)
}

// jobEnded is the runner's end hook: in the transaction that records a job's end, the log gets
// job.completed or job.failed, and what a completed job of its type means.
func (s *Service) jobEnded(tx *store.Tx, j *store.Job) error {
	data := JobEvent{Job: JobView(j)}
	typ := "job.completed"
	if j.State == scheduler.StateFailed {
		typ = "job.failed"
	}
	if err := s.appendEvent(tx, typ, j.OrganizationID, j.ProjectID, data); err != nil {
		return err
	}
	s.jobEndedMetric(j)
	if j.Type == JobBackupCreate {
		if err := s.observe.BackupEnded(tx, j); err != nil {
			return err
		}
	}
	if extra, ok := jobEvents[j.Type]; ok && j.State == scheduler.StateCompleted {
		return s.appendEvent(tx, extra, j.OrganizationID, j.ProjectID, data)
	}
	return nil
}

// SweepEvents deletes the events older than EventRetention and the ended webhook deliveries older than
// webhook.DeliveryRetention; it reports how many.
func (s *Service) SweepEvents(ctx context.Context) (int, error) {
	cutoff := s.now().Add(-EventRetention)
	n := 0
	err := s.db.Update(func(tx *store.Tx) error {
		old, err := store.Events.All(tx, func(e *store.Event) bool { return e.CreatedAt.Before(cutoff) })
		if err != nil {
			return err
		}
		for _, e := range old {
			if err := store.Events.Delete(tx, e.ID); err != nil {
				return err
			}
		}
		swept, err := s.hooks.SweepDeliveries(tx)
		n = len(old) + swept
		return err
	})
	return n, err
}

// EventTable renders EventTypes as the Markdown table of docs/api-decisions.md.
func EventTable() string {
	var b strings.Builder
	b.WriteString("| Type | When | data |\n|---|---|---|\n")
	for _, e := range EventTypes {
		fmt.Fprintf(&b, "| `%s` | %s | `%s` |\n", e.Name, e.When, e.Payload)
	}
	return b.String()
}

// Event is an event as the API streams it.
type Event struct {
	Seq  uint64          `json:"seq"`
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// EventPosition is the log's newest position: a stream starting there sends only what happens next.
func (s *Service) EventPosition() (uint64, error) {
	var pos uint64
	err := s.db.View(func(tx *store.Tx) error { pos = store.EventPosition(tx); return nil })
	return pos, err
}

// EventPage is a read of the log: the events the caller may see, and the position read up to (the stream
// resumes after it even when the events read there were not for the caller).
type EventPage struct {
	Events []Event
	Last   uint64
	Full   bool // limit events were read: more may be waiting
}

// ProjectEvents returns the events of a project the caller may see after position after, oldest first,
// reading up to limit events.
func (s *Service) ProjectEvents(ctx context.Context, p *Principal, projectID string, after uint64, limit int) (*EventPage, error) {
	return s.readEvents(after, limit, func(tx *store.Tx) (*store.Index[store.Event], string, func(*store.Event) bool, error) {
		_, err := s.visibleProject(tx, p, projectID)
		return store.EventsByProject, projectID, nil, err
	})
}

// OrganizationEvents returns the events of an organization's projects after position after, oldest first,
// reading up to limit events; the organization's own events (no project) only to callers holding
// organizations:read. Project-scoped keys are refused.
func (s *Service) OrganizationEvents(ctx context.Context, p *Principal, orgID string, after uint64, limit int) (*EventPage, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	if p.ProjectID != "" {
		return nil, Forbidden("a project-scoped key reads its project's events (/v1/projects/%s/events)", p.ProjectID)
	}
	orgEvents := p.Has(ScopeOrganizationsRead)
	return s.readEvents(after, limit, func(tx *store.Tx) (*store.Index[store.Event], string, func(*store.Event) bool, error) {
		if _, err := store.Organizations.Get(tx, orgID); err != nil {
			return nil, "", nil, notFoundAs(err, "organization %s not found", orgID)
		}
		return store.EventsByOrg, orgID, func(e *store.Event) bool { return e.ProjectID != "" || orgEvents }, nil
	})
}

// readEvents reads up to limit events of one index key after position after; scope checks access and
// names the index, the key and which events the caller may see (nil: all).
func (s *Service) readEvents(after uint64, limit int, scope func(*store.Tx) (*store.Index[store.Event], string, func(*store.Event) bool, error)) (*EventPage, error) {
	page := &EventPage{Events: []Event{}, Last: after}
	err := s.db.View(func(tx *store.Tx) error {
		ix, key, keep, err := scope(tx)
		if err != nil {
			return err
		}
		evs, err := store.Events.Lookup(tx, ix, key, store.Query{After: store.EventID(after), Limit: limit})
		if err != nil {
			return Internal(err, "read events")
		}
		for _, e := range evs {
			page.Last = e.Seq
			if keep == nil || keep(e) {
				page.Events = append(page.Events, Event{Seq: e.Seq, Type: e.Type, Data: e.Data})
			}
		}
		page.Full = len(evs) == limit
		return nil
	})
	if err != nil {
		return nil, err
	}
	return page, nil
}
