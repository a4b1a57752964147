// Package upgrades is the upgrades area: minor upgrades (a restart onto the installed binaries of the same
// major), major upgrades with pg_upgrade (preflight, upgrade into a new data directory, confirm,
// rollback) and the plain restart of a project's server and pooler, their endpoints and jobs.
//
// It reaches the rest of the domain only through Host (declared here, given by the root's areaHost), the
// instance engine through Engine (the root's appliance/instances manager), the kernel packages (apperr,
// authz), the records (store), the PostgreSQL processes (postgres, daemon) and the job runner (scheduler).
// It never imports `appliance`.
package upgrades

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Job types of upgrades.
const (
	JobMinor     = "project.upgrade_minor"
	JobPreflight = "project.upgrade_major_preflight"
	JobMajor     = "project.upgrade_major"
	JobConfirm   = "project.upgrade_major_confirm"
	JobRollback  = "project.upgrade_major_rollback"
	JobRestart   = "project.restart"
)

// DefaultPostgresRoot is where Debian installs PostgreSQL majors (/usr/lib/postgresql/<major>/bin).
const DefaultPostgresRoot = "/usr/lib/postgresql"

// Host is what the area takes from the rest of the domain: the records and rules every area shares, which
// the root package keeps (appliance/areas.go gives them).
type Host interface {
	// ActiveProject is a visible project that is also active with an instance (else 409).
	ActiveProject(tx *store.Tx, p *authz.Principal, projectID string) (*store.Project, error)
	// Enqueue adds a job of the project in tx and makes it the project's latest_job_id.
	Enqueue(tx *store.Tx, prj *store.Project, jobType, lock string, payload any) (*store.Job, error)
	// AnswerJob is a job-returning call's answer once its transaction committed (it pokes the runner).
	AnswerJob(job *store.Job, err error) (*api.JobResponse, error)
	// Audit writes an audit event of the caller in tx.
	Audit(tx *store.Tx, p *authz.Principal, action, orgID, projectID string, metadata any) error
	// ActiveTarget starts a project job: the data plane must exist, the payload is decoded, and the
	// project must be active with an instance.
	ActiveTarget(run *scheduler.Run, payload any) (*store.Project, *store.Instance, error)
	// LoadProject reads a project and its primary instance.
	LoadProject(id string) (*store.Project, *store.Instance, error)
	// UpdateProject applies fn to the stored project in one transaction.
	UpdateProject(id string, fn func(*store.Project) error) error
	// AdminConn is a superuser session in the project's database (the admin password is sealed with the
	// root's box).
	AdminConn(ctx context.Context, inst *store.Instance, db string) (*pgx.Conn, error)
	// SetRuntime records the project's runtime status (restarting, active): the status page and the
	// supervisor's callbacks read it, which are the root's.
	SetRuntime(projectID, status string)
	// InitOptions is what initdb of a new cluster for the project's instance record takes: its admin
	// password, its TLS certificate (the appliance CA) and its settings (the settings are the root's).
	InitOptions(prj *store.Project, rec *store.Instance) (postgres.InitOptions, error)
	// Settings are the project's server settings on an instance record (its WAL archive's commands
	// included: the backup store is the root's).
	Settings(prj *store.Project, rec *store.Instance) (postgres.Settings, error)
	// WALArchived reports whether a WAL segment is in the project's WAL archive walArchive.
	WALArchived(ctx context.Context, projectID, walArchive, segment string) (bool, error)
	// SwitchedCluster records in the project's timeline log (the backups area's) that the project moved to
	// another cluster (a cutover, a rollback): a point in time before sw.At is then read on the old
	// cluster, after it on the new one. With backup it also enqueues a base backup of the new cluster, the
	// start of its point-in-time window.
	SwitchedCluster(ctx context.Context, prj *store.Project, sw ClusterSwitch, backup bool) error
	// BackupCluster takes, within run, a base backup of a cluster of the project that is not its server yet
	// (rec: a logical upgrade's new cluster on its own port), recorded as the project's (the backups
	// area's): it opens the new cluster's point-in-time window before the cutover.
	BackupCluster(ctx context.Context, run *scheduler.Run, prj *store.Project, rec *store.Instance, label string) error
	// ForgetCluster removes the WAL archive walArchive of a cluster that never served the project (a
	// failed upgrade's new cluster) and its backups.
	ForgetCluster(ctx context.Context, prj *store.Project, walArchive string) error
}

// ClusterSwitch is a move of a project from one cluster to another: a cutover of a major upgrade by
// logical replication, or its rollback.
type ClusterSwitch struct {
	JobID                    string
	FromArchive, ToArchive   string // the clusters' WAL archives (store.Instance.WALArchive)
	FromTimeline, ToTimeline int
	At                       time.Time // writes paused: before it the old cluster took them, after it the new one
}

// Engine is what the area drives of the instance engine (appliance/instances): an instance record's
// processes, and the supervisor's watch of a project's server.
type Engine interface {
	Instance(rec *store.Instance) *postgres.Instance
	Watch(rec *store.Instance, prj *store.Project) error
	Unwatch(rec *store.Instance)
	// Restart restarts the server and its pooler, out of the supervisor's watch meanwhile.
	Restart(ctx context.Context, exec daemon.ExecFunc, inst *store.Instance, prj *store.Project, restarting func(bool)) error
	// Pooler is the PgBouncer of an instance record; SyncPoolerUsers writes its user list from the server
	// (conn: an admin session of it).
	Pooler(rec *store.Instance, prj *store.Project) *postgres.Pooler
	SyncPoolerUsers(ctx context.Context, conn *pgx.Conn, inst *store.Instance, prj *store.Project) error
}

// Plane is the data plane pieces the jobs need: the OS user pg_upgrade runs as.
type Plane struct {
	User *daemon.OSUser
}

// Opener opens sealed secrets (the root's SecretBox).
type Opener interface {
	Open(sealed []byte) ([]byte, error)
}

// Config is the deployment the area needs to know.
type Config struct {
	// PostgresRoot is where the distribution installs PostgreSQL majors, <root>/<major>/bin.
	PostgresRoot string
	// DistRoot holds the distributions the appliance unpacked itself (up --pg-dist), <root>/<major>/bin.
	DistRoot string
}

// Deps are the area's collaborators; New takes them all.
type Deps struct {
	DB    *store.DB
	Box   Opener
	Clock func() time.Time // UTC
	// Plane and Engine are nil in a process without a data plane (tests of the API alone): jobs fail.
	Plane  *Plane
	Engine Engine
	Host   Host
	// Step, when not nil, is called at the named steps of a logical upgrade (the root's job-step hook:
	// test builds stop the process there). The steps: upgrade-catching-up (the new cluster follows the old
	// one), upgrade-paused (writes paused, the old server fenced, the swap not begun), upgrade-swapped (the
	// record names the new server, not yet open to clients).
	Step func(ctx context.Context, jobID, step string)
}

// Service is the upgrades area.
type Service struct {
	cfg   Config
	db    *store.DB
	box   Opener
	now   func() time.Time
	plane *Plane
	eng   Engine
	host  Host
	// stepHook is Deps.Step.
	stepHook func(ctx context.Context, jobID, step string)
}

// New returns the area built with its collaborators.
func New(cfg Config, deps Deps) *Service {
	return &Service{cfg: cfg, db: deps.DB, box: deps.Box, now: deps.Clock, plane: deps.Plane, eng: deps.Engine, host: deps.Host, stepHook: deps.Step}
}

// dataPlane is the data plane, or the error of a process without one.
func (s *Service) dataPlane() (*Plane, error) {
	if s.plane == nil {
		return nil, errors.New("no data plane: PostgreSQL instances cannot run in this process")
	}
	return s.plane, nil
}

// RegisterJobs registers the area's job handlers on the runner (the root's RegisterJobs calls it).
func (s *Service) RegisterJobs(r *scheduler.Runner) {
	r.Handle(JobMinor, s.minorJob)
	r.Handle(JobPreflight, s.preflightJob)
	r.Handle(JobMajor, s.majorJob)
	r.Handle(JobConfirm, s.confirmJob)
	r.Handle(JobRollback, s.rollbackJob)
	r.Handle(JobRestart, s.restartJob)
}

// MajorsStatus is /status's line of the PostgreSQL majors installed, each with what it can do: the targets
// of major upgrades.
func (s *Service) MajorsStatus(context.Context) (string, string) {
	var have []string
	for _, b := range postgres.Majors(s.cfg.PostgresRoot, s.cfg.DistRoot) {
		have = append(have, fmt.Sprintf("%d: %s (%s)", b.Major, b.Dir, b.Abilities()))
	}
	if len(have) == 0 {
		return api.StatusDegraded, "no PostgreSQL installation found under " + s.cfg.PostgresRoot + " nor " + s.cfg.DistRoot
	}
	return api.StatusOperational, strings.Join(have, "; ")
}
