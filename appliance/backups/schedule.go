package backups

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/migrate"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// ScheduledBackupID is the id of a project's one schedule.
const ScheduledBackupID = "default"

// ScheduledBackupLabel is the label of the backups a schedule takes.
const ScheduledBackupLabel = "scheduled"

// DefaultRetentionDays is the backup retention of every project without a schedule, and retention_days when
// a PUT leaves it out (of a new schedule), unless the operator sets another (Config.BackupRetentionDays).
const DefaultRetentionDays = 7

// DefaultScheduleHour is the UTC hour of the daily backup a production project gets when it is created
// (AddDefaultSchedule); the minute is spread over the hour by the project's id, so the projects of an
// appliance do not all start their backups at once.
const DefaultScheduleHour = 3

// AddDefaultSchedule gives a project just created in tx its default schedule: active, daily at
// DefaultScheduleHour UTC and a minute of that hour taken from its id, keeping the operator's default
// retention. A production project has a daily backup from its first day; others get one when someone
// sets it (PutSchedule changes or disables it like any other).
func (s *Service) AddDefaultSchedule(tx *store.Tx, prj *store.Project, now time.Time) error {
	h := fnv.New32a()
	h.Write([]byte(prj.ID))
	r := &store.ScheduledBackup{ID: ScheduledBackupID, ProjectID: prj.ID, OrganizationID: prj.OrganizationID,
		Label: ScheduledBackupLabel, CronHour: DefaultScheduleHour, CronMinute: int(h.Sum32() % 60),
		RetentionDays: s.retentionDays(), IsActive: true, CreatedAt: now, UpdatedAt: now}
	if err := store.ScheduledBackups.Put(tx, r); err != nil {
		return fmt.Errorf("store the default backup schedule: %w", err)
	}
	return nil
}

// retentionDays is the operator's default backup retention (up --backup-retention-days).
func (s *Service) retentionDays() int {
	if s.cfg.RetentionDays > 0 {
		return s.cfg.RetentionDays
	}
	return DefaultRetentionDays
}

func scheduledBackupView(r *store.ScheduledBackup) *api.ScheduledBackup {
	return &api.ScheduledBackup{ID: r.ID, Label: r.Label, LastJobID: r.LastJobID, LastRunSkipped: r.LastRunSkipped, OrganizationID: r.OrganizationID,
		ProjectID: r.ProjectID, CronHour: r.CronHour, CronMinute: r.CronMinute, RetentionDays: r.RetentionDays,
		IsActive: r.IsActive, CreatedAt: r.CreatedAt, LastRunAt: r.LastRunAt, UpdatedAt: r.UpdatedAt}
}

// ListSchedules lists a project's backup schedules: none, or its one schedule "default".
func (s *Service) ListSchedules(ctx context.Context, p *authz.Principal, projectID string) (*api.ScheduledBackupList, error) {
	out := &api.ScheduledBackupList{ScheduledBackups: []*api.ScheduledBackup{}}
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		r, err := store.ScheduledBackups.Get(tx, prj.ID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil
		case err != nil:
			return apperr.Internal(err, "read the backup schedule")
		}
		out.ScheduledBackups = append(out.ScheduledBackups, scheduledBackupView(r))
		return nil
	})
	return out, err
}

// PutSchedule creates or replaces a project's backup schedule. It is data the periodic
// scheduled-backups task reads, so a change takes effect at its next tick.
func (s *Service) PutSchedule(ctx context.Context, p *authz.Principal, projectID, scheduleID string, req *api.PutScheduledBackupRequest) (*api.ScheduledBackupResponse, error) {
	if scheduleID != ScheduledBackupID {
		return nil, apperr.NotFound("scheduled backup %s not found: a project has one schedule, %q", scheduleID, ScheduledBackupID)
	}
	// Retention deletes backups and the schedule decides whether any are taken: an admin's decision.
	if err := p.RequireAdminRole("changing the backup schedule or its retention"); err != nil {
		return nil, err
	}
	switch {
	case req.CronHour == nil:
		return nil, apperr.Invalid("cron_hour is required")
	case req.CronMinute == nil:
		return nil, apperr.Invalid("cron_minute is required")
	case req.IsActive == nil:
		return nil, apperr.Invalid("is_active is required")
	case *req.CronHour < 0 || *req.CronHour > 23:
		return nil, apperr.Invalid("cron_hour must be 0 to 23")
	case *req.CronMinute < 0 || *req.CronMinute > 59:
		return nil, apperr.Invalid("cron_minute must be 0 to 59")
	case req.RetentionDays != nil && (*req.RetentionDays < 1 || *req.RetentionDays > 365):
		return nil, apperr.Invalid("retention_days must be 1 to 365")
	}
	var out *api.ScheduledBackupResponse
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		now := s.now()
		r, err := store.ScheduledBackups.Get(tx, prj.ID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			r = &store.ScheduledBackup{ID: ScheduledBackupID, ProjectID: prj.ID, OrganizationID: prj.OrganizationID,
				Label: ScheduledBackupLabel, RetentionDays: s.retentionDays(), CreatedAt: now}
		case err != nil:
			return apperr.Internal(err, "read the backup schedule")
		}
		r.CronHour, r.CronMinute, r.IsActive, r.UpdatedAt = *req.CronHour, *req.CronMinute, *req.IsActive, now
		if req.RetentionDays != nil {
			r.RetentionDays = *req.RetentionDays
		}
		if err := store.ScheduledBackups.Put(tx, r); err != nil {
			return apperr.Internal(err, "store the backup schedule")
		}
		if err := s.host.Audit(tx, p, "scheduled_backup.update", prj.OrganizationID, prj.ID, map[string]any{
			"cron_hour": r.CronHour, "cron_minute": r.CronMinute, "is_active": r.IsActive, "retention_days": r.RetentionDays,
		}); err != nil {
			return apperr.Internal(err, "audit")
		}
		out = &api.ScheduledBackupResponse{ScheduledBackup: scheduledBackupView(r)}
		return nil
	})
	return out, err
}

// ScheduledRunResult says what one run of the scheduled-backups task did.
type ScheduledRunResult struct {
	Enqueued       int // backup.create jobs enqueued by schedules
	Skipped        int // slots of suspended projects with no data change since their last backup
	First          int // first backups enqueued (Config.FirstBackups)
	BackupsDeleted int // backups deleted by retention
	WALDeleted     int // WAL segments deleted by retention
}

// dueSlot reports whether a schedule's latest slot has come and has not run yet: today's (UTC) once its
// hour:minute has come; before that, yesterday's, when the schedule was already set so then and it did not
// run (the appliance was down across midnight): a missed slot runs late, once.
func dueSlot(r *store.ScheduledBackup, now time.Time) bool {
	now = now.UTC()
	slot := time.Date(now.Year(), now.Month(), now.Day(), r.CronHour, r.CronMinute, 0, 0, time.UTC)
	if now.Before(slot) {
		slot = slot.AddDate(0, 0, -1)
		if slot.Before(r.UpdatedAt) {
			return false // yesterday's slot was not this schedule's
		}
	}
	return r.LastRunAt == nil || r.LastRunAt.Before(slot)
}

// RunScheduled is the periodic scheduled-backups task (every minute): it enqueues a backup.create
// (label "scheduled") for every active schedule whose UTC hour:minute has come today and that has not run
// since, then applies retention to every project that has backups: its schedule's retention_days (active or
// not), or the appliance's default retention when it has no schedule.
//
// A suspended project (scale to zero) whose WAL after its newest completed backup holds no data change
// (postgres.Instance.DataChangedSince) gets no backup: the slot is recorded as run and skipped
// (last_run_skipped, the audit action scheduled_backup.skip). One with a change, or where that cannot be
// told, is backed up: the backup job wakes it (scaletozero's WakeForJob) and the idle pass suspends it again.
func (s *Service) RunScheduled(ctx context.Context, now time.Time) (ScheduledRunResult, error) {
	var res ScheduledRunResult
	if err := s.host.RequireBackups(); err != nil {
		return res, err
	}
	if err := s.host.RequireDisk(); err != nil { // they wait for space: the next run after it takes them
		return res, err
	}
	var scheds []*store.ScheduledBackup
	if err := s.db.View(func(tx *store.Tx) (err error) {
		scheds, err = store.ScheduledBackups.All(tx, nil)
		return err
	}); err != nil {
		return res, err
	}
	var errs []error
	for _, sc := range scheds {
		if !sc.IsActive || !dueSlot(sc, now) {
			continue
		}
		enqueued, skipped := false, false
		suspendedAt, skip := s.skipSuspended(ctx, sc.ProjectID)
		err := s.db.Update(func(tx *store.Tx) error {
			enqueued, skipped = false, false // a run again starts over
			r, err := store.ScheduledBackups.Get(tx, sc.ProjectID)
			if err != nil || !r.IsActive || !dueSlot(r, now) {
				return err
			}
			prj, err := store.Projects.Get(tx, r.ProjectID)
			if err != nil {
				return err
			}
			if skip != "" && prj.IdleSuspendedAt != nil && prj.IdleSuspendedAt.Equal(suspendedAt) {
				at := now.UTC()
				r.LastRunAt, r.LastRunSkipped = &at, skip
				if err := store.ScheduledBackups.Put(tx, r); err != nil {
					return err
				}
				skipped = true
				return s.host.Audit(tx, &authz.Principal{AuthSource: authz.ActorSystem}, "scheduled_backup.skip", prj.OrganizationID, prj.ID,
					map[string]any{"reason": skip})
			}
			switch {
			case prj.State == api.ProjectDeleting || prj.State == api.ProjectDeleted:
				return nil // never: the delete job deletes the project's backups and this schedule
			case prj.State != api.ProjectActive || prj.PrimaryInstanceID == "":
				return nil // not now: the slot runs once the project is active again
			}
			if suspended, err := store.Suspended(tx, prj.OrganizationID); err != nil || suspended {
				return err // not now: its server is stopped until the organization resumes
			}
			b, j, err := s.NewBackup(tx, prj, ScheduledBackupLabel)
			if err != nil {
				return err
			}
			at := now.UTC()
			r.LastRunAt, r.LastJobID, r.LastRunSkipped = &at, j.ID, ""
			if err := store.ScheduledBackups.Put(tx, r); err != nil {
				return err
			}
			enqueued = true
			return s.host.Audit(tx, &authz.Principal{AuthSource: authz.ActorSystem}, "scheduled_backup.run", prj.OrganizationID, prj.ID,
				map[string]any{"backup_id": b.ID, "backup_key": b.BackupKey, "job_id": j.ID})
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("schedule of %s: %w", sc.ProjectID, err))
		} else if enqueued {
			res.Enqueued++
		} else if skipped {
			res.Skipped++
			s.log.Info("scheduled backup skipped", "project", sc.ProjectID, "reason", skip)
		}
	}
	if s.cfg.FirstBackups {
		n, err := s.enqueueFirstBackups(now)
		res.First = n
		if err != nil {
			errs = append(errs, err)
		}
	}
	if res.Enqueued+res.First > 0 {
		s.host.Notify()
	}
	days := map[string]int{} // the projects with backups, and their retention
	if err := s.db.View(func(tx *store.Tx) error {
		_, err := store.Backups.All(tx, func(b *store.Backup) bool {
			days[b.ProjectID] = s.retentionDays()
			return false
		})
		return err
	}); err != nil {
		return res, errors.Join(append(errs, err)...)
	}
	for _, sc := range scheds {
		if _, ok := days[sc.ProjectID]; ok && sc.RetentionDays > 0 {
			days[sc.ProjectID] = sc.RetentionDays
		}
	}
	for _, projectID := range slices.Sorted(maps.Keys(days)) {
		nb, nw, err := s.applyRetention(projectID, days[projectID], now)
		res.BackupsDeleted += nb
		res.WALDeleted += nw
		if err != nil {
			errs = append(errs, fmt.Errorf("retention of %s: %w", projectID, err))
		}
	}
	return res, errors.Join(errs...)
}

// FirstBackupLabel is the label of the backups FirstBackups takes; FirstBackupRetry is how long after a
// failed first backup the next is tried.
const (
	FirstBackupLabel = "first"
	FirstBackupRetry = time.Hour
)

// movingMeta keys, in the store's meta, a running move of a project (appliance/moves' metaPrefix).
const movingMeta = "move/"

// enqueueFirstBackups enqueues a backup.create (label "first") for every active project — not a preview,
// not an unclaimed ephemeral database, not one being moved to another node (the move takes its own first:
// appliance/moves) — that has no backup pending, running or completed, and whose last failed one (if any)
// failed more than FirstBackupRetry ago; each in its own transaction, checked again there.
func (s *Service) enqueueFirstBackups(now time.Time) (int, error) {
	needs := func(tx *store.Tx, prj *store.Project) (bool, error) {
		if prj.State != api.ProjectActive || prj.PrimaryInstanceID == "" || prj.PreviewOf != "" || (prj.Ephemeral && prj.ClaimedAt == nil) {
			return false, nil
		}
		if tx.Meta(movingMeta+prj.ID) != "" {
			return false, nil
		}
		if suspended, err := store.Suspended(tx, prj.OrganizationID); err != nil || suspended {
			return false, err // after the organization's resume
		}
		bs, err := store.Backups.All(tx, func(b *store.Backup) bool { return b.ProjectID == prj.ID })
		if err != nil {
			return false, err
		}
		for _, b := range bs {
			if b.State != StateFailed || now.Sub(b.CreatedAt) < FirstBackupRetry {
				return false, nil
			}
		}
		return true, nil
	}
	var todo []string
	if err := s.db.View(func(tx *store.Tx) error {
		prjs, err := store.Projects.All(tx, func(p *store.Project) bool { return p.State == api.ProjectActive })
		for _, prj := range prjs {
			if ok, err := needs(tx, prj); err != nil {
				return err
			} else if ok {
				todo = append(todo, prj.ID)
			}
		}
		return err
	}); err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, id := range todo {
		err := s.db.Update(func(tx *store.Tx) error {
			prj, err := store.Projects.Get(tx, id)
			if err != nil {
				return err
			}
			if ok, err := needs(tx, prj); err != nil || !ok {
				return err
			}
			b, j, err := s.NewBackup(tx, prj, FirstBackupLabel)
			if err != nil {
				return err
			}
			tx.OnCommit(func() { n++ })
			return s.host.Audit(tx, &authz.Principal{AuthSource: authz.ActorSystem}, "backup.first", prj.OrganizationID, prj.ID,
				map[string]any{"backup_id": b.ID, "backup_key": b.BackupKey, "job_id": j.ID})
		})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			errs = append(errs, fmt.Errorf("first backup of %s: %w", id, err))
		}
	}
	return n, errors.Join(errs...)
}

// applyRetention deletes the project's backups created more than days before now (records and
// directories), except the newest completed one, those still pending or running and those something else
// needs (pinnedBackups), then deletes the archived WAL segments older than the oldest remaining completed
// backup's start segment. It does nothing while a restore of the project is queued or running.
func (s *Service) applyRetention(projectID string, days int, now time.Time) (backups, wal int, err error) {
	if days <= 0 {
		days = s.retentionDays()
	}
	cutoff := now.Add(-time.Duration(days) * 24 * time.Hour)
	var all []*store.Backup
	busy := false
	var pinned map[string]bool
	live := map[string]bool{} // the WAL archives of the project's servers: never removed whole
	if err := s.db.View(func(tx *store.Tx) error {
		prj, err := store.Projects.Get(tx, projectID)
		if err != nil {
			return err
		}
		if prj.State != api.ProjectActive {
			busy = true
			return nil
		}
		if prj.PrimaryInstanceID == "" {
			busy = true // no server: which archive it writes is unknown
			return nil
		}
		inst, err := store.Instances.Get(tx, prj.PrimaryInstanceID)
		if err != nil {
			return err
		}
		live[inst.WALArchive] = true
		if inst.PreviousDir != "" {
			live[inst.PreviousWALArchive] = true
		}
		js, err := store.Jobs.Lookup(tx, store.JobsByProject, projectID, store.Query{})
		if err != nil {
			return err
		}
		for _, j := range js {
			if j.Type == JobRestore && j.State != scheduler.StateCompleted && j.State != scheduler.StateFailed {
				busy = true
			}
		}
		if pinned, err = pinnedBackups(tx, projectID); err != nil {
			return err
		}
		all, err = store.Backups.Lookup(tx, store.BackupsByProject, projectID, store.Query{Newest: true})
		return err
	}); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return 0, 0, nil
		}
		return 0, 0, err
	}
	if busy {
		return 0, 0, nil
	}
	ctx := context.Background() // the directory store answers at once
	bs := s.host.BackupStore()
	var newest *store.Backup
	for _, b := range all {
		if b.State == StateCompleted && (newest == nil || b.CreatedAt.After(newest.CreatedAt)) {
			newest = b
		}
	}
	// Each cluster's WAL archive is pruned before its own oldest kept backup (WAL names of two clusters do
	// not compare); the archive of an old cluster none of whose backups is kept goes whole.
	oldestKept := map[string]*store.Backup{}
	archives := map[string]bool{}
	for _, b := range all {
		archives[b.WALArchive] = true
		keep := b == newest || pinned[b.ID] || !b.CreatedAt.Before(cutoff) || b.State == StatePending || b.State == StateRunning
		if keep {
			if o := oldestKept[b.WALArchive]; b.State == StateCompleted && (o == nil || b.CreatedAt.Before(o.CreatedAt)) {
				oldestKept[b.WALArchive] = b
			}
			if b.State != StateCompleted {
				live[b.WALArchive] = true
			}
			continue
		}
		if err := bs.RemoveBackup(ctx, projectID, b.BackupKey); err != nil {
			return backups, 0, err
		}
		if err := s.db.Update(func(tx *store.Tx) error { return store.Backups.Delete(tx, b.ID) }); err != nil {
			return backups, 0, err
		}
		backups++
	}
	for archive := range archives {
		o := oldestKept[archive]
		if o == nil {
			if live[archive] {
				continue
			}
			if _, err := bs.RemoveWAL(ctx, projectID, archive); err != nil {
				return backups, wal, err
			}
			s.log.Info("backup retention: removed the WAL archive of an old cluster with no backup left", "project", projectID, "archive", archive)
			continue
		}
		_, start, err := bs.BackupStart(ctx, projectID, o.BackupKey)
		if err != nil {
			return backups, wal, err
		}
		n, err := bs.PruneWAL(ctx, projectID, archive, start)
		wal += n
		if err != nil {
			return backups, wal, err
		}
	}
	return backups, wal, nil
}

// pinnedBackups are the ids of the project's backups that something else needs, whatever their age: the
// base backup of each active restore point (a restore to the point starts from it), of each preview cloned
// from the project as of a past time (its reset clones again from it), the backup an unfinished follow
// would restore on abort, and the pre-cutover backup of an approved or promoting cutover request. Keeping
// a backup keeps the WAL archived since it too.
func pinnedBackups(tx *store.Tx, projectID string) (map[string]bool, error) {
	pinned := map[string]bool{}
	if f, err := migrate.CurrentFollow(tx, projectID); err != nil {
		return nil, err
	} else if f != nil && !migrate.FollowFinished(f.State) {
		pinned[f.BackupID] = true
	}
	rps, err := store.RestorePoints.Lookup(tx, store.RestorePointsByProject, projectID, store.Query{})
	if err != nil {
		return nil, err
	}
	for _, rp := range rps {
		if rp.State != RestorePointDeleted && rp.BackupID != "" {
			pinned[rp.BackupID] = true
		}
	}
	prvs, err := store.Projects.Lookup(tx, store.ProjectsByPreviewOf, projectID, store.Query{})
	if err != nil {
		return nil, err
	}
	for _, prv := range prvs {
		if prv.State != api.ProjectDeleted && prv.SourceBackupID != "" {
			pinned[prv.SourceBackupID] = true
		}
	}
	reqs, err := store.CutoverRequests.Lookup(tx, store.CutoverRequestsByProject, projectID, store.Query{})
	if err != nil {
		return nil, err
	}
	for _, r := range reqs {
		if (r.Status == migrate.CutoverApproved || r.Status == migrate.CutoverPromoting) && r.PreCutoverBackupID != "" {
			pinned[r.PreCutoverBackupID] = true
		}
	}
	delete(pinned, "")
	return pinned, nil
}

// skipSuspended is why the project's scheduled backup may be skipped, with the suspension it holds for
// ("" when it may not: the project runs, has no completed backup that names its WAL end, or its WAL after
// that backup changes data or cannot be read).
func (s *Service) skipSuspended(ctx context.Context, projectID string) (time.Time, string) {
	if s.eng == nil {
		return time.Time{}, ""
	}
	var prj *store.Project
	var inst *store.Instance
	var last *store.Backup
	err := s.db.View(func(tx *store.Tx) (err error) {
		if prj, err = store.Projects.Get(tx, projectID); err != nil || prj.IdleSuspendedAt == nil || prj.PrimaryInstanceID == "" {
			return err
		}
		if inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID); err != nil {
			return err
		}
		bs, err := store.Backups.Lookup(tx, store.BackupsByProject, projectID, store.Query{Newest: true})
		for _, b := range bs {
			if b.State == StateCompleted {
				last = b
				break
			}
		}
		if last != nil && last.WALArchive != inst.WALArchive {
			last = nil // of another cluster (before a major upgrade): the WAL since it is not this server's
		}
		return err
	})
	if err != nil || inst == nil || last == nil || last.EndLSN == "" || last.CompletedAt == nil {
		return time.Time{}, ""
	}
	bs := s.host.BackupStore()
	archived := func(ctx context.Context, segment string) (io.ReadCloser, error) {
		return bs.GetWAL(ctx, projectID, inst.WALArchive, segment)
	}
	changed, detail, err := s.eng.Instance(inst).DataChangedSince(ctx, last.EndLSN, last.Timeline, archived)
	switch {
	case err != nil:
		s.log.Info("scheduled backup of a suspended project: its WAL since the last backup cannot be read, backing up", "project", projectID, "err", err)
		return time.Time{}, ""
	case changed:
		s.log.Info("scheduled backup of a suspended project with new data: waking it", "project", projectID, "change", detail)
		return time.Time{}, ""
	}
	return *prj.IdleSuspendedAt, fmt.Sprintf("the project is suspended and its data has not changed since backup %s (completed %s)",
		last.BackupKey, last.CompletedAt.UTC().Format(time.RFC3339))
}
