package moves

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// drainPayload is JobDrain's payload.
type drainPayload struct {
	Node string `json:"node"`
}

// DrainResult is JobDrain's result: the projects moved, each with its move job's result.
type DrainResult struct {
	Node  string   `json:"node"`
	Moved []Result `json:"moved"`
}

// EnqueueDrain enqueues, inside tx, the drain of node: every project it hosts moved to the node placement
// picks among the others (appliance cluster remove-node; any node runs it).
func EnqueueDrain(tx *store.Tx, node string) (*store.Job, error) {
	raw, err := json.Marshal(drainPayload{Node: node})
	if err != nil {
		return nil, err
	}
	j := &store.Job{Type: JobDrain, LockedResource: "drain/" + node, Payload: raw, MaxAttempts: 1}
	if err := scheduler.Enqueue(tx, j); err != nil {
		return nil, err
	}
	return j, nil
}

// NodeProjects are the projects (not deleted) node hosts.
func NodeProjects(tx *store.Tx, node string) ([]*store.Project, error) {
	return store.Projects.All(tx, func(p *store.Project) bool {
		return p.State != api.ProjectDeleted && store.ProjectNode(tx, p) == node
	})
}

// target is where placement puts prj leaving node: the live active node with the most room and a free
// port pair, other than node.
func (s *Service) target(tx *store.Tx, node string, live map[string]bool) (string, error) {
	rooms, err := s.host.Rooms(tx, live)
	if err != nil {
		return "", err
	}
	for _, r := range rooms {
		if r.Node.ID != node && r.PortsFree >= 2 {
			return r.Node.ID, nil
		}
	}
	return "", fmt.Errorf("no other live node has a free pair of ports")
}

// drainJob moves every project of the node away, one at a time; every project is checked first, and
// one that cannot move stops the drain before any moves. A move that fails stops it too (the project
// serves on the node still; the ones moved before stay moved).
func (s *Service) drainJob(ctx context.Context, run *scheduler.Run) (any, error) {
	var pl drainPayload
	if err := run.DecodePayload(&pl); err != nil {
		return nil, err
	}
	if s.cfg.NodeID == "" || s.members == nil {
		return nil, errors.New("a drain runs on a cluster node")
	}
	res := DrainResult{Node: pl.Node, Moved: []Result{}}
	live, err := s.live(ctx)
	if err != nil {
		return nil, err
	}
	// Every project checked first: one that cannot move stops the drain before anything moved.
	var refused []string
	var ids []string
	err = s.db.View(func(tx *store.Tx) error {
		prjs, err := NodeProjects(tx, pl.Node)
		if err != nil {
			return err
		}
		for _, p := range prjs {
			ids = append(ids, p.ID)
			to, err := s.target(tx, pl.Node, live)
			if err == nil {
				err = s.Check(tx, p, to, live)
			}
			if err != nil {
				refused = append(refused, fmt.Sprintf("project %s (%s): %v", p.ID, p.Name, err))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("node %s cannot be drained, nothing was moved: %s", pl.Node, strings.Join(refused, "; "))
	}
	// While it drains the node takes no new project or preview (placement counts active nodes only); a
	// drain that stops puts it back to active.
	if err := s.setNodeState(pl.Node, store.NodeActive, store.NodeDraining); err != nil {
		return nil, err
	}
	drained := false
	defer func() {
		if !drained {
			if err := s.setNodeState(pl.Node, store.NodeDraining, store.NodeActive); err != nil {
				s.log.Warn("a stopped drain could not put its node back to active", "node", pl.Node, "err", err)
			}
		}
	}()
	for i, id := range ids {
		_ = run.Progress(map[string]any{"step": "move", "project_id": id, "of": len(ids), "done": i})
		var j *store.Job
		err := s.db.Update(func(tx *store.Tx) error {
			p, err := store.Projects.Get(tx, id)
			if err != nil {
				return err
			}
			if store.ProjectNode(tx, p) != pl.Node || p.State == api.ProjectDeleted {
				return nil // moved or deleted meanwhile
			}
			to, err := s.target(tx, pl.Node, live)
			if err != nil {
				return err
			}
			if err := s.Check(tx, p, to, live); err != nil {
				return err
			}
			j, err = s.enqueue(tx, p, to)
			return err
		})
		if err != nil {
			return res, fmt.Errorf("drain of node %s stopped at project %s (%d of %d moved): %w", pl.Node, id, len(res.Moved), len(ids), err)
		}
		if j == nil {
			continue
		}
		s.host.Notify()
		done, err := s.waitJob(ctx, j.ID)
		if err != nil {
			return res, err
		}
		if done.State != scheduler.StateCompleted {
			return res, fmt.Errorf("drain of node %s stopped: the move of project %s failed (job %s: %s), it serves on node %s still; %d of %d moved",
				pl.Node, id, j.ID, done.Error, pl.Node, len(res.Moved), len(ids))
		}
		var r Result
		_ = json.Unmarshal(done.Result, &r)
		res.Moved = append(res.Moved, r)
	}
	drained = true
	return res, nil
}

// setNodeState moves node's record from state from to state to (nothing when it is in neither: removed,
// or put in another state meanwhile).
func (s *Service) setNodeState(node, from, to string) error {
	return s.db.Update(func(tx *store.Tx) error {
		n, err := store.Nodes.Get(tx, node)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		if n.State != from {
			return nil
		}
		n.State = to
		return store.Nodes.Put(tx, n)
	})
}
