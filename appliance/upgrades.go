package appliance

import (
	"context"

	"github.com/theappliance/appliance/store"
)

// Job types of upgrades.
const (
	JobUpgradeMinor     = "project.upgrade_minor"
	JobUpgradePreflight = "project.upgrade_major_preflight"
	JobUpgradeMajor     = "project.upgrade_major"
	JobUpgradeConfirm   = "project.upgrade_major_confirm"
	JobUpgradeRollback  = "project.upgrade_major_rollback"
)

type minorPayload struct {
	Force bool `json:"force"`
}

type majorPayload struct {
	TargetMajor int `json:"target_major"`
}

// UpgradeMinor enqueues a restart onto the installed binaries of the same major. Forcing it while
// sessions are active is for administrators: the admin role for sessions, an organization-wide key
// (not a project-scoped one) for API keys.
func (s *Service) UpgradeMinor(ctx context.Context, p *Principal, projectID string, force bool) (*JobResponse, error) {
	if force {
		if err := p.RequireAdminRole("forcing a minor upgrade"); err != nil {
			return nil, err
		}
		if p.ProjectID != "" {
			return nil, Forbidden("forcing a minor upgrade needs an organization-wide key or an administrator's session")
		}
	}
	return s.projectJob(p, projectID, JobUpgradeMinor, minorPayload{Force: force}, func(prj *store.Project, inst *store.Instance) error { return nil })
}

// PreflightMajorUpgrade enqueues pg_upgrade --check against the target major's binaries.
func (s *Service) PreflightMajorUpgrade(ctx context.Context, p *Principal, projectID string, target int) (*JobResponse, error) {
	return s.projectJob(p, projectID, JobUpgradePreflight, majorPayload{TargetMajor: target}, func(prj *store.Project, inst *store.Instance) error {
		if target <= inst.Major {
			return Invalid("target_major must be above the current major version %d", inst.Major)
		}
		return nil
	})
}

// UpgradeMajor enqueues the upgrade into a new data directory, keeping the old one until confirmed.
func (s *Service) UpgradeMajor(ctx context.Context, p *Principal, projectID string, target int) (*JobResponse, error) {
	return s.projectJob(p, projectID, JobUpgradeMajor, majorPayload{TargetMajor: target}, func(prj *store.Project, inst *store.Instance) error {
		if target <= inst.Major {
			return Invalid("target_major must be above the current major version %d", inst.Major)
		}
		if inst.PreviousDir != "" {
			return Conflict("a major upgrade awaits confirm or rollback")
		}
		return nil
	})
}

// ConfirmMajorUpgrade enqueues the removal of the pre-upgrade data directory.
func (s *Service) ConfirmMajorUpgrade(ctx context.Context, p *Principal, projectID string) (*JobResponse, error) {
	return s.projectJob(p, projectID, JobUpgradeConfirm, nil, func(prj *store.Project, inst *store.Instance) error {
		if inst.PreviousDir == "" {
			return Conflict("no major upgrade awaits confirmation")
		}
		return nil
	})
}

// RollbackMajorUpgrade enqueues the return to the pre-upgrade data directory and binaries.
func (s *Service) RollbackMajorUpgrade(ctx context.Context, p *Principal, projectID string) (*JobResponse, error) {
	return s.projectJob(p, projectID, JobUpgradeRollback, nil, func(prj *store.Project, inst *store.Instance) error {
		if inst.PreviousDir == "" {
			return Conflict("no major upgrade can be rolled back")
		}
		return nil
	})
}

// projectJob enqueues a job on an active project after check accepts it, and audits it.
func (s *Service) projectJob(p *Principal, projectID, jobType string, payload any, check func(*store.Project, *store.Instance) error) (*JobResponse, error) {
	var job *store.Job
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := s.visibleActiveProject(tx, p, projectID)
		if err != nil {
			return err
		}
		inst, err := store.Instances.Get(tx, prj.PrimaryInstanceID)
		if err != nil {
			return Internal(err, "read instance")
		}
		if err := check(prj, inst); err != nil {
			return err
		}
		j, err := s.enqueue(tx, prj, jobType, prj.ID, payload)
		if err != nil {
			return err
		}
		if err := s.audit(tx, p, jobType, prj.OrganizationID, prj.ID, map[string]any{"job_id": j.ID, "payload": payload}); err != nil {
			return Internal(err, "audit")
		}
		job = j
		return nil
	})
	return s.answerJob(job, err)
}
