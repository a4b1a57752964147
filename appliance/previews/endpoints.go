package previews

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

func view(p *store.Project) *api.PreviewDatabase {
	v := &api.PreviewDatabase{ID: p.ID, ProjectID: p.PreviewOf, Name: p.Name, DatabaseName: p.DatabaseName, RoleName: p.RoleName,
		PublicHost: p.PublicHost, SSLMode: p.SSLMode, Mode: p.PreviewMode, SourceKind: p.SourceKind,
		SourceBackupKey: p.SourceBackupKey, SourceRestoreTime: p.SourceRestoreTime, SourceDatabase: p.SourceDatabase,
		SourceRestorePointID: p.SourceRestorePointID, SourceRestorePointLabel: p.SourceRestorePointLabel,
		State: p.State, LastError: p.LastError, DirectPort: p.DirectPort, PooledPort: p.PooledPort,
		CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt}
	if p.TTLExpiresAt != nil {
		v.TTLExpiresAt = *p.TTLExpiresAt
	}
	return v
}

func checkTTL(h int) error {
	if h < 1 || h > api.MaxPreviewTTLHours {
		return apperr.Invalid("ttl_hours must be between 1 and %d", api.MaxPreviewTTLHours)
	}
	return nil
}

// visible loads a preview the caller may see: a project-scoped key reaches its project's only.
func (s *Service) visible(tx *store.Tx, p *authz.Principal, previewID string) (*store.Project, error) {
	prv, err := store.Projects.Get(tx, previewID)
	if err != nil || prv.PreviewOf == "" {
		return nil, apperr.NotFoundAs(apperr.OrNotFound(err), "preview database %s not found", previewID)
	}
	if err := p.CheckProject(prv.PreviewOf, prv.OrganizationID); err != nil {
		return nil, err
	}
	if prv.DeletedAt != nil {
		return nil, apperr.NotFound("preview database %s was deleted", previewID)
	}
	return prv, nil
}

// live are a project's previews not deleted.
func live(tx *store.Tx, projectID string) ([]*store.Project, error) {
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

// enqueue queues a preview job: the parent's project_id, the preview's preview_database_id, the preview's
// lock.
func (s *Service) enqueue(tx *store.Tx, parent, prv *store.Project, jobType string) (*store.Job, error) {
	j := &store.Job{Type: jobType, OrganizationID: parent.OrganizationID, ProjectID: parent.ID, PreviewDatabaseID: prv.ID,
		LockedResource: prv.ID, InstanceID: prv.PrimaryInstanceID, Node: store.ProjectNode(tx, prv)} // where the preview's instance is
	if err := scheduler.Enqueue(tx, j); err != nil {
		return nil, apperr.Internal(err, "enqueue %s", jobType)
	}
	prv.LatestJobID = j.ID
	return j, nil
}

// Create records a preview of an active project and enqueues the job that makes its instance.
func (s *Service) Create(ctx context.Context, p *authz.Principal, projectID string, req *api.CreatePreviewRequest) (*api.PreviewJobResponse, error) {
	mode := req.Mode
	if mode == "" {
		mode = ModeClone
	}
	if mode != ModeEmpty && mode != ModeClone {
		return nil, apperr.Invalid("mode must be empty or clone")
	}
	ttl := api.DefaultPreviewTTLHours
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
	if err := s.host.CheckDisplayText("name", name, 1, 63); err != nil {
		return nil, err
	}
	var target time.Time
	var pitrBase func(tx *store.Tx, projectID string, target time.Time) (*store.Backup, int, error)
	var pointBase func(tx *store.Tx, projectID, id string) (*store.RestorePoint, *store.Backup, error)
	if req.SourceRestoreTime != "" && req.SourceRestorePointID != "" {
		return nil, apperr.Invalid("source_restore_time and source_restore_point_id cannot go together: a clone is as of one or the other")
	}
	if req.SourceRestorePointID != "" {
		if mode != ModeClone {
			return nil, apperr.Invalid("source_restore_point_id makes a clone: it cannot go with mode empty")
		}
		if err := s.host.RequireBackups(); err != nil { // it starts from a base backup
			return nil, err
		}
		var err error
		if pointBase, err = s.host.RestorePointBase(ctx, p, projectID); err != nil {
			return nil, err
		}
	}
	if req.SourceRestoreTime != "" {
		if mode != ModeClone {
			return nil, apperr.Invalid("source_restore_time makes a clone: it cannot go with mode empty")
		}
		if err := s.host.RequireBackups(); err != nil { // it starts from a base backup
			return nil, err
		}
		t, err := time.Parse(time.RFC3339Nano, req.SourceRestoreTime)
		if err != nil {
			return nil, apperr.Invalid("source_restore_time must be an RFC 3339 time such as 2026-01-31T12:00:00Z")
		}
		if target = t.UTC(); target.After(s.now()) {
			return nil, apperr.Invalid("source_restore_time %s is in the future", req.SourceRestoreTime)
		}
		if pitrBase, err = s.host.PointInTime(ctx, p, projectID); err != nil {
			return nil, err
		}
	}
	var job *store.Job
	var prv *store.Project
	err := s.db.Update(func(tx *store.Tx) error {
		parent, err := s.host.ActiveProject(tx, p, projectID)
		if err != nil {
			return err
		}
		var base *store.Backup
		var tl int
		var rp *store.RestorePoint
		if pointBase != nil {
			if rp, base, err = pointBase(tx, parent.ID, req.SourceRestorePointID); err != nil {
				return err
			}
			tl, target = rp.Timeline, rp.PITRTime.UTC()
		}
		if pitrBase != nil {
			if base, tl, err = pitrBase(tx, parent.ID, target); err != nil {
				return apperr.Internal(err, "find a base backup")
			}
			if base == nil {
				return apperr.Invalid("source_restore_time %s is outside the project's point-in-time window: no base backup was complete by then", req.SourceRestoreTime)
			}
		}
		previews, err := live(tx, parent.ID)
		if err != nil {
			return apperr.Internal(err, "list previews")
		}
		if limit, plan := s.host.PlanPreviews(parent.Plan); len(previews) >= limit {
			return apperr.Forbidden("preview quota reached: project %s has %d of the %d previews its plan (%s) allows", parent.ID, len(previews), limit, plan)
		}
		if n, err := s.orgPreviews(tx, parent.OrganizationID); err != nil {
			return err
		} else if _, q, err := s.host.OrganizationQuota(tx, parent.OrganizationID); err != nil {
			return apperr.Internal(err, "read the organization's quota")
		} else if n >= q {
			return apperr.Forbidden("preview quota reached: the organization has %d of %d previews", n, q)
		}
		now := s.now()
		expires := now.Add(time.Duration(ttl) * time.Hour)
		prv = &store.Project{ID: ids.New("prv"), Name: name, Slug: s.host.Slug(name), OrganizationID: parent.OrganizationID,
			DatabaseName: parent.DatabaseName, RoleName: parent.RoleName, PublicHost: s.cfg.PublicHost, Region: parent.Region,
			Plan: parent.Plan, SSLMode: "verify-full", StatementTimeout: parent.StatementTimeout,
			IdleTransactionTimeout: parent.IdleTransactionTimeout, MaxConnections: parent.MaxConnections,
			StorageLimitBytes: parent.StorageLimitBytes, Environment: "development", State: api.ProjectProvisioning,
			RuntimeStatus: api.RuntimeProvisioning, CreatedAt: now, UpdatedAt: now, PreloadLibraries: parent.PreloadLibraries,
			PreviewOf: parent.ID, PreviewMode: mode, SourceKind: SourceNone, TTLExpiresAt: &expires}
		// Next to its parent (a clone is a copy of the parent's files), when it fits there.
		if err := s.host.PlacePreview(tx, parent, prv); err != nil {
			return err
		}
		if prv.PreloadLibraries == nil {
			prv.PreloadLibraries = []string{}
		}
		if mode == ModeClone {
			prv.SourceKind, prv.SourceDatabase, prv.SourceRestoreTime = SourceLive, parent.DatabaseName, &now
		}
		if base != nil {
			prv.SourceKind, prv.SourceBackupKey, prv.SourceBackupID, prv.SourceTimeline = SourceBackup, base.BackupKey, base.ID, tl
			prv.SourceRestoreTime = &target
		}
		if rp != nil {
			prv.SourceRestorePointID, prv.SourceRestorePointLabel, prv.SourceRestorePointName = rp.ID, rp.Label, rp.Name
		}
		if job, err = s.enqueue(tx, parent, prv, JobCreate); err != nil {
			return err
		}
		if err := store.Projects.Put(tx, prv); err != nil {
			return apperr.Internal(err, "store preview")
		}
		md := map[string]any{"preview_id": prv.ID, "name": name, "mode": mode, "ttl_hours": ttl, "job_id": job.ID}
		if req.SourceRestoreTime != "" {
			md["source_restore_time"] = req.SourceRestoreTime
		}
		if rp != nil {
			md["source_restore_point_id"] = rp.ID
		}
		if err := s.host.Audit(tx, p, "preview.create", parent.OrganizationID, parent.ID, md); err != nil {
			return apperr.Internal(err, "audit")
		}
		return nil
	})
	res, err := s.host.AnswerJob(job, err)
	if err != nil {
		return nil, err
	}
	return &api.PreviewJobResponse{Job: res.Job, Preview: view(prv)}, nil
}

// orgPreviews counts the organization's live previews.
func (s *Service) orgPreviews(tx *store.Tx, orgID string) (int, error) {
	prjs, err := store.Projects.Lookup(tx, store.ProjectsByOrg, orgID, store.Query{})
	if err != nil {
		return 0, apperr.Internal(err, "list projects")
	}
	n := 0
	for _, p := range prjs {
		if p.PreviewOf != "" && p.DeletedAt == nil {
			n++
		}
	}
	return n, nil
}

// List lists a project's live previews, oldest first.
func (s *Service) List(ctx context.Context, p *authz.Principal, projectID string) (*api.PreviewList, error) {
	out := &api.PreviewList{PreviewDatabases: []*api.PreviewDatabase{}}
	err := s.db.View(func(tx *store.Tx) error {
		parent, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		previews, err := live(tx, parent.ID)
		if err != nil {
			return apperr.Internal(err, "list previews")
		}
		for _, prv := range previews {
			out.PreviewDatabases = append(out.PreviewDatabases, view(prv))
		}
		return nil
	})
	return out, err
}

// Connections are a preview's URLs with its own credential.
func (s *Service) Connections(ctx context.Context, p *authz.Principal, previewID string) (*api.ConnectionsResponse, error) {
	var out *api.ConnectionsResponse
	err := s.db.View(func(tx *store.Tx) error {
		prv, err := s.visible(tx, p, previewID)
		if err != nil {
			return err
		}
		if prv.State != api.ProjectActive {
			return apperr.Conflict("preview database %s is %s: connections exist once it is active", prv.ID, prv.State)
		}
		c, err := s.host.Connections(prv)
		if err == nil {
			out = &api.ConnectionsResponse{Connections: *c}
		}
		return err
	})
	return out, err
}

// Extend moves the preview's deletion to ttl_hours from now.
func (s *Service) Extend(ctx context.Context, p *authz.Principal, previewID string, req *api.ExtendPreviewRequest) (*api.PreviewResponse, error) {
	if err := checkTTL(req.TTLHours); err != nil {
		return nil, err
	}
	var out *api.PreviewResponse
	err := s.db.Update(func(tx *store.Tx) error {
		prv, err := s.visible(tx, p, previewID)
		if err != nil {
			return err
		}
		if prv.State == api.ProjectDeleting {
			return apperr.Conflict("preview database %s is being deleted", prv.ID)
		}
		now := s.now()
		expires := now.Add(time.Duration(req.TTLHours) * time.Hour)
		prv.TTLExpiresAt, prv.UpdatedAt = &expires, now
		if err := store.Projects.Put(tx, prv); err != nil {
			return apperr.Internal(err, "store preview")
		}
		if err := s.host.Audit(tx, p, "preview.extend", prv.OrganizationID, prv.PreviewOf,
			map[string]any{"preview_id": prv.ID, "ttl_hours": req.TTLHours, "ttl_expires_at": expires}); err != nil {
			return apperr.Internal(err, "audit")
		}
		out = &api.PreviewResponse{Preview: view(prv)}
		return nil
	})
	return out, err
}

// Delete enqueues preview.delete: its instance and everything it had are removed.
func (s *Service) Delete(ctx context.Context, p *authz.Principal, previewID string) (*api.JobResponse, error) {
	var job *store.Job
	err := s.db.Update(func(tx *store.Tx) error {
		prv, err := s.visible(tx, p, previewID)
		if err != nil {
			return err
		}
		job, err = s.EnqueueDelete(tx, p, prv, "preview.delete")
		return err
	})
	return s.host.AnswerJob(job, err)
}

// EnqueueDelete enqueues the preview's preview.delete in tx and audits it as action (the endpoint, the
// sweep, a completed cutover); the caller pokes the runner once tx committed.
func (s *Service) EnqueueDelete(tx *store.Tx, p *authz.Principal, prv *store.Project, action string) (*store.Job, error) {
	if prv.State == api.ProjectDeleting {
		return nil, apperr.Conflict("preview database %s is already being deleted (job %s)", prv.ID, prv.LatestJobID)
	}
	if err := s.host.CheckNotPromoting(tx, prv); err != nil {
		return nil, err
	}
	parent, err := store.Projects.Get(tx, prv.PreviewOf)
	if err != nil {
		return nil, apperr.Internal(err, "read the preview's project")
	}
	j, err := s.enqueue(tx, parent, prv, JobDelete)
	if err != nil {
		return nil, err
	}
	prv.State, prv.UpdatedAt = api.ProjectDeleting, s.now()
	if err := store.Projects.Put(tx, prv); err != nil {
		return nil, apperr.Internal(err, "store preview")
	}
	if err := s.host.Audit(tx, p, action, prv.OrganizationID, prv.PreviewOf, map[string]any{"preview_id": prv.ID, "job_id": j.ID}); err != nil {
		return nil, apperr.Internal(err, "audit")
	}
	return j, nil
}

// Sweep deletes the previews whose TTL is over.
func (s *Service) Sweep(ctx context.Context) (int, error) {
	return s.sweepExpired(func(tx *store.Tx) ([]*store.Project, error) {
		all, err := store.Projects.All(tx, func(p *store.Project) bool { return p.PreviewOf != "" && p.DeletedAt == nil })
		// A preview a cutover is promoting outlives its TTL until the cutover ends (which deletes it or not).
		return slices.DeleteFunc(all, func(p *store.Project) bool { return s.host.CheckNotPromoting(tx, p) != nil }), err
	}, func(p *store.Project) *time.Time { return p.TTLExpiresAt },
		func(tx *store.Tx, p *store.Project) error {
			_, err := s.EnqueueDelete(tx, &authz.Principal{AuthSource: authz.ActorSystem}, p, "preview.expire")
			return err
		})
}

// Reset enqueues preview.reset: the preview is made again from its source (an empty cluster, or a new
// copy of the project as of now); its own writes are gone, its host, ports and credential stay.
func (s *Service) Reset(ctx context.Context, p *authz.Principal, previewID string) (*api.JobResponse, error) {
	var job *store.Job
	err := s.db.Update(func(tx *store.Tx) error {
		prv, err := s.visible(tx, p, previewID)
		if err != nil {
			return err
		}
		if prv.State != api.ProjectActive {
			return apperr.Conflict("preview database %s is %s: a reset needs it active", prv.ID, prv.State)
		}
		if err := s.host.CheckNotPromoting(tx, prv); err != nil {
			return err
		}
		parent, err := store.Projects.Get(tx, prv.PreviewOf)
		if err != nil {
			return apperr.Internal(err, "read the preview's project")
		}
		if prv.PreviewMode == ModeClone && parent.State != api.ProjectActive {
			return apperr.Conflict("project %s is %s: a clone is made again from it active", parent.ID, parent.State)
		}
		if job, err = s.enqueue(tx, parent, prv, JobReset); err != nil {
			return err
		}
		if prv.SourceKind == SourceLive {
			now := s.now()
			prv.SourceRestoreTime = &now
		}
		// Provisioning from now on (not from the job's start): a reader never sees it active while the
		// reset is queued.
		prv.State, prv.RuntimeStatus, prv.UpdatedAt = api.ProjectProvisioning, api.RuntimeProvisioning, s.now()
		if err := store.Projects.Put(tx, prv); err != nil {
			return apperr.Internal(err, "store preview")
		}
		return s.host.Audit(tx, p, "preview.reset", prv.OrganizationID, prv.PreviewOf, map[string]any{"preview_id": prv.ID, "job_id": job.ID})
	})
	return s.host.AnswerJob(job, err)
}
