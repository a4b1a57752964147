package appliance

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/appliance/moves"
	"github.com/theappliance/appliance/appliance/nodeloss"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// The move of a project between cluster nodes lives in appliance/moves; the service holds it, built in
// New with moveHost as its Host.

// MoveProject is POST /v1/projects/{projectID}/move (platform operators): the project moves to the node
// the body names (a job on its node; the answer is 4xx with nothing changed when it cannot).
func (s *Service) MoveProject(ctx context.Context, p *Principal, projectID string, req *api.MoveProjectRequest) (*api.JobResponse, error) {
	if req == nil {
		req = &api.MoveProjectRequest{}
	}
	j, err := s.moves.Move(ctx, projectID, req.Node, func(tx *store.Tx, prj *store.Project, md any) error {
		return s.audit(tx, p, "project.move_requested", prj.OrganizationID, prj.ID, md)
	})
	if err != nil {
		return nil, err
	}
	return &api.JobResponse{Job: JobView(j)}, nil
}

// moveHost is the move area's Host.
type moveHost struct{ s *Service }

var _ moves.Host = moveHost{}

func (h moveHost) Enqueue(tx *store.Tx, prj *store.Project, jobType, lock string, payload any) (*store.Job, error) {
	return h.s.enqueue(tx, prj, jobType, lock, payload)
}

func (h moveHost) Notify() { h.s.notify() }

func (h moveHost) AuditSystem(tx *store.Tx, action, orgID, projectID string, metadata any) error {
	return h.s.audit(tx, &Principal{AuthSource: ActorSystem}, action, orgID, projectID, metadata)
}

func (h moveHost) AppendEvent(tx *store.Tx, typ, orgID, projectID string, data any) error {
	return h.s.events.Append(tx, typ, orgID, projectID, data)
}

func (h moveHost) Rooms(tx *store.Tx, live map[string]bool) ([]moves.Room, error) {
	rooms, err := Rooms(tx, live, func(plan string) int64 { return h.s.planOrDefault(plan).MemoryBytes })
	if err != nil {
		return nil, err
	}
	out := make([]moves.Room, len(rooms))
	for i, r := range rooms {
		out[i] = moves.Room{Node: r.Node, PortsFree: r.PortsFree}
	}
	return out, nil
}

// fenceOn refuses every login but the admin's on inst's server (or lets them in again) and, fencing,
// ends the client sessions (upgrades' fence).
func (s *Service) fenceOn(ctx context.Context, inst *store.Instance, fenced bool) error {
	if err := s.eng.Instance(inst).Fence(fenced); err != nil {
		return err
	}
	conn, err := s.adminConn(ctx, inst, "postgres")
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return postgres.ApplyFence(ctx, conn, fenced)
}

func (h moveHost) Pause(ctx context.Context, projectID string) (string, error) {
	s := h.s
	if _, err := s.dataPlane(); err != nil {
		return "", err
	}
	prj, inst, err := s.loadProject(projectID)
	if err != nil {
		return "", err
	}
	if inst == nil {
		return "", errors.New("no instance record")
	}
	if inst.WALArchiveOff {
		return "", errors.New("the project's WAL is not archived: the target could not replay its last writes")
	}
	pw, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return "", err
	}
	if conn, err := s.adminConn(ctx, inst, "postgres"); err == nil {
		_, _ = conn.Exec(ctx, "CHECKPOINT") // keeps the shutdown checkpoint in the pause short
		conn.Close(context.WithoutCancel(ctx))
	}
	s.setRuntime(projectID, RuntimeRestarting)
	s.eng.Unwatch(inst)
	if err := s.eng.Pooler(inst, prj).Stop(ctx, nil, daemon.StopFast); err != nil {
		return "", fmt.Errorf("stop the pooler: %w", err)
	}
	if err := s.fenceOn(ctx, inst, true); err != nil {
		return "", fmt.Errorf("fence the server: %w", err)
	}
	archived := func(ctx context.Context, seg string) (bool, error) {
		return s.retentionStore().WALArchived(ctx, projectID, inst.WALArchive, seg)
	}
	if _, _, err := instances.ArchiveNow(ctx, inst, string(pw), archived); err != nil {
		return "", fmt.Errorf("archive the last WAL in the backup store: %w", err)
	}
	var lsn string
	conn, err := s.adminConn(ctx, inst, "postgres")
	if err != nil {
		return "", err
	}
	err = conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn)
	conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return "", err
	}
	if err := s.eng.Instance(inst).Stop(ctx, nil, daemon.StopFast); err != nil {
		return "", fmt.Errorf("stop the server: %w", err)
	}
	return lsn, nil
}

func (h moveHost) Resume(ctx context.Context, projectID string) error {
	s := h.s
	if _, err := s.dataPlane(); err != nil {
		return err
	}
	prj, inst, err := s.loadProject(projectID)
	if err != nil {
		return err
	}
	if inst == nil {
		return errors.New("no instance record")
	}
	if err := s.eng.Instance(inst).Fence(false); err != nil {
		return err
	}
	if err := s.eng.Start(ctx, nil, inst, prj); err != nil {
		return err
	}
	if err := s.fenceOn(ctx, inst, false); err != nil { // a server left running fenced reloads its pg_hba.conf
		return err
	}
	s.setRuntime(projectID, RuntimeActive)
	return nil
}

func (h moveHost) Rebuild(ctx context.Context, projectID, from string) (*nodeloss.Rebuilt, error) {
	return nodeLossHost(h).Rebuild(ctx, projectID, from)
}

// local is inst with its directory on this node (a record names the directory on the node that wrote it).
func (h moveHost) local(projectID string) (*store.Project, *store.Instance, error) {
	prj, inst, err := h.s.loadProject(projectID)
	if err != nil {
		return nil, nil, err
	}
	if inst == nil {
		return prj, nil, nil
	}
	l := *inst
	l.Dir = filepath.Join(h.s.instancesDir(), inst.ID)
	return prj, &l, nil
}

func (h moveHost) Discard(ctx context.Context, projectID string) error {
	if _, err := h.s.dataPlane(); err != nil {
		return err
	}
	_, inst, err := h.local(projectID)
	if err != nil || inst == nil {
		return err
	}
	h.s.eng.Unwatch(inst)
	return h.s.eng.Remove(ctx, inst)
}

func (h moveHost) StopLocal(ctx context.Context, projectID string) error {
	if _, err := h.s.dataPlane(); err != nil {
		return err
	}
	prj, inst, err := h.local(projectID)
	if err != nil || inst == nil {
		return err
	}
	return nodeLossHost(h).StopStale(ctx, inst, prj)
}

func (h moveHost) InstancesDir() string { return h.s.instancesDir() }

func (h moveHost) SetRuntime(projectID, status string) { h.s.setRuntime(projectID, status) }
