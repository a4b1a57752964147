package appliance

import (
	"context"

	"github.com/theappliance/appliance/appliance/tenancy"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Tenancy is the platform operators' area (appliance/tenancy): operators, and the organizations they
// create, suspend, resume and delete.
func (s *Service) Tenancy() *tenancy.Service { return s.tenancy }

// suspendedTarget is the project and its instance a project.stop or project.start job acts on (a nil
// instance: the project has none, and nothing runs).
func (s *Service) suspendedTarget(projectID string) (*store.Project, *store.Instance, error) {
	if _, err := s.dataPlane(); err != nil {
		return nil, nil, err
	}
	var prj *store.Project
	var inst *store.Instance
	err := s.db.View(func(tx *store.Tx) error {
		var err error
		if prj, err = store.Projects.Get(tx, projectID); err != nil {
			return err
		}
		if prj.PrimaryInstanceID == "" || prj.State == ProjectDeleted || prj.State == ProjectDeleting {
			return nil
		}
		inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID)
		return err
	})
	return prj, inst, err
}

// stopProject stops the project's server and pooler, keeping the data, and records runtime_status
// stopped (the job of a suspension).
func (s *Service) stopProject(ctx context.Context, run *scheduler.Run, projectID string) error {
	prj, inst, err := s.suspendedTarget(projectID)
	if err != nil || inst == nil {
		return err
	}
	// Its key-value store's clients go too (the fronts refuse new ones from the suspension's commit on);
	// the store's server keeps its data, running.
	if err := s.kv.Disconnect(ctx, prj.ID); err != nil {
		return scheduler.Transient(err)
	}
	if err := s.eng.Stop(ctx, run.Exec, inst, prj); err != nil {
		return scheduler.Transient(err)
	}
	s.setRuntime(prj.ID, RuntimeStopped)
	return nil
}

// startProject starts the project's server and pooler again and watches them (the job of a resume).
func (s *Service) startProject(ctx context.Context, run *scheduler.Run, projectID string) error {
	prj, inst, err := s.suspendedTarget(projectID)
	if err != nil || inst == nil {
		return err
	}
	s.z.ClearIdleSuspension(prj) // the front lets go of its ports: this start binds them
	if err := s.eng.Start(ctx, run.Exec, inst, prj); err != nil {
		return scheduler.Transient(err)
	}
	s.setRuntime(prj.ID, RuntimeActive)
	return nil
}
