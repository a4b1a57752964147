package upgrades

import (
	"context"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

type minorPayload struct {
	Force bool `json:"force"`
}

type majorPayload struct {
	TargetMajor int `json:"target_major"`
}

// Minor enqueues a restart onto the installed binaries of the same major. Forcing it while
// sessions are active is for administrators: the admin role for sessions, an organization-wide key
// (not a project-scoped one) for API keys.
func (s *Service) Minor(ctx context.Context, p *authz.Principal, projectID string, force bool) (*api.JobResponse, error) {
	if force {
		if err := requireAdministrator(p, "forcing a minor upgrade"); err != nil {
			return nil, err
		}
	}
	return s.projectJob(p, projectID, JobMinor, minorPayload{Force: force}, func(tx *store.Tx, prj *store.Project, inst *store.Instance) error { return nil })
}

// Restart enqueues a restart of the project's server and its pooler. It ends the sessions open, which is
// for the organization's admin role, as forcing a minor upgrade is (a key bound to the project may, as it
// may delete it); refused (409) while another job holds the project (it would run after that one, at a
// time nobody chose).
func (s *Service) Restart(ctx context.Context, p *authz.Principal, projectID string) (*api.JobResponse, error) {
	if err := p.RequireAdminRole("restarting a project's server"); err != nil {
		return nil, err
	}
	return s.projectJob(p, projectID, JobRestart, nil, func(tx *store.Tx, prj *store.Project, inst *store.Instance) error {
		j, err := scheduler.Holder(tx, prj.ID, s.now())
		if err != nil {
			return apperr.Internal(err, "read the project's jobs")
		}
		if j != nil {
			return apperr.Conflict("job %s (%s) holds project %s: restart once it has ended", j.ID, j.Type, prj.ID)
		}
		return nil
	})
}

// requireAdministrator lets through what ends a project's sessions: a session with the admin role, or an
// organization-wide key (not a project-scoped one).
func requireAdministrator(p *authz.Principal, action string) error {
	if err := p.RequireAdminRole(action); err != nil {
		return err
	}
	if p.ProjectID != "" {
		return apperr.Forbidden("%s needs an organization-wide key or an administrator's session", action)
	}
	return nil
}

// Preflight enqueues pg_upgrade --check against the target major's binaries.
func (s *Service) Preflight(ctx context.Context, p *authz.Principal, projectID string, target int) (*api.JobResponse, error) {
	return s.projectJob(p, projectID, JobPreflight, majorPayload{TargetMajor: target}, func(tx *store.Tx, prj *store.Project, inst *store.Instance) error {
		if target <= inst.Major {
			return apperr.Invalid("target_major must be above the current major version %d", inst.Major)
		}
		return nil
	})
}

// Major enqueues the upgrade into a new data directory, keeping the old one until confirmed.
func (s *Service) Major(ctx context.Context, p *authz.Principal, projectID string, target int) (*api.JobResponse, error) {
	return s.projectJob(p, projectID, JobMajor, majorPayload{TargetMajor: target}, func(tx *store.Tx, prj *store.Project, inst *store.Instance) error {
		if target <= inst.Major {
			return apperr.Invalid("target_major must be above the current major version %d", inst.Major)
		}
		if inst.PreviousDir != "" {
			return apperr.Conflict("a major upgrade awaits confirm or rollback")
		}
		return nil
	})
}

// Confirm enqueues the removal of the pre-upgrade data directory.
func (s *Service) Confirm(ctx context.Context, p *authz.Principal, projectID string) (*api.JobResponse, error) {
	return s.projectJob(p, projectID, JobConfirm, nil, func(tx *store.Tx, prj *store.Project, inst *store.Instance) error {
		if inst.PreviousDir == "" {
			return apperr.Conflict("no major upgrade awaits confirmation")
		}
		return nil
	})
}

// Rollback enqueues the return to the pre-upgrade data directory and binaries.
func (s *Service) Rollback(ctx context.Context, p *authz.Principal, projectID string) (*api.JobResponse, error) {
	return s.projectJob(p, projectID, JobRollback, nil, func(tx *store.Tx, prj *store.Project, inst *store.Instance) error {
		if inst.PreviousDir == "" {
			return apperr.Conflict("no major upgrade can be rolled back")
		}
		return nil
	})
}

// projectJob enqueues a job on an active project after check accepts it, and audits it.
func (s *Service) projectJob(p *authz.Principal, projectID, jobType string, payload any, check func(*store.Tx, *store.Project, *store.Instance) error) (*api.JobResponse, error) {
	var job *store.Job
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := s.host.ActiveProject(tx, p, projectID)
		if err != nil {
			return err
		}
		inst, err := store.Instances.Get(tx, prj.PrimaryInstanceID)
		if err != nil {
			return apperr.Internal(err, "read instance")
		}
		if err := check(tx, prj, inst); err != nil {
			return err
		}
		j, err := s.host.Enqueue(tx, prj, jobType, prj.ID, payload)
		if err != nil {
			return err
		}
		if err := s.host.Audit(tx, p, jobType, prj.OrganizationID, prj.ID, map[string]any{"job_id": j.ID, "payload": payload}); err != nil {
			return apperr.Internal(err, "audit")
		}
		job = j
		return nil
	})
	return s.host.AnswerJob(job, err)
}
