package appliance

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/backups"
	"github.com/theappliance/appliance/appliance/databases"
	"github.com/theappliance/appliance/appliance/exports"
	"github.com/theappliance/appliance/appliance/extensions"
	"github.com/theappliance/appliance/appliance/identity"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/appliance/kv"
	"github.com/theappliance/appliance/appliance/migrate"
	"github.com/theappliance/appliance/appliance/nodeloss"
	"github.com/theappliance/appliance/appliance/observe"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/previews"
	"github.com/theappliance/appliance/appliance/referrals"
	"github.com/theappliance/appliance/appliance/scaletozero"
	"github.com/theappliance/appliance/appliance/storageguard"
	"github.com/theappliance/appliance/appliance/studio"
	"github.com/theappliance/appliance/appliance/tenancy"
	"github.com/theappliance/appliance/appliance/upgrades"
	"github.com/theappliance/appliance/appliance/webhook"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// areaHost is the root's side of the API areas that live in packages of their own (appliance/kv,
// appliance/observe, appliance/studio, appliance/webhook): the records and rules they share with the rest
// of the domain, which each area declares as its Host. It is a type of its own rather than methods of
// Service so that what the areas need is not part of the service's API (httpapi cannot call it).
type areaHost struct{ s *Service }

var _ kv.Host = areaHost{}
var _ webhook.Host = areaHost{}

var _ studio.Host = areaHost{}

func (h areaHost) VisibleProject(tx *store.Tx, p *Principal, projectID string) (*store.Project, error) {
	return h.s.visibleProject(tx, p, projectID)
}

func (h areaHost) ActiveProject(tx *store.Tx, p *Principal, projectID string) (*store.Project, error) {
	return h.s.visibleActiveProject(tx, p, projectID)
}

func (h areaHost) Enqueue(tx *store.Tx, prj *store.Project, jobType, lock string, payload any) (*store.Job, error) {
	return h.s.enqueue(tx, prj, jobType, lock, payload)
}

func (h areaHost) AnswerJob(job *store.Job, err error) (*JobResponse, error) {
	return h.s.answerJob(job, err)
}

func (h areaHost) Audit(tx *store.Tx, p *Principal, action, orgID, projectID string, metadata any) error {
	return h.s.audit(tx, p, action, orgID, projectID, metadata)
}

func (h areaHost) RevokeKVToken(hash string) error { return h.s.recordRevocation(revokedKVToken, hash) }

// PlanKVMemoryMB is the plan's store size, the default plan's when the plan gives none.
func (h areaHost) PlanKVMemoryMB(name string) int {
	plan, _ := h.s.PlanByName(name)
	if plan.KVMemoryMB <= 0 {
		plan = h.s.planOrDefault(DefaultPlan)
	}
	return plan.KVMemoryMB
}

var _ observe.Host = areaHost{}

// NewestBackup is the project's newest backup (the backups area's records).
func (h areaHost) NewestBackup(tx *store.Tx, projectID string) (*api.Backup, error) {
	return backups.Newest(tx, projectID)
}

func (h areaHost) ActiveInstance(p *Principal, projectID string) (*store.Project, *store.Instance, error) {
	return h.s.activeProject(p, projectID)
}

func (h areaHost) QuietAdminConn(ctx context.Context, inst *store.Instance, db string) (*pgx.Conn, error) {
	return h.s.quietAdminConn(ctx, inst, db)
}

// WithTenantSession takes a session of the studio's pool for the project, under the studio's timeout.
func (h areaHost) WithTenantSession(ctx context.Context, p *Principal, prj *store.Project, fn func(context.Context, *pgx.Conn) error) error {
	_, tenant, err := h.s.studio.Session(ctx, p, prj.ID)
	if err != nil {
		return err
	}
	defer tenant.Release()
	qctx, cancel := h.s.studio.QueryContext(ctx, prj)
	defer cancel()
	return fn(qctx, tenant.Conn())
}

// AppendEvent appends an event to the log in tx (appliance/eventlog); its webhook deliveries are queued
// there too (the webhooks area's FanOut).
func (h areaHost) AppendEvent(tx *store.Tx, typ, orgID, projectID string, data any) error {
	return h.s.events.Append(tx, typ, orgID, projectID, data)
}

// Plan is the plan's server sizes (zero for a plan the table does not have).
func (h areaHost) Plan(name string) observe.Plan {
	plan, _ := h.s.PlanByName(name)
	return observe.Plan{MemoryBytes: plan.MemoryBytes, CPUCores: plan.CPUCores}
}

// ProjectTarget reads the project's studio target, from the cache when no write to the projects or
// instances table committed since (projectVersion), and checks that the caller may see the project.
func (h areaHost) ProjectTarget(p *Principal, projectID string) (*studio.ProjectTarget, error) {
	s := h.s
	version := s.projectVersion()
	t, ok := s.studioTargets.Get(projectID, version)
	if !ok {
		t = &studio.ProjectTarget{}
		err := s.db.View(func(tx *store.Tx) error {
			prj, err := store.Projects.Get(tx, projectID)
			if err != nil {
				return notFoundAs(err, "project %s not found", projectID)
			}
			t.Project = prj
			if prj.State != ProjectActive || prj.PrimaryInstanceID == "" {
				return nil
			}
			inst, err := store.Instances.Get(tx, prj.PrimaryInstanceID)
			if err != nil {
				t.Err = Internal(err, "read the project's instance")
				return nil
			}
			t.Port = inst.Port
			pw, err := s.box.Open(prj.Credential.Password)
			if err != nil {
				t.Err = Internal(err, "open the project's credential")
				return nil
			}
			t.Password = string(pw)
			return nil
		})
		if err != nil {
			return nil, err
		}
		if t.Err == nil {
			s.studioTargets.Put(projectID, version, t)
		}
	}
	if err := projectVisible(p, t.Project); err != nil {
		return nil, err
	}
	return t, nil
}

// StatementTimeout is the project's statement_timeout as its settings read it (0: none, or unreadable).
func (h areaHost) StatementTimeout(prj *store.Project) time.Duration {
	d, err := parsePGDuration(prj.StatementTimeout)
	if err != nil {
		return 0
	}
	return d
}

// PlanAIUsesPerMonth is the plan's monthly AI uses.
func (h areaHost) PlanAIUsesPerMonth(name string) int {
	plan, _ := h.s.PlanByName(name)
	return plan.AIUsesPerMonth
}

// CheckDisplayText applies the rules of every display field.
func (h areaHost) CheckDisplayText(field, v string, min, max int) error {
	return checkDisplayText(field, v, min, max)
}

// CountWebhookAttempt counts a delivery attempt for /metrics.
func (h areaHost) CountWebhookAttempt(ok bool, d time.Duration) { h.s.webhookAttemptMetric(ok, d) }

var _ extensions.Host = areaHost{}

var _ migrate.Host = areaHost{}

// AdminConn is a superuser session in the project's database (the admin password is sealed with the
// root's box): the extensions' statements, the import preflight's target.
func (h areaHost) AdminConn(ctx context.Context, inst *store.Instance, db string) (*pgx.Conn, error) {
	return h.s.adminConn(ctx, inst, db)
}

// ActiveTarget starts a project job: the data plane, the payload, the active project and its instance.
func (h areaHost) ActiveTarget(run *scheduler.Run, payload any) (*store.Project, *store.Instance, error) {
	_, prj, inst, err := h.s.activeTarget(run, payload)
	return prj, inst, err
}

// UpdateProject applies fn to the stored project in one transaction.
func (h areaHost) UpdateProject(id string, fn func(*store.Project) error) error {
	return h.s.updateProject(id, fn)
}

// LoadProject reads a project and its primary instance (nil when it has none yet).
func (h areaHost) LoadProject(id string) (*store.Project, *store.Instance, error) {
	return h.s.loadProject(id)
}

// ApplySettings writes the project's server settings and applies them through the instance engine.
func (h areaHost) ApplySettings(ctx context.Context, run *scheduler.Run, prj *store.Project, inst *store.Instance) (postgres.Action, error) {
	dp, err := h.s.dataPlane()
	if err != nil {
		return 0, err
	}
	return h.s.writeSettingsAndApply(ctx, run, dp, prj, inst)
}

var _ exports.Host = areaHost{}

// RequireDumps is a 503 when the installed PostgreSQL lacks pg_dump or pg_restore (FeatureDumps), and a
// 409 when the installation the project's server runs from lacks them (a server-only distribution of
// another major, after a major upgrade by logical replication: dumps need the server's major's tools).
func (h areaHost) RequireDumps(tx *store.Tx, prj *store.Project) error {
	if err := h.s.requireFeature(FeatureDumps); err != nil {
		return err
	}
	if h.s.dp == nil || prj.PrimaryInstanceID == "" {
		return nil
	}
	inst, err := store.Instances.Get(tx, prj.PrimaryInstanceID)
	if err != nil {
		return Internal(err, "read the project's instance")
	}
	bin := h.s.eng.Instance(inst).Bin
	for _, prog := range []string{"pg_dump", "pg_restore"} {
		if _, err := bin.Path(prog); err != nil {
			return Conflict("the project runs PostgreSQL %d from %s, which has no %s: dumps of PostgreSQL %d need its client tools (%s); roll the upgrade back or restore to a time before it to dump the project on its old major",
				inst.Major, bin.Dir, prog, inst.Major, postgres.PackageOf(prog, inst.Major))
		}
	}
	return nil
}

// PrepareDumpDir makes the project's directory of dumps (its exports, a cutover's copy of a preview),
// owned by the instances' OS user, and returns it. Its errors are transient.
func (h areaHost) PrepareDumpDir(ctx context.Context, projectID string) (string, error) {
	dp, err := h.s.dataPlane()
	if err != nil {
		return "", err
	}
	if err := h.s.localBackups(dp).Prepare(ctx, projectID); err != nil {
		return "", scheduler.Transient(err)
	}
	dir := exports.Dir(h.s.cfg.DataDir, projectID)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", scheduler.Transient(err)
	}
	if err := dp.User.Chown(dir); err != nil {
		return "", scheduler.Transient(err)
	}
	return dir, nil
}

// DumpDatabase writes a custom-format dump (pg_dump -Fc, as the admin) of the instance's database to path,
// replacing any file there; a failed dump leaves no file. The dump is the whole database: only the
// instances' OS user reads it (pg_dump keeps the mode of the file it truncates, so it is created first,
// 0600). Errors about the file are transient.
func (h areaHost) DumpDatabase(ctx context.Context, run *scheduler.Run, inst *store.Instance, database, path string) error {
	dp, err := h.s.dataPlane()
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return scheduler.Transient(err)
	}
	if f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); err != nil {
		return scheduler.Transient(err)
	} else if err := f.Close(); err != nil {
		return scheduler.Transient(err)
	}
	if err := dp.User.Chown(path); err != nil {
		return scheduler.Transient(err)
	}
	adminPW, err := h.s.box.Open(inst.AdminPassword)
	if err != nil {
		return fmt.Errorf("open admin password: %w", err)
	}
	pgdump, err := h.s.eng.Instance(inst).Bin.Path("pg_dump")
	if err != nil {
		return err
	}
	cmd := dp.User.Command(pgdump, "-Fc", "--no-password", "-h", "127.0.0.1", "-p", strconv.Itoa(inst.Port),
		"-U", postgres.AdminRole, "-d", database, "-f", path)
	// role=none: the session's own role whatever the database's defaults say (postgres.Instance.Connect).
	cmd.Env = append(cmd.Env, "PGPASSWORD="+string(adminPW), "PGSSLMODE=disable", "PGCONNECT_TIMEOUT=10", "PGOPTIONS=-c role=none")
	if err := run.Exec(ctx, cmd); err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
}

var _ upgrades.Host = areaHost{}

// SetRuntime records the project's runtime status (setRuntime).
func (h areaHost) SetRuntime(projectID, status string) { h.s.setRuntime(projectID, status) }

// InitOptions is initdb's options for a new cluster of the project's instance record: the admin password
// opened with the root's box, the project's settings, a certificate of the appliance CA, in that order.
func (h areaHost) InitOptions(prj *store.Project, rec *store.Instance) (postgres.InitOptions, error) {
	dp, err := h.s.dataPlane()
	if err != nil {
		return postgres.InitOptions{}, err
	}
	adminPW, err := h.s.box.Open(rec.AdminPassword)
	if err != nil {
		return postgres.InitOptions{}, err
	}
	settings, err := h.s.settingsFor(dp, prj, rec)
	if err != nil {
		return postgres.InitOptions{}, err
	}
	certPEM, keyPEM, caPEM, err := dp.CA.InstanceTLS(h.s.certHosts()...)
	if err != nil {
		return postgres.InitOptions{}, err
	}
	return postgres.InitOptions{AdminPassword: string(adminPW), CertPEM: certPEM, KeyPEM: keyPEM, CAPEM: caPEM, Settings: settings}, nil
}

// OffersExtension is the extensions rule (the network extensions are the root's setting).
func (h areaHost) OffersExtension(name string) bool { return h.s.extensions.Offers(name) }

// PlacePreview sets a new preview's node in a cluster (placement.go's PlacePreview).
func (h areaHost) PlacePreview(tx *store.Tx, parent, prv *store.Project) error {
	return h.s.placePreview(tx, parent, prv)
}

// PlanStorageLimitBytes is the plan's storage limit (0 for a plan the table does not have).
func (h areaHost) PlanStorageLimitBytes(name string) int64 {
	if pl, ok := h.s.PlanByName(name); ok {
		return pl.StorageLimitBytes
	}
	return 0
}

// PrepareUploads makes the project's directory in the data plane's backup store; the uploads belong to
// the instances' OS user.
func (h areaHost) PrepareUploads(ctx context.Context, projectID string) (migrate.Owner, error) {
	dp, err := h.s.dataPlane()
	if err != nil {
		return nil, err
	}
	if err := h.s.localBackups(dp).Prepare(ctx, projectID); err != nil {
		return nil, Internal(err, "prepare backup store")
	}
	return dp.User, nil
}

var _ identity.Host = areaHost{}

// RecordKeyRevocation appends a revoked API key's hash to the revocation record (revocations.go).
func (h areaHost) RecordKeyRevocation(hash string) error {
	return h.s.recordRevocation(revokedAPIKey, hash)
}

// RecordSessionRevocation appends a revoked session's token hash to the revocation record.
func (h areaHost) RecordSessionRevocation(hash string) error {
	return h.s.recordRevocation(revokedSession, hash)
}

// The migration area's follow and cutover (appliance/migrate) need these besides the methods above.

// RequireBackups is a 503 when the installed PostgreSQL lacks the backup programs (FeatureBackups).
func (h areaHost) RequireBackups() error { return h.s.requireFeature(FeatureBackups) }

// NewBackup records a pending backup of the project and enqueues its backup.create job in tx.
func (h areaHost) NewBackup(tx *store.Tx, prj *store.Project, label string) (*store.Backup, *store.Job, error) {
	return h.s.backups.NewBackup(tx, prj, label)
}

// EnqueueBackupRestore enqueues backup.restore of the project's backup in tx (the backups area's).
func (h areaHost) EnqueueBackupRestore(tx *store.Tx, prj *store.Project, backupID string) (*store.Job, error) {
	return h.s.backups.EnqueueRestore(tx, prj, backupID)
}

// DeletePreview marks the preview deleting and enqueues its deletion in tx (deletePreview).
func (h areaHost) DeletePreview(tx *store.Tx, p *Principal, prv *store.Project, action string) (*store.Job, error) {
	return h.s.previews.EnqueueDelete(tx, p, prv, action)
}

// ForgetStudio ends the studio's pooled sessions of the project.
func (h areaHost) ForgetStudio(projectID string) { h.s.studio.Forget(projectID) }

var _ previews.Host = areaHost{}

// Notify pokes the job runner once jobs enqueued in a committed transaction are there.
func (h areaHost) Notify() { h.s.notify() }

// Slug is a display name's URL slug (one rule for every project).
func (h areaHost) Slug(name string) string { return slugify(name) }

// InstanceIdent is the database and role name a project named name gets (or the 400 of a name PostgreSQL
// would refuse).
func (h areaHost) InstanceIdent(name string) (string, error) { return instanceIdent(name) }

// Connections are a project's URLs with its current credential (opened with the root's box).
func (h areaHost) Connections(prj *store.Project) (*api.Connections, error) {
	return h.s.connectionsOf(prj)
}

// ProjectView is a project's API resource.
func (h areaHost) ProjectView(prj *store.Project) *api.Project { return h.s.projectView(prj) }

// DefaultPlan is the name of the plan of a project made without one.
func (h areaHost) DefaultPlan() string {
	return h.s.planOrDefault(DefaultPlan).Name
}

// PlanPreviews is the previews the plan allows and its name (0 and "" for a plan the table does not have).
func (h areaHost) PlanPreviews(name string) (int, string) {
	plan, _ := h.s.PlanByName(name)
	return plan.PreviewsLimit, plan.Name
}

// OrganizationQuota is the organization's projects and previews limits in force, read in tx (the
// operators' configuration: appliance/tenancy).
func (h areaHost) OrganizationQuota(tx *store.Tx, orgID string) (projects, previews int, err error) {
	q, err := h.s.organizationQuota(tx, orgID)
	return q.ProjectsLimit, q.PreviewsLimit, err
}

// PointInTime is the backups area's finder of a recovery's base backup and timeline.
func (h areaHost) PointInTime(ctx context.Context, p *Principal, projectID string) (func(*store.Tx, string, time.Time) (*store.Backup, int, error), error) {
	return h.s.backups.PointInTime(ctx, p, projectID)
}

// Archive is the instance engine's view of the project's backup store (archiveOf).
func (h areaHost) Archive(ctx context.Context, projectID, backupKey string) (instances.Archive, error) {
	return h.s.archiveOf(ctx, h.s.dp, projectID, backupKey)
}

// CheckNotPromoting refuses to change a preview that an approved or promoting cutover request holds.
func (h areaHost) CheckNotPromoting(tx *store.Tx, prv *store.Project) error {
	return migrate.CheckNotPromoting(tx, prv)
}

// EnqueueProvision queues the project's project.provision in tx (locked by the project).
func (h areaHost) EnqueueProvision(tx *store.Tx, prj *store.Project) (*store.Job, error) {
	if prj.NodeID == "" { // a new project (an ephemeral database): placed in a cluster
		if err := h.s.placeNew(tx, prj); err != nil {
			return nil, err
		}
	}
	return h.s.enqueue(tx, prj, JobProjectProvision, prj.ID, nil)
}

// EnqueueDelete queues the project's project.delete in tx (locked by the project).
func (h areaHost) EnqueueDelete(tx *store.Tx, prj *store.Project) (*store.Job, error) {
	return h.s.enqueue(tx, prj, JobProjectDelete, prj.ID, nil)
}

// Provision is the project provision job (provisionProject).
func (h areaHost) Provision(ctx context.Context, run *scheduler.Run) (any, error) {
	return h.s.provisionProject(ctx, run)
}

// DeleteProject is the project delete job (deleteProjectJob).
func (h areaHost) DeleteProject(ctx context.Context, run *scheduler.Run) (any, error) {
	return h.s.deleteProjectJob(ctx, run)
}

// FailOnFinalError marks the project failed when h fails for good (failProjectOnFinalError).
func (h areaHost) FailOnFinalError(handler scheduler.Handler) scheduler.Handler {
	return h.s.failProjectOnFinalError(handler)
}

// SettleRemoved records, in tx, that the instance instID ("" for none) was removed and a change of the
// project (settle with InstanceRemoved).
func (h areaHost) SettleRemoved(tx *store.Tx, instID, projectID string, change func(*store.Project)) error {
	_, err := h.s.settle(tx, instID, InstanceRemoved, projectID, change)
	return err
}

// LiftStorageLock lifts the project's storage lock (the storage guard's Lift).
func (h areaHost) LiftStorageLock(ctx context.Context, projectID string) error {
	return h.s.storage.Lift(ctx, projectID)
}

var _ backups.Host = areaHost{}

// The backups area (appliance/backups) needs these besides the methods above.

// RequireDisk is the 507 while the data directory's disk is low (the storage guard).
func (h areaHost) RequireDisk() error { return h.s.storage.RequireDisk() }

// BackupStore is the data plane's backup store (backupStore): the jobs', retention's and the timeline
// log's.
func (h areaHost) BackupStore() *backup.Store { return h.s.retentionStore() }

// BackupStorage is where the project's backups live and its WAL archiving (backupStorage).
func (h areaHost) BackupStorage(projectID string) *api.BackupStorage {
	return h.s.backupStorage(projectID)
}

// Credential is the project's current credential, opened with the root's box (credentialOf).
func (h areaHost) Credential(prj *store.Project) (instances.Credential, error) {
	return h.s.credentialOf(prj)
}

// Settings are the project's server settings on its instance (settingsFor; an error without a data
// plane).
func (h areaHost) Settings(prj *store.Project, inst *store.Instance) (postgres.Settings, error) {
	dp, err := h.s.dataPlane()
	if err != nil {
		return postgres.Settings{}, err
	}
	return h.s.settingsFor(dp, prj, inst)
}

// Restarting sets the project's runtime status as the engine stops and starts its server (restartingFunc).
func (h areaHost) Restarting(projectID string) func(bool) { return h.s.restartingFunc(projectID) }

var _ storageguard.Host = areaHost{}

// RestorePointBase is the backups area's finder of a restore point and a recovery's base backup for it.
func (h areaHost) RestorePointBase(ctx context.Context, p *Principal, projectID string) (func(*store.Tx, string, string) (*store.RestorePoint, *store.Backup, error), error) {
	return h.s.backups.RestorePointBase(ctx, p, projectID)
}

var _ databases.Host = areaHost{}

// SyncPooler gives the project's PgBouncer the roles as they are now and reloads it (the instance engine's).
func (h areaHost) SyncPooler(ctx context.Context, conn *pgx.Conn, inst *store.Instance, prj *store.Project) error {
	if err := h.s.eng.SyncPoolerUsers(ctx, conn, inst, prj); err != nil {
		return serverErr(err, "update the pooler's users")
	}
	if err := h.s.eng.Pooler(inst, prj).Reload(); err != nil {
		return serverErr(err, "reload the pooler")
	}
	return nil
}

// The tenancy area (appliance/tenancy) needs these besides the methods above.

var _ tenancy.Host = areaHost{}

// JobView is a job's API resource.
func (h areaHost) JobView(j *store.Job) *api.Job { return JobView(j) }

// CreateUser adds a user of the built-in identity provider (the identity area's).
func (h areaHost) CreateUser(tx *store.Tx, email, name, password string, isAdmin bool, memberships ...store.Membership) (*store.User, error) {
	return h.s.identity.CreateUser(tx, email, name, password, isAdmin, memberships...)
}

// StopProject stops the project's server and pooler, data kept (a suspension's job).
func (h areaHost) StopProject(ctx context.Context, run *scheduler.Run, projectID string) error {
	return h.s.stopProject(ctx, run, projectID)
}

// StartProject starts the project's server and pooler again (a resume's job).
func (h areaHost) StartProject(ctx context.Context, run *scheduler.Run, projectID string) error {
	return h.s.startProject(ctx, run, projectID)
}

// PlatformOrganization is the organization the platform's own events (program applications) and their
// audit events go to: the one made at the first start.
func (h areaHost) PlatformOrganization(tx *store.Tx) string { return h.s.platformOrganization(tx) }

// ApplyPlan queues the project's project.apply_plan job in tx (the plan's limits to its server and
// key-value store), locked by the project as a plan change of the project is.
func (h areaHost) ApplyPlan(tx *store.Tx, prj *store.Project) (*store.Job, error) {
	return h.s.enqueue(tx, prj, JobProjectApplyPlan, prj.ID, nil)
}

// The sign-up (appliance/tenancy) and the referrals (appliance/referrals) need these besides the methods
// above.

var _ referrals.Host = areaHost{}

// SignIn starts a session of a user just signed up (the identity area's, as a sign-in's).
func (h areaHost) SignIn(tx *store.Tx, u *store.User, orgID, role string) (*api.SessionResult, error) {
	return h.s.identity.SignIn(tx, u, orgID, role)
}

// ReferralAtSignup records the referral of an organization signing up with a code (appliance/referrals).
func (h areaHost) ReferralAtSignup(tx *store.Tx, code, orgID string, u *store.User) (*api.Referral, error) {
	return h.s.referrals.AtSignup(tx, code, orgID, u)
}

// OrganizationCreated gives an organization a sign-up made its customer at the billing provider (a no-op
// with billing off; a failure is logged, and the periodic billing pass tries again).
func (h areaHost) OrganizationCreated(ctx context.Context, orgID string) {
	if _, err := h.s.billing.EnsureCustomer(ctx, orgID); err != nil {
		h.s.log.Warn("billing: the customer of a new organization, retried later", "organization_id", orgID, "err", err)
	}
}

// SignupURL is the dashboard's sign-up page.
func (h areaHost) SignupURL() string { return h.s.signupURL() }

var _ scaletozero.Host = areaHost{}

// DataPlaneReady fails when the appliance runs no instances.
func (h areaHost) DataPlaneReady() error { _, err := h.s.dataPlane(); return err }

// SuspendTarget is the project and its primary instance (nil when it has none or is being deleted).
func (h areaHost) SuspendTarget(projectID string) (*store.Project, *store.Instance, error) {
	return h.s.suspendedTarget(projectID)
}

// OrganizationSuspended reports whether an operator suspended the organization.
func (h areaHost) OrganizationSuspended(orgID string) bool { return h.s.organizationSuspended(orgID) }

// ClientConnections is the number of client sessions on the project's server.
func (h areaHost) ClientConnections(ctx context.Context, prj *store.Project) (int, error) {
	_, conns, err := h.s.measureProject(ctx, prj)
	return conns, err
}

// StopServer stops the project's server and pooler through the instance engine, data kept.
func (h areaHost) StopServer(ctx context.Context, inst *store.Instance, prj *store.Project) error {
	return h.s.eng.Stop(ctx, nil, inst, prj)
}

// StartServer starts the project's server and pooler through the instance engine.
func (h areaHost) StartServer(ctx context.Context, inst *store.Instance, prj *store.Project) error {
	if err := nodeloss.CheckEpoch(inst.Dir, prj); err != nil { // a copy older than the project's placement
		return err
	}
	return h.s.eng.Start(ctx, nil, inst, prj)
}

// ServerRunning reports whether the instance's server runs.
func (h areaHost) ServerRunning(inst *store.Instance) bool {
	_, running, _ := h.s.eng.Instance(inst).Status()
	return running
}

// ServerCertFiles are the files of the instance's server certificate and key.
func (h areaHost) ServerCertFiles(inst *store.Instance) (certFile, keyFile string) {
	pgi := h.s.eng.Instance(inst)
	return pgi.CertFile(), pgi.KeyFile()
}

// JobTarget is the project a job acts on (its preview database, when it names one).
func (h areaHost) JobTarget(run *scheduler.Run) string { return targetOf(run) }

// PlanOf is the plan in force of the project (the default plan when its own is gone).
func (h areaHost) PlanOf(prj *store.Project) api.Plan { return h.s.planOrDefault(prj.Plan) }

// WALArchived reports whether a WAL segment is in the project's WAL archive walArchive (the backup store
// is the root's).
func (h areaHost) WALArchived(ctx context.Context, projectID, walArchive, segment string) (bool, error) {
	return h.s.retentionStore().WALArchived(ctx, projectID, walArchive, segment)
}

// BackupCluster takes a base backup of a cluster of the project that is not its server yet (the backups
// area's BackupOf).
func (h areaHost) BackupCluster(ctx context.Context, run *scheduler.Run, prj *store.Project, rec *store.Instance, label string) error {
	_, err := h.s.backups.BackupOf(ctx, run, prj, rec, label)
	return err
}

// ForgetCluster removes the archive and backups of a cluster that never served the project (the backups
// area's ForgetCluster).
func (h areaHost) ForgetCluster(ctx context.Context, prj *store.Project, walArchive string) error {
	return h.s.backups.ForgetCluster(ctx, prj.ID, walArchive)
}

// SwitchedCluster records a move of the project to another cluster in its timeline log (the backups
// area's TimelineSwitch) and, with backup, enqueues a base backup of the new cluster.
func (h areaHost) SwitchedCluster(ctx context.Context, prj *store.Project, sw upgrades.ClusterSwitch, backup bool) error {
	err := backups.AppendTimelineSwitch(ctx, h.s.retentionStore(), prj.ID, backups.TimelineSwitch{JobID: sw.JobID,
		From: sw.FromTimeline, To: sw.ToTimeline, At: sw.At, Archive: sw.ToArchive, FromArchive: sw.FromArchive})
	if err != nil || !backup {
		return err
	}
	err = h.s.db.Update(func(tx *store.Tx) error {
		p, err := store.Projects.Get(tx, prj.ID)
		if err != nil {
			return err
		}
		_, _, err = h.s.backups.NewBackup(tx, p, "after the upgrade "+sw.JobID)
		return err
	})
	if err == nil {
		h.s.notify()
	}
	return err
}
