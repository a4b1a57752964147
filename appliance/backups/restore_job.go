package backups

import (
	"context"
	"fmt"

	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// restoreJob restores the project's instance from a base backup and the WAL archive (the engine's
// Restore: recovered aside, then swapped in; a retry after a crash repairs or only finishes), records the
// new timeline, and enqueues a base backup of it.
func (s *Service) restoreJob(ctx context.Context, run *scheduler.Run) (any, error) {
	var in restorePayload
	prj, inst, err := s.host.ActiveTarget(run, &in)
	if err != nil {
		return nil, err
	}
	var b *store.Backup
	if err := s.db.View(func(tx *store.Tx) (err error) { b, err = store.Backups.Get(tx, in.BackupID); return err }); err != nil {
		return nil, fmt.Errorf("backup %s: %w", in.BackupID, err)
	}
	adminPW, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return nil, fmt.Errorf("open admin password: %w", err)
	}
	cred, err := s.host.Credential(prj)
	if err != nil {
		return nil, err
	}
	settings, err := s.host.Settings(prj, inst)
	if err != nil {
		return nil, err
	}
	bs := s.host.BackupStore()
	archive, err := s.host.Archive(ctx, prj.ID, b.BackupKey)
	if err != nil {
		return nil, err
	}
	steps := instances.NewTimer()
	done, err := s.eng.Restore(ctx, run.Exec, instances.RestoreSpec{JobID: run.Job.ID, Instance: inst, Project: prj,
		AdminPassword: string(adminPW), Credential: cred, Settings: settings, Archive: archive,
		Target:     instances.Target{Time: in.TargetTime, Name: in.TargetName, Timeline: in.Timeline},
		Restarting: s.host.Restarting(prj.ID), Steps: steps})
	if err != nil {
		return nil, err
	}
	tli, swap := done.Timeline, done
	if err := AppendTimelineSwitch(ctx, bs, prj.ID, TimelineSwitch{JobID: run.Job.ID, From: swap.FromTimeline, To: tli,
		At: swap.SwitchedAt, BackupID: b.ID}); err != nil {
		return nil, fmt.Errorf("record the timeline switch: %w", err)
	}
	// A base backup of the new timeline, so that later point-in-time restores have one to start from.
	var next *store.Job
	err = s.db.Update(func(tx *store.Tx) error {
		p, err := store.Projects.Get(tx, prj.ID)
		if err != nil {
			return err
		}
		now := s.now()
		id := ids.New("bkp")
		nb := &store.Backup{ID: id, ProjectID: p.ID, OrganizationID: p.OrganizationID, DatabaseName: p.DatabaseName,
			BackupKey: now.Format("20060102T150405Z") + "-" + id[len(id)-6:], Label: "after restore " + run.Job.ID,
			State: StatePending, VerificationState: VerificationPending, CreatedAt: now}
		if next, err = s.host.Enqueue(tx, p, JobCreate, p.ID, backupPayload{BackupID: id}); err != nil {
			return err
		}
		nb.JobID = next.ID
		if err := store.Backups.Put(tx, nb); err != nil {
			return err
		}
		md := map[string]any{"job_id": run.Job.ID, "backup_key": b.BackupKey, "timeline": tli, "from_timeline": swap.FromTimeline}
		return s.host.Audit(tx, &authz.Principal{AuthSource: authz.ActorSystem}, "project.restored", p.OrganizationID, p.ID, md)
	})
	if err != nil {
		return nil, err
	}
	s.eng.FinishRestore(inst, run.Job.ID)
	s.host.Notify()
	steps.Done("finish")
	return map[string]any{"backup_key": b.BackupKey, "timeline": tli, "from_timeline": swap.FromTimeline,
		"switched_at": swap.SwitchedAt, "backup_job_id": next.ID, "timings_ms": steps.MS}, nil
}
