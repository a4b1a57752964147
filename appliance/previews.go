package appliance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Preview modes and sources (see docs/api-decisions.md "Preview databases").
const (
	PreviewEmpty = "empty" // the project's database and role names, no data (from a spare cluster)
	PreviewClone = "clone" // the project's data as of now (an online copy of its running server)

	SourceNone   = "none"   // an empty preview
	SourceLive   = "live"   // a copy of the running server
	SourceBackup = "backup" // a base backup and the WAL archive, recovered to source_restore_time
)

// Preview jobs: each acts on the preview's own project record (the job's preview_database_id).
const (
	JobPreviewCreate = "preview.create"
	JobPreviewDelete = "preview.delete"
	JobPreviewReset  = "preview.reset"
)

func previewView(p *store.Project) *PreviewDatabase {
	v := &PreviewDatabase{ID: p.ID, ProjectID: p.PreviewOf, Name: p.Name, DatabaseName: p.DatabaseName, RoleName: p.RoleName,
		PublicHost: p.PublicHost, SSLMode: p.SSLMode, Mode: p.PreviewMode, SourceKind: p.SourceKind,
		SourceBackupKey: p.SourceBackupKey, SourceRestoreTime: p.SourceRestoreTime, SourceDatabase: p.SourceDatabase,
		State: p.State, LastError: p.LastError, DirectPort: p.DirectPort, PooledPort: p.PooledPort,
		CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt}
	if p.TTLExpiresAt != nil {
		v.TTLExpiresAt = *p.TTLExpiresAt
	}
	return v
}

func checkTTL(h int) error {
	if h < 1 || h > MaxPreviewTTLHours {
		return Invalid("ttl_hours must be between 1 and %d", MaxPreviewTTLHours)
	}
	return nil
}

// visiblePreview loads a preview the caller may see: a project-scoped key reaches its project's only.
func (s *Service) visiblePreview(tx *store.Tx, p *Principal, previewID string) (*store.Project, error) {
	prv, err := store.Projects.Get(tx, previewID)
	if err != nil || prv.PreviewOf == "" {
		return nil, notFoundAs(orNotFound(err), "preview database %s not found", previewID)
	}
	if err := p.CheckProject(prv.PreviewOf, prv.OrganizationID); err != nil {
		return nil, err
	}
	if prv.DeletedAt != nil {
		return nil, NotFound("preview database %s was deleted", previewID)
	}
	return prv, nil
}

// orNotFound is err, or store.ErrNotFound when err is nil (a record of another kind).
func orNotFound(err error) error {
	if err == nil {
		return store.ErrNotFound
	}
	return err
}

// livePreviews are a project's previews not deleted.
func livePreviews(tx *store.Tx, projectID string) ([]*store.Project, error) {
	all, err := store.Projects.Lookup(tx, store.ProjectsByPreviewOf, projectID, store.Query{})
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, p := range all {
		if p.DeletedAt == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// enqueuePreview queues a preview job: the parent's project_id, the preview's preview_database_id, the
// preview's lock.
func (s *Service) enqueuePreview(tx *store.Tx, parent, prv *store.Project, jobType string) (*store.Job, error) {
	j := &store.Job{Type: jobType, OrganizationID: parent.OrganizationID, ProjectID: parent.ID, PreviewDatabaseID: prv.ID,
		LockedResource: prv.ID, InstanceID: prv.PrimaryInstanceID}
	if err := scheduler.Enqueue(tx, j); err != nil {
		return nil, Internal(err, "enqueue %s", jobType)
	}
	prv.LatestJobID = j.ID
	return j, nil
}

// CreatePreview records a preview of an active project and enqueues the job that makes its instance.
func (s *Service) CreatePreview(ctx context.Context, p *Principal, projectID string, req *CreatePreviewRequest) (*PreviewJobResponse, error) {
	mode := req.Mode
	if mode == "" {
		mode = PreviewClone
	}
	if mode != PreviewEmpty && mode != PreviewClone {
		return nil, Invalid("mode must be empty or clone")
	}
	ttl := DefaultPreviewTTLHours
	if req.TTLHours != nil {
		ttl = *req.TTLHours
	}
	if err := checkTTL(ttl); err != nil {
		return nil, err
	}
	name := strings.TrimSpace(req.Name)
	if name == "" {
		name = "preview-" + ids.Secret(4)[:6]
	}
	if err := checkDisplayText("name", name, 1, 63); err != nil {
		return nil, err
	}
	var target time.Time
	var timeline int
	var switches []timelineSwitch
	if req.SourceRestoreTime != "" {
		if mode != PreviewClone {
			return nil, Invalid("source_restore_time makes a clone: it cannot go with mode empty")
		}
		if err := s.requireFeature(FeatureBackups); err != nil { // it starts from a base backup
			return nil, err
		}
		t, err := time.Parse(time.RFC3339Nano, req.SourceRestoreTime)
		if err != nil {
			return nil, Invalid("source_restore_time must be an RFC 3339 time such as 2026-01-31T12:00:00Z")
		}
		if target = t.UTC(); target.After(s.now()) {
			return nil, Invalid("source_restore_time %s is in the future", req.SourceRestoreTime)
		}
		parent, inst, err := s.activeProject(p, projectID)
		if err != nil {
			return nil, err
		}
		if timeline, switches, err = s.pitrHistory(ctx, parent, inst, true, true); err != nil {
			return nil, err
		}
	}
	var out *PreviewJobResponse
	err := s.db.Update(func(tx *store.Tx) error {
		parent, err := s.visibleActiveProject(tx, p, projectID)
		if err != nil {
			return err
		}
		var base *store.Backup
		var tl int
		if !target.IsZero() {
			if base, tl, err = s.pitrBase(tx, parent.ID, target, timeline, switches); err != nil {
				if errors.Is(err, errNoBackup) {
					return Invalid("source_restore_time %s is outside the project's point-in-time window: no base backup was complete by then", req.SourceRestoreTime)
				}
				return Internal(err, "find a base backup")
			}
		}
		live, err := livePreviews(tx, parent.ID)
		if err != nil {
			return Internal(err, "list previews")
		}
		plan, _ := PlanByName(parent.Plan)
		if len(live) >= plan.PreviewsLimit {
			return Forbidden("preview quota reached: project %s has %d of the %d previews its plan (%s) allows", parent.ID, len(live), plan.PreviewsLimit, plan.Name)
		}
		if n, err := s.orgPreviews(tx, parent.OrganizationID); err != nil {
			return err
		} else if n >= DefaultOrganizationQuota.PreviewsLimit {
			return Forbidden("preview quota reached: the organization has %d of %d previews", n, DefaultOrganizationQuota.PreviewsLimit)
		}
		now := s.now()
		expires := now.Add(time.Duration(ttl) * time.Hour)
		prv := &store.Project{ID: ids.New("prv"), Name: name, Slug: slugify(name), OrganizationID: parent.OrganizationID,
			DatabaseName: parent.DatabaseName, RoleName: parent.RoleName, PublicHost: s.cfg.PublicHost, Region: parent.Region,
			Plan: parent.Plan, SSLMode: "verify-full", StatementTimeout: parent.StatementTimeout,
			IdleTransactionTimeout: parent.IdleTransactionTimeout, MaxConnections: parent.MaxConnections,
			StorageLimitBytes: parent.StorageLimitBytes, Environment: "development", State: ProjectProvisioning,
			RuntimeStatus: RuntimeProvisioning, CreatedAt: now, UpdatedAt: now, PreloadLibraries: parent.PreloadLibraries,
			PreviewOf: parent.ID, PreviewMode: mode, SourceKind: SourceNone, TTLExpiresAt: &expires}
		if prv.PreloadLibraries == nil {
			prv.PreloadLibraries = []string{}
		}
		if mode == PreviewClone {
			prv.SourceKind, prv.SourceDatabase, prv.SourceRestoreTime = SourceLive, parent.DatabaseName, &now
		}
		if base != nil {
			prv.SourceKind, prv.SourceBackupKey, prv.SourceBackupID, prv.SourceTimeline = SourceBackup, base.BackupKey, base.ID, tl
			prv.SourceRestoreTime = &target
		}
		j, err := s.enqueuePreview(tx, parent, prv, JobPreviewCreate)
		if err != nil {
			return err
		}
		if err := store.Projects.Put(tx, prv); err != nil {
			return Internal(err, "store preview")
		}
		if err := s.audit(tx, p, "preview.create", parent.OrganizationID, parent.ID,
			map[string]any{"preview_id": prv.ID, "name": name, "mode": mode, "ttl_hours": ttl, "job_id": j.ID}); err != nil {
			return Internal(err, "audit")
		}
		out = &PreviewJobResponse{Job: JobView(j), Preview: previewView(prv)}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.notify()
	return out, nil
}

// orgPreviews counts the organization's live previews.
func (s *Service) orgPreviews(tx *store.Tx, orgID string) (int, error) {
	prjs, err := store.Projects.Lookup(tx, store.ProjectsByOrg, orgID, store.Query{})
	if err != nil {
		return 0, Internal(err, "list projects")
	}
	n := 0
	for _, p := range prjs {
		if p.PreviewOf != "" && p.DeletedAt == nil {
			n++
		}
	}
	return n, nil
}

// ListPreviews lists a project's live previews, oldest first.
func (s *Service) ListPreviews(ctx context.Context, p *Principal, projectID string) (*PreviewList, error) {
	out := &PreviewList{PreviewDatabases: []*PreviewDatabase{}}
	err := s.db.View(func(tx *store.Tx) error {
		parent, err := s.visibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		live, err := livePreviews(tx, parent.ID)
		if err != nil {
			return Internal(err, "list previews")
		}
		for _, prv := range live {
			out.PreviewDatabases = append(out.PreviewDatabases, previewView(prv))
		}
		return nil
	})
	return out, err
}

// PreviewConnections are a preview's URLs with its own credential.
func (s *Service) PreviewConnections(ctx context.Context, p *Principal, previewID string) (*ConnectionsResponse, error) {
	var out *ConnectionsResponse
	err := s.db.View(func(tx *store.Tx) error {
		prv, err := s.visiblePreview(tx, p, previewID)
		if err != nil {
			return err
		}
		if prv.State != ProjectActive {
			return Conflict("preview database %s is %s: connections exist once it is active", prv.ID, prv.State)
		}
		c, err := s.connectionsOf(prv)
		if err == nil {
			out = &ConnectionsResponse{Connections: *c}
		}
		return err
	})
	return out, err
}

// ExtendPreview moves the preview's deletion to ttl_hours from now.
func (s *Service) ExtendPreview(ctx context.Context, p *Principal, previewID string, req *ExtendPreviewRequest) (*PreviewResponse, error) {
	if err := checkTTL(req.TTLHours); err != nil {
		return nil, err
	}
	var out *PreviewResponse
	err := s.db.Update(func(tx *store.Tx) error {
		prv, err := s.visiblePreview(tx, p, previewID)
		if err != nil {
			return err
		}
		if prv.State == ProjectDeleting {
			return Conflict("preview database %s is being deleted", prv.ID)
		}
		now := s.now()
		expires := now.Add(time.Duration(req.TTLHours) * time.Hour)
		prv.TTLExpiresAt, prv.UpdatedAt = &expires, now
		if err := store.Projects.Put(tx, prv); err != nil {
			return Internal(err, "store preview")
		}
		if err := s.audit(tx, p, "preview.extend", prv.OrganizationID, prv.PreviewOf,
			map[string]any{"preview_id": prv.ID, "ttl_hours": req.TTLHours, "ttl_expires_at": expires}); err != nil {
			return Internal(err, "audit")
		}
		out = &PreviewResponse{Preview: previewView(prv)}
		return nil
	})
	return out, err
}

// DeletePreview enqueues preview.delete: its instance and everything it had are removed.
func (s *Service) DeletePreview(ctx context.Context, p *Principal, previewID string) (*JobResponse, error) {
	var job *store.Job
	err := s.db.Update(func(tx *store.Tx) error {
		prv, err := s.visiblePreview(tx, p, previewID)
		if err != nil {
			return err
		}
		job, err = s.deletePreview(tx, p, prv, "preview.delete")
		return err
	})
	return s.answerJob(job, err)
}

func (s *Service) deletePreview(tx *store.Tx, p *Principal, prv *store.Project, action string) (*store.Job, error) {
	if prv.State == ProjectDeleting {
		return nil, Conflict("preview database %s is already being deleted (job %s)", prv.ID, prv.LatestJobID)
	}
	if err := checkNotPromoting(tx, prv); err != nil {
		return nil, err
	}
	parent, err := store.Projects.Get(tx, prv.PreviewOf)
	if err != nil {
		return nil, Internal(err, "read the preview's project")
	}
	j, err := s.enqueuePreview(tx, parent, prv, JobPreviewDelete)
	if err != nil {
		return nil, err
	}
	prv.State, prv.UpdatedAt = ProjectDeleting, s.now()
	if err := store.Projects.Put(tx, prv); err != nil {
		return nil, Internal(err, "store preview")
	}
	if err := s.audit(tx, p, action, prv.OrganizationID, prv.PreviewOf, map[string]any{"preview_id": prv.ID, "job_id": j.ID}); err != nil {
		return nil, Internal(err, "audit")
	}
	return j, nil
}

// SweepPreviews deletes the previews whose TTL is over.
func (s *Service) SweepPreviews(ctx context.Context) (int, error) {
	return s.sweepExpired(func(tx *store.Tx) ([]*store.Project, error) {
		all, err := store.Projects.All(tx, func(p *store.Project) bool { return p.PreviewOf != "" && p.DeletedAt == nil })
		// A preview a cutover is promoting outlives its TTL until the cutover ends (which deletes it or not).
		return slices.DeleteFunc(all, func(p *store.Project) bool { return checkNotPromoting(tx, p) != nil }), err
	}, func(p *store.Project) *time.Time { return p.TTLExpiresAt },
		func(tx *store.Tx, p *store.Project) error {
			_, err := s.deletePreview(tx, &Principal{AuthSource: ActorSystem}, p, "preview.expire")
			return err
		})
}

func (s *Service) registerPreviewJobs(r *scheduler.Runner) {
	r.Handle(JobPreviewCreate, s.failProjectOnFinalError(s.provisionProject))
	r.Handle(JobPreviewDelete, s.deleteProjectJob)
	r.Handle(JobPreviewReset, s.failProjectOnFinalError(s.resetPreviewJob))
}

// ResetPreview enqueues preview.reset: the preview is made again from its source (an empty cluster, or a
// new copy of the project as of now); its own writes are gone, its host, ports and credential stay.
func (s *Service) ResetPreview(ctx context.Context, p *Principal, previewID string) (*JobResponse, error) {
	var job *store.Job
	err := s.db.Update(func(tx *store.Tx) error {
		prv, err := s.visiblePreview(tx, p, previewID)
		if err != nil {
			return err
		}
		if prv.State != ProjectActive {
			return Conflict("preview database %s is %s: a reset needs it active", prv.ID, prv.State)
		}
		if err := checkNotPromoting(tx, prv); err != nil {
			return err
		}
		parent, err := store.Projects.Get(tx, prv.PreviewOf)
		if err != nil {
			return Internal(err, "read the preview's project")
		}
		if prv.PreviewMode == PreviewClone && parent.State != ProjectActive {
			return Conflict("project %s is %s: a clone is made again from it active", parent.ID, parent.State)
		}
		if job, err = s.enqueuePreview(tx, parent, prv, JobPreviewReset); err != nil {
			return err
		}
		if prv.SourceKind == SourceLive {
			now := s.now()
			prv.SourceRestoreTime = &now
		}
		// Provisioning from now on (not from the job's start): a reader never sees it active while the
		// reset is queued.
		prv.State, prv.RuntimeStatus, prv.UpdatedAt = ProjectProvisioning, RuntimeProvisioning, s.now()
		if err := store.Projects.Put(tx, prv); err != nil {
			return Internal(err, "store preview")
		}
		return s.audit(tx, p, "preview.reset", prv.OrganizationID, prv.PreviewOf, map[string]any{"preview_id": prv.ID, "job_id": job.ID})
	})
	return s.answerJob(job, err)
}

// resetPreviewJob removes the preview's server and data (its instance record, ports and credential stay),
// then provisions it again from its source. A retry after a crash removes whatever the last attempt made.
func (s *Service) resetPreviewJob(ctx context.Context, run *scheduler.Run) (any, error) {
	_, err := s.dataPlane()
	if err != nil {
		return nil, err
	}
	prv, inst, err := s.loadProject(targetOf(run))
	if err != nil {
		return nil, err
	}
	if prv.DeletedAt != nil || prv.State == ProjectDeleting {
		return map[string]any{"skipped": "preview is " + prv.State}, nil
	}
	if inst != nil {
		if err := s.eng.Remove(ctx, inst); err != nil {
			return nil, scheduler.Transient(err)
		}
	}
	return s.provisionProject(ctx, run) // ResetPreview made the preview provisioning when it queued this job
}

// cloneSource is where a clone preview's data comes from (instances.CloneSpec): its project's running
// server, or, as of a past time, its base backup and WAL archive. It holds the project's admin password,
// which the copy starts with.
func (s *Service) cloneSource(ctx context.Context, run *scheduler.Run, prv *store.Project) (*instances.CloneSpec, error) {
	parent, pinst, err := s.loadProject(prv.PreviewOf)
	if err != nil {
		return nil, err
	}
	if parent.State != ProjectActive || pinst == nil {
		return nil, fmt.Errorf("project %s is %s: a clone needs it active", parent.ID, parent.State)
	}
	pw, err := s.box.Open(pinst.AdminPassword)
	if err != nil {
		return nil, fmt.Errorf("open the project's admin password: %w", err)
	}
	c := &instances.CloneSpec{Source: pinst, AdminPassword: string(pw), Label: "appliance preview " + prv.ID}
	if prv.SourceBackupID != "" { // recovered from the project's WAL archive to source_restore_time
		var b *store.Backup
		if err := s.db.View(func(tx *store.Tx) (err error) { b, err = store.Backups.Get(tx, prv.SourceBackupID); return err }); err != nil {
			return nil, fmt.Errorf("the preview's base backup %s: %w", prv.SourceBackupID, err)
		}
		archive, err := s.archiveOf(ctx, s.dp, parent.ID, b.BackupKey)
		if err != nil {
			return nil, err
		}
		c.Recovery = &instances.RecoverySpec{JobID: run.Job.ID, Archive: archive,
			Target: instances.Target{Time: *prv.SourceRestoreTime, Timeline: prv.SourceTimeline}}
	}
	return c, nil
}

// CopySessionName is the application_name of the session a clone's online copy runs on (its backup and
// its temporary replication slot end with it).
const CopySessionName = instances.CopySessionName

// removePreviews removes the instances of a deleted project's previews and marks them deleted.
func (s *Service) removePreviews(ctx context.Context, projectID string) error {
	var live []*store.Project
	if err := s.db.View(func(tx *store.Tx) (err error) { live, err = livePreviews(tx, projectID); return err }); err != nil {
		return err
	}
	for _, prv := range live {
		_, inst, err := s.loadProject(prv.ID)
		if err != nil {
			return err
		}
		instID := ""
		if inst != nil {
			if err := s.eng.Remove(ctx, inst); err != nil {
				return err
			}
			instID = inst.ID
		}
		if err := s.db.Update(func(tx *store.Tx) error {
			_, err := s.settle(tx, instID, InstanceRemoved, prv.ID, func(p *store.Project) {
				now := s.now()
				p.State, p.RuntimeStatus, p.DeletedAt = ProjectDeleted, RuntimeStopped, &now
				p.Credential.Password, p.PreviousCredential = nil, nil
			})
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}
