package backups

import (
	"context"
	"errors"
	"fmt"

	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/appliance/postgres"
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
	if inst.PreviousDir != "" {
		return nil, errors.New("a major upgrade of the project awaits confirm or rollback: confirm it (or roll it back) before restoring")
	}
	// The restored server is of the backup's cluster: its major (which may be the one before a major
	// upgrade), its installation, its WAL archive.
	from := inst
	if inst = BackupCluster(inst, b, s.plane.Tools); inst.Major != from.Major || inst.BinDir != from.BinDir {
		if _, err := s.eng.Instance(inst).Bin.Path("postgres"); err != nil {
			// The installation's path is the operator's business (the log has it), not the tenant's.
			s.log.Warn("restore: the backup's PostgreSQL installation is gone", "backup", b.BackupKey, "major", inst.Major, "dir", inst.BinDir, "err", err)
			return nil, fmt.Errorf("backup %s is of PostgreSQL %d, which is no longer installed on this appliance", b.BackupKey, inst.Major)
		}
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
	done, err := s.eng.Restore(ctx, run.Exec, instances.RestoreSpec{JobID: run.Job.ID, Instance: inst, Running: from, Project: prj,
		AdminPassword: string(adminPW), Credential: cred, Settings: settings, Archive: archive,
		Target:     instances.Target{Time: in.TargetTime, Name: in.TargetName, Timeline: in.Timeline},
		Restarting: s.host.Restarting(prj.ID), Steps: steps})
	if err != nil {
		return nil, err
	}
	tli, swap := done.Timeline, done
	if inst.Major != from.Major || inst.BinDir != from.BinDir || inst.WALArchive != from.WALArchive || inst.WALArchiveOff != from.WALArchiveOff {
		// The restore changed the cluster: the record says which one runs now.
		if err := s.db.Update(func(tx *store.Tx) error {
			rec, err := store.Instances.Get(tx, inst.ID)
			if err != nil {
				return err
			}
			rec.Major, rec.BinDir, rec.WALArchive, rec.WALArchiveOff, rec.UpdatedAt = inst.Major, inst.BinDir, inst.WALArchive, false, s.now()
			if p, err := store.Projects.Get(tx, prj.ID); err == nil && done.Version != "" {
				p.PostgresVersion = done.Version
				if err := store.Projects.Put(tx, p); err != nil {
					return err
				}
			}
			return store.Instances.Put(tx, rec)
		}); err != nil {
			return nil, fmt.Errorf("record the restored cluster: %w", err)
		}
	}
	if err := AppendTimelineSwitch(ctx, bs, prj.ID, TimelineSwitch{JobID: run.Job.ID, From: swap.FromTimeline, To: tli,
		At: swap.SwitchedAt, BackupID: b.ID, Archive: inst.WALArchive, FromArchive: from.WALArchive}); err != nil {
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
		"switched_at": swap.SwitchedAt, "backup_job_id": next.ID, "major": inst.Major, "from_major": from.Major,
		"timings_ms": steps.MS}, nil
}

// BackupCluster is inst as the cluster b is a backup of: its major, installation and WAL archive (b's;
// a backup of before they were recorded is of the project's first cluster, on def, the default
// installation).
func BackupCluster(inst *store.Instance, b *store.Backup, def postgres.Binaries) *store.Instance {
	c := *inst
	c.Major, c.BinDir, c.WALArchive = b.Major, b.BinDir, b.WALArchive
	if c.Major == 0 {
		c.Major, c.BinDir = def.Major, def.Dir
	}
	if c.WALArchive != inst.WALArchive || c.Major != inst.Major {
		c.WALArchiveOff = false
	}
	return &c
}
