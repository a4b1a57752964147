package appliance

import (
	"context"
	"fmt"

	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// JobStepHook, when not nil (Deps.JobStepHook), is called at the named steps of the restore and cutover
// jobs. Only test builds give one (cmd/testhooks_on.go), to stop the process at a chosen moment. The steps
// of a restore:
//
//	recovering   the candidate postmaster is recovering on its scratch port
//	swapped-out  the original data directory was renamed to pgdata.pre-restore-<job>, pgdata is absent
//	swapped-in   the candidate's data directory is pgdata, not started yet
//	started      the restored instance runs on the real port; the original's directory is still kept
//
// and of a cutover's promotion:
//
//	cutover-staged   the preview's data is restored into the staging database; the project is untouched
//	cutover-swapped  the staging database has the project's database name; the old one is not dropped yet
type JobStepHook func(ctx context.Context, jobID, step string)

func (s *Service) jobStep(ctx context.Context, jobID, step string) {
	if h := s.stepHook; h != nil {
		h(ctx, jobID, step)
	}
}

// restoreJob restores the project's instance from a base backup and the WAL archive (the engine's
// Restore: recovered aside, then swapped in; a retry after a crash repairs or only finishes), records the
// new timeline, and enqueues a base backup of it.
func (s *Service) restoreJob(ctx context.Context, run *scheduler.Run) (any, error) {
	var in restorePayload
	dp, prj, inst, err := s.activeTarget(run, &in)
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
	cred, err := s.credentialOf(prj)
	if err != nil {
		return nil, err
	}
	settings, err := s.settingsFor(dp, prj, inst)
	if err != nil {
		return nil, err
	}
	bs := s.backupStore(dp)
	archive, err := s.archiveOf(ctx, dp, prj.ID, b.BackupKey)
	if err != nil {
		return nil, err
	}
	steps := instances.NewTimer()
	done, err := s.eng.Restore(ctx, run.Exec, instances.RestoreSpec{JobID: run.Job.ID, Instance: inst, Project: prj,
		AdminPassword: string(adminPW), Credential: cred, Settings: settings, Archive: archive,
		Target:     instances.Target{Time: in.TargetTime, Name: in.TargetName, Timeline: in.Timeline},
		Restarting: s.restartingFunc(prj.ID), Steps: steps})
	if err != nil {
		return nil, err
	}
	tli, swap := done.Timeline, done
	if err := appendTimelineSwitch(ctx, bs, prj.ID, timelineSwitch{JobID: run.Job.ID, From: swap.FromTimeline, To: tli,
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
			State: BackupPending, VerificationState: VerificationPending, CreatedAt: now}
		if next, err = s.enqueue(tx, p, JobBackupCreate, p.ID, backupPayload{BackupID: id}); err != nil {
			return err
		}
		nb.JobID = next.ID
		if err := store.Backups.Put(tx, nb); err != nil {
			return err
		}
		md := map[string]any{"job_id": run.Job.ID, "backup_key": b.BackupKey, "timeline": tli, "from_timeline": swap.FromTimeline}
		return s.audit(tx, &Principal{AuthSource: ActorSystem}, "project.restored", p.OrganizationID, p.ID, md)
	})
	if err != nil {
		return nil, err
	}
	s.eng.FinishRestore(inst, run.Job.ID)
	s.notify()
	steps.Done("finish")
	return map[string]any{"backup_key": b.BackupKey, "timeline": tli, "from_timeline": swap.FromTimeline,
		"switched_at": swap.SwitchedAt, "backup_job_id": next.ID, "timings_ms": steps.MS}, nil
}

// restartingFunc tells the project's runtime status as the engine stops (restarting) and starts again
// (active) its server.
func (s *Service) restartingFunc(projectID string) func(bool) {
	return func(restarting bool) {
		if restarting {
			s.setRuntime(projectID, RuntimeRestarting)
		} else {
			s.setRuntime(projectID, RuntimeActive)
		}
	}
}

// repairEndedRestores puts right, at start, what restore jobs of an instance that will never run again
// left behind (instances.Manager.RepairEndedRestores): a restore job ends when it failed (a crash spent
// its last attempt) or completed. Call it before the instance is watched.
func (s *Service) repairEndedRestores(ctx context.Context, inst *store.Instance) {
	s.eng.RepairEndedRestores(ctx, inst, func(jobID string) bool {
		var j *store.Job
		err := s.db.View(func(tx *store.Tx) (err error) { j, err = store.Jobs.Get(tx, jobID); return err })
		return err == nil && (j.State == scheduler.StateFailed || j.State == scheduler.StateCompleted)
	})
}
