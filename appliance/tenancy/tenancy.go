// Package tenancy is the platform operators' area: the operators themselves (users with is_admin, made on
// the machine by `appliance operators add` or `up --operator-email`), and the organizations they host:
// create, list, suspend with a reason, resume, delete. A suspension is held in two places: the identity
// area refuses the organization's keys and sessions at once (it reads suspended_at on every
// authentication), and this area's jobs stop each of its projects' servers (data kept) and start them
// again on resume.
//
// It reaches the rest of the domain only through Host (declared here, given by the root's areaHost), the
// kernel packages (apperr, authz, ids), the wire types (api), the records (store) and the job runner
// (scheduler). It never imports `appliance`.
package tenancy

import (
	"context"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Job types: a suspended organization's project's server is stopped, a resumed one's started.
const (
	JobStop  = "project.stop"
	JobStart = "project.start"
)

// Host is what the area takes from the rest of the domain (appliance/areas.go gives it).
type Host interface {
	// Audit writes an audit event of the caller in tx.
	Audit(tx *store.Tx, p *authz.Principal, action, orgID, projectID string, metadata any) error
	// CheckDisplayText applies the rules of every display field (names, descriptions).
	CheckDisplayText(field, v string, min, max int) error
	// Slug is a display name's URL slug.
	Slug(name string) string
	// Enqueue queues a job of the project in tx, locked by lock.
	Enqueue(tx *store.Tx, prj *store.Project, jobType, lock string, payload any) (*store.Job, error)
	// Notify pokes the job runner once jobs enqueued in a committed transaction are there.
	Notify()
	// JobView is a job's API resource.
	JobView(j *store.Job) *api.Job
	// CreateUser adds a user of the built-in identity provider in tx (the identity area's).
	CreateUser(tx *store.Tx, email, name, password string, isAdmin bool, memberships ...store.Membership) (*store.User, error)
	// RecordKeyRevocation appends a revoked API key's hash to the revocation record.
	RecordKeyRevocation(hash string) error
	// StopProject stops the project's server and pooler (data kept) and records its runtime status
	// stopped; StartProject starts them again and puts them back under supervision.
	StopProject(ctx context.Context, run *scheduler.Run, projectID string) error
	StartProject(ctx context.Context, run *scheduler.Run, projectID string) error
	// ApplyPlan queues in tx the job that applies the project's plan to its server and key-value store
	// (project.apply_plan: max_connections, memory and CPU, maxmemory), as a plan change of the project does.
	ApplyPlan(tx *store.Tx, prj *store.Project) (*store.Job, error)
	// SignIn starts a session of a user just signed up, in tx (the identity area's, as a sign-in's).
	SignIn(tx *store.Tx, u *store.User, orgID, role string) (*api.SessionResult, error)
	// ReferralAtSignup records the referral of an organization signing up with a referral code, in tx
	// (appliance/referrals): nil when no organization has that code.
	ReferralAtSignup(tx *store.Tx, code, orgID string, u *store.User) (*api.Referral, error)
	// OrganizationCreated is told of an organization a sign-up made, after the commit (its customer at the
	// billing provider; a failure is logged and retried by the periodic pass).
	OrganizationCreated(ctx context.Context, orgID string)
	// SignupURL is the dashboard's sign-up page.
	SignupURL() string
}

// Deps are the area's collaborators; New takes them all.
type Deps struct {
	DB    *store.DB
	Clock func() time.Time // UTC
	Host  Host
	// Seed is the built-in plans and default organization quota (the store's until it is seeded).
	Seed Seed
}

// Service is the tenancy area.
type Service struct {
	db     *store.DB
	now    func() time.Time
	host   Host
	seed   Seed
	plans  store.Cache[[]api.Plan] // the plans in force, by the plans table's version
	signup signupMode              // up --signup (signup.go)
}

// New returns the area built with its collaborators.
func New(deps Deps) *Service {
	return &Service{db: deps.DB, now: deps.Clock, host: deps.Host, seed: deps.Seed}
}

// RegisterJobs registers the area's job handlers on the runner (the root's RegisterJobs calls it).
func (s *Service) RegisterJobs(r *scheduler.Runner) {
	r.Handle(JobStop, func(ctx context.Context, run *scheduler.Run) (any, error) {
		if err := s.host.StopProject(ctx, run, run.Job.ProjectID); err != nil {
			return nil, err
		}
		return map[string]any{"stopped": run.Job.ProjectID}, nil
	})
	r.Handle(JobStart, func(ctx context.Context, run *scheduler.Run) (any, error) {
		if err := s.host.StartProject(ctx, run, run.Job.ProjectID); err != nil {
			return nil, err
		}
		return map[string]any{"started": run.Job.ProjectID}, nil
	})
}

func wireOrganization(o *store.Organization) *api.Organization { return (*api.Organization)(o) }
