package appliance

import (
	"context"
	"encoding/json"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/exports"
	"github.com/theappliance/appliance/appliance/kv"
	"github.com/theappliance/appliance/appliance/migrate"
	"github.com/theappliance/appliance/appliance/previews"
	"github.com/theappliance/appliance/appliance/upgrades"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// The job states the API declares (api.Enums["JobState"]) are the scheduler's: a map literal with a
// duplicate key (two false ones) fails to compile when one of them differs.
var _ = map[bool]int{false: 0,
	scheduler.StatePending == api.JobPending && scheduler.StateRunning == api.JobRunning &&
		scheduler.StateCompleted == api.JobCompleted && scheduler.StateFailed == api.JobFailed: 1}

// JobView converts the record to the API resource.
func JobView(j *store.Job) *Job {
	res := j.Result
	if len(res) == 0 {
		res = json.RawMessage("null")
	}
	return &Job{ID: j.ID, Type: j.Type, State: j.State, OrganizationID: j.OrganizationID, ProjectID: j.ProjectID,
		PreviewDatabaseID: j.PreviewDatabaseID, InstanceID: j.InstanceID, HostID: j.HostID,
		LockedResource: j.LockedResource, ClaimedBy: j.ClaimedBy, Attempts: j.Attempts, MaxAttempts: j.MaxAttempts,
		Error: j.Error, RetryClassification: j.RetryClassification, LastStdout: j.LastStdout,
		LastStderr: j.LastStderr, LastExitCode: j.LastExitCode, Result: res, ClaimedAt: j.ClaimedAt,
		StartedAt: j.StartedAt, CompletedAt: j.CompletedAt, CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt}
}

// GetJob returns a job the caller may see; project-scoped keys see only their project's jobs.
func (s *Service) GetJob(ctx context.Context, p *Principal, jobID string) (*JobResponse, error) {
	var out *JobResponse
	err := s.db.View(func(tx *store.Tx) error {
		j, err := store.Jobs.Get(tx, jobID)
		if err != nil {
			return notFoundAs(err, "job %s not found", jobID)
		}
		if err := p.CheckOrganization(j.OrganizationID); err != nil {
			return NotFound("job %s not found", jobID)
		}
		if p.ProjectID != "" && j.ProjectID != p.ProjectID {
			return Forbidden("this API key is restricted to project %s", p.ProjectID)
		}
		out = &JobResponse{Job: JobView(j)}
		return nil
	})
	return out, err
}

// ListProjectJobs returns the project's newest jobs.
func (s *Service) ListProjectJobs(ctx context.Context, p *Principal, projectID string, limit int) (*JobList, error) {
	out := &JobList{Jobs: []*Job{}}
	err := s.db.View(func(tx *store.Tx) error {
		if _, err := s.visibleProject(tx, p, projectID); err != nil {
			return err
		}
		jobs, err := store.Jobs.Lookup(tx, store.JobsByProject, projectID, store.Query{Newest: true, Limit: limit})
		if err != nil {
			return Internal(err, "list jobs")
		}
		for _, j := range jobs {
			out.Jobs = append(out.Jobs, JobView(j))
		}
		return nil
	})
	return out, err
}

// setPayload stores the job's input.
func setPayload(j *store.Job, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return Internal(err, "encode job payload")
	}
	j.Payload = b
	return nil
}

// answerJob is the answer of a job-returning call whose store transaction (its error err) enqueued job:
// the runner is poked once the transaction has committed.
func (s *Service) answerJob(job *store.Job, err error) (*JobResponse, error) {
	if err != nil {
		return nil, err
	}
	s.notify()
	return &JobResponse{Job: JobView(job)}, nil
}

// JobStepHook, when not nil (Deps.JobStepHook), is called at the named steps of the restore and cutover
// jobs. Only test builds give one (appliance/node/testhooks_on.go), to stop the process at a chosen moment. The steps
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

// JobEvent is the data of the job events and of the events a job's end tells.
type JobEvent struct {
	Job *Job `json:"job"`
}

// jobEvents are the events a job type's completion tells besides job.completed.
var jobEvents = map[string]string{
	JobProjectProvision:    "project.ready",
	JobProjectDelete:       "project.deleted",
	JobBackupCreate:        "backup.completed",
	JobBackupRestore:       "restore.completed",
	exports.JobCreate:      "export.completed",
	JobImportRestore:       "import.completed",
	JobImportFollowCutover: "import.completed",
	JobProjectRotate:       "credentials.rotated",
	kv.JobCreate:           "kv.ready",
	previews.JobCreate:     "preview.ready",
	previews.JobDelete:     "preview.deleted",
	previews.JobReset:      "preview.reset",
	kv.JobDelete:           "kv.deleted",
}

// jobEnded is the runner's end hook: in the transaction that records a job's end, the log gets
// job.completed or job.failed, and what a completed job of its type means.
func (s *Service) jobEnded(tx *store.Tx, j *store.Job) error {
	data := JobEvent{Job: JobView(j)}
	typ := "job.completed"
	if j.State == scheduler.StateFailed {
		typ = "job.failed"
	}
	if err := s.events.Append(tx, typ, j.OrganizationID, j.ProjectID, data); err != nil {
		return err
	}
	tx.OnCommit(func() { s.jobEndedMetric(j) }) // counted once, when the job's end commits
	if j.Type == JobBackupCreate {
		if err := s.observe.BackupEnded(tx, j); err != nil {
			return err
		}
	}
	if j.State == scheduler.StateCompleted {
		if err := s.integrationsAfterJob(tx, j.Type, j.ProjectID); err != nil {
			return err
		}
	}
	if extra, ok := jobEvents[j.Type]; ok && j.State == scheduler.StateCompleted {
		return s.events.Append(tx, extra, j.OrganizationID, j.ProjectID, data)
	}
	return nil
}

// integrationsAfterJob is the area's part of the job end hook: a completed rotation, cutover, major
// upgrade (its cutover to the new major's server), its rollback or a restore pushes the project's settings
// again (a sync per active platform integration); a deleted project's integrations go.
func (s *Service) integrationsAfterJob(tx *store.Tx, typ, projectID string) error {
	switch typ {
	case JobProjectRotate, migrate.JobCutoverPromote, upgrades.JobMajor, upgrades.JobRollback, JobBackupRestore:
		_, err := s.integrations.Repush(tx, projectID)
		if err == nil {
			tx.OnCommit(s.notify)
		}
		return err
	case JobProjectDelete:
		return s.integrations.ForgetProject(tx, projectID)
	}
	return nil
}
