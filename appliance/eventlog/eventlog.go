// Package eventlog is the event log: the table of every event the appliance appends (Types), appending one
// in the transaction of the change it tells (Append, which queues its webhook deliveries there too), the
// reads of the project and organization streams (ProjectEvents, OrganizationEvents, Position) and the
// retention sweep (Sweep).
//
// It reaches the rest of the domain only through Host (declared here, given by the root's areaHost) and
// Deliveries (the webhooks area's fan-out), the kernel packages (apperr, authz) and the records (store). It
// never imports `appliance`.
package eventlog

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/observe"
	"github.com/theappliance/appliance/store"
)

// Type is a kind of event of the log: its name, when it is appended, and its payload (data).
type Type struct {
	Name    string
	When    string
	Payload string // the JSON shape of data
}

// Types are every event the appliance appends; docs/api-decisions.md shows this table
// (UPDATE_DOCS=1 go test ./appliance/eventlog -run TestEventTableDoc).
var Types = []Type{
	{"job.completed", "a job completed (every job)", "{job}"},
	{"job.failed", "a job failed after its last attempt (every job)", "{job}"},
	{"project.ready", "a project's provisioning completed: it accepts connections", "{job}"},
	{"project.deleted", "a project's deletion completed: its instance, data and backups are gone", "{job}"},
	{"backup.completed", "a backup was taken (its verification follows in the job's result)", "{job}"},
	{"backup.verified", "the periodic restore test (up --verify-backups-every) restored a backup from the backup store into a scratch server and queried it: its verification_state is verified", "{backup_id, backup_key, project_id, verification_state, verification_error, verified_at, databases, tables, took_ms}"},
	{"backup.verification_failed", "the periodic restore test of a backup failed (fetch, recovery or query): its verification_state is failed, verification_error says why, and a backup_unrestorable alert stays open until a restore test succeeds", "{backup_id, backup_key, project_id, verification_state, verification_error, verified_at, databases, tables, took_ms}"},
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
	{"project.suspended", "a project was suspended (scale to zero): idle for its suspend_after_seconds, or POST .../suspend; its server and pooler stopped, runtime_status suspended, and the next connection to its ports wakes it", "{project_id, reason, at}"},
	{"project.resumed", "a suspended project was woken: by a connection to its ports, a job that needs its server, or POST .../resume; runtime_status active", "{project_id, reason, at, took_ms}"},
	{"instance.crashed", "a project's PostgreSQL server or its pooler exited without being stopped (killed, crashed); the supervisor starts it again, and an instance_crashed alert stays open until both serve", "{project_id, process, pid, error, at}"},
	{observe.EventBackupStoreUnreachable, "a project's WAL is not reaching the backup store (its archiving failed at a sample: the store is unreachable, refuses or is full); the WAL waits on the local disk, and a backup_store_unreachable alert stays open until archiving succeeds", "{project_id, failed_wal, failed_at, last_archived_at, pending_bytes}"},
	{observe.EventProjectUnavailable, "the cluster node hosting a project lost its lease (SIGKILLed, its machine down, or cut off from the others): runtime_status unavailable, and a node_unavailable alert stays open until the node is back", "{project_id, node_id, at}"},
	{observe.EventProjectAvailable, "the cluster node hosting a project that was unavailable holds its lease again: runtime_status back to what it was, the node_unavailable alert resolved", "{project_id, node_id, runtime_status, at}"},
	{"project.moved", "a project moved to another cluster node (POST .../move, or a drain by appliance cluster remove-node): it serves on the target, its URLs name the target's host, the source's directory is kept aside", "{project_id, from_node, to_node, write_pause_ms, lsn}"},
	{"alert.triggered", "an observability alert was raised on a project (storage or connections near the limit, a long-open transaction, a failed backup, a crashed instance, WAL not reaching the backup store)", "{alert}"},
	{"alert.resolved", "an alert's condition cleared (resolved_at set)", "{alert}"},
	{"webhook.test", "POST .../webhook-endpoints/{endpointID}/test: sent to that endpoint only, whatever its event_types (never in the log or a stream)", "{webhook_endpoint_id, organization_id}"},
	{"webhook_endpoint.disabled", "a webhook endpoint was disabled: through the API, on a 410 Gone, or after failing for 5 days (organization event: on no project stream)", "{webhook_endpoint, reason}"},
	{"program_application.received", "the public website submitted a program application with a service token (platform event: delivered to the webhook endpoints of the organization made at the first start, the operator's)", "{program_application}"},
	{"program_application.approved", "a platform operator approved a program application: its discount (a coupon and its promotion code) was made at the billing provider (platform event)", "{program_application}"},
	{"program_application.rejected", "a platform operator rejected a program application (platform event)", "{program_application}"},
	{"referral.rewarded", "an organization that signed up with this organization's referral code paid its first invoice: the referrer's reward, a discount at the billing provider only its customer may redeem, was made (organization event of the referrer)", "{referral}"},
	{"referral.voided", "a referral was voided: a self-referral at sign-up, or the referred subscription cancelled or refunded within its first period, before the reward (organization event of the referrer)", "{referral}"},
	{"integration.connected", "an integration's first sync succeeded: its credentials were checked and the project's settings pushed to the platform (or the identity provider's users backfilled); state active", "{integration, job_id}"},
	{"integration.synced", "an integration pushed again (a password rotation, a cutover, a config change, a git branch's preview database) or synced its users; state active", "{integration, job_id, branch?, preview_id?}"},
	{"integration.failed", "an integration's job failed for good (its credentials refused, the provider unreachable after the retries, the outbound policy refusing its address): state error, last_error says why", "{integration, job_id, error}"},
	{"integration.disconnected", "an integration was deleted: what it pushed was removed at the provider (best effort, reported on the job) and its credentials are gone", "{integration}"},
}

// Names are the names of Types, in the table's order (the webhook endpoints' filter accepts these).
func Names() []string {
	names := make([]string, 0, len(Types))
	for _, e := range Types {
		names = append(names, e.Name)
	}
	return names
}

// Table renders Types as the Markdown table of docs/api-decisions.md.
func Table() string {
	var b strings.Builder
	b.WriteString("| Type | When | data |\n|---|---|---|\n")
	for _, e := range Types {
		fmt.Fprintf(&b, "| `%s` | %s | `%s` |\n", e.Name, e.When, e.Payload)
	}
	return b.String()
}

// Retention is how long the log keeps an event (a stream resuming from an older position starts at the
// oldest event kept).
const Retention = 7 * 24 * time.Hour

// Host is what the log takes from the rest of the domain, which the root package keeps (appliance/areas.go
// gives it).
type Host interface {
	// VisibleProject is a project the caller may see (404 for another organization's or a preview's, 403
	// off a project-scoped key's own): projects and their visibility are one rule for every area.
	VisibleProject(tx *store.Tx, p *authz.Principal, projectID string) (*store.Project, error)
}

// Deliveries are the webhook deliveries of the events (the webhooks area): queued in the transaction that
// appends an event, swept with the log.
type Deliveries interface {
	// FanOut queues the deliveries of e to its organization's endpoints in tx.
	FanOut(tx *store.Tx, e *store.Event) error
	// SweepDeliveries deletes the ended deliveries past their retention in tx; it reports how many.
	SweepDeliveries(tx *store.Tx) (int, error)
}

// Deps are the log's collaborators, given at New.
type Deps struct {
	DB         *store.DB
	Clock      func() time.Time
	Deliveries Deliveries
	Host       Host
}

// Log is the event log.
type Log struct {
	db    *store.DB
	now   func() time.Time
	hooks Deliveries
	host  Host
}

// New returns the log built with its collaborators.
func New(deps Deps) *Log {
	return &Log{db: deps.DB, now: deps.Clock, hooks: deps.Deliveries, host: deps.Host}
}

// Append adds an event to the log inside tx, and queues its webhook deliveries.
func (l *Log) Append(tx *store.Tx, typ, orgID, projectID string, data any) error {
	raw, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("event %s: %w", typ, err)
	}
	e := &store.Event{Type: typ, OrganizationID: orgID, ProjectID: projectID, Data: raw, CreatedAt: l.now()}
	if err := store.AppendEvent(tx, e); err != nil {
		return err
	}
	return l.hooks.FanOut(tx, e)
}

// Sweep deletes the events older than Retention and the ended webhook deliveries past theirs
// (Deliveries.SweepDeliveries); it reports how many.
func (l *Log) Sweep(ctx context.Context) (int, error) {
	cutoff := l.now().Add(-Retention)
	n := 0
	err := l.db.Update(func(tx *store.Tx) error {
		old, err := store.Events.All(tx, func(e *store.Event) bool { return e.CreatedAt.Before(cutoff) })
		if err != nil {
			return err
		}
		for _, e := range old {
			if err := store.Events.Delete(tx, e.ID); err != nil {
				return err
			}
		}
		swept, err := l.hooks.SweepDeliveries(tx)
		n = len(old) + swept
		return err
	})
	return n, err
}

// Event is an event as the API streams it.
type Event struct {
	Seq  uint64          `json:"seq"`
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// Position is the log's newest position: a stream starting there sends only what happens next.
func (l *Log) Position() (uint64, error) {
	var pos uint64
	err := l.db.View(func(tx *store.Tx) error { pos = store.EventPosition(tx); return nil })
	return pos, err
}

// Page is a read of the log: the events the caller may see, and the position read up to (the stream
// resumes after it even when the events read there were not for the caller).
type Page struct {
	Events []Event
	Last   uint64
	Full   bool // limit events were read: more may be waiting
}

// ProjectEvents returns the events of a project the caller may see after position after, oldest first,
// reading up to limit events.
func (l *Log) ProjectEvents(ctx context.Context, p *authz.Principal, projectID string, after uint64, limit int) (*Page, error) {
	return l.read(after, limit, func(tx *store.Tx) (*store.Index[store.Event], string, func(*store.Event) bool, error) {
		_, err := l.host.VisibleProject(tx, p, projectID)
		return store.EventsByProject, projectID, nil, err
	})
}

// OrganizationEvents returns the events of an organization's projects after position after, oldest first,
// reading up to limit events; the organization's own events (no project) only to callers holding
// organizations:read. Project-scoped keys are refused.
func (l *Log) OrganizationEvents(ctx context.Context, p *authz.Principal, orgID string, after uint64, limit int) (*Page, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	if p.ProjectID != "" {
		return nil, apperr.Forbidden("a project-scoped key reads its project's events (/v1/projects/%s/events)", p.ProjectID)
	}
	orgEvents := p.Has(api.ScopeOrganizationsRead)
	return l.read(after, limit, func(tx *store.Tx) (*store.Index[store.Event], string, func(*store.Event) bool, error) {
		if _, err := store.Organizations.Get(tx, orgID); err != nil {
			return nil, "", nil, apperr.NotFoundAs(err, "organization %s not found", orgID)
		}
		return store.EventsByOrg, orgID, func(e *store.Event) bool { return e.ProjectID != "" || orgEvents }, nil
	})
}

// read reads up to limit events of one index key after position after; scope checks access and names the
// index, the key and which events the caller may see (nil: all).
func (l *Log) read(after uint64, limit int, scope func(*store.Tx) (*store.Index[store.Event], string, func(*store.Event) bool, error)) (*Page, error) {
	page := &Page{Events: []Event{}, Last: after}
	err := l.db.View(func(tx *store.Tx) error {
		ix, key, keep, err := scope(tx)
		if err != nil {
			return err
		}
		evs, err := store.Events.Lookup(tx, ix, key, store.Query{After: store.EventID(after), Limit: limit})
		if err != nil {
			return apperr.Internal(err, "read events")
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
