package appliance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/cluster/lease"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/appliance/nodeloss"
	"github.com/theappliance/appliance/store"
)

// The node-loss area lives in appliance/nodeloss (a lost node's projects unavailable and back, fencing,
// the restore elsewhere); the service holds it, built in New with nodeLossHost as its Host. Nothing of the
// root's call cycle calls this file: only the area (through Host) and the service's users do.

// DefaultNodeLossRestoreAfter is up --node-loss-restore-after's default.
const DefaultNodeLossRestoreAfter = nodeloss.DefaultNodeLossRestoreAfter

// JobRestoreElsewhere is the job of the restore elsewhere.
const JobRestoreElsewhere = nodeloss.JobRestoreElsewhere

// WatchNodeLoss runs, until ctx ends, the cluster's handling of lost nodes on this node (nodeloss.Watch).
func (s *Service) WatchNodeLoss(ctx context.Context, m lease.Membership) { s.nodeloss.Watch(ctx, m) }

// RestoreElsewhere is POST /v1/projects/{projectID}/restore-elsewhere (platform operators).
func (s *Service) RestoreElsewhere(ctx context.Context, _ *Principal, projectID string) (*api.JobResponse, error) {
	j, err := s.nodeloss.RestoreElsewhere(ctx, projectID)
	if err != nil {
		return nil, err
	}
	return &api.JobResponse{Job: JobView(j)}, nil
}

// nodeLossHost is the node-loss area's Host.
type nodeLossHost struct{ s *Service }

func (h nodeLossHost) Enqueue(tx *store.Tx, prj *store.Project, jobType, lock string, payload any) (*store.Job, error) {
	return h.s.enqueue(tx, prj, jobType, lock, payload)
}

func (h nodeLossHost) Notify() { h.s.notify() }

func (h nodeLossHost) AuditSystem(tx *store.Tx, action, orgID, projectID string, metadata any) error {
	return h.s.audit(tx, &Principal{AuthSource: ActorSystem}, action, orgID, projectID, metadata)
}

func (h nodeLossHost) InstancesDir() string { return h.s.instancesDir() }

func (h nodeLossHost) StopStale(ctx context.Context, inst *store.Instance, prj *store.Project) error {
	if _, running, _ := h.s.eng.Instance(inst).Status(); running {
		return h.s.eng.Stop(ctx, nil, inst, prj)
	}
	return nil
}

func (h nodeLossHost) Rebuild(ctx context.Context, projectID, from string) (*nodeloss.Rebuilt, error) {
	return h.rebuild(ctx, projectID, from, nil)
}

// rebuild is Rebuild, from the copy staged on this node when staged is not nil (a move's cutover).
func (h nodeLossHost) rebuild(ctx context.Context, projectID, from string, staged *stagedCopy) (*nodeloss.Rebuilt, error) {
	s := h.s
	if _, err := s.dataPlane(); err != nil {
		return nil, err
	}
	r := &recovery{s: s, moved: map[string][]string{}, staged: staged, steps: instances.NewTimer()}
	var name string
	var epoch int64 // the project's placement epoch once its records name this node
	var dir string  // its instance's directory here
	var wasPrj *store.Project
	var wasInst *store.Instance
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := store.Projects.Get(tx, projectID)
		if err != nil {
			return err
		}
		name = prj.Name
		if owner := store.ProjectNode(tx, prj); owner != from && owner != s.cfg.NodeID {
			return fmt.Errorf("project %s is on node %s now, not on the lost node %s", prj.ID, owner, from)
		}
		inst, err := store.Instances.Get(tx, prj.PrimaryInstanceID)
		if err != nil {
			return err
		}
		if store.ProjectNode(tx, prj) == from { // not a retry after a failure here that kept it
			p, i := *prj, *inst
			wasPrj, wasInst = &p, &i
		}
		inst.Dir = filepath.Join(s.instancesDir(), inst.ID)
		if inst.Major == s.dp.Bin.Major {
			inst.BinDir = s.dp.Bin.Dir
		}
		inst.UpdatedAt = s.now()
		if err := store.Instances.Put(tx, inst); err != nil {
			return err
		}
		store.MoveProject(prj, s.cfg.NodeID)
		epoch, dir = prj.PlacementEpoch, inst.Dir
		prj.RuntimeStatus, prj.UpdatedAt = RuntimeRestarting, s.now()
		if n, err := store.Nodes.Get(tx, s.cfg.NodeID); err == nil && n.PublicHost != "" {
			prj.PublicHost = n.PublicHost // its URLs name this node
		}
		if err := store.Projects.Put(tx, prj); err != nil {
			return err
		}
		return r.fitPorts(tx, prj)
	})
	if err != nil {
		return nil, err
	}
	r.done("records")
	if staged != nil {
		// The staged copy records its epoch as soon as its data is in, before its server starts: a crash of
		// this node after the move opened the project here finds a copy of the placement, which its start
		// serves (a copy without it would be kept aside as stale). Its server starts fenced (marked so:
		// moveFenced) and lets clients in once the word that the move opened it here is written.
		sc, fill := *staged, staged.Fill
		sc.Fill = func(ctx context.Context, exec daemon.ExecFunc, dataDir string) error {
			if err := fill(ctx, exec, dataDir); err != nil {
				return err
			}
			if err := nodeloss.RecordEpoch(dir, epoch); err != nil {
				return err
			}
			return markMoveFenced(dir)
		}
		r.staged = &sc
	}
	rp := r.project(ctx, ProjectRecovery{ID: projectID, Name: name, Notes: r.moved[projectID]})
	r.done("settle")
	if rp.Err != nil {
		// Not half-moved: the project goes back to the lost node (its records as they were, unavailable),
		// so that the sweep and the operator can restore it again, and that node, back, serves it again.
		if err := h.moveBack(ctx, wasPrj, wasInst); err != nil {
			s.setRuntime(projectID, RuntimeDown)
			return nil, fmt.Errorf("restore from the backup store on node %s: %w (and moving its records back to node %s: %v)", s.cfg.NodeID, rp.Err, from, err)
		}
		return nil, fmt.Errorf("restore from the backup store on node %s: %w (the project stays on node %s, unavailable: the restore can be tried again)", s.cfg.NodeID, rp.Err, from)
	}
	prj, inst, err := s.loadProject(projectID)
	if err != nil {
		return nil, err
	}
	// This copy is of the project's placement now: its epoch is recorded with it.
	if err := nodeloss.RecordEpoch(inst.Dir, prj.PlacementEpoch); err != nil {
		return nil, err
	}
	// The word is written (the move happened): clients in. Should that fail, the project is this node's
	// all the same (watched; its next start lets them in): the error says so.
	var unfenceErr error
	if staged != nil {
		unfenceErr = s.openMoveFenced(ctx, inst)
	}
	if err := s.eng.Watch(inst, prj); err != nil {
		return nil, err
	}
	if unfenceErr != nil {
		return nil, fmt.Errorf("the project opened on node %s, but its server still refuses client logins (the node's next start lets them in): %w", s.cfg.NodeID, unfenceErr)
	}
	r.done("watch")
	return &nodeloss.Rebuilt{Project: prj, BackupKey: rp.BackupKey, LSN: rp.LSN, At: rp.At, Timeline: rp.Timeline, Notes: rp.Notes, StepsMS: r.steps.MS}, nil
}

// moveBack puts a project whose restore on this node failed back as it was on its lost node (prj and inst
// as read before; nil: it was not moved by this attempt), unavailable, and removes what the attempt left
// in this node's data directory.
func (h nodeLossHost) moveBack(ctx context.Context, prj *store.Project, inst *store.Instance) error {
	s := h.s
	if prj == nil || inst == nil {
		return errors.New("it was moved to this node before this attempt")
	}
	here := *inst
	here.Dir = filepath.Join(s.instancesDir(), inst.ID)
	if err := s.eng.Remove(ctx, &here); err != nil {
		s.log.Warn("node loss: remove what a failed restore left on this node", "instance", inst.ID, "err", err)
	}
	return s.db.Update(func(tx *store.Tx) error {
		cur, err := store.Projects.Get(tx, prj.ID)
		if err != nil {
			return err
		}
		if cur.NodeID != s.cfg.NodeID {
			return fmt.Errorf("project %s moved to node %s meanwhile", prj.ID, cur.NodeID)
		}
		back := *prj
		back.RuntimeStatus, back.UpdatedAt = RuntimeUnavailable, s.now()
		back.LatestJobID = cur.LatestJobID
		if err := store.Projects.Put(tx, &back); err != nil {
			return err
		}
		i := *inst
		i.UpdatedAt = s.now()
		return store.Instances.Put(tx, &i)
	})
}

// moveFenced is the file, in an instance's directory, of a copy a move's rebuild started fenced (its
// server admits the admin alone until the word that the move opened the project here is written). The
// rebuild removes it once it let clients in; the node's start, finding it on a copy of a project the node
// serves (a crash came after the word, before the rebuild let clients in), lets them in (openMoveFenced).
// A copy fenced for another reason (an upgrade's, the node's self-fence) has no such file.
const moveFenced = "move-fenced"

// markMoveFenced marks the copy of dir as started fenced by a move's rebuild.
func markMoveFenced(dir string) error {
	return os.WriteFile(filepath.Join(dir, moveFenced), []byte("fenced until the move's word\n"), 0o600)
}
