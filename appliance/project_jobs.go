package appliance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/theappliance/appliance/appliance/backups"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/previews"
	"github.com/theappliance/appliance/appliance/storageguard"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// JobExpireCredential ends the overlap of a credential rotation.
const JobExpireCredential = "project.expire_credential"

// RegisterJobs registers the handler of every job type this service enqueues.
func (s *Service) RegisterJobs(r *scheduler.Runner) {
	r.OnEnd(s.jobEnded)
	r.Before(s.z.WakeForJob)
	r.Handle(JobProjectProvision, s.failProjectOnFinalError(s.provisionProject))
	r.Handle(JobProjectApplyPlan, s.applyPlan)
	r.Handle(JobProjectDelete, s.deleteProjectJob)
	r.Handle(JobProjectRotate, s.rotateCredentialsJob)
	r.Handle(JobExpireCredential, s.expireCredentialJob)
	s.nodeloss.RegisterJobs(r)
	s.moves.RegisterJobs(r)
	s.extensions.RegisterJobs(r)
	s.upgrades.RegisterJobs(r)
	s.backups.RegisterJobs(r)
	s.exports.RegisterJobs(r)
	s.migrate.RegisterJobs(r)
	s.kv.RegisterJobs(r)
	s.previews.RegisterJobs(r)
	s.tenancy.RegisterJobs(r)
	s.integrations.RegisterJobs(r)
}

// targetOf is the project record a job acts on: its preview database's when it names one (a preview is a
// project record of its own), else its project's.
func targetOf(run *scheduler.Run) string {
	if run.Job.PreviewDatabaseID != "" {
		return run.Job.PreviewDatabaseID
	}
	return run.Job.ProjectID
}

// loadProject reads a job's project and its primary instance (nil when it has none yet).
func (s *Service) loadProject(id string) (*store.Project, *store.Instance, error) {
	var prj *store.Project
	var inst *store.Instance
	err := s.db.View(func(tx *store.Tx) error {
		var err error
		if prj, err = store.Projects.Get(tx, id); err != nil {
			return err
		}
		if prj.PrimaryInstanceID != "" {
			inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID)
		}
		return err
	})
	return prj, inst, err
}

// activeTarget starts most project job handlers: the data plane, the job's payload (decoded into payload
// when it is not nil), and the project with its instance, which must be active.
func (s *Service) activeTarget(run *scheduler.Run, payload any) (*DataPlane, *store.Project, *store.Instance, error) {
	dp, err := s.dataPlane()
	if err != nil {
		return nil, nil, nil, err
	}
	if payload != nil {
		if err := run.DecodePayload(payload); err != nil {
			return nil, nil, nil, err
		}
	}
	prj, inst, err := s.loadProject(run.Job.ProjectID)
	if err != nil {
		return nil, nil, nil, err
	}
	if prj.State != ProjectActive || inst == nil {
		return nil, nil, nil, fmt.Errorf("project %s is %s, not active", prj.ID, prj.State)
	}
	return dp, prj, inst, nil
}

// updateProject applies fn to the stored project in one transaction.
func (s *Service) updateProject(id string, fn func(*store.Project) error) error {
	return s.db.Update(func(tx *store.Tx) error {
		prj, err := store.Projects.Get(tx, id)
		if err != nil {
			return err
		}
		if err := fn(prj); err != nil {
			return err
		}
		prj.UpdatedAt = s.now()
		return store.Projects.Put(tx, prj)
	})
}

// failProjectOnFinalError marks the project failed (with last_error) when the provision job fails for
// good, and removes whatever instance it had started so no process is left behind.
func (s *Service) failProjectOnFinalError(h scheduler.Handler) scheduler.Handler {
	return func(ctx context.Context, run *scheduler.Run) (any, error) {
		res, err := h(ctx, run)
		// When the appliance stops (ctx ends), what the job started but the supervisor does not watch yet
		// is stopped by the shutdown's StopInstances; the retry after the next start starts it again.
		if err == nil || ctx.Err() != nil || (scheduler.IsTransient(err) && run.Job.Attempts < run.Job.MaxAttempts) {
			return res, err
		}
		if s.eng != nil {
			if _, inst, lerr := s.loadProject(targetOf(run)); lerr == nil && inst != nil {
				s.eng.Remove(context.WithoutCancel(ctx), inst)
			}
		}
		uerr := s.updateProject(targetOf(run), func(p *store.Project) error {
			p.State, p.RuntimeStatus, p.LastError = ProjectFailed, RuntimeStopped, err.Error()
			return nil
		})
		if uerr != nil {
			s.log.Error("mark project failed", "project", targetOf(run), "err", uerr)
		}
		return res, err
	}
}

// provisionProject creates, starts and configures the project's instance and pooler. Every step checks
// what exists, so a retry after a crash continues where the last attempt stopped.
func (s *Service) provisionProject(ctx context.Context, run *scheduler.Run) (any, error) {
	dp, err := s.dataPlane()
	if err != nil {
		return nil, err
	}
	prj, _, err := s.loadProject(targetOf(run))
	if err != nil {
		return nil, err
	}
	if prj.State != ProjectProvisioning {
		return map[string]any{"skipped": "project is " + prj.State}, nil
	}
	steps := instances.NewTimer()
	inst, err := s.ensureInstanceRecord(dp, prj.ID)
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	prj, _, err = s.loadProject(prj.ID)
	if err != nil {
		return nil, err
	}
	adminPW, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return nil, fmt.Errorf("open admin password: %w", err)
	}
	settings, err := s.settingsFor(dp, prj, inst)
	if err != nil {
		return nil, err
	}
	cred, err := s.credentialOf(prj)
	if err != nil {
		return nil, err
	}
	spec := instances.ProvisionSpec{Instance: inst, Project: prj, AdminPassword: string(adminPW), Credential: cred,
		Settings: settings, Steps: steps, PortTaken: func(pooler bool, err error) error { return s.movePortIfTaken(inst, pooler, err) }}
	if prj.PreviewMode == previews.ModeClone {
		if spec.Clone, err = s.previews.CloneSource(ctx, run, prj); err != nil {
			return nil, err
		}
	}
	version, err := s.eng.Provision(ctx, run.Exec, spec)
	if err != nil {
		return nil, err
	}
	err = s.db.Update(func(tx *store.Tx) error {
		p, err := s.settle(tx, inst.ID, InstanceRunning, prj.ID, func(p *store.Project) {
			p.State, p.RuntimeStatus, p.PostgresVersion, p.LastError = ProjectActive, RuntimeActive, version, ""
		})
		if err != nil {
			return err
		}
		return s.audit(tx, &Principal{AuthSource: ActorSystem}, "project.provisioned", p.OrganizationID, p.ID,
			map[string]any{"instance_id": inst.ID, "postgres_version": version})
	})
	if err != nil {
		return nil, err
	}
	if err := s.eng.Watch(inst, prj); err != nil {
		return nil, err
	}
	steps.Done("activate")
	go func() {
		if err := s.EnsureSpares(context.WithoutCancel(ctx)); err != nil {
			s.log.Warn("refill spare clusters", "err", err)
		}
	}()
	return map[string]any{"instance_id": inst.ID, "postgres_version": version, "direct_port": inst.Port,
		"pooled_port": inst.PooledPort, "timings_ms": steps.MS}, nil
}

// settle records, in tx, an instance's new state (instID "" for none) and a change of its project.
func (s *Service) settle(tx *store.Tx, instID, state, projectID string, change func(*store.Project)) (*store.Project, error) {
	now := s.now()
	if instID != "" {
		in, err := store.Instances.Get(tx, instID)
		if err != nil {
			return nil, err
		}
		in.State, in.UpdatedAt = state, now
		if err := store.Instances.Put(tx, in); err != nil {
			return nil, err
		}
	}
	p, err := store.Projects.Get(tx, projectID)
	if err != nil {
		return nil, err
	}
	change(p)
	p.UpdatedAt = now
	return p, store.Projects.Put(tx, p)
}

// certHosts are the names an instance certificate covers.
func (s *Service) certHosts() []string {
	hosts := []string{}
	for _, h := range []string{s.cfg.PublicHost, "localhost", "127.0.0.1", s.cfg.ListenHost} {
		if h != "" && h != "0.0.0.0" && h != "::" && !contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

// ensureInstanceRecord creates the project's instance record (ports, directory, admin password) and its
// first credential, once.
func (s *Service) ensureInstanceRecord(dp *DataPlane, projectID string) (*store.Instance, error) {
	var inst *store.Instance
	marked := "" // the spare's directory an attempt marked as the project's
	unmark := func() {
		if marked != "" && instanceOwner(marked) == projectID {
			os.Remove(filepath.Join(marked, instanceOwnerFile))
		}
		marked = ""
	}
	err := s.db.Update(func(tx *store.Tx) error {
		// Run again (on etcd, after a conflict): the spare an earlier attempt marked was not claimed.
		unmark()
		prj, err := store.Projects.Get(tx, projectID)
		if err != nil {
			return err
		}
		// The major the project's cluster runs: the default installation's, or a preview's project's (see
		// previewMajor).
		major, binDir := dp.Bin.Major, dp.Bin.Dir
		if prj.PreviewOf != "" {
			if major, binDir, err = previewMajor(tx, prj, dp.Bin); err != nil {
				return err
			}
		}
		if prj.PrimaryInstanceID != "" {
			if inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID); err != nil {
				return err
			}
			// A preview's record whose cluster is not made yet (a reset removed it, its project upgraded
			// meanwhile) takes the major it is to run now.
			if prj.PreviewOf != "" && (inst.Major != major || inst.BinDir != binDir) && !(&postgres.Instance{Dir: inst.Dir}).Initialized() {
				inst.Major, inst.BinDir, inst.UpdatedAt = major, binDir, s.now()
				return store.Instances.Put(tx, inst)
			}
			return nil
		}
		now := s.now()
		var spare *store.Instance
		// A clone's data directory is copied, never a spare's; a spare runs the default installation, so
		// a cluster of another major is made anew.
		if prj.PreviewMode != previews.ModeClone && major == dp.Bin.Major && binDir == dp.Bin.Dir {
			if spare, err = claimSpare(tx); err != nil {
				return err
			}
		}
		var ports []int
		if spare != nil { // it runs on its reserved ports already (a spare from before pooled spares: one)
			inst, ports = spare, []int{spare.Port, spare.PooledPort}
			if spare.PooledPort == 0 {
				if ports, err = s.allocatePorts(tx, 1); err != nil {
					return err
				}
				ports = []int{inst.Port, ports[0]}
			}
		} else {
			if ports, err = s.allocatePorts(tx, 2); err != nil {
				return err
			}
			id := ids.New("ins")
			inst = &store.Instance{ID: id, Dir: filepath.Join(s.instancesDir(), id), Major: major,
				BinDir: binDir, AdminPassword: s.box.Seal([]byte(ids.Secret(24))), CreatedAt: now}
		}
		id := inst.ID
		if spare != nil {
			// On disk too: metadata from before this claim (an older meta.db put back) must not take the
			// directory for a spare still (reconcile.go).
			if err := markInstanceOwner(spare.Dir, prj.ID); err != nil {
				return err
			}
			marked = spare.Dir
		}
		inst.ProjectID, inst.OrganizationID, inst.Port, inst.PooledPort = prj.ID, prj.OrganizationID, ports[0], ports[1]
		inst.State, inst.UpdatedAt = InstanceCreating, now
		if err := store.Instances.Put(tx, inst); err != nil {
			return err
		}
		prj.PrimaryInstanceID, prj.DirectPort, prj.PooledPort, prj.UpdatedAt = id, ports[0], ports[1], now
		prj.Credential = store.Credential{Username: prj.RoleName, Password: s.box.Seal([]byte(ids.Secret(20))), CreatedAt: now}
		return store.Projects.Put(tx, prj)
	})
	if err != nil {
		unmark()
	}
	return inst, err
}

func altRole(role string) string { return instances.AltRole(role) }

// credentialOf is the project's current credential with its password opened, for the engine.
func (s *Service) credentialOf(prj *store.Project) (instances.Credential, error) {
	pw, err := s.box.Open(prj.Credential.Password)
	if err != nil {
		return instances.Credential{}, fmt.Errorf("open credential: %w", err)
	}
	// A new password does not lift the storage lock.
	return instances.Credential{Username: prj.Credential.Username, Password: string(pw), NoLogin: prj.StorageLock == storageguard.NoConnections}, nil
}

// applyPlan writes the project's settings and reloads or restarts the instance as PostgreSQL requires.
func (s *Service) applyPlan(ctx context.Context, run *scheduler.Run) (any, error) {
	dp, prj, inst, err := s.activeTarget(run, nil)
	if err != nil {
		return nil, err
	}
	action, err := s.writeSettingsAndApply(ctx, run, dp, prj, inst)
	if err != nil {
		return nil, err
	}
	kvMB, err := s.kv.ApplyPlan(ctx, prj.ID, prj.Plan)
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	limits := s.serverLimits(prj)
	return map[string]any{"action": action.String(), "max_connections": prj.MaxConnections,
		"statement_timeout": prj.StatementTimeout, "idle_transaction_timeout": prj.IdleTransactionTimeout,
		"storage_limit_bytes": prj.StorageLimitBytes, "kv_memory_mb": kvMB, "memory_bytes": limits.MemoryBytes, "cpu_cores": limits.CPUCores}, nil
}

// writeSettingsAndApply rewrites the instance's settings and the pooler's pool size, then reloads or
// restarts. The supervisor lets go of the instance during a restart so it does not race the restart.
func (s *Service) writeSettingsAndApply(ctx context.Context, run *scheduler.Run, dp *DataPlane, prj *store.Project, inst *store.Instance) (postgres.Action, error) {
	settings, err := s.settingsFor(dp, prj, inst)
	if err != nil {
		return 0, err
	}
	adminPW, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return 0, err
	}
	return s.eng.ApplySettings(ctx, run.Exec, inst, prj, settings, string(adminPW), s.restartingFunc(prj.ID))
}

func (s *Service) setRuntime(projectID, status string) {
	if err := s.updateProject(projectID, func(p *store.Project) error { p.RuntimeStatus = status; return nil }); err != nil {
		s.log.Error("set runtime status", "project", projectID, "err", err)
	}
}

// deleteProjectJob stops and removes the instance and pooler, deletes the project's backups
// (purgeProjectBackups), then marks the project deleted. Every step is idempotent and the project is marked
// deleted last, so a retry after a crash does whatever the last attempt left undone.
func (s *Service) deleteProjectJob(ctx context.Context, run *scheduler.Run) (any, error) {
	if _, err := s.dataPlane(); err != nil {
		return nil, err
	}
	prj, inst, err := s.loadProject(targetOf(run))
	if err != nil {
		return nil, err
	}
	if prj.State == ProjectDeleted {
		return map[string]any{"skipped": "already deleted"}, nil
	}
	followWarnings := s.migrate.DetachOpenFollow(ctx, prj, inst)
	s.studio.Forget(prj.ID)
	if inst != nil {
		if err := s.eng.Remove(ctx, inst); err != nil {
			return nil, scheduler.Transient(err)
		}
	}
	if err := s.kv.RemoveProject(ctx, prj.ID); err != nil {
		return nil, scheduler.Transient(fmt.Errorf("remove the project's key-value store: %w", err))
	}
	if err := s.previews.RemoveProject(ctx, prj.ID); err != nil {
		return nil, scheduler.Transient(fmt.Errorf("remove the project's previews: %w", err))
	}
	// Only now: the instance no longer archives WAL into the store.
	purged, err := s.purgeProjectBackups(prj)
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	instID := ""
	if inst != nil {
		instID = inst.ID
	}
	err = s.db.Update(func(tx *store.Tx) error {
		_, err := s.settle(tx, instID, InstanceRemoved, prj.ID, func(p *store.Project) {
			now := s.now()
			p.State, p.RuntimeStatus, p.DeletedAt = ProjectDeleted, RuntimeStopped, &now
			p.Credential.Password, p.PreviousCredential = nil, nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return map[string]any{"deleted": true, "backups_deleted": purged, "follow_warnings": followWarnings}, nil
}

// purgedBackups counts what purgeProjectBackups deleted.
type purgedBackups struct {
	StoreRemoved    bool `json:"backup_store_removed"` // <data-dir>/backups/<project> existed and is gone
	Backups         int  `json:"backups"`
	RestorePoints   int  `json:"restore_points"`
	Exports         int  `json:"exports"`
	Uploads         int  `json:"uploads"`
	Follows         int  `json:"follows"` // imports/follow records (they hold the source URL, sealed)
	ScheduledBackup bool `json:"scheduled_backup"`
}

func (c purgedBackups) any() bool {
	return c.StoreRemoved || c.ScheduledBackup || c.Backups+c.RestorePoints+c.Exports+c.Uploads+c.Follows > 0
}

// purgeProjectBackups deletes everything the backup store holds of a project (WAL archive, base backups,
// exports, uploads: <data-dir>/backups/<project>) and then, in one transaction, its Backup, RestorePoint,
// ScheduledBackup, Export and Upload records with a project.backups_deleted audit event (system actor)
// when there was anything to delete. Running it again deletes nothing and audits nothing; a crash between
// the two steps leaves only records, which the next run deletes (and audits).
func (s *Service) purgeProjectBackups(prj *store.Project) (purgedBackups, error) {
	var c purgedBackups
	removed, err := s.retentionStore().RemoveProject(context.Background(), prj.ID)
	if err != nil {
		return c, err
	}
	if s.backupObjects != nil { // the exports' and uploads' local files: their cache, or made before the bucket
		local, err := s.localBackups(s.dp).RemoveProject(context.Background(), prj.ID)
		if err != nil {
			return c, err
		}
		removed = removed || local
	}
	err = s.db.Update(func(tx *store.Tx) error {
		c = purgedBackups{StoreRemoved: removed}
		if err := deleteAll(tx, store.Backups, store.BackupsByProject, prj.ID, func(r *store.Backup) string { return r.ID }, &c.Backups); err != nil {
			return err
		}
		if err := deleteAll(tx, store.RestorePoints, store.RestorePointsByProject, prj.ID, func(r *store.RestorePoint) string { return r.ID }, &c.RestorePoints); err != nil {
			return err
		}
		if err := deleteAll(tx, store.Exports, store.ExportsByProject, prj.ID, func(r *store.Export) string { return r.ID }, &c.Exports); err != nil {
			return err
		}
		if err := deleteAll(tx, store.Uploads, store.UploadsByProject, prj.ID, func(r *store.Upload) string { return r.ID }, &c.Uploads); err != nil {
			return err
		}
		if err := deleteAll(tx, store.ImportFollows, store.ImportFollowsByProject, prj.ID, func(r *store.ImportFollow) string { return r.ID }, &c.Follows); err != nil {
			return err
		}
		switch _, err := store.ScheduledBackups.Get(tx, prj.ID); {
		case err == nil:
			c.ScheduledBackup = true
			if err := store.ScheduledBackups.Delete(tx, prj.ID); err != nil {
				return err
			}
		case !errors.Is(err, store.ErrNotFound):
			return err
		}
		if !c.any() {
			return nil
		}
		return s.audit(tx, &Principal{AuthSource: ActorSystem}, "project.backups_deleted", prj.OrganizationID, prj.ID, c)
	})
	return c, err
}

// hasBackupRecords reports whether any Backup, RestorePoint, ScheduledBackup, Export or Upload record of the
// project exists.
func hasBackupRecords(tx *store.Tx, projectID string) (bool, error) {
	for _, has := range []func() (bool, error){
		func() (bool, error) { return hasAny(tx, store.Backups, store.BackupsByProject, projectID) },
		func() (bool, error) { return hasAny(tx, store.RestorePoints, store.RestorePointsByProject, projectID) },
		func() (bool, error) { return hasAny(tx, store.Exports, store.ExportsByProject, projectID) },
		func() (bool, error) { return hasAny(tx, store.Uploads, store.UploadsByProject, projectID) },
		func() (bool, error) { return hasAny(tx, store.ImportFollows, store.ImportFollowsByProject, projectID) },
	} {
		if ok, err := has(); err != nil || ok {
			return ok, err
		}
	}
	_, err := store.ScheduledBackups.Get(tx, projectID)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// hasAny reports whether index ix of table lists any record under key.
func hasAny[T any](tx *store.Tx, table *store.Table[T], ix *store.Index[T], key string) (bool, error) {
	recs, err := table.Lookup(tx, ix, key, store.Query{Limit: 1})
	return len(recs) > 0, err
}

// deleteAll deletes, in tx, the records of table that index ix lists under key, adding their number to n.
func deleteAll[T any](tx *store.Tx, table *store.Table[T], ix *store.Index[T], key string, id func(*T) string, n *int) error {
	recs, err := table.Lookup(tx, ix, key, store.Query{})
	if err != nil {
		return err
	}
	for _, r := range recs {
		if err := table.Delete(tx, id(r)); err != nil {
			return err
		}
		*n++
	}
	return nil
}

// rotateCredentialsJob sets a new password on the idle login and makes it current; the previous login
// keeps working until the overlap ends (a project.expire_credential job scheduled for then).
func (s *Service) rotateCredentialsJob(ctx context.Context, run *scheduler.Run) (any, error) {
	var in rotatePayload
	_, prj, inst, err := s.activeTarget(run, &in)
	if err != nil {
		return nil, err
	}
	adminPW, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return nil, err
	}
	conn, err := s.eng.Instance(inst).Admin(ctx, string(adminPW))
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	next := altRole(prj.RoleName)
	if prj.Credential.Username == next {
		next = prj.RoleName
	}
	password := ids.Secret(20)
	setPW, err := instances.SetPasswordSQL("ALTER ROLE", next, "LOGIN", password)
	if err != nil {
		return nil, err
	}
	if err := instances.Untracked(ctx, conn); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, setPW); err != nil {
		return nil, fmt.Errorf("set new password: %w", err)
	}
	now := s.now()
	expires := now.Add(time.Duration(in.OverlapSeconds) * time.Second)
	var expireJob *store.Job
	err = s.db.Update(func(tx *store.Tx) error {
		p, err := store.Projects.Get(tx, prj.ID)
		if err != nil {
			return err
		}
		prev := p.Credential
		prev.ExpiresAt = &expires
		p.PreviousCredential = &prev
		p.Credential = store.Credential{Username: next, Password: s.box.Seal([]byte(password)), CreatedAt: now}
		p.UpdatedAt = now
		j := &store.Job{Type: JobExpireCredential, OrganizationID: p.OrganizationID, ProjectID: p.ID,
			LockedResource: p.ID, InstanceID: inst.ID, RunAfter: expires}
		if err := setPayload(j, expirePayload{Username: prev.Username}); err != nil {
			return err
		}
		if err := scheduler.Enqueue(tx, j); err != nil {
			return err
		}
		expireJob = j
		return store.Projects.Put(tx, p)
	})
	if err != nil {
		return nil, err
	}
	if err := s.eng.SyncPoolerUsers(ctx, conn, inst, prj); err != nil {
		return nil, err
	}
	if err := s.eng.Pooler(inst, prj).Reload(); err != nil {
		return nil, scheduler.Transient(err)
	}
	s.notify()
	return map[string]any{"username": next, "previous_username": prj.Credential.Username,
		"previous_expires_at": expires, "expire_job_id": expireJob.ID}, nil
}

type expirePayload struct {
	Username string `json:"username"`
}

// expireCredentialJob disables the previous login after the overlap: its password is removed and its
// sessions end. A newer rotation that made it current again in between leaves it alone.
func (s *Service) expireCredentialJob(ctx context.Context, run *scheduler.Run) (any, error) {
	_, err := s.dataPlane()
	if err != nil {
		return nil, err
	}
	var in expirePayload
	if err := run.DecodePayload(&in); err != nil {
		return nil, err
	}
	prj, inst, err := s.loadProject(run.Job.ProjectID)
	if err != nil {
		return nil, err
	}
	if prj.State != ProjectActive || inst == nil {
		return map[string]any{"skipped": "project is " + prj.State}, nil
	}
	if prj.Credential.Username == in.Username {
		return map[string]any{"skipped": in.Username + " is current again"}, nil
	}
	adminPW, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return nil, err
	}
	conn, err := s.eng.Instance(inst).Admin(ctx, string(adminPW))
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// A fresh random password (rather than none) keeps a SCRAM verifier for the pooler's user list.
	setPW, err := instances.SetPasswordSQL("ALTER ROLE", in.Username, "", ids.Secret(20))
	if err != nil {
		return nil, err
	}
	if err := instances.Untracked(ctx, conn); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, setPW); err != nil {
		return nil, err
	}
	var ended int
	if err := conn.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = $1", in.Username).Scan(&ended); err != nil {
		return nil, err
	}
	if err := s.eng.SyncPoolerUsers(ctx, conn, inst, prj); err != nil {
		return nil, err
	}
	if err := s.eng.Pooler(inst, prj).Reload(); err != nil {
		return nil, scheduler.Transient(err)
	}
	err = s.updateProject(prj.ID, func(p *store.Project) error {
		if p.PreviousCredential != nil && p.PreviousCredential.Username == in.Username {
			p.PreviousCredential = nil
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return map[string]any{"disabled": in.Username, "sessions_ended": ended}, nil
}

// restartingFunc tells the project's runtime status as the engine stops (restarting) and starts again
// (active) its server.
func (s *Service) restartingFunc(projectID string) func(bool) {
	return func(restarting bool) {
		if restarting {
			s.setRuntime(projectID, RuntimeRestarting)
		} else {
			s.setRuntime(projectID, RuntimeActive)
		}
	}
}

// previewMajor is the major and installation a preview of prj's parent runs: its parent's server's (an
// empty preview: the project's names on the project's major; a clone: the data it copies), or, a clone as
// of a past time, that of the cluster of its base backup (before a major upgrade: the old one); def (the
// default installation) for a record or backup of before they recorded theirs.
func previewMajor(tx *store.Tx, prj *store.Project, def postgres.Binaries) (int, string, error) {
	parent, err := store.Projects.Get(tx, prj.PreviewOf)
	if err != nil {
		return 0, "", err
	}
	src, err := store.Instances.Get(tx, parent.PrimaryInstanceID)
	if err != nil {
		return 0, "", err
	}
	if src.Major == 0 {
		src.Major, src.BinDir = def.Major, def.Dir
	} else if src.BinDir == "" && src.Major == def.Major {
		src.BinDir = def.Dir
	}
	if prj.PreviewMode == previews.ModeClone && prj.SourceBackupID != "" {
		b, err := store.Backups.Get(tx, prj.SourceBackupID)
		if err != nil {
			return 0, "", err
		}
		src = backups.BackupCluster(src, b, def)
	}
	return src.Major, src.BinDir, nil
}
