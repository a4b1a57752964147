// Package migrate is the migration area: the checks of an outside PostgreSQL source (the source URL under
// the appliance's outbound policy, SourceURL; the import preflight that inspects the source and compares
// it with the project: Preflight for the endpoint, Check for the follow's start job), the dump uploads and
// their import (CreateUpload, ReceiveUpload, CreateImport and the import.restore job), following a source
// by logical replication (StartFollow, FollowStatus, FollowCutover, FollowAbort and their jobs) and the
// cutover requests that make a preview's data its project's (RequestCutover, ApproveCutover, RejectCutover
// and the cutover.promote job).
//
// It reaches the rest of the domain only through Host (declared here, given by the root's areaHost), the
// instance engine through Engine, the kernel packages (apperr, authz, ids), the extensions and exports
// areas' shared pieces (extensions.Conn, exports.Dir), the signed URLs (signedurl), the bucket's backup
// store (backup) and the local cache of its dumps (dumpcache), the records (store) and the job runner
// (scheduler).
// It never imports `appliance`.
package migrate

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/dumpcache"
	"github.com/theappliance/appliance/appliance/keyrate"
	"github.com/theappliance/appliance/appliance/outbound"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/signedurl"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Host is what the area needs of the rest of the domain; the root gives it (areaHost).
type Host interface {
	// ActiveInstance applies the projects' visibility and "active" rules and reads the project's instance.
	ActiveInstance(p *authz.Principal, projectID string) (*store.Project, *store.Instance, error)
	// AdminConn opens an admin connection to the instance's database (the admin password is sealed with
	// the root's box).
	AdminConn(ctx context.Context, inst *store.Instance, db string) (*pgx.Conn, error)
	// Audit records an event (one event shape, one clock).
	Audit(tx *store.Tx, p *authz.Principal, action, orgID, projectID string, metadata any) error
	// OffersExtension is the appliance's rule of which extensions projects may have.
	OffersExtension(name string) bool
	// PlanStorageLimitBytes is the plan's storage limit (0 for a plan the table does not have).
	PlanStorageLimitBytes(plan string) int64
	// ActiveProject applies the projects' visibility and "active" rules in tx.
	ActiveProject(tx *store.Tx, p *authz.Principal, projectID string) (*store.Project, error)
	// RequireDumps refuses when the programs of dumps are missing (the data plane's features).
	RequireDumps(tx *store.Tx, prj *store.Project) error
	// Enqueue queues a job that becomes the project's latest_job_id.
	Enqueue(tx *store.Tx, prj *store.Project, jobType, lock string, payload any) (*store.Job, error)
	// AnswerJob is the 202 answer (pokes the root's runner once the transaction committed).
	AnswerJob(job *store.Job, err error) (*api.JobResponse, error)
	// PrepareUploads makes the project's directory in the backup store (the data plane's) and returns the
	// instances' OS user, who must own the uploaded dumps.
	PrepareUploads(ctx context.Context, projectID string) (Owner, error)

	// VisibleProject is a project the caller may see (the follow's and cutover requests' reads): one
	// visibility rule for every area.
	VisibleProject(tx *store.Tx, p *authz.Principal, projectID string) (*store.Project, error)
	// ActiveTarget starts a project job: the data plane must exist, the payload is decoded, and the
	// project must be active with an instance (the projects' rule).
	ActiveTarget(run *scheduler.Run, payload any) (*store.Project, *store.Instance, error)
	// LoadProject reads a project and its primary instance (the cutover's preview): the records' reader
	// the root's jobs share.
	LoadProject(id string) (*store.Project, *store.Instance, error)
	// CheckDisplayText applies the rules of every display field (a cutover request's notes).
	CheckDisplayText(field, v string, min, max int) error
	// AppendEvent appends an event to the log in tx (cutover.requested, cutover.completed); the webhooks'
	// deliveries are queued there too.
	AppendEvent(tx *store.Tx, typ, orgID, projectID string, data any) error
	// RequireBackups refuses when the programs of backups are missing (the pre-cutover backup; the data
	// plane's features).
	RequireBackups() error
	// NewBackup records a pending backup of the project and enqueues its backup.create job in tx (before a
	// follow, before a cutover): backups are the root's.
	NewBackup(tx *store.Tx, prj *store.Project, label string) (*store.Backup, *store.Job, error)
	// EnqueueBackupRestore enqueues backup.restore of a backup of the project in tx (a follow's abort
	// puts the project back): the restore job and its payload are the root's.
	EnqueueBackupRestore(tx *store.Tx, prj *store.Project, backupID string) (*store.Job, error)
	// DeletePreview marks a preview deleting and enqueues its deletion in tx (a completed cutover): the
	// previews are the root's.
	DeletePreview(tx *store.Tx, p *authz.Principal, prv *store.Project, action string) (*store.Job, error)
	// PrepareDumpDir makes the project's directory of dumps in the backup store (the exports' directory,
	// where a cutover's dump of the preview goes): the backup store and the instances' OS user are the
	// root's. Its errors are transient.
	PrepareDumpDir(ctx context.Context, projectID string) (string, error)
	// DumpDatabase writes a pg_dump -Fc of the instance's database to path, as the admin (the cutover's
	// dump of the preview; the exports' pg_dump).
	DumpDatabase(ctx context.Context, run *scheduler.Run, inst *store.Instance, database, path string) error
	// ForgetStudio ends the studio's pooled sessions of the project (a cutover's swap is about to end
	// them): the studio area is the root's to hold.
	ForgetStudio(projectID string)
}

// Owner is the OS user files are given to.
type Owner interface{ Chown(path string) error }

// Box seals and opens the follows' source URLs and opens the projects' credentials (the root's
// SecretBox).
type Box interface {
	Seal(plaintext []byte) []byte
	Open(sealed []byte) ([]byte, error)
}

// Engine is what the area drives of the instance engine (appliance/instances): an instance record's
// processes, for its programs (pg_dump, pg_restore).
type Engine interface {
	Instance(rec *store.Instance) *postgres.Instance
}

// Plane is the data plane pieces the jobs need: the OS user pg_dump and pg_restore run as.
type Plane struct {
	User *daemon.OSUser
}

// Notifier is poked after jobs are enqueued so the runner claims them at once (the root's job runner).
type Notifier interface{ Notify() }

// Config is the area's settings.
type Config struct {
	// DataDir is the appliance's data directory (the uploads are in its backup store).
	DataDir string
}

// Deps are the area's collaborators.
type Deps struct {
	DB    *store.DB
	Box   Box
	Log   *slog.Logger
	Clock func() time.Time
	// URLs signs the upload URLs (one signer with the exports' download URLs, keyed by the root's box).
	URLs *signedurl.Signer
	// Bucket is the backup store when it is a bucket (nil: the local directory, where the uploaded dumps'
	// files are the only copy); Cache the local cache of its dumps, the uploads' files in it among them
	// (New adds them as a source).
	Bucket *backup.Store
	Cache  *dumpcache.Cache
	// UploadLimit overrides the upload size limit when it returns a positive size (tests of 413).
	UploadLimit func() int64
	// Policy is the outbound policy every connection to a source goes through.
	Policy *outbound.Policy
	// Engine and Plane are nil in a process without a data plane (tests of the API alone): the jobs fail
	// then (Host.ActiveTarget refuses first).
	Engine Engine
	Plane  *Plane
	// Jobs is poked after jobs are enqueued outside AnswerJob (nil: no runner; jobs wait for one).
	Jobs Notifier
	// StepHook is called at the named steps of the cutover's promotion (nil: none; test builds).
	StepHook func(ctx context.Context, jobID, step string)
	Host     Host
}

// Service is the migration area.
type Service struct {
	db          *store.DB
	box         Box
	log         *slog.Logger
	policy      *outbound.Policy
	host        Host
	eng         Engine
	plane       *Plane
	jobs        Notifier
	stepHook    func(ctx context.Context, jobID, step string)
	preflights  *keyrate.Limiter // each project's import preflights (they connect out on the tenant's behalf)
	dataDir     string
	now         func() time.Time
	uploadLimit func() int64
	uploads     uploadGate
	uploadURLs  *signedurl.Resource[store.Upload]
	bucket      *backup.Store
	cache       *dumpcache.Cache
}

// New builds the area.
func New(cfg Config, d Deps) *Service {
	limit := d.UploadLimit
	if limit == nil {
		limit = func() int64 { return 0 }
	}
	s := &Service{db: d.DB, box: d.Box, log: d.Log, policy: d.Policy, host: d.Host, eng: d.Engine, plane: d.Plane,
		jobs: d.Jobs, stepHook: d.StepHook,
		preflights: keyrate.New(time.Minute/PreflightsPerMinute, PreflightsPerMinute),
		dataDir:    cfg.DataDir, now: d.Clock, uploadLimit: limit,
		uploadURLs: &signedurl.Resource[store.Upload]{Signer: d.URLs, DB: d.DB, Purpose: uploadMACPurpose, Path: "/v1/uploads/imports",
			Action: "upload", Noun: "upload", Refused: "not accepted", Table: store.Uploads,
			Project: func(u *store.Upload) string { return u.ProjectID }},
		bucket: d.Bucket, cache: d.Cache}
	s.cache.AddSource(s.cachedUploads)
	return s
}

// RegisterJobs registers the area's job handlers on the runner (the root's RegisterJobs calls it).
func (s *Service) RegisterJobs(r *scheduler.Runner) {
	r.Handle(JobImportRestore, s.importRestoreJob)
	r.Handle(JobFollow, s.followStartJob)
	r.Handle(JobFollowStatus, s.followStatusJob)
	r.Handle(JobFollowCutover, s.followCutoverJob)
	r.Handle(JobFollowAbort, s.followAbortJob)
	r.Handle(JobCutoverPromote, s.failCutoverOnFinalError(s.promoteCutoverJob))
}

// notify pokes the job runner after a transaction that enqueued jobs committed.
func (s *Service) notify() {
	if s.jobs != nil {
		s.jobs.Notify()
	}
}

// jobStep calls the step hook (test builds) at a named step of a job.
func (s *Service) jobStep(ctx context.Context, jobID, step string) {
	if s.stepHook != nil {
		s.stepHook(ctx, jobID, step)
	}
}
