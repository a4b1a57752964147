package appliance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/backups"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/appliance/moves"
	"github.com/theappliance/appliance/appliance/nodeloss"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/scheduler"
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

func (h moveHost) Pause(ctx context.Context, projectID string) (string, int, error) {
	s := h.s
	if _, err := s.dataPlane(); err != nil {
		return "", 0, err
	}
	prj, inst, err := s.loadProject(projectID)
	if err != nil {
		return "", 0, err
	}
	if inst == nil {
		return "", 0, errors.New("no instance record")
	}
	if inst.WALArchiveOff {
		return "", 0, errors.New("the project's WAL is not archived: the target could not replay its last writes")
	}
	pw, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return "", 0, err
	}
	if conn, err := s.adminConn(ctx, inst, "postgres"); err == nil {
		_, _ = conn.Exec(ctx, "CHECKPOINT") // keeps the shutdown checkpoint in the pause short
		conn.Close(context.WithoutCancel(ctx))
	}
	s.setRuntime(projectID, RuntimeRestarting)
	s.eng.Unwatch(inst)
	if err := s.eng.Pooler(inst, prj).Stop(ctx, nil, daemon.StopFast); err != nil {
		return "", 0, fmt.Errorf("stop the pooler: %w", err)
	}
	if err := s.fenceOn(ctx, inst, true); err != nil {
		return "", 0, fmt.Errorf("fence the server: %w", err)
	}
	archived := func(ctx context.Context, seg string) (bool, error) {
		return s.retentionStore().WALArchived(ctx, projectID, inst.WALArchive, seg)
	}
	// The position the switch ended the last segment at: everything written is before it (the server is
	// fenced: nothing a client sends is written after), and the archive holds it.
	_, timeline, lsn, err := instances.SwitchArchived(ctx, inst, string(pw), archived)
	if err != nil {
		return "", 0, fmt.Errorf("archive the last WAL in the backup store: %w", err)
	}
	if err := s.eng.Instance(inst).Stop(ctx, nil, daemon.StopFast); err != nil {
		return "", 0, fmt.Errorf("stop the server: %w", err)
	}
	return lsn, timeline, nil
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
	if err := h.leaveDeadBranch(ctx, prj, inst); err != nil {
		return fmt.Errorf("move the project to a timeline above the one a rolled-back move's target promoted to: %w", err)
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

// leaveDeadBranch: a move's target that promoted its copy (then the move rolled back) archives the
// history file of a timeline above the source's — at once, or later (killed, once it runs again) — a
// branch the source, resumed, does not follow; yet every recovery that follows the archive's latest
// timeline (the next move's staged standby, a restore elsewhere after a node's loss, a recovery to the
// archive's end) would take it and miss what the source writes after. So the source, stopped (still
// fenced) and about to serve again, first moves itself to a new timeline above it when the archive holds
// one or when the move told the target where it paused (moves.CutoverTold: the target may have promoted)
// (instances.NewTimeline: a recovery of its own WAL on its own timeline, then a promotion, which takes
// the newest timeline + 1, skipping the target's), recorded in the project's timeline log as a
// restore's switch is (the dead branch's switch, which the target's rebuild recorded, dropped from it).
// Nothing is done when the archive holds no timeline above the source's, when the project's WAL is not
// archived, or when its server runs (an earlier attempt resumed it).
func (h moveHost) leaveDeadBranch(ctx context.Context, prj *store.Project, inst *store.Instance) error {
	s := h.s
	if inst.WALArchiveOff {
		return nil
	}
	if _, running, err := s.eng.Instance(inst).Status(); err != nil || running {
		return err
	}
	dp, err := s.dataPlane()
	if err != nil {
		return err
	}
	bs := s.backupStore(dp)
	archived := func(ctx context.Context, name string) (bool, error) {
		return bs.WALArchived(ctx, prj.ID, inst.WALArchive, name)
	}
	_, restore, err := s.walCommands(ctx, dp, prj.ID, inst.WALArchive)
	if err != nil {
		return err
	}
	pw, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return err
	}
	jobID := "move-rollback-" + prj.ID + "-" + s.now().UTC().Format("20060102T150405Z")
	told := false // the target may have promoted, its history file not archived yet
	_ = s.db.View(func(tx *store.Tx) error { told = moves.CutoverTold(tx, prj.ID); return nil })
	if told {
		pgi := s.eng.Instance(inst)
		tl, at, err := instances.StoppedTimeline(ctx, pgi)
		if err != nil {
			return err
		}
		if above, err := instances.HistoryAbove(ctx, archived, tl); err != nil {
			return err
		} else if !above {
			ph, err := instances.PlaceholderHistory(pgi, tl, at, "placeholder: a timeline the target of a rolled-back move may have promoted to ("+jobID+")")
			if err != nil {
				return err
			}
			if _, err := bs.PutWAL(ctx, prj.ID, inst.WALArchive, fmt.Sprintf("%08X.history", tl+1), bytes.NewReader(ph)); err != nil {
				return fmt.Errorf("archive a placeholder of timeline %d's history: %w", tl+1, err)
			}
		}
	}
	b, moved, err := s.eng.NewTimeline(ctx, nil, inst, string(pw), restore, jobID, archived)
	if err != nil || !moved {
		return err
	}
	sw := backups.TimelineSwitch{JobID: jobID, From: b.From, To: b.To, At: b.Switched, Archive: inst.WALArchive, FromArchive: inst.WALArchive}
	if nb, err := (&recovery{s: s}).newestBackup(prj.ID, inst.WALArchive); err == nil && nb != nil {
		sw.BackupID = nb.ID
	}
	if err := backups.ReplaceDeadTimelines(ctx, bs, prj.ID, sw); err != nil {
		return fmt.Errorf("moved to timeline %d, but the timeline switch was not recorded: %w", b.To, err)
	}
	s.log.Warn("move: the source, resumed after a rolled-back move whose target had promoted its copy, moved to a new timeline above the target's",
		"project", prj.ID, "from_timeline", b.From, "to_timeline", b.To, "at", b.At)
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

func (h moveHost) Step(ctx context.Context, jobID, step string) { h.s.jobStep(ctx, jobID, step) }

func (h moveHost) SetRuntime(projectID, status string) { h.s.setRuntime(projectID, status) }

// stagingRecord is the project's instance record as it will be on this node (its directory here, the
// installation of its major here), and its admin password (the data plane readied first).
func (h moveHost) stagingRecord(projectID string) (*store.Instance, string, error) {
	s := h.s
	if _, err := s.dataPlane(); err != nil {
		return nil, "", err
	}
	_, inst, err := s.loadProject(projectID)
	if err != nil {
		return nil, "", err
	}
	if inst == nil {
		return nil, "", errors.New("no instance record")
	}
	l := *inst
	l.Dir = filepath.Join(s.instancesDir(), inst.ID)
	bin, err := s.installedMajor(l.Major, l.BinDir)
	if err != nil && l.Major == s.dp.Bin.Major {
		bin, err = s.dp.Bin.Dir, nil
	}
	if err != nil {
		return nil, "", err
	}
	l.BinDir = bin
	pw, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return nil, "", fmt.Errorf("open the admin password: %w", err)
	}
	return &l, string(pw), nil
}

func (h moveHost) Stage(ctx context.Context, projectID, key string) (string, error) {
	s := h.s
	inst, pw, err := h.stagingRecord(projectID)
	if err != nil {
		return "", err
	}
	r := &recovery{s: s}
	b, err := r.newestBackup(projectID, inst.WALArchive)
	if err != nil {
		return "", err
	}
	if c := backups.BackupCluster(inst, b, s.dp.Bin); c.Major != inst.Major || c.WALArchive != inst.WALArchive {
		return "", fmt.Errorf("the newest base backup %s is not of the cluster the project runs (PostgreSQL %d, WAL archive %q): no copy of it can be staged", b.BackupKey, inst.Major, inst.WALArchive)
	}
	archive, err := s.archiveOf(ctx, s.dp, projectID, b.BackupKey)
	if err != nil {
		return "", err
	}
	if err := s.eng.Stage(ctx, instances.StageSpec{Instance: inst, Key: key, AdminPassword: pw, Archive: archive}); err != nil {
		return "", err
	}
	return b.BackupKey, nil
}

func (h moveHost) StagedReplay(ctx context.Context, projectID, key string) (string, error) {
	inst, pw, err := h.stagingRecord(projectID)
	if err != nil {
		return "", err
	}
	return h.s.eng.StagedReplayLSN(ctx, inst, key, pw)
}

func (h moveHost) CheckpointStaged(ctx context.Context, projectID, key string) error {
	inst, pw, err := h.stagingRecord(projectID)
	if err != nil {
		return err
	}
	return h.s.eng.CheckpointStaged(ctx, inst, key, pw)
}

func (h moveHost) PromoteStaged(ctx context.Context, projectID, key string, timeline int) (string, error) {
	s := h.s
	inst, pw, err := h.stagingRecord(projectID)
	if err != nil {
		return "", err
	}
	// Without the archive when it holds no history file of the next timeline: the server then chooses
	// that one, as it would asking the archive.
	off := false
	if timeline > 0 {
		have, err := s.retentionStore().WALArchived(ctx, projectID, inst.WALArchive, fmt.Sprintf("%08X.history", timeline+1))
		off = err == nil && !have
	}
	return s.eng.PromoteStaged(ctx, inst, key, pw, off)
}

func (h moveHost) RebuildStaged(ctx context.Context, projectID, from, key, backupKey string, started func(context.Context), opened func(*store.Tx) error) (*nodeloss.Rebuilt, error) {
	inst, _, err := h.stagingRecord(projectID)
	if err != nil {
		return nil, err
	}
	return nodeLossHost(h).rebuild(ctx, projectID, from, &stagedCopy{BackupKey: backupKey, Fill: h.s.eng.StagedFill(inst, key), Started: started, Opened: opened})
}

func (h moveHost) RemoveStaged(ctx context.Context, projectID string) error {
	if _, err := h.s.dataPlane(); err != nil {
		return err
	}
	_, inst, err := h.local(projectID)
	if err != nil || inst == nil {
		return err
	}
	h.s.eng.RemoveStaged(ctx, inst)
	return nil
}

func (h moveHost) CatchUp(ctx context.Context, projectID string) (string, error) {
	s := h.s
	if _, err := s.dataPlane(); err != nil {
		return "", err
	}
	_, inst, err := s.loadProject(projectID)
	if err != nil {
		return "", err
	}
	if inst == nil {
		return "", errors.New("no instance record")
	}
	pw, err := s.box.Open(inst.AdminPassword)
	if err != nil {
		return "", err
	}
	archived := func(ctx context.Context, seg string) (bool, error) {
		return s.retentionStore().WALArchived(ctx, projectID, inst.WALArchive, seg)
	}
	// A checkpoint first: the staged copy replays it before the pause, and the pause's own is short.
	if conn, err := s.adminConn(ctx, inst, "postgres"); err == nil {
		_, _ = conn.Exec(ctx, "CHECKPOINT")
		conn.Close(context.WithoutCancel(ctx))
	}
	_, _, lsn, err := instances.SwitchArchived(ctx, inst, string(pw), archived)
	return lsn, err
}

func (h moveHost) WALSince(ctx context.Context, projectID, lsn string) (int64, error) {
	s := h.s
	if _, err := s.dataPlane(); err != nil {
		return 0, err
	}
	_, inst, err := s.loadProject(projectID)
	if err != nil {
		return 0, err
	}
	if inst == nil {
		return 0, errors.New("no instance record")
	}
	conn, err := s.adminConn(ctx, inst, "postgres")
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int64
	err = conn.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint", lsn).Scan(&n)
	return n, err
}

func (h moveHost) TakeBackup(ctx context.Context, run *scheduler.Run, projectID, label string) (string, error) {
	s := h.s
	if _, err := s.dataPlane(); err != nil {
		return "", err
	}
	prj, inst, err := h.local(projectID) // its directory here (a record a move rebuilt names the target's)
	if err != nil {
		return "", err
	}
	if inst == nil {
		return "", errors.New("no instance record")
	}
	b, err := s.backups.BackupOf(ctx, run, prj, inst, label)
	if err != nil {
		return "", err
	}
	if b.State != BackupCompleted {
		return "", fmt.Errorf("backup %s: %s %s", b.BackupKey, b.State, b.Error)
	}
	return b.BackupKey, nil
}
