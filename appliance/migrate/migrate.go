// Package migrate is the migration area: the checks of an outside PostgreSQL source (the source URL under
// the appliance's outbound policy, SourceURL; the import preflight that inspects the source and compares
// it with the project: Preflight for the endpoint, Check for the follow's start job) and the dump uploads
// an import restores (CreateUpload, ReceiveUpload, CreateImport; the import.restore job is the root's).
// The rest of the domain only through its Host interface.
package migrate

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/keyrate"
	"github.com/theappliance/appliance/appliance/outbound"
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
	RequireDumps() error
	// Enqueue queues a job that becomes the project's latest_job_id.
	Enqueue(tx *store.Tx, prj *store.Project, jobType, lock string, payload any) (*store.Job, error)
	// AnswerJob is the 202 answer (pokes the root's runner once the transaction committed).
	AnswerJob(job *store.Job, err error) (*api.JobResponse, error)
	// SignedURL and CheckSignedURL are the signed URLs (keyed by the root's secret box).
	SignedURL(purpose, path, id string, expires time.Time) string
	CheckSignedURL(purpose, what, id, expires, sig string) error
	// PrepareUploads makes the project's directory in the backup store (the data plane's) and returns the
	// instances' OS user, who must own the uploaded dumps.
	PrepareUploads(ctx context.Context, projectID string) (Owner, error)
}

// Owner is the OS user files are given to.
type Owner interface{ Chown(path string) error }

// Config is the area's settings.
type Config struct {
	// DataDir is the appliance's data directory (the uploads are in its backup store).
	DataDir string
}

// Deps are the area's collaborators.
type Deps struct {
	DB    *store.DB
	Log   *slog.Logger
	Clock func() time.Time
	// UploadLimit overrides the upload size limit when it returns a positive size (tests of 413).
	UploadLimit func() int64
	// Policy is the outbound policy every connection to a source goes through.
	Policy *outbound.Policy
	Host   Host
}

// Service is the migration area.
type Service struct {
	db          *store.DB
	log         *slog.Logger
	policy      *outbound.Policy
	host        Host
	preflights  *keyrate.Limiter // each project's import preflights (they connect out on the tenant's behalf)
	dataDir     string
	now         func() time.Time
	uploadLimit func() int64
	uploads     uploadGate
}

// New builds the area.
func New(cfg Config, d Deps) *Service {
	limit := d.UploadLimit
	if limit == nil {
		limit = func() int64 { return 0 }
	}
	return &Service{db: d.DB, log: d.Log, policy: d.Policy, host: d.Host,
		preflights: keyrate.New(time.Minute/PreflightsPerMinute, PreflightsPerMinute),
		dataDir:    cfg.DataDir, now: d.Clock, uploadLimit: limit}
}
