package previews

import (
	"context"
	"fmt"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// resetJob removes the preview's server and data (its instance record, ports and credential stay), then
// provisions it again from its source. A retry after a crash removes whatever the last attempt made.
func (s *Service) resetJob(ctx context.Context, run *scheduler.Run) (any, error) {
	eng, err := s.engine()
	if err != nil {
		return nil, err
	}
	prv, inst, err := s.host.LoadProject(run.Job.PreviewDatabaseID) // a preview job's record is its preview's
	if err != nil {
		return nil, err
	}
	if prv.DeletedAt != nil || prv.State == api.ProjectDeleting {
		return map[string]any{"skipped": "preview is " + prv.State}, nil
	}
	if inst != nil {
		if err := eng.Remove(ctx, inst); err != nil {
			return nil, scheduler.Transient(err)
		}
	}
	return s.host.Provision(ctx, run) // Reset made the preview provisioning when it queued this job
}

// CloneSource is where a clone preview's data comes from (instances.CloneSpec): its project's running
// server, or, as of a past time, its base backup and WAL archive. It holds the project's admin password,
// which the copy starts with. The root's provision job asks for it when the preview's mode is ModeClone.
func (s *Service) CloneSource(ctx context.Context, run *scheduler.Run, prv *store.Project) (*instances.CloneSpec, error) {
	parent, pinst, err := s.host.LoadProject(prv.PreviewOf)
	if err != nil {
		return nil, err
	}
	if parent.State != api.ProjectActive || pinst == nil {
		return nil, fmt.Errorf("project %s is %s: a clone needs it active", parent.ID, parent.State)
	}
	pw, err := s.box.Open(pinst.AdminPassword)
	if err != nil {
		return nil, fmt.Errorf("open the project's admin password: %w", err)
	}
	c := &instances.CloneSpec{Source: pinst, AdminPassword: string(pw), Label: "appliance preview " + prv.ID}
	if prv.SourceBackupID != "" { // recovered from the project's WAL archive to source_restore_time or the restore point
		var b *store.Backup
		if err := s.db.View(func(tx *store.Tx) (err error) { b, err = store.Backups.Get(tx, prv.SourceBackupID); return err }); err != nil {
			return nil, fmt.Errorf("the preview's base backup %s: %w", prv.SourceBackupID, err)
		}
		archive, err := s.host.Archive(ctx, parent.ID, b.BackupKey)
		if err != nil {
			return nil, err
		}
		target := instances.Target{Time: *prv.SourceRestoreTime, Timeline: prv.SourceTimeline}
		if prv.SourceRestorePointName != "" { // recovered to the named restore point (recovery_target_name)
			target = instances.Target{Name: prv.SourceRestorePointName, Timeline: prv.SourceTimeline}
		}
		c.Recovery = &instances.RecoverySpec{JobID: run.Job.ID, Archive: archive, Target: target}
	}
	return c, nil
}

// RemoveProject removes the instances of a deleted project's previews and marks them deleted (the root's
// project delete job calls it).
func (s *Service) RemoveProject(ctx context.Context, projectID string) error {
	var previews []*store.Project
	if err := s.db.View(func(tx *store.Tx) (err error) { previews, err = live(tx, projectID); return err }); err != nil {
		return err
	}
	for _, prv := range previews {
		_, inst, err := s.host.LoadProject(prv.ID)
		if err != nil {
			return err
		}
		instID := ""
		if inst != nil {
			eng, err := s.engine()
			if err != nil {
				return err
			}
			if err := eng.Remove(ctx, inst); err != nil {
				return err
			}
			instID = inst.ID
		}
		if err := s.db.Update(func(tx *store.Tx) error {
			return s.host.SettleRemoved(tx, instID, prv.ID, func(p *store.Project) {
				now := s.now()
				p.State, p.RuntimeStatus, p.DeletedAt = api.ProjectDeleted, api.RuntimeStopped, &now
				p.Credential.Password, p.PreviousCredential = nil, nil
			})
		}); err != nil {
			return err
		}
	}
	return nil
}
