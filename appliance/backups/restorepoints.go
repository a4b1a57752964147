package backups

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// Restore point kinds and states.
const (
	RestorePointNamed   = api.RestorePointNamed
	RestorePointActive  = api.RestorePointActive
	RestorePointDeleted = api.RestorePointDeleted
)

func restorePointView(r *store.RestorePoint) *api.RestorePoint {
	return &api.RestorePoint{ID: r.ID, BackupID: r.BackupID, BackupKey: r.BackupKey, CreatedByActorID: r.CreatedByActorID,
		CreatedByActorKind: r.CreatedByActorKind, Label: r.Label, Note: r.Note, OrganizationID: r.OrganizationID,
		ProjectID: r.ProjectID, Kind: r.Kind, State: r.State, PITRTime: r.PITRTime, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// CreateRestorePoint writes a named restore point into the project's WAL (pg_create_restore_point) and
// records it. Its WAL name is the record's id, so names never repeat.
func (s *Service) CreateRestorePoint(ctx context.Context, p *authz.Principal, projectID string, req *api.RestorePointRequest) (*api.RestorePointResponse, error) {
	label := strings.TrimSpace(req.Label)
	if err := s.host.CheckDisplayText("label", label, 1, 100); err != nil {
		return nil, err
	}
	prj, inst, err := s.host.ActiveInstance(p, projectID)
	if err != nil {
		return nil, err
	}
	conn, err := s.host.AdminConn(ctx, inst, "postgres")
	if err != nil {
		return nil, &apperr.Error{Kind: apperr.KindUnavailable, Msg: "the project's server does not answer", Cause: err}
	}
	defer conn.Close(context.Background())
	id := ids.New("rp")
	point, err := postgres.CreateRestorePoint(ctx, conn, id)
	if err != nil {
		return nil, apperr.Server(err, "create restore point")
	}
	lsn := point.LSN
	tli, _, err := instances.CurrentTimeline(ctx, conn)
	if err != nil {
		return nil, apperr.Server(err, "read the timeline")
	}
	kind, actor := p.Actor()
	var out *api.RestorePointResponse
	err = s.db.Update(func(tx *store.Tx) error {
		now := s.now()
		rp := &store.RestorePoint{ID: id, ProjectID: prj.ID, OrganizationID: prj.OrganizationID, Kind: RestorePointNamed,
			State: RestorePointActive, Label: label, Name: id, LSN: lsn, Timeline: tli, CreatedByActorKind: kind,
			CreatedByActorID: actor, PITRTime: point.Time.UTC(), CreatedAt: now, UpdatedAt: now}
		if b, err := s.baseBackupBefore(tx, prj.ID, rp.PITRTime, tli, inst.WALArchive); err == nil {
			rp.BackupID, rp.BackupKey = b.ID, b.BackupKey
		}
		if err := store.RestorePoints.Put(tx, rp); err != nil {
			return apperr.Internal(err, "store restore point")
		}
		if err := s.host.Audit(tx, p, "restore_point.create", prj.OrganizationID, prj.ID,
			map[string]any{"restore_point_id": id, "label": label, "lsn": lsn}); err != nil {
			return apperr.Internal(err, "audit")
		}
		out = &api.RestorePointResponse{RestorePoint: restorePointView(rp)}
		return nil
	})
	return out, err
}

// ListRestorePoints lists a project's restore points (newest first) and its point-in-time window.
func (s *Service) ListRestorePoints(ctx context.Context, p *authz.Principal, projectID string) (*api.RestorePointList, error) {
	out := &api.RestorePointList{RestorePoints: []*api.RestorePoint{}}
	err := s.db.View(func(tx *store.Tx) error {
		prj, rps, err := visibleRecords(s, tx, p, projectID, "restore points", store.RestorePoints, store.RestorePointsByProject)
		if err != nil {
			return err
		}
		for _, r := range rps {
			if r.State == RestorePointDeleted {
				continue
			}
			out.RestorePoints = append(out.RestorePoints, restorePointView(r))
		}
		if oldest, err := s.oldestBackup(tx, prj.ID); err == nil {
			out.PITRWindowDays = int(s.now().Sub(*oldest.CompletedAt) / (24 * time.Hour))
		}
		return nil
	})
	return out, err
}

// DeleteRestorePoint marks a restore point deleted (the WAL record stays; nothing refers to it). A delete
// is idempotent: deleting a deleted point answers deleted again.
func (s *Service) DeleteRestorePoint(ctx context.Context, p *authz.Principal, projectID, restorePointID string) (*api.DeletedResponse, error) {
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		rp, err := store.RestorePoints.Get(tx, restorePointID)
		if err != nil || rp.ProjectID != prj.ID {
			return apperr.NotFound("restore point %s not found", restorePointID)
		}
		if rp.State == RestorePointDeleted {
			return nil
		}
		rp.State, rp.UpdatedAt = RestorePointDeleted, s.now()
		if err := store.RestorePoints.Put(tx, rp); err != nil {
			return apperr.Internal(err, "delete restore point")
		}
		return s.host.Audit(tx, p, "restore_point.delete", prj.OrganizationID, prj.ID, map[string]any{"restore_point_id": rp.ID})
	})
	if err != nil {
		return nil, err
	}
	return &api.DeletedResponse{Deleted: true}, nil
}

var errNoBackup = errors.New("no completed backup")

// oldestBackup is the project's oldest completed backup.
func (s *Service) oldestBackup(tx *store.Tx, projectID string) (*store.Backup, error) {
	bs, err := store.Backups.Lookup(tx, store.BackupsByProject, projectID, store.Query{})
	if err != nil {
		return nil, err
	}
	for _, b := range bs {
		if b.State == StateCompleted && b.CompletedAt != nil {
			return b, nil
		}
	}
	return nil, errNoBackup
}

// baseBackupBefore is the newest completed backup of the timeline that was complete at t: a restore to t
// (or to a point written at t) starts from it.
func (s *Service) baseBackupBefore(tx *store.Tx, projectID string, t time.Time, timeline int, archive string) (*store.Backup, error) {
	bs, err := store.Backups.Lookup(tx, store.BackupsByProject, projectID, store.Query{Newest: true})
	if err != nil {
		return nil, err
	}
	for _, b := range bs {
		if b.State == StateCompleted && b.CompletedAt != nil && !b.CompletedAt.After(t) && b.Timeline == timeline && b.WALArchive == archive {
			return b, nil
		}
	}
	return nil, errNoBackup
}
