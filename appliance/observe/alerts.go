package observe

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/pgstat"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Alert kinds and the thresholds that raise them (docs/api-decisions.md "Observability"). An alert is
// raised once when its condition holds at a sample, keeps its observed value and severity current while
// it holds, and resolves by itself at the first sample where it does not.
const (
	AlertStorage         = api.AlertStorage         // the database's size against the plan's storage limit
	AlertConnections     = api.AlertConnections     // client connections against the server's limit
	AlertLongTransaction = api.AlertLongTransaction // a client transaction open for a long time (holds back vacuum)
	AlertBackupFailed    = api.AlertBackupFailed    // the project's latest backup failed (resolved by the next that completes)
	AlertInstanceCrashed = api.AlertInstanceCrashed // the server or its pooler exited unexpectedly (resolved once both serve again)
	// AlertBackupUnrestorable is raised on a project whose newest backup failed its periodic restore test
	// (BackupRestoreTested); the next restore test that succeeds resolves it.
	AlertBackupUnrestorable = api.AlertBackupUnrestorable
	// AlertDataMissing is raised on a project whose instance or key-value store directory the metadata has
	// running is missing from the data directory: found at start, resolved at a start that no longer finds
	// it (DataMissing).
	AlertDataMissing = api.AlertDataMissing
	// AlertBackupStoreUnreachable is raised on a project whose WAL archiving fails at a sample (the
	// archive_command's last attempt failed: the backup store is unreachable, refuses or is full), with the
	// event backup_store.unreachable; critical once the archive has not advanced for ArchiveStalledCritical.
	// Its observed value is the WAL waiting on the local disk, in bytes. It resolves at the first sample
	// where the last attempt succeeded.
	AlertBackupStoreUnreachable = api.AlertBackupStoreUnreachable
	// EventBackupStoreUnreachable is the event appended when that alert is raised.
	EventBackupStoreUnreachable = "backup_store.unreachable"

	SeverityWarning  = api.SeverityWarning
	SeverityCritical = api.SeverityCritical

	// AlertWarnShare and AlertCriticalShare of a limit raise storage and connection alerts.
	AlertWarnShare     = 0.80
	AlertCriticalShare = 0.95
	// LongTransactionWarn and LongTransactionCritical: how long a transaction may stay open.
	LongTransactionWarn     = 5 * time.Minute
	LongTransactionCritical = time.Hour
	// ArchiveStalledCritical: how long the archive may not advance while archiving fails before the
	// backup_store_unreachable alert is critical.
	ArchiveStalledCritical = 15 * time.Minute
	// AlertListWindow: resolved alerts are listed this long after they resolved.
	AlertListWindow = 7 * 24 * time.Hour
)

func alertView(a *store.ProjectAlert) *api.ProjectAlert {
	return &api.ProjectAlert{ID: a.ID, ProjectID: a.ProjectID, Kind: a.Kind, Severity: a.Severity, Message: a.Message,
		LimitValue: a.LimitValue, ObservedValue: a.ObservedValue, TriggeredAt: a.TriggeredAt,
		AcknowledgedAt: a.AcknowledgedAt, ResolvedAt: a.ResolvedAt, LastNotifiedAt: a.LastNotifiedAt}
}

// AlertEvent is the data of alert.triggered and alert.resolved.
type AlertEvent struct {
	Alert *api.ProjectAlert `json:"alert"`
}

// alertCondition is one kind's verdict at a sample: raised (with its severity and values) or clear.
type alertCondition struct {
	kind, severity, message string
	observed, limit         float64
	raised                  bool
	// event, when set, is appended with eventData as well as alert.triggered when the alert is raised.
	event     string
	eventData any
}

// alertInput is what a sample knows for the alerts.
func (t *sampleTarget) alertInput() []alertCondition {
	c := t.cur.Counters
	share := func(kind, what string, observed, limit int64, format func(int64) string) alertCondition {
		a := alertCondition{kind: kind, observed: float64(observed), limit: float64(limit)}
		if limit <= 0 {
			return a
		}
		r := float64(observed) / float64(limit)
		switch {
		case r >= AlertCriticalShare:
			a.raised, a.severity = true, SeverityCritical
		case r >= AlertWarnShare:
			a.raised, a.severity = true, SeverityWarning
		}
		a.message = fmt.Sprintf("%s at %.0f%% of the limit (%s of %s)", what, r*100, format(observed), format(limit))
		return a
	}
	long := alertCondition{kind: AlertLongTransaction, observed: c.OldestXactSeconds, limit: LongTransactionWarn.Seconds()}
	if d := time.Duration(c.OldestXactSeconds * float64(time.Second)); d >= LongTransactionWarn {
		long.raised, long.severity = true, SeverityWarning
		if d >= LongTransactionCritical {
			long.severity = SeverityCritical
		}
		long.message = fmt.Sprintf("a transaction has been open for %s (it holds back vacuum and may hold locks)", d.Round(time.Second))
	}
	conds := []alertCondition{
		share(AlertStorage, "storage", c.DatabaseSizeBytes, t.prj.StorageLimitBytes, api.FormatBytes),
		share(AlertConnections, "connections", c.Connections, c.ConnectionLimit, func(n int64) string { return fmt.Sprint(n) }),
		long,
	}
	if t.arch != nil {
		conds = append(conds, archiveCondition(t.prj.ID, t.arch, c.At))
	}
	return conds
}

// BackupStoreUnreachableEvent is the data of backup_store.unreachable.
type BackupStoreUnreachableEvent struct {
	ProjectID      string     `json:"project_id"`
	FailedWAL      string     `json:"failed_wal" doc:"the WAL file whose archiving failed last"`
	FailedAt       *time.Time `json:"failed_at"`
	LastArchivedAt *time.Time `json:"last_archived_at" doc:"when the archive last advanced (null: not since the server's statistics began)"`
	PendingBytes   int64      `json:"pending_bytes" doc:"WAL written past the end of the last archived segment, waiting on the local disk"`
}

// archiveCondition is the backup_store_unreachable verdict of a server's archiver read at now.
func archiveCondition(projectID string, a *pgstat.Archiver, now time.Time) alertCondition {
	c := alertCondition{kind: AlertBackupStoreUnreachable, observed: float64(a.PendingBytes)}
	if !a.Failing() {
		return c
	}
	c.raised, c.severity = true, SeverityWarning
	since := "no WAL file was archived since the server's statistics began"
	if a.ArchivedAt != nil {
		stalled := now.Sub(*a.ArchivedAt)
		since = "the archive last advanced " + stalled.Round(time.Second).String() + " ago"
		if stalled >= ArchiveStalledCritical {
			c.severity = SeverityCritical
		}
	}
	c.message = fmt.Sprintf("WAL is not reaching the backup store: archiving %s failed; %s, and %s of WAL wait on the local disk",
		a.FailedWAL, since, api.FormatBytes(a.PendingBytes))
	c.event = EventBackupStoreUnreachable
	c.eventData = BackupStoreUnreachableEvent{ProjectID: projectID, FailedWAL: a.FailedWAL, FailedAt: a.FailedAt,
		LastArchivedAt: a.ArchivedAt, PendingBytes: a.PendingBytes}
	return c
}

// evaluateAlerts applies a sample's verdicts to the project's open alerts inside tx: a condition that
// holds with no open alert of its kind raises one (and appends alert.triggered); one that clears
// resolves it (alert.resolved). It returns how many alerts it raised or resolved.
func (s *Service) evaluateAlerts(tx *store.Tx, prj *store.Project, conds []alertCondition, now time.Time) (int, error) {
	open, err := openAlerts(tx, prj.ID)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range conds {
		changed, err := s.applyAlert(tx, prj, open[c.kind], c, now)
		if err != nil {
			return n, err
		}
		if changed {
			n++
		}
	}
	return n, nil
}

// openAlerts are the project's unresolved alerts by kind.
func openAlerts(tx *store.Tx, projectID string) (map[string]*store.ProjectAlert, error) {
	all, err := store.ProjectAlerts.Lookup(tx, store.ProjectAlertsByProject, projectID, store.Query{})
	if err != nil {
		return nil, err
	}
	open := map[string]*store.ProjectAlert{}
	for _, a := range all {
		if a.ResolvedAt == nil {
			open[a.Kind] = a
		}
	}
	return open, nil
}

// applyAlert raises, updates or resolves one alert; it reports whether it raised or resolved.
func (s *Service) applyAlert(tx *store.Tx, prj *store.Project, a *store.ProjectAlert, c alertCondition, now time.Time) (bool, error) {
	switch {
	case c.raised && a == nil:
		a = &store.ProjectAlert{ID: ids.New("alr"), ProjectID: prj.ID, OrganizationID: prj.OrganizationID, Kind: c.kind,
			Severity: c.severity, Message: c.message, LimitValue: c.limit, ObservedValue: c.observed, TriggeredAt: now, LastNotifiedAt: &now}
		if err := store.ProjectAlerts.Put(tx, a); err != nil {
			return false, err
		}
		if c.event != "" {
			if err := s.host.AppendEvent(tx, c.event, prj.OrganizationID, prj.ID, c.eventData); err != nil {
				return false, err
			}
		}
		return true, s.host.AppendEvent(tx, "alert.triggered", prj.OrganizationID, prj.ID, AlertEvent{Alert: alertView(a)})
	case c.raised:
		if a.Severity == c.severity && a.ObservedValue == c.observed && a.LimitValue == c.limit && a.Message == c.message {
			return false, nil
		}
		a.Severity, a.ObservedValue, a.LimitValue, a.Message = c.severity, c.observed, c.limit, c.message
		return false, store.ProjectAlerts.Put(tx, a)
	case a != nil:
		a.ResolvedAt = &now
		a.ObservedValue = c.observed
		if err := store.ProjectAlerts.Put(tx, a); err != nil {
			return false, err
		}
		return true, s.host.AppendEvent(tx, "alert.resolved", prj.OrganizationID, prj.ID, AlertEvent{Alert: alertView(a)})
	}
	return false, nil
}

// BackupEnded raises backup_failed when a backup job fails and resolves it when one completes (the root's
// job end hook calls it for the backup.create jobs, in the transaction that records the job's end).
func (s *Service) BackupEnded(tx *store.Tx, j *store.Job) error {
	if j.ProjectID == "" {
		return nil
	}
	prj, err := store.Projects.Get(tx, j.ProjectID)
	if err != nil {
		return nil // the project is gone: nothing to tell
	}
	open, err := openAlerts(tx, prj.ID)
	if err != nil {
		return err
	}
	c := alertCondition{kind: AlertBackupFailed}
	if j.State == scheduler.StateFailed {
		c.raised, c.severity, c.observed = true, SeverityWarning, 1
		c.message = "the latest backup failed: " + firstLine(j.Error)
		if a := open[AlertBackupFailed]; a != nil {
			c.observed = a.ObservedValue + 1
			c.message = fmt.Sprintf("the latest %d backups failed: %s", int(c.observed), firstLine(j.Error))
		}
	}
	_, err = s.applyAlert(tx, prj, open[AlertBackupFailed], c, s.now())
	return err
}

// BackupRestoreTested raises backup_unrestorable when a periodic restore test of one of the project's
// backups failed (critical: the project may have no backup that restores; observed_value the failures in
// a row), and resolves it when one succeeds (the root's restore test calls it in the transaction that
// records the result).
func (s *Service) BackupRestoreTested(tx *store.Tx, prj *store.Project, backupKey string, failure error) error {
	open, err := openAlerts(tx, prj.ID)
	if err != nil {
		return err
	}
	c := alertCondition{kind: AlertBackupUnrestorable}
	if failure != nil {
		c.raised, c.severity, c.observed = true, SeverityCritical, 1
		if a := open[AlertBackupUnrestorable]; a != nil {
			c.observed = a.ObservedValue + 1
		}
		c.message = fmt.Sprintf("the restore test of backup %s failed: %s", backupKey, firstLine(failure.Error()))
	}
	_, err = s.applyAlert(tx, prj, open[AlertBackupUnrestorable], c, s.now())
	return err
}

// InstanceCrashedEvent is the data of instance.crashed.
type InstanceCrashedEvent struct {
	ProjectID string    `json:"project_id"`
	Process   string    `json:"process" doc:"postgres or pooler"`
	PID       int       `json:"pid" doc:"the process that exited"`
	Error     string    `json:"error"`
	At        time.Time `json:"at"`
}

// InstanceCrashed tells, inside tx, that a watched process of prj exited while nobody stopped it: the
// instance.crashed event, and the instance_crashed alert (critical; a crash while it is open counts one
// more in its observed value).
func (s *Service) InstanceCrashed(tx *store.Tx, prj *store.Project, e daemon.Event) error {
	process := "postgres"
	if strings.HasSuffix(e.Key, "/pooler") {
		process = "pooler"
	}
	ev := InstanceCrashedEvent{ProjectID: prj.ID, Process: process, PID: e.PID, At: e.At.UTC()}
	if e.Err != nil {
		ev.Error = e.Err.Error()
	}
	if err := s.host.AppendEvent(tx, "instance.crashed", prj.OrganizationID, prj.ID, ev); err != nil {
		return err
	}
	open, err := openAlerts(tx, prj.ID)
	if err != nil {
		return err
	}
	c := alertCondition{kind: AlertInstanceCrashed, raised: true, severity: SeverityCritical, observed: 1}
	if a := open[AlertInstanceCrashed]; a != nil {
		c.observed = a.ObservedValue + 1
	}
	c.message = fmt.Sprintf("the %s process (pid %d) exited unexpectedly; it is being restarted", process, e.PID)
	if c.observed > 1 {
		c.message = fmt.Sprintf("%s (%d crashes since the alert was raised)", c.message, int(c.observed))
	}
	_, err = s.applyAlert(tx, prj, open[AlertInstanceCrashed], c, s.now())
	return err
}

// InstanceServing resolves the instance_crashed alert once the project's server and pooler serve again.
func (s *Service) InstanceServing(tx *store.Tx, prj *store.Project) error {
	open, err := openAlerts(tx, prj.ID)
	if err != nil {
		return err
	}
	if a := open[AlertInstanceCrashed]; a != nil {
		_, err = s.applyAlert(tx, prj, a, alertCondition{kind: AlertInstanceCrashed, observed: a.ObservedValue}, s.now())
	}
	return err
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// ListAlerts returns the project's open alerts and those resolved within AlertListWindow, newest first.
func (s *Service) ListAlerts(ctx context.Context, p *authz.Principal, projectID string) (*api.AlertList, error) {
	out := &api.AlertList{Alerts: []*api.ProjectAlert{}}
	now := s.now()
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		all, err := store.ProjectAlerts.Lookup(tx, store.ProjectAlertsByProject, prj.ID, store.Query{Newest: true})
		if err != nil {
			return apperr.Internal(err, "list alerts")
		}
		for _, a := range all {
			if a.ResolvedAt == nil || now.Sub(*a.ResolvedAt) <= AlertListWindow {
				out.Alerts = append(out.Alerts, alertView(a))
			}
		}
		return nil
	})
	slices.SortStableFunc(out.Alerts, func(a, b *api.ProjectAlert) int { return b.TriggeredAt.Compare(a.TriggeredAt) })
	return out, err
}

// AcknowledgeAlert records that someone has seen the alert (again: a no-op that keeps the first time).
func (s *Service) AcknowledgeAlert(ctx context.Context, p *authz.Principal, projectID, alertID string) (*api.AlertResponse, error) {
	var out *api.ProjectAlert
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		a, err := store.ProjectAlerts.Get(tx, alertID)
		if err != nil || a.ProjectID != prj.ID {
			return apperr.NotFound("alert %s not found", alertID)
		}
		if a.AcknowledgedAt == nil {
			now := s.now()
			_, actor := p.Actor()
			a.AcknowledgedAt, a.AcknowledgedBy = &now, actor
			if err := store.ProjectAlerts.Put(tx, a); err != nil {
				return err
			}
			if err := s.host.Audit(tx, p, "project.alert.acknowledge", prj.OrganizationID, prj.ID, map[string]any{"alert_id": a.ID, "kind": a.Kind}); err != nil {
				return err
			}
		}
		out = alertView(a)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &api.AlertResponse{Alert: out}, nil
}

// DataMissing applies, inside tx, what a start found missing from the data directory (the mismatches'
// texts by project): the data_missing alerts of an earlier start whose mismatches are gone resolve, and
// each project concerned has one raised (or kept, its message and count current).
func (s *Service) DataMissing(tx *store.Tx, byProject map[string][]string) error {
	// The alerts of an earlier start whose mismatches are gone resolve.
	stale, err := store.ProjectAlerts.All(tx, func(a *store.ProjectAlert) bool {
		return a.Kind == AlertDataMissing && a.ResolvedAt == nil && byProject[a.ProjectID] == nil
	})
	if err != nil {
		return err
	}
	for _, a := range stale {
		if prj, err := store.Projects.Get(tx, a.ProjectID); err == nil {
			if _, err := s.applyAlert(tx, prj, a, alertCondition{kind: AlertDataMissing}, s.now()); err != nil {
				return err
			}
		}
	}
	for id, what := range byProject {
		prj, err := store.Projects.Get(tx, id)
		if err != nil {
			continue
		}
		open, err := openAlerts(tx, id)
		if err != nil {
			return err
		}
		c := alertCondition{kind: AlertDataMissing, raised: true, severity: SeverityCritical, observed: float64(len(what)),
			message: "the metadata does not match the data directory: " + strings.Join(what, "; ")}
		if _, err := s.applyAlert(tx, prj, open[AlertDataMissing], c, s.now()); err != nil {
			return err
		}
	}
	return nil
}
