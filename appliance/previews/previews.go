// Package previews is the previews area: a project's preview databases (an empty copy of its names, or a
// clone of its data as of now or of a past time), their endpoints (create, list, connections, extend,
// delete, reset), their jobs and the sweep of the expired ones; and the ephemeral databases, throwaway
// projects made without an account (create, get, delete, claim, and their sweep).
//
// Both are project records of their own, provisioned and deleted by the root's project jobs: the area
// keeps their records (load → engine → settle, audit, enqueue) and reaches the instance engine through
// Engine, the rest of the domain only through Host (declared here, given by the root's areaHost), the
// kernel packages (apperr, authz, ids, keyrate), the records (store) and the job runner (scheduler). It
// never imports `appliance`.
package previews

import (
	"context"
	"errors"
	"github.com/jackc/pgx/v5"
	"log/slog"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/appliance/keyrate"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Preview modes and sources (see docs/api-decisions.md "Preview databases").
const (
	ModeEmpty = api.PreviewModeEmpty // the project's database and role names, no data (from a spare cluster)
	ModeClone = api.PreviewModeClone // the project's data as of now (an online copy of its running server)

	SourceNone   = api.PreviewSourceNone   // an empty preview
	SourceLive   = api.PreviewSourceLive   // a copy of the running server
	SourceBackup = api.PreviewSourceBackup // a base backup and the WAL archive, recovered to source_restore_time
)

// Preview jobs: each acts on the preview's own project record (the job's preview_database_id).
const (
	JobCreate = "preview.create"
	JobDelete = "preview.delete"
	JobReset  = "preview.reset"
)

// Host is what the area takes from the rest of the domain: the records and rules every area shares, which
// the root package keeps (appliance/areas.go gives them).
type Host interface {
	// VisibleProject is a project the caller may see: one visibility rule for every area.
	VisibleProject(tx *store.Tx, p *authz.Principal, projectID string) (*store.Project, error)
	// ActiveProject is a visible project that is also active with an instance (else 409).
	ActiveProject(tx *store.Tx, p *authz.Principal, projectID string) (*store.Project, error)
	// LoadProject reads a project and its primary instance (nil when it has none yet).
	LoadProject(id string) (*store.Project, *store.Instance, error)
	// Audit writes an audit event of the caller in tx.
	Audit(tx *store.Tx, p *authz.Principal, action, orgID, projectID string, metadata any) error
	// AppendEvent appends an event to the log in tx (the webhooks' deliveries are queued there too).
	AppendEvent(tx *store.Tx, typ, orgID, projectID string, data any) error
	// AnswerJob is a job-returning call's answer once its transaction committed (it pokes the runner).
	AnswerJob(job *store.Job, err error) (*api.JobResponse, error)
	// Notify pokes the root's job runner once jobs enqueued in a transaction are committed.
	Notify()
	// CheckDisplayText applies the rules of every display field.
	CheckDisplayText(field, v string, min, max int) error
	// Slug is a display name's URL slug, InstanceIdent the database and role name a project named name
	// gets (a 400 for a name PostgreSQL would refuse): one rule for every project.
	Slug(name string) string
	InstanceIdent(name string) (string, error)
	// Connections are a project's URLs with its current credential (opened with the root's box).
	Connections(prj *store.Project) (*api.Connections, error)
	// ProjectView is a project's API resource.
	ProjectView(prj *store.Project) *api.Project
	// DefaultPlan is the name of the plan of a project made without one; PlanPreviews the previews the
	// plan allows and its name ("" for a plan the table does not have); PlanStorageLimitBytes its storage
	// limit: the plans table is the root's.
	DefaultPlan() string
	PlanPreviews(name string) (limit int, plan string)
	PlanStorageLimitBytes(name string) int64
	// PlacePreview sets, in a cluster, the node of a new preview (prv.NodeID, prv.PublicHost): its parent's,
	// a 409 when it has no room for it. Nothing on a single node (the placement is the root's).
	PlacePreview(tx *store.Tx, parent, prv *store.Project) error
	// OrganizationQuota is the projects and previews the organization may have, read in tx (the operators'
	// configuration).
	OrganizationQuota(tx *store.Tx, orgID string) (projects, previews int, err error)
	// RequireBackups is a 503 when the installed PostgreSQL lacks the programs of backups (a clone of a
	// past time starts from a base backup): the data plane's programs are the root's.
	RequireBackups() error
	// PointInTime reads what a recovery of the caller's active project to a past time needs (its timeline
	// switches and current timeline: the root's restore points) and returns the finder, in a transaction,
	// of the base backup and timeline a recovery to target starts from (a nil backup: none was complete by
	// then).
	PointInTime(ctx context.Context, p *authz.Principal, projectID string) (func(tx *store.Tx, projectID string, target time.Time) (*store.Backup, int, error), error)
	// RestorePointBase is PointInTime for a named restore point: the finder of the project's active restore
	// point id and the base backup a recovery to it starts from (an apperr.Invalid when there is none).
	RestorePointBase(ctx context.Context, p *authz.Principal, projectID string) (func(tx *store.Tx, projectID, id string) (*store.RestorePoint, *store.Backup, error), error)
	// Archive is the instance engine's view of the project's backup store (its WAL archive and the base
	// backup key): the backup store is the root's.
	Archive(ctx context.Context, projectID, backupKey string) (instances.Archive, error)
	// CheckNotPromoting refuses to change a preview that an approved or promoting cutover request holds
	// (the cutover is the root's).
	CheckNotPromoting(tx *store.Tx, prv *store.Project) error
	// EnqueueProvision and EnqueueDelete queue the root's project.provision and project.delete of the
	// project in tx (an ephemeral database's life is a project's).
	EnqueueProvision(tx *store.Tx, prj *store.Project) (*store.Job, error)
	EnqueueDelete(tx *store.Tx, prj *store.Project) (*store.Job, error)
	// Provision and DeleteProject are the root's project jobs (a preview is a project record, provisioned
	// and deleted like any), FailOnFinalError the wrapper that marks the project failed when a provision
	// fails for good.
	Provision(ctx context.Context, run *scheduler.Run) (any, error)
	DeleteProject(ctx context.Context, run *scheduler.Run) (any, error)
	FailOnFinalError(h scheduler.Handler) scheduler.Handler
	// SettleRemoved records, in tx, that the project's instance instID ("" for none) was removed and a
	// change of the project (the instances' states are the root's).
	SettleRemoved(tx *store.Tx, instID, projectID string, change func(*store.Project)) error
	// AdminConn is a superuser session in a database of the instance (the schema diff reads the catalogs of
	// a preview and its project; the admin password is sealed with the root's box).
	AdminConn(ctx context.Context, inst *store.Instance, db string) (*pgx.Conn, error)
	// LiftStorageLock lifts the project's storage lock (the storage guard is the root's).
	LiftStorageLock(ctx context.Context, projectID string) error
}

// Engine is what the area drives of the instance engine (appliance/instances): removing an instance's
// server and data (a reset, a deleted project's previews).
type Engine interface {
	Remove(ctx context.Context, rec *store.Instance) error
}

// Opener opens sealed secrets (the root's SecretBox).
type Opener interface {
	Open(sealed []byte) ([]byte, error)
}

// Config is the deployment the area needs to know.
type Config struct {
	APIURL     string // base URL clients use for the API (the claim URL)
	PublicHost string // host name clients use for databases
	Region     string
	// Ephemeral bounds anonymous ephemeral databases (its zero sizes take DefaultEphemeralLimits').
	Ephemeral EphemeralLimits
}

// Deps are the area's collaborators; New takes them all.
type Deps struct {
	DB    *store.DB
	Box   Opener
	Log   *slog.Logger
	Clock func() time.Time // UTC
	// Engine is nil in a process without a data plane (tests of the API alone): the reset job fails.
	Engine Engine
	Host   Host
}

// Service is the previews area.
type Service struct {
	cfg  Config
	db   *store.DB
	box  Opener
	log  *slog.Logger
	now  func() time.Time
	eng  Engine
	host Host
	// ephemeral bounds anonymous ephemeral databases; ephemeralRate is its per-address bucket.
	ephemeral     EphemeralLimits
	ephemeralRate *keyrate.Limiter
}

// New returns the area built with its collaborators.
func New(cfg Config, deps Deps) *Service {
	s := &Service{cfg: cfg, db: deps.DB, box: deps.Box, log: deps.Log, now: deps.Clock, eng: deps.Engine, host: deps.Host}
	s.setEphemeralLimits(cfg.Ephemeral)
	return s
}

// engine is the instance engine, or the error of a process without one.
func (s *Service) engine() (Engine, error) {
	if s.eng == nil {
		return nil, errors.New("no data plane: PostgreSQL instances cannot run in this process")
	}
	return s.eng, nil
}

// RegisterJobs registers the area's job handlers on the runner (the root's RegisterJobs calls it): a
// preview is made and deleted by the root's project jobs, reset by the area's.
func (s *Service) RegisterJobs(r *scheduler.Runner) {
	r.Handle(JobCreate, s.host.FailOnFinalError(s.host.Provision))
	r.Handle(JobDelete, s.host.DeleteProject)
	r.Handle(JobReset, s.host.FailOnFinalError(s.resetJob))
}
