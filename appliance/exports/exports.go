// Package exports is the exports area: logical exports of a project's database (pg_dump -Fc) kept in the
// backup store until they expire, their signed download URLs, and the sweep of the expired ones. With a
// bucket as the backup store, each export is an object of the bucket (backup.Store's PutExport: sealed and
// compressed) and its local file an entry of the local cache of the bucket's dumps (Deps.Cache, cache.go).
//
// It reaches the rest of the domain only through Host (declared here, given by the root's areaHost), the
// kernel packages (apperr, authz, ids), the signed URLs (signedurl), the bucket's backup store (backup) and
// the local cache of its dumps (dumpcache), the records (store) and the job runner (scheduler). It never imports `appliance`.
package exports

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/dumpcache"
	"github.com/theappliance/appliance/appliance/signedurl"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Export states; see docs/api-decisions.md (Exports).
const (
	StatePending   = api.ExportPending
	StateRunning   = api.ExportRunning
	StateCompleted = api.ExportCompleted
	StateFailed    = api.ExportFailed
	StateExpired   = api.ExportExpired
)

// JobCreate dumps a project's database with pg_dump -Fc.
const JobCreate = "export.create"

// TTL is how long a completed export is kept (from its completion); DownloadTTL is how long a signed
// download URL is valid.
const (
	TTL         = 7 * 24 * time.Hour
	DownloadTTL = 15 * time.Minute
)

const macPurpose = "export-download"

// Host is what the area takes from the rest of the domain: the records and rules every area shares, which
// the root package keeps (appliance/areas.go gives them).
type Host interface {
	// VisibleProject is a project the caller may see: one visibility rule for every area.
	VisibleProject(tx *store.Tx, p *authz.Principal, projectID string) (*store.Project, error)
	// ActiveProject is a visible project that is also active with an instance (else 409).
	ActiveProject(tx *store.Tx, p *authz.Principal, projectID string) (*store.Project, error)
	// RequireDumps is a 503 when the installed PostgreSQL lacks the programs of exports and imports (the
	// root's FeatureDumps): the data plane's programs are the root's.
	RequireDumps(tx *store.Tx, prj *store.Project) error
	// Enqueue adds a job of the project in tx and makes it the project's latest_job_id.
	Enqueue(tx *store.Tx, prj *store.Project, jobType, lock string, payload any) (*store.Job, error)
	// AnswerJob is a job-returning call's answer once its transaction committed (it pokes the runner).
	AnswerJob(job *store.Job, err error) (*api.JobResponse, error)
	// Audit writes an audit event of the caller in tx.
	Audit(tx *store.Tx, p *authz.Principal, action, orgID, projectID string, metadata any) error
	// ActiveTarget starts a project job: the data plane must exist, the payload is decoded, and the
	// project must be active with an instance.
	ActiveTarget(run *scheduler.Run, payload any) (*store.Project, *store.Instance, error)
	// PrepareDumpDir makes the project's directory of dumps in the backup store (the backup store and the
	// instances' OS user are the root's; a cutover's dump goes there too). Its errors are transient.
	PrepareDumpDir(ctx context.Context, projectID string) (string, error)
	// DumpDatabase writes a pg_dump -Fc of the instance's database to path (the instance engine's
	// pg_dump, run as the instances' OS user; the cutover dumps with it too).
	DumpDatabase(ctx context.Context, run *scheduler.Run, inst *store.Instance, database, path string) error
}

// Config is the deployment the area needs to know.
type Config struct {
	DataDir string // the appliance's data directory (the backup store is under it)
}

// Deps are the area's collaborators; New takes them all.
type Deps struct {
	DB    *store.DB
	Log   *slog.Logger
	Clock func() time.Time // UTC
	// URLs signs the download URLs (one signer with the imports' upload URLs).
	URLs *signedurl.Signer
	Host Host
	// Bucket is the backup store when it is a bucket (nil: the local directory, where the exports' files
	// are the only copy).
	Bucket *backup.Store
	// Cache is the local cache of the bucket's dumps, which the exports' files stored in the bucket are
	// entries of (New adds them as a source).
	Cache *dumpcache.Cache
}

// Service is the exports area.
type Service struct {
	cfg Config
	db  *store.DB
	log *slog.Logger
	now func() time.Time
	// downloads are the signed download URLs (Deps.URLs) of the exports.
	downloads *signedurl.Resource[store.Export]
	host      Host
	bucket    *backup.Store
	cache     *dumpcache.Cache
}

// New returns the area built with its collaborators.
func New(cfg Config, deps Deps) *Service {
	s := &Service{cfg: cfg, db: deps.DB, log: deps.Log, now: deps.Clock, host: deps.Host, bucket: deps.Bucket, cache: deps.Cache}
	s.downloads = &signedurl.Resource[store.Export]{Signer: deps.URLs, DB: deps.DB, Purpose: macPurpose, Path: "/v1/downloads/exports",
		Action: "download", Noun: "export", Refused: "not downloadable", Table: store.Exports,
		Project: func(e *store.Export) string { return e.ProjectID }}
	s.cache.AddSource(s.cachedPaths)
	return s
}

// RegisterJobs registers the area's job handler on the runner (the root's RegisterJobs calls it).
func (s *Service) RegisterJobs(r *scheduler.Runner) {
	r.Handle(JobCreate, s.failOnFinalError(s.createJob))
}

// failOnFinalError marks the export failed when its job fails for good: a transient error on the last
// attempt (a bucket still unreachable, a dump interrupted again) would otherwise leave it running
// forever. A shutdown is not a failure: the job runs again after the next start.
func (s *Service) failOnFinalError(h scheduler.Handler) scheduler.Handler {
	return func(ctx context.Context, run *scheduler.Run) (any, error) {
		res, err := h(ctx, run)
		if err == nil || ctx.Err() != nil || (scheduler.IsTransient(err) && run.Job.Attempts < run.Job.MaxAttempts) {
			return res, err
		}
		var in payload
		if derr := run.DecodePayload(&in); derr == nil && in.ExportID != "" {
			err = s.fail(in.ExportID, err)
		}
		return res, err
	}
}

// Dir is the directory of a project's exports in the backup store under dataDir.
func Dir(dataDir, projectID string) string {
	return filepath.Join(dataDir, "backups", projectID, "exports")
}
