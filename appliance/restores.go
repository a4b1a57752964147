package appliance

import (
	"context"
	"errors"
	"time"

	"github.com/theappliance/appliance/store"
)

// JobBackupRestore restores a project from its backup store.
const JobBackupRestore = "backup.restore"

// RestoreRequest is the body of POST /v1/projects/{projectID}/restores: exactly one target.
type RestoreRequest struct {
	BackupKey      string `json:"backup_key" doc:"restore what this backup contains (recovery_target = immediate)"`
	RestoreTime    string `json:"restore_time" doc:"RFC 3339: restore the state at this time, within the point-in-time window"`
	RestorePointID string `json:"restore_point_id" doc:"restore the state at this restore point"`
}

type restorePayload struct {
	BackupID   string    `json:"backup_id"`   // the base backup the new data directory starts from
	TargetTime time.Time `json:"target_time"` // recovery_target_time (zero: not this kind)
	TargetName string    `json:"target_name"` // recovery_target_name
	Timeline   int       `json:"timeline"`    // recovery_target_timeline (0: the backup's own, for immediate)
}

// RestoreProject checks the target and enqueues backup.restore. A session needs the admin role.
func (s *Service) RestoreProject(ctx context.Context, p *Principal, projectID string, req *RestoreRequest) (*JobResponse, error) {
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
		return nil, Invalid("a restore needs exactly one of backup_key, restore_time, restore_point_id")
	}
	var target time.Time
	if req.RestoreTime != "" {
		t, err := time.Parse(time.RFC3339Nano, req.RestoreTime)
		if err != nil {
			return nil, Invalid("restore_time must be an RFC 3339 time: %v", err)
		}
		if target = t.UTC(); target.After(s.now()) {
			return nil, Invalid("restore_time %s is in the future", req.RestoreTime)
		}
	}
	prj, inst, err := s.activeProject(p, projectID)
	if err != nil {
		return nil, err
	}
	timeline := 0
	if !target.IsZero() { // a time is read on the project's current history
		conn, err := s.adminConn(ctx, inst, "postgres")
		if err != nil {
			return nil, &Error{Kind: KindUnavailable, Msg: "the project's server does not answer", Cause: err}
		}
		timeline, _, err = currentTimeline(ctx, conn)
		conn.Close(context.Background())
		if err != nil {
			return nil, Internal(err, "read the timeline")
		}
	}
	var out *JobResponse
	err = s.db.Update(func(tx *store.Tx) error {
		prj, err := s.visibleProject(tx, p, prj.ID)
		if err != nil {
			return err
		}
		pl := restorePayload{TargetTime: target, Timeline: timeline}
		var base *store.Backup
		switch {
		case req.BackupKey != "":
			bs, err := store.Backups.Lookup(tx, store.BackupsByProject, prj.ID, store.Query{})
			if err != nil {
				return Internal(err, "list backups")
			}
			for _, b := range bs {
				if b.BackupKey == req.BackupKey && b.State == BackupCompleted {
					base = b
				}
			}
			if base == nil {
				return Invalid("backup_key %q names no completed backup of this project", req.BackupKey)
			}
		case req.RestorePointID != "":
			rp, err := store.RestorePoints.Get(tx, req.RestorePointID)
			if err != nil || rp.ProjectID != prj.ID || rp.State != RestorePointActive {
				return Invalid("restore_point_id %q names no restore point of this project", req.RestorePointID)
			}
			if base, err = s.baseBackupBefore(tx, prj.ID, rp.PITRTime, rp.Timeline); err != nil {
				return Invalid("restore point %s is outside the point-in-time window: no backup of its timeline was complete before it", rp.ID)
			}
			pl.TargetName, pl.Timeline = rp.Name, rp.Timeline
		default:
			if base, err = s.baseBackupBefore(tx, prj.ID, target, timeline); err != nil {
				if errors.Is(err, errNoBackup) {
					return Invalid("restore_time %s is outside the point-in-time window: no backup of the current timeline was complete by then", req.RestoreTime)
				}
				return Internal(err, "find a base backup")
			}
		}
		pl.BackupID = base.ID
		j, err := s.enqueue(tx, prj, JobBackupRestore, prj.ID, pl)
		if err != nil {
			return err
		}
		prj.LatestJobID, prj.UpdatedAt = j.ID, s.now()
		if err := store.Projects.Put(tx, prj); err != nil {
			return Internal(err, "store project")
		}
		md := map[string]any{"job_id": j.ID, "backup_key": base.BackupKey}
		if req.RestoreTime != "" {
			md["restore_time"] = req.RestoreTime
		}
		if req.RestorePointID != "" {
			md["restore_point_id"] = req.RestorePointID
		}
		if err := s.audit(tx, p, JobBackupRestore, prj.OrganizationID, prj.ID, md); err != nil {
			return Internal(err, "audit")
		}
		out = &JobResponse{Job: JobView(j)}
		return nil
	})
	if err == nil {
		s.notify()
	}
	return out, err
}
