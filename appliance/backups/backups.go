// Package backups is the backups area: a project's base backups (list, take: the backup.create job), its
// backup schedule and the retention that the periodic scheduled-backups task applies, its named restore
// points, and restoring it (to a backup, a time or a restore point: the backup.restore job, which drives
// the instance engine's Restore and records the new timeline).
//
// The backup store itself (where base backups and WAL live, the WAL socket, the archive the engine reads)
// is the data plane's and stays in the root: the area reaches it through Host (BackupStore, Archive). The
// area keeps its records (load → engine → settle, audit, enqueue), reaches the instance engine through
// Engine, the rest of the domain only through Host (declared here, given by the root's areaHost), the
// kernel packages (apperr, authz, ids), the records (store) and the job runner (scheduler). It never
// imports `appliance`.
package backups

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Backup states (state) and verification states (verification_state); see docs/api-decisions.md.
const (
	StatePending   = api.BackupPending
	StateRunning   = api.BackupRunning
	StateCompleted = api.BackupCompleted
	StateFailed    = api.BackupFailed

	VerificationPending  = api.VerificationPending
	VerificationVerified = api.VerificationVerified
	VerificationFailed   = api.VerificationFailed
)

// JobCreate takes a base backup; JobRestore restores a project from its backup store.
const (
	JobCreate  = "backup.create"
	JobRestore = api.JobBackupRestore
)

// Host is what the area takes from the rest of the domain: the records and rules every area shares, which
// the root package keeps (appliance/areas.go gives them).
type Host interface {
	// VisibleProject is a project the caller may see: one visibility rule for every area.
	VisibleProject(tx *store.Tx, p *authz.Principal, projectID string) (*store.Project, error)
	// ActiveProject is a visible project that is also active with an instance (else 409).
	ActiveProject(tx *store.Tx, p *authz.Principal, projectID string) (*store.Project, error)
	// ActiveInstance reads the caller's active project and its instance (one "active" rule).
	ActiveInstance(p *authz.Principal, projectID string) (*store.Project, *store.Instance, error)
	// ActiveTarget starts a project job: the data plane (an error without one), the payload, the active
	// project and its instance.
	ActiveTarget(run *scheduler.Run, payload any) (*store.Project, *store.Instance, error)
	// Audit writes an audit event of the caller in tx.
	Audit(tx *store.Tx, p *authz.Principal, action, orgID, projectID string, metadata any) error
	// Enqueue enqueues a job of the project in tx (it becomes the project's latest_job_id).
	Enqueue(tx *store.Tx, prj *store.Project, jobType, lock string, payload any) (*store.Job, error)
	// AnswerJob is a job-returning call's answer once its transaction committed (it pokes the runner).
	AnswerJob(job *store.Job, err error) (*api.JobResponse, error)
	// Notify pokes the root's job runner once jobs enqueued in a transaction are committed.
	Notify()
	// CheckDisplayText applies the rules of every display field.
	CheckDisplayText(field, v string, min, max int) error
	// RequireBackups is a 503 when the installed PostgreSQL lacks the backup programs (the data plane's
	// programs are the root's).
	RequireBackups() error
	// RequireDisk is the 507 while the data directory's disk is low (the storage guard is the root's).
	RequireDisk() error
	// AdminConn is a superuser session in the project's database (the admin password is sealed with the
	// root's box).
	AdminConn(ctx context.Context, inst *store.Instance, db string) (*pgx.Conn, error)
	// BackupStore is the data plane's backup store (a bucket, or the local directory): the root's.
	BackupStore() *backup.Store
	// BackupStorage is where the project's backups live and its WAL archiving as last sampled (the backup
	// store and the observability sampler are the root's).
	BackupStorage(projectID string) *api.BackupStorage
	// Archive is the instance engine's view of the project's backup store (its WAL archive and the base
	// backup key): the backup store is the root's.
	Archive(ctx context.Context, projectID, backupKey string) (instances.Archive, error)
	// Credential is the project's current credential (opened with the root's box).
	Credential(prj *store.Project) (instances.Credential, error)
	// Settings are the project's server settings on its instance (the settings are the root's).
	Settings(prj *store.Project, inst *store.Instance) (postgres.Settings, error)
	// Restarting tells the project's runtime status as the engine stops (restarting) and starts again
	// (active) its server (the runtime status is the root's).
	Restarting(projectID string) func(bool)
}

// Engine is what the area drives of the instance engine (appliance/instances): an instance's programs
// and connections, and its restore.
type Engine interface {
	Instance(rec *store.Instance) *postgres.Instance
	Restore(ctx context.Context, exec daemon.ExecFunc, spec instances.RestoreSpec) (instances.Restored, error)
	FinishRestore(inst *store.Instance, jobID string)
}

// Plane is the data plane pieces the jobs need: the OS user pg_basebackup and pg_verifybackup run as.
type Plane struct {
	User *daemon.OSUser
	// Reflink: the data directory has reflinks (postgres.ReflinkSupport): a base backup into the local
	// backup store is an online copy by reflink (onlineBackup) rather than pg_basebackup.
	Reflink bool
	// Tools is the default PostgreSQL installation, with the client tools: its pg_verifybackup checks the
	// backups of a server whose own installation has none (onlineBackup's manifest, without parsing WAL
	// of another major).
	Tools postgres.Binaries
}

// Opener opens sealed secrets (the root's SecretBox).
type Opener interface {
	Open(sealed []byte) ([]byte, error)
}

// Config is the area's settings.
type Config struct {
	// RetentionDays is the operator's default backup retention (0: DefaultRetentionDays).
	RetentionDays int
	// FirstBackups, set when the backup store is off the machine (a bucket), makes RunScheduled take a
	// base backup of every active project that has none: a project is rebuilt after the machine's loss
	// from its newest base backup and the WAL after it, so one that was never backed up would be lost.
	FirstBackups bool
}

// Deps are the area's collaborators; New takes them all.
type Deps struct {
	DB    *store.DB
	Box   Opener
	Log   *slog.Logger
	Clock func() time.Time // UTC
	// Engine and Plane are nil in a process without a data plane (tests of the API alone): the jobs fail.
	Engine Engine
	Plane  *Plane
	Host   Host
}

// Service is the backups area.
type Service struct {
	cfg   Config
	db    *store.DB
	box   Opener
	log   *slog.Logger
	now   func() time.Time
	eng   Engine
	plane *Plane
	host  Host
}

// New builds the area.
func New(cfg Config, deps Deps) *Service {
	return &Service{cfg: cfg, db: deps.DB, box: deps.Box, log: deps.Log, now: deps.Clock, eng: deps.Engine,
		plane: deps.Plane, host: deps.Host}
}

// RegisterJobs registers the area's job handlers.
func (s *Service) RegisterJobs(r *scheduler.Runner) {
	r.Handle(JobCreate, s.createBackupJob)
	r.Handle(JobRestore, s.restoreJob)
}

func backupView(b *store.Backup) *api.Backup {
	return &api.Backup{ID: b.ID, BackupKey: b.BackupKey, DatabaseName: b.DatabaseName, Label: b.Label, ProjectID: b.ProjectID,
		State: b.State, VerificationState: b.VerificationState, VerificationError: b.VerificationError,
		SizeBytes: b.SizeBytes, CreatedAt: b.CreatedAt, VerifiedAt: b.VerifiedAt, PostgresMajor: b.Major}
}

// Newest is, in tx, the project's newest backup, whatever its state (nil when it has none).
func Newest(tx *store.Tx, projectID string) (*api.Backup, error) {
	bs, err := store.Backups.Lookup(tx, store.BackupsByProject, projectID, store.Query{Newest: true, Limit: 1})
	if err != nil || len(bs) == 0 {
		return nil, err
	}
	return backupView(bs[0]), nil
}

type backupPayload struct {
	BackupID string `json:"backup_id"`
}

// visibleRecords is a project the caller may see and its records of table (newest first); what names them
// in an error.
func visibleRecords[T any](s *Service, tx *store.Tx, p *authz.Principal, projectID, what string, table *store.Table[T], ix *store.Index[T]) (*store.Project, []*T, error) {
	prj, err := s.host.VisibleProject(tx, p, projectID)
	if err != nil {
		return nil, nil, err
	}
	recs, err := table.Lookup(tx, ix, prj.ID, store.Query{Newest: true})
	if err != nil {
		return nil, nil, apperr.Internal(err, "list %s", what)
	}
	return prj, recs, nil
}

// List lists a project's backups, newest first, and where they live (Host.BackupStorage).
func (s *Service) List(ctx context.Context, p *authz.Principal, projectID string) (*api.BackupList, error) {
	out := &api.BackupList{Backups: []*api.Backup{}}
	err := s.db.View(func(tx *store.Tx) error {
		_, bs, err := visibleRecords(s, tx, p, projectID, "backups", store.Backups, store.BackupsByProject)
		if err != nil {
			return err
		}
		for _, b := range bs {
			out.Backups = append(out.Backups, backupView(b))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out.Storage = s.host.BackupStorage(projectID)
	return out, nil
}

// Create records a backup and enqueues the backup.create job that takes it.
func (s *Service) Create(ctx context.Context, p *authz.Principal, projectID string, req *api.CreateBackupRequest) (*api.JobResponse, error) {
	label := strings.TrimSpace(req.Label)
	if err := s.host.CheckDisplayText("label", label, 0, 100); err != nil {
		return nil, err
	}
	var job *store.Job
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := s.host.ActiveProject(tx, p, projectID)
		if err != nil {
			return err
		}
		if err := s.host.RequireBackups(); err != nil {
			return err
		}
		b, j, err := s.NewBackup(tx, prj, label)
		if err != nil {
			return err
		}
		if err := s.host.Audit(tx, p, JobCreate, prj.OrganizationID, prj.ID,
			map[string]any{"backup_id": b.ID, "backup_key": b.BackupKey, "job_id": j.ID}); err != nil {
			return apperr.Internal(err, "audit")
		}
		job = j
		return nil
	})
	return s.host.AnswerJob(job, err)
}

// NewBackup records a pending backup of prj and enqueues the backup.create job that takes it, inside tx.
func (s *Service) NewBackup(tx *store.Tx, prj *store.Project, label string) (*store.Backup, *store.Job, error) {
	now := s.now()
	id := ids.New("bkp")
	b := &store.Backup{ID: id, ProjectID: prj.ID, OrganizationID: prj.OrganizationID, DatabaseName: prj.DatabaseName,
		BackupKey: now.Format("20060102T150405Z") + "-" + id[len(id)-6:], Label: label,
		State: StatePending, VerificationState: VerificationPending, CreatedAt: now}
	j, err := s.host.Enqueue(tx, prj, JobCreate, prj.ID, backupPayload{BackupID: b.ID})
	if err != nil {
		return nil, nil, err
	}
	b.JobID = j.ID
	if err := store.Backups.Put(tx, b); err != nil {
		return nil, nil, apperr.Internal(err, "store backup")
	}
	return b, j, nil
}

// updateBackup applies fn to the stored backup in one transaction.
func (s *Service) updateBackup(id string, fn func(*store.Backup)) error {
	return s.db.Update(func(tx *store.Tx) error {
		b, err := store.Backups.Get(tx, id)
		if err != nil {
			return err
		}
		fn(b)
		return store.Backups.Put(tx, b)
	})
}

// createBackupJob takes a plain-format base backup with pg_basebackup (-X stream: the backup carries the
// WAL it needs, so it restores on its own) into the backup store's stage, verifies it with pg_verifybackup,
// stores it (its files, then its manifest) and records its size and verification.
func (s *Service) createBackupJob(ctx context.Context, run *scheduler.Run) (any, error) {
	steps := instances.NewTimer()
	var in backupPayload
	prj, inst, err := s.host.ActiveTarget(run, &in)
	if err != nil {
		return nil, s.failBackup(in.BackupID, err)
	}
	var b *store.Backup
	if err := s.db.View(func(tx *store.Tx) (err error) { b, err = store.Backups.Get(tx, in.BackupID); return err }); err != nil {
		return nil, fmt.Errorf("backup %s: %w", in.BackupID, err)
	}
	if b.State == StateCompleted || b.State == StateFailed {
		return map[string]any{"skipped": "backup is " + b.State}, nil
	}
	return s.take(ctx, run, steps, prj, inst, b)
}

// BackupOf takes, within run (another area's job), a base backup of a cluster of prj that inst describes
// (its port, directory, major and WAL archive) though it is not the project's server yet: a logical major
// upgrade's new cluster, before its cutover, so that the new cluster's point-in-time window opens before
// the project moves to it. The backup is recorded as the project's, of that cluster (job: run's).
func (s *Service) BackupOf(ctx context.Context, run *scheduler.Run, prj *store.Project, inst *store.Instance, label string) (*store.Backup, error) {
	if s.plane == nil || s.eng == nil {
		return nil, errors.New("no data plane: PostgreSQL instances cannot run in this process")
	}
	now := s.now()
	id := ids.New("bkp")
	b := &store.Backup{ID: id, ProjectID: prj.ID, OrganizationID: prj.OrganizationID, DatabaseName: prj.DatabaseName,
		BackupKey: now.Format("20060102T150405Z") + "-" + id[len(id)-6:], Label: label, JobID: run.Job.ID,
		State: StatePending, VerificationState: VerificationPending, CreatedAt: now}
	if err := s.db.Update(func(tx *store.Tx) error { return store.Backups.Put(tx, b) }); err != nil {
		return nil, err
	}
	if _, err := s.take(ctx, run, instances.NewTimer(), prj, inst, b); err != nil {
		return b, err
	}
	err := s.db.View(func(tx *store.Tx) (err error) { b, err = store.Backups.Get(tx, id); return err })
	return b, err
}

// ForgetCluster removes what the backup store holds of a cluster of the project that never served it (a
// failed logical upgrade's new cluster): its WAL archive walArchive, and its backups (files and records).
// It refuses an archive the project's server or its kept previous server writes.
func (s *Service) ForgetCluster(ctx context.Context, projectID, walArchive string) error {
	if walArchive == "" {
		return errors.New("forget a cluster: the project's first archive is never forgotten")
	}
	var bks []*store.Backup
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := store.Projects.Get(tx, projectID)
		if err != nil {
			return err
		}
		if prj.PrimaryInstanceID != "" {
			inst, err := store.Instances.Get(tx, prj.PrimaryInstanceID)
			if err != nil {
				return err
			}
			if inst.WALArchive == walArchive || (inst.PreviousDir != "" && inst.PreviousWALArchive == walArchive) {
				return fmt.Errorf("forget a cluster: the project's server archives into %s", walArchive)
			}
		}
		all, err := store.Backups.Lookup(tx, store.BackupsByProject, projectID, store.Query{})
		for _, b := range all {
			if b.WALArchive == walArchive {
				bks = append(bks, b)
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	bs := s.host.BackupStore()
	for _, b := range bks {
		if err := bs.RemoveBackup(ctx, projectID, b.BackupKey); err != nil {
			return err
		}
		if err := s.db.Update(func(tx *store.Tx) error { return store.Backups.Delete(tx, b.ID) }); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	_, err = bs.RemoveWAL(ctx, projectID, walArchive)
	return err
}

// take takes the base backup b of inst's server (the project's, or BackupOf's cluster).
func (s *Service) take(ctx context.Context, run *scheduler.Run, steps *instances.Timer, prj *store.Project, inst *store.Instance, b *store.Backup) (any, error) {
	user := s.plane.User
	bs := s.host.BackupStore()
	if err := bs.Prepare(ctx, prj.ID); err != nil {
		return nil, scheduler.Transient(err)
	}
	// A retry after a crash starts over: what an earlier attempt stored or staged goes.
	if err := bs.RemoveBackup(ctx, prj.ID, b.BackupKey); err != nil {
		return nil, scheduler.Transient(err)
	}
	if err := s.updateBackup(b.ID, func(b *store.Backup) { b.State = StateRunning }); err != nil {
		return nil, err
	}
	adminPW, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return nil, s.failBackup(b.ID, fmt.Errorf("open admin password: %w", err))
	}
	pgi := s.eng.Instance(inst)
	// Just after the appliance starts, the supervisor may still be bringing the server up: a backup waits
	// for it (a retry) instead of failing.
	ping, err := pgi.Admin(ctx, string(adminPW))
	if err != nil {
		return nil, scheduler.Transient(fmt.Errorf("the project's server does not accept connections yet: %w", err))
	}
	ping.Close(context.WithoutCancel(ctx))
	// The backup is of the server's cluster: its major, its installation, its WAL archive.
	if err := s.updateBackup(b.ID, func(b *store.Backup) { b.Major, b.BinDir, b.WALArchive = inst.Major, inst.BinDir, inst.WALArchive }); err != nil {
		return nil, err
	}
	b.Major, b.BinDir, b.WALArchive = inst.Major, inst.BinDir, inst.WALArchive
	// A server whose installation has no client tools (a server-only distribution of another major, after
	// a major upgrade by logical replication) is copied online, and its copy checked by the default
	// installation's pg_verifybackup without parsing its WAL (another major's).
	basebackup, bbErr := pgi.Bin.Path("pg_basebackup")
	verify, err := pgi.Bin.Path("pg_verifybackup")
	var verifyArgs []string
	if err != nil && bbErr != nil {
		if verify, err = s.plane.Tools.Path("pg_verifybackup"); err == nil {
			verifyArgs = []string{"--no-parse-wal"}
		}
	}
	if err != nil {
		return nil, s.failBackup(b.ID, err)
	}
	dir, err := bs.StageBackup(ctx, prj.ID, b.BackupKey)
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	label := "appliance " + b.BackupKey
	// A fenced server (BackupOf's) is copied online too: its copy gets the usual pg_hba.conf (onlineBackup).
	if reflink := s.plane.Reflink && bs.IsLocal(); reflink || bbErr != nil || pgi.Fenced() {
		st, err := s.onlineBackup(ctx, inst, string(adminPW), dir, label, reflink)
		if err != nil {
			_ = bs.RemoveBackup(context.WithoutCancel(ctx), prj.ID, b.BackupKey)
			if ctx.Err() != nil {
				return nil, err
			}
			return nil, s.failBackup(b.ID, err)
		}
		steps.Part("copy", st.Copy+st.Start+st.Stop+st.WAL)
		steps.Part("sync", st.Sync)
		steps.Done("basebackup")
		return s.finishBackup(ctx, run, steps, prj, b, bs, dir, "online_copy", verify, verifyArgs...)
	}
	cmd := user.Command(basebackup, "-D", dir, "-F", "p", "-X", "stream", "--checkpoint=fast", "--no-password",
		"--label", label, "-h", "127.0.0.1", "-p", strconv.Itoa(inst.Port), "-U", postgres.AdminRole)
	cmd.Env = append(cmd.Env, "PGPASSWORD="+string(adminPW), "PGSSLMODE=disable", "PGCONNECT_TIMEOUT=10")
	steps.Done("prepare")
	if err := run.Exec(ctx, cmd); err != nil {
		_ = bs.RemoveBackup(context.WithoutCancel(ctx), prj.ID, b.BackupKey)
		if ctx.Err() != nil {
			return nil, err // the runner stops: a later attempt starts over
		}
		return nil, s.failBackup(b.ID, err)
	}
	steps.Done("basebackup")
	return s.finishBackup(ctx, run, steps, prj, b, bs, dir, "pg_basebackup", verify)
}

// finishBackup verifies the base backup staged in dir (pg_verifybackup verify with verifyArgs), stores it
// and records it; method says how it was taken (pg_basebackup, online_copy) and goes into the result, with
// the pg_verifybackup that checked it.
func (s *Service) finishBackup(ctx context.Context, run *scheduler.Run, steps *instances.Timer, prj *store.Project, b *store.Backup,
	bs *backup.Store, dir, method, verify string, verifyArgs ...string) (any, error) {
	user := s.plane.User
	// pg_verifybackup reads a plain-format directory (PostgreSQL 15's): the staged one, before it is stored.
	vstate, verr := VerificationVerified, ""
	if err := run.Exec(ctx, user.Command(verify, append(verifyArgs, dir)...)); err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		vstate, verr = VerificationFailed, err.Error()
	}
	steps.Done("verify")
	endLSN, _, err := postgres.ManifestEnd(dir)
	if err != nil {
		s.log.Warn("backup: no WAL end in its manifest (a suspended project's schedule will not skip after it)", "backup", b.ID, "err", err)
	}
	now := s.now()
	m, err := bs.CommitBackup(ctx, prj.ID, b.BackupKey, dir, now)
	if err != nil {
		_ = bs.RemoveBackup(context.WithoutCancel(ctx), prj.ID, b.BackupKey)
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, s.failBackup(b.ID, fmt.Errorf("store the base backup: %w", err))
	}
	size := m.SizeBytes
	steps.Done("store")
	if err := s.updateBackup(b.ID, func(b *store.Backup) {
		b.State, b.SizeBytes, b.Timeline, b.CompletedAt, b.EndLSN = StateCompleted, size, m.Timeline, &now, endLSN
	}); err != nil {
		return nil, err
	}
	steps.Done("record")
	verified := s.now()
	if err := s.updateBackup(b.ID, func(b *store.Backup) {
		b.VerificationState, b.VerificationError, b.VerifiedAt = vstate, verr, &verified
	}); err != nil {
		return nil, err
	}
	steps.Done("finish")
	return map[string]any{"backup_id": b.ID, "backup_key": b.BackupKey, "size_bytes": size, "verification_state": vstate,
		"major": b.Major, "method": method, "verified_with": verify, "verify_args": verifyArgs, "timings_ms": steps.MS}, nil
}

// failBackup marks a backup failed with err, and returns err for the job.
func (s *Service) failBackup(id string, err error) error {
	if id == "" {
		return err
	}
	uerr := s.updateBackup(id, func(b *store.Backup) {
		b.State, b.Error = StateFailed, err.Error()
		b.VerificationState, b.VerificationError = VerificationFailed, "no backup to verify: "+err.Error()
	})
	if uerr != nil && !errors.Is(uerr, store.ErrNotFound) {
		s.log.Error("mark backup failed", "backup", id, "err", uerr)
	}
	return err
}
