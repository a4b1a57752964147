package appliance

import (
	"context"
	"encoding/json"
	"time"

	"github.com/theappliance/appliance/store"
)

// Job is the API resource of a durable job.
type Job struct {
	ID                  string          `json:"id"`
	Type                string          `json:"type"`
	State               string          `json:"state" enum:"pending,running,completed,failed" doc:"pending, running, completed or failed"`
	OrganizationID      string          `json:"organization_id"`
	ProjectID           string          `json:"project_id"`
	PreviewDatabaseID   string          `json:"preview_database_id"`
	InstanceID          string          `json:"instance_id"`
	HostID              string          `json:"host_id"`
	LockedResource      string          `json:"locked_resource"`
	ClaimedBy           string          `json:"claimed_by"`
	Attempts            int             `json:"attempts"`
	MaxAttempts         int             `json:"max_attempts"`
	Error               string          `json:"error"`
	RetryClassification string          `json:"retry_classification" doc:"transient (retried with backoff) or permanent; empty until a failure"`
	LastStdout          string          `json:"last_stdout"`
	LastStderr          string          `json:"last_stderr"`
	LastExitCode        *int            `json:"last_exit_code" api:"nullable" doc:"null until a step ran a program"`
	Result              json.RawMessage `json:"result" doc:"free-form result of the job; null until it completes"`
	ClaimedAt           *time.Time      `json:"claimed_at"`
	StartedAt           *time.Time      `json:"started_at"`
	CompletedAt         *time.Time      `json:"completed_at"`
	CreatedAt           time.Time       `json:"created_at"`
	UpdatedAt           time.Time       `json:"updated_at"`
}

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

// JobResponse wraps one job (also the 202 answer of every job-returning endpoint).
type JobResponse struct {
	Job *Job `json:"job"`
}

// JobList is the list response.
type JobList struct {
	Jobs []*Job `json:"jobs"`
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
