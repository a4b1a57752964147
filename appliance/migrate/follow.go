package migrate

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/store"
)

// Job types of imports/follow.
const (
	JobFollow        = "import.follow"
	JobFollowStatus  = "import.follow_status"
	JobFollowCutover = "import.follow_cutover"
	JobFollowAbort   = "import.follow_abort"
)

type followPayload struct {
	FollowID string `json:"follow_id"`
}

// FollowFinished says whether a follow can no longer change.
func FollowFinished(state string) bool {
	return state == api.FollowCompleted || state == api.FollowAborted
}

// CurrentFollow is the project's newest follow (nil when it never followed a source).
func CurrentFollow(tx *store.Tx, projectID string) (*store.ImportFollow, error) {
	fs, err := store.ImportFollows.Lookup(tx, store.ImportFollowsByProject, projectID, store.Query{Newest: true, Limit: 1})
	if err != nil || len(fs) == 0 {
		return nil, err
	}
	return fs[0], nil
}

// StartFollow checks the source (it must be ready for logical replication and pass the preflight), then
// enqueues a backup of the project (abort restores it) and import.follow, which copies the schema and
// creates the subscription. It needs confirm: true; a session needs the admin role.
func (s *Service) StartFollow(ctx context.Context, p *authz.Principal, projectID string, req *api.FollowRequest) (*api.JobResponse, error) {
	if err := p.RequireAdminRole("importing into a project"); err != nil {
		return nil, err
	}
	src, err := s.ParseSource(req.SourceURL)
	if err != nil {
		return nil, err
	}
	if !req.Confirm {
		return nil, apperr.Invalid("follow copies the source's schema over the project's database; send confirm: true")
	}
	prj, inst, err := s.host.ActiveInstance(p, projectID)
	if err != nil {
		return nil, err
	}
	if err := s.db.View(func(tx *store.Tx) error { return s.host.RequireDumps(tx, prj) }); err != nil {
		return nil, err
	}
	// Checked before the preflight connects anywhere, and again when the follow is stored.
	if err := s.db.View(func(tx *store.Tx) error { return noOpenFollow(tx, prj.ID) }); err != nil {
		return nil, err
	}
	target, err := s.host.AdminConn(ctx, inst, prj.DatabaseName)
	if err != nil {
		return nil, &apperr.Error{Kind: apperr.KindUnavailable, Msg: "the project's server does not answer", Cause: err}
	}
	pf, err := s.Check(ctx, prj, target, src)
	target.Close(context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}
	if err := followReady(pf); err != nil {
		return nil, err
	}
	sealed := s.box.Seal([]byte(src.String()))
	var job *store.Job
	err = s.db.Update(func(tx *store.Tx) error {
		prj, err := s.host.ActiveProject(tx, p, projectID)
		if err != nil {
			return err
		}
		if err := noOpenFollow(tx, prj.ID); err != nil {
			return err
		}
		now := s.now()
		id := ids.New("flw")
		name := "appliance_follow_" + strings.ToLower(id[len(id)-10:])
		b, _, err := s.host.NewBackup(tx, prj, "before follow "+id)
		if err != nil {
			return err
		}
		j, err := s.host.Enqueue(tx, prj, JobFollow, prj.ID, followPayload{FollowID: id})
		if err != nil {
			return err
		}
		f := &store.ImportFollow{ID: id, ProjectID: prj.ID, OrganizationID: prj.OrganizationID, SourceURL: sealed,
			SourceRedacted: src.Redacted(), State: api.FollowStarting, Publication: name, Subscription: name, BackupID: b.ID,
			JobID: j.ID, CreatedAt: now, UpdatedAt: now}
		if err := store.ImportFollows.Put(tx, f); err != nil {
			return apperr.Internal(err, "store follow")
		}
		md := map[string]any{"follow_id": id, "job_id": j.ID, "backup_id": b.ID, "source": src.Redacted()}
		if err := s.host.Audit(tx, p, JobFollow, prj.OrganizationID, prj.ID, md); err != nil {
			return apperr.Internal(err, "audit")
		}
		job = j
		return nil
	})
	return s.host.AnswerJob(job, err)
}

// followReady turns a preflight that rules out following into a Conflict naming every reason.
func followReady(pf *api.Preflight) error {
	var reasons []string
	for _, c := range pf.Checks {
		if c.Status == CheckFail {
			reasons = append(reasons, c.Name+": "+c.Detail)
		}
	}
	if pf.Source != nil {
		reasons = append(reasons, pf.Source.Replication.Blockers...)
	}
	if len(reasons) > 0 {
		return apperr.Conflict("the source cannot be followed: %s", strings.Join(reasons, "; "))
	}
	return nil
}

// noOpenFollow refuses a second follow while one is not finished.
func noOpenFollow(tx *store.Tx, projectID string) error {
	cur, err := CurrentFollow(tx, projectID)
	if err != nil {
		return apperr.Internal(err, "read follows")
	}
	if cur != nil && !FollowFinished(cur.State) {
		return apperr.Conflict("project %s already follows a source (state %s): cut over or abort it first", projectID, cur.State)
	}
	return nil
}

// FollowStatus enqueues import.follow_status, which measures the follow (subscription, tables, lag) and
// reports it as the job's result. It takes no lock: it only reads.
func (s *Service) FollowStatus(ctx context.Context, p *authz.Principal, projectID string) (*api.JobResponse, error) {
	return s.followJob(p, projectID, JobFollowStatus, "", func(f *store.ImportFollow) error { return nil })
}

// FollowCutover enqueues import.follow_cutover: wait for zero lag, copy the sequences, detach. It needs
// confirm: true and a follow that is starting (the cutover then runs once import.follow has) or following.
func (s *Service) FollowCutover(ctx context.Context, p *authz.Principal, projectID string, req *api.FollowCutoverRequest) (*api.JobResponse, error) {
	if err := p.RequireAdminRole("cutting over an import"); err != nil {
		return nil, err
	}
	if !req.Confirm {
		return nil, apperr.Invalid("after the cutover the project no longer follows the source; send confirm: true")
	}
	return s.followJob(p, projectID, JobFollowCutover, projectID, func(f *store.ImportFollow) error {
		if f.State != api.FollowStarting && f.State != api.FollowFollowing {
			return apperr.Conflict("the follow is %s; only a starting or following one can cut over", f.State)
		}
		return nil
	})
}

// FollowAbort enqueues import.follow_abort: remove the subscription and the publication, and restore the
// backup taken before follow started.
func (s *Service) FollowAbort(ctx context.Context, p *authz.Principal, projectID string) (*api.JobResponse, error) {
	if err := p.RequireAdminRole("aborting an import"); err != nil {
		return nil, err
	}
	return s.followJob(p, projectID, JobFollowAbort, projectID, func(f *store.ImportFollow) error {
		if FollowFinished(f.State) || f.State == api.FollowAborting {
			return apperr.Conflict("the follow is %s already", f.State)
		}
		f.State = api.FollowAborting
		return nil
	})
}

// followJob enqueues a job on the project's newest follow after change accepts it (and perhaps moves its
// state, which is then stored).
func (s *Service) followJob(p *authz.Principal, projectID, jobType, lock string, change func(*store.ImportFollow) error) (*api.JobResponse, error) {
	var job *store.Job
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		f, err := CurrentFollow(tx, prj.ID)
		if err != nil {
			return apperr.Internal(err, "read follows")
		}
		if f == nil {
			return apperr.NotFound("project %s has never followed a source", prj.ID)
		}
		before := f.State
		if err := change(f); err != nil {
			return err
		}
		if prj.State != api.ProjectActive || prj.PrimaryInstanceID == "" {
			return apperr.Conflict("project %s is %s, not active", prj.ID, prj.State)
		}
		j, err := s.host.Enqueue(tx, prj, jobType, lock, followPayload{FollowID: f.ID})
		if err != nil {
			return err
		}
		if f.State != before {
			f.UpdatedAt = s.now()
			if err := store.ImportFollows.Put(tx, f); err != nil {
				return apperr.Internal(err, "store follow")
			}
		}
		if err := s.host.Audit(tx, p, jobType, prj.OrganizationID, prj.ID, map[string]any{"follow_id": f.ID, "job_id": j.ID}); err != nil {
			return apperr.Internal(err, "audit")
		}
		job = j
		return nil
	})
	return s.host.AnswerJob(job, err)
}

// updateFollow applies fn to the stored follow in one transaction.
func (s *Service) updateFollow(id string, fn func(*store.ImportFollow)) error {
	return s.db.Update(func(tx *store.Tx) error {
		f, err := store.ImportFollows.Get(tx, id)
		if err != nil {
			return err
		}
		fn(f)
		f.UpdatedAt = s.now()
		if FollowFinished(f.State) || f.State == api.FollowFailed {
			t := f.UpdatedAt
			f.FinishedAt = &t
		}
		return store.ImportFollows.Put(tx, f)
	})
}

// followSource opens the follow's sealed source URL.
func (s *Service) followSource(f *store.ImportFollow) (*SourceURL, error) {
	raw, err := s.box.Open(f.SourceURL)
	if err != nil {
		return nil, err
	}
	return s.ParseSource(string(raw))
}

var errFollowGone = errors.New("follow not found")

// loadFollow reads a follow for a job.
func (s *Service) loadFollow(id string) (*store.ImportFollow, error) {
	var f *store.ImportFollow
	err := s.db.View(func(tx *store.Tx) (err error) { f, err = store.ImportFollows.Get(tx, id); return err })
	if errors.Is(err, store.ErrNotFound) {
		return nil, errFollowGone
	}
	return f, err
}

// followPollEvery is how often the cutover and the follow job look at replication progress.
const followPollEvery = 250 * time.Millisecond
