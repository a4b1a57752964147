package backups

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/store"
)

type restorePayload struct {
	BackupID   string    `json:"backup_id"`   // the base backup the new data directory starts from
	TargetTime time.Time `json:"target_time"` // recovery_target_time (zero: not this kind)
	TargetName string    `json:"target_name"` // recovery_target_name
	Timeline   int       `json:"timeline"`    // recovery_target_timeline (0: the backup's own, for immediate)
}

// Restore checks the target and enqueues backup.restore. A session needs the admin role.
func (s *Service) Restore(ctx context.Context, p *authz.Principal, projectID string, req *api.RestoreRequest) (*api.JobResponse, error) {
	if err := p.RequireAdminRole("restoring a project"); err != nil {
		return nil, err
	}
	n := 0
	for _, v := range []string{req.BackupKey, req.RestoreTime, req.RestorePointID} {
		if v != "" {
			n++
		}
	}
	if n != 1 {
		return nil, apperr.Invalid("a restore needs exactly one of backup_key, restore_time, restore_point_id")
	}
	var target time.Time
	if req.RestoreTime != "" {
		t, err := time.Parse(time.RFC3339Nano, req.RestoreTime)
		if err != nil {
			return nil, apperr.Invalid("restore_time must be an RFC 3339 time such as 2026-01-31T12:00:00Z")
		}
		if target = t.UTC(); target.After(s.now()) {
			return nil, apperr.Invalid("restore_time %s is in the future", req.RestoreTime)
		}
	}
	prj, inst, err := s.host.ActiveInstance(p, projectID)
	if err != nil {
		return nil, err
	}
	if inst.PreviousDir != "" {
		return nil, apperr.Conflict("a major upgrade of the project awaits confirm or rollback: confirm it (or roll it back) before restoring")
	}
	timeline, switches, err := s.pitrHistory(ctx, prj, inst, !target.IsZero() || req.RestorePointID != "", !target.IsZero())
	if err != nil {
		return nil, err
	}
	var job *store.Job
	err = s.db.Update(func(tx *store.Tx) error {
		prj, err := s.host.VisibleProject(tx, p, prj.ID)
		if err != nil {
			return err
		}
		pl := restorePayload{TargetTime: target, Timeline: timeline}
		var base *store.Backup
		switch {
		case req.BackupKey != "":
			bs, err := store.Backups.Lookup(tx, store.BackupsByProject, prj.ID, store.Query{})
			if err != nil {
				return apperr.Internal(err, "list backups")
			}
			for _, b := range bs {
				if b.BackupKey == req.BackupKey && b.State == StateCompleted {
					base = b
				}
			}
			if base == nil {
				return apperr.Invalid("backup_key %q names no completed backup of this project", req.BackupKey)
			}
		case req.RestorePointID != "":
			rp, err := store.RestorePoints.Get(tx, req.RestorePointID)
			if err != nil || rp.ProjectID != prj.ID || rp.State != RestorePointActive {
				return apperr.Invalid("restore_point_id %q names no restore point of this project", req.RestorePointID)
			}
			if base, err = s.restoreBase(tx, prj.ID, rp.PITRTime, rp.Timeline, archiveAt(switches, rp.PITRTime, inst.WALArchive), switchTo(switches, rp.Timeline)); err != nil {
				return apperr.Invalid("restore point %s is outside the point-in-time window: no backup of its timeline was complete before it", rp.ID)
			}
			pl.TargetName, pl.Timeline = rp.Name, rp.Timeline
		default:
			var tl int
			if base, tl, err = s.pitrBase(tx, prj.ID, target, timeline, inst.WALArchive, switches); err != nil {
				if errors.Is(err, errNoBackup) {
					return apperr.Invalid("restore_time %s is outside the point-in-time window: no backup of the timeline the project was on then was complete by then", req.RestoreTime)
				}
				return apperr.Internal(err, "find a base backup")
			}
			pl.Timeline = tl
		}
		pl.BackupID = base.ID
		j, err := s.host.Enqueue(tx, prj, JobRestore, prj.ID, pl)
		if err != nil {
			return err
		}
		md := map[string]any{"job_id": j.ID, "backup_key": base.BackupKey}
		if req.RestoreTime != "" {
			md["restore_time"] = req.RestoreTime
		}
		if req.RestorePointID != "" {
			md["restore_point_id"] = req.RestorePointID
		}
		if err := s.host.Audit(tx, p, JobRestore, prj.OrganizationID, prj.ID, md); err != nil {
			return apperr.Internal(err, "audit")
		}
		job = j
		return nil
	})
	return s.host.AnswerJob(job, err)
}

// A restore switches the project to a new WAL timeline. Each switch is recorded in the project's timeline
// log in the backup store (backup.Store.Timelines), so that a restore to a time finds the timeline the project was on at that
// time: before a switch, the timeline it left (whose WAL the restore archived up to the switch); from the
// switch on, the new one.
//
// A switch may also change the project's cluster (a major upgrade by logical replication moves it to a new
// cluster, whose timelines start over; its rollback, or a restore from a backup of the other cluster, moves
// it back): Archive and FromArchive then name the WAL archives (store.Instance.WALArchive) of the cluster
// after and before it, and a time is read on the cluster the project was on then.
type TimelineSwitch struct {
	JobID       string    `json:"job_id"`                 // the restore (or the upgrade, its rollback)
	From        int       `json:"from"`                   // the timeline before it (0: unknown)
	To          int       `json:"to"`                     // the timeline it created
	At          time.Time `json:"at"`                     // the moment it took over: just before the original stopped
	BackupID    string    `json:"backup_id"`              // the base backup it started from (a base for times on To, before To's first backup)
	Archive     string    `json:"archive,omitempty"`      // the WAL archive of the cluster To is on
	FromArchive string    `json:"from_archive,omitempty"` // the WAL archive of the cluster From is on
}

// readTimelineSwitches reads a project's timeline switches, oldest first (none when there is no log).
func readTimelineSwitches(ctx context.Context, bs *backup.Store, projectID string) ([]TimelineSwitch, error) {
	data, err := bs.Timelines(ctx, projectID)
	if err != nil || data == nil {
		return nil, err
	}
	var out []TimelineSwitch
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("the timeline log of %s: %w", projectID, err)
	}
	slices.SortStableFunc(out, func(a, b TimelineSwitch) int { return a.At.Compare(b.At) })
	return out, nil
}

// AppendTimelineSwitch records a switch (once per restore job: a retried job replaces its entry; the root's
// recover records the timeline its promotion starts).
// It is written atomically and durably (an object put), owned by the instances' OS user like the rest of
// the directory store.
func AppendTimelineSwitch(ctx context.Context, bs *backup.Store, projectID string, sw TimelineSwitch) error {
	all, err := readTimelineSwitches(ctx, bs, projectID)
	if err != nil {
		return err
	}
	all = slices.DeleteFunc(all, func(o TimelineSwitch) bool { return o.JobID == sw.JobID })
	all = append(all, sw)
	data, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	return bs.PutTimelines(ctx, projectID, data)
}

// ReplaceDeadTimelines is AppendTimelineSwitch for a switch that leaves the branches the project was never
// on behind (a move's source, resumed after its rolled-back target promoted a copy: sw.To is above them):
// the switches recorded to a timeline between sw.From and sw.To of sw's archive (or of none named: a
// rebuild's) are dropped, so that a restore to a time reads none of them.
func ReplaceDeadTimelines(ctx context.Context, bs *backup.Store, projectID string, sw TimelineSwitch) error {
	all, err := readTimelineSwitches(ctx, bs, projectID)
	if err != nil {
		return err
	}
	all = slices.DeleteFunc(all, func(o TimelineSwitch) bool {
		return o.JobID == sw.JobID || (o.To > sw.From && o.To < sw.To && (o.Archive == sw.Archive || o.Archive == ""))
	})
	all = append(all, sw)
	data, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	return bs.PutTimelines(ctx, projectID, data)
}

// timelineAt is the timeline the project was on at t (0: unknown) and the switch that made it (nil: none
// recorded, it was the original one). current is the timeline now.
func timelineAt(switches []TimelineSwitch, t time.Time, current int) (int, *TimelineSwitch) {
	var last *TimelineSwitch
	for i := range switches {
		if switches[i].At.After(t) {
			break
		}
		last = &switches[i]
	}
	switch {
	case last != nil:
		return last.To, last
	case len(switches) > 0:
		return switches[0].From, nil
	}
	return current, nil
}

// archiveAt is the WAL archive of the cluster the project was on at t (as timelineAt reads the timeline);
// current is the archive of its cluster now.
func archiveAt(switches []TimelineSwitch, t time.Time, current string) string {
	var last *TimelineSwitch
	for i := range switches {
		if switches[i].At.After(t) {
			break
		}
		last = &switches[i]
	}
	switch {
	case last != nil:
		return last.Archive
	case len(switches) > 0:
		return switches[0].FromArchive
	}
	return current
}

// switchTo is the switch that created timeline tl (nil: none recorded).
func switchTo(switches []TimelineSwitch, tl int) *TimelineSwitch {
	for i := range switches {
		if switches[i].To == tl {
			return &switches[i]
		}
	}
	return nil
}

// restoreBase is the base backup a restore to t on timeline tl of the cluster whose WAL archive is archive
// starts from: the newest completed backup of tl on that cluster complete by t; if tl has none yet (t lies
// just after the restore sw that created tl), the backup sw started from, whose timeline tl branched off
// after it (recovery follows tl's history file). Timeline 0 (unknown) takes the newest backup of the
// cluster complete by t, whatever its timeline.
func (s *Service) restoreBase(tx *store.Tx, projectID string, t time.Time, tl int, archive string, sw *TimelineSwitch) (*store.Backup, error) {
	if tl == 0 {
		bs, err := store.Backups.Lookup(tx, store.BackupsByProject, projectID, store.Query{Newest: true})
		if err != nil {
			return nil, err
		}
		for _, b := range bs {
			if b.State == StateCompleted && b.CompletedAt != nil && !b.CompletedAt.After(t) && b.WALArchive == archive {
				return b, nil
			}
		}
		return nil, errNoBackup
	}
	b, err := s.baseBackupBefore(tx, projectID, t, tl, archive)
	if !errors.Is(err, errNoBackup) || sw == nil || sw.To != tl || sw.BackupID == "" {
		return b, err
	}
	if b, err := store.Backups.Get(tx, sw.BackupID); err == nil && b.State == StateCompleted && b.WALArchive == archive {
		return b, nil
	}
	return nil, errNoBackup
}

// pitrHistory reads what a point-in-time target needs: the project's timeline switches (withSwitches) and
// its current timeline (withTimeline: a time is read on the history the project had at that time).
func (s *Service) pitrHistory(ctx context.Context, prj *store.Project, inst *store.Instance, withSwitches, withTimeline bool) (int, []TimelineSwitch, error) {
	var switches []TimelineSwitch
	var err error
	if withSwitches {
		if switches, err = readTimelineSwitches(ctx, s.host.BackupStore(), prj.ID); err != nil {
			return 0, nil, apperr.Internal(err, "read the project's timeline switches")
		}
	}
	timeline := 0
	if withTimeline {
		conn, err := s.host.AdminConn(ctx, inst, "postgres")
		if err != nil {
			return 0, nil, &apperr.Error{Kind: apperr.KindUnavailable, Msg: "the project's server does not answer", Cause: err}
		}
		timeline, _, err = instances.CurrentTimeline(ctx, conn)
		conn.Close(context.Background())
		if err != nil {
			return 0, nil, apperr.Internal(err, "read the timeline")
		}
	}
	return timeline, switches, nil
}

// pitrBase finds the base backup and timeline a recovery to target starts from (errNoBackup outside the
// point-in-time window): on the cluster the project was on at target (archive: its cluster's now).
func (s *Service) pitrBase(tx *store.Tx, projectID string, target time.Time, timeline int, archive string, switches []TimelineSwitch) (*store.Backup, int, error) {
	tl, sw := timelineAt(switches, target, timeline)
	base, err := s.restoreBase(tx, projectID, target, tl, archiveAt(switches, target, archive), sw)
	if err != nil {
		return nil, 0, err
	}
	if tl == 0 {
		tl = base.Timeline
	}
	return base, tl, nil
}

// EnqueueRestore enqueues backup.restore of the project's backup in tx (a restore to the backup itself).
func (s *Service) EnqueueRestore(tx *store.Tx, prj *store.Project, backupID string) (*store.Job, error) {
	return s.host.Enqueue(tx, prj, JobRestore, prj.ID, restorePayload{BackupID: backupID})
}

// PointInTime reads the caller's active project's timeline switches and current timeline (pitrHistory)
// and returns the finder of the base backup and timeline of a recovery to a time (pitrBase; a nil backup
// when no backup was complete by then).
func (s *Service) PointInTime(ctx context.Context, p *authz.Principal, projectID string) (func(*store.Tx, string, time.Time) (*store.Backup, int, error), error) {
	prj, inst, err := s.host.ActiveInstance(p, projectID)
	if err != nil {
		return nil, err
	}
	timeline, switches, err := s.pitrHistory(ctx, prj, inst, true, true)
	if err != nil {
		return nil, err
	}
	return func(tx *store.Tx, projectID string, target time.Time) (*store.Backup, int, error) {
		base, tl, err := s.pitrBase(tx, projectID, target, timeline, inst.WALArchive, switches)
		if errors.Is(err, errNoBackup) {
			return nil, 0, nil
		}
		return base, tl, err
	}, nil
}

// RestorePointBase reads the caller's active project's timeline switches and returns the finder, in a
// transaction, of one of its active restore points and the base backup a recovery to it starts from (as
// Restore finds them); an apperr.Invalid when the id names none of the project's or no backup of its
// timeline was complete before it.
func (s *Service) RestorePointBase(ctx context.Context, p *authz.Principal, projectID string) (func(*store.Tx, string, string) (*store.RestorePoint, *store.Backup, error), error) {
	prj, inst, err := s.host.ActiveInstance(p, projectID)
	if err != nil {
		return nil, err
	}
	_, switches, err := s.pitrHistory(ctx, prj, inst, true, false)
	if err != nil {
		return nil, err
	}
	return func(tx *store.Tx, projectID, id string) (*store.RestorePoint, *store.Backup, error) {
		rp, err := store.RestorePoints.Get(tx, id)
		if err != nil || rp.ProjectID != projectID || rp.State != RestorePointActive {
			return nil, nil, apperr.Invalid("source_restore_point_id %q names no restore point of this project", id)
		}
		base, err := s.restoreBase(tx, projectID, rp.PITRTime, rp.Timeline, archiveAt(switches, rp.PITRTime, inst.WALArchive), switchTo(switches, rp.Timeline))
		if err != nil {
			return nil, nil, apperr.Invalid("restore point %s is outside the point-in-time window: no backup of its timeline was complete before it", rp.ID)
		}
		return rp, base, nil
	}, nil
}
