// Package nodeloss is the cluster's handling of a lost node: while the leader, the projects of a node whose
// lease lapsed are runtime_status unavailable (and back when it holds one again); a node that holds its
// lease again fences the stale copies of the projects hosted elsewhere meanwhile; a lost project is
// restored on another node from the off-machine backup store (restore.go). The rest of the domain only
// through its Host interface (the root's nodeLossHost).
package nodeloss

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/cluster/lease"
	"github.com/theappliance/appliance/appliance/observe"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Config is the area's settings.
type Config struct {
	// NodeID is this node of the cluster ("" on a single node).
	NodeID string
	// RestoreAfter is how long a project stays unavailable with its node lost before the leader restores
	// it on itself from the backup store (0: never by itself).
	RestoreAfter time.Duration
}

// Host is what the area uses of the rest of the domain (the root's nodeLossHost).
type Host interface {
	// Enqueue enqueues a job of prj inside tx.
	Enqueue(tx *store.Tx, prj *store.Project, jobType, lock string, payload any) (*store.Job, error)
	// Notify wakes the job runner.
	Notify()
	// AuditSystem records, inside tx, an audit event the system did.
	AuditSystem(tx *store.Tx, action, orgID, projectID string, metadata any) error
	// InstancesDir is this node's directory of instances.
	InstancesDir() string
	// StopStale stops the server and pooler of inst (this node's copy) if they run.
	StopStale(ctx context.Context, inst *store.Instance, prj *store.Project) error
	// Rebuild moves the project's records to this node (its instance's directory, ports, Project.NodeID;
	// unless it is on a node other than from and this one now) and rebuilds its instance from the backup
	// store (newest base backup, whole WAL archive), watched; on failure its runtime status is down.
	Rebuild(ctx context.Context, projectID, from string) (*Rebuilt, error)
}

// Rebuilt is what Host.Rebuild brought back.
type Rebuilt struct {
	Project   *store.Project
	BackupKey string
	LSN       string
	At        *time.Time
	Timeline  int
	Notes     []string
	// StepsMS is how long each step of the rebuild took (milliseconds).
	StepsMS map[string]int64
}

// Deps are the area's collaborators.
type Deps struct {
	DB    *store.DB
	Log   *slog.Logger
	Clock func() time.Time
	// Members is this node's place in its cluster (nil: a single node).
	Members lease.Membership
	// BackupStore tells whether the appliance has an off-machine backup store (up --backup-store).
	BackupStore bool
	Observe     *observe.Service
	Host        Host
}

// Service is the node-loss area.
type Service struct {
	cfg           Config
	db            *store.DB
	log           *slog.Logger
	now           func() time.Time
	members       lease.Membership
	backupObjects bool
	observe       *observe.Service
	host          Host
}

// New builds the area.
func New(cfg Config, deps Deps) *Service {
	return &Service{cfg: cfg, db: deps.DB, log: deps.Log, now: deps.Clock, members: deps.Members,
		backupObjects: deps.BackupStore, observe: deps.Observe, host: deps.Host}
}

// RegisterJobs registers the area's job (the restore elsewhere).
func (s *Service) RegisterJobs(r *scheduler.Runner) {
	r.Handle(JobRestoreElsewhere, s.restoreElsewhereJob)
}

const (
	projectDeleted     = api.ProjectDeleted
	runtimeActive      = api.RuntimeActive
	runtimeUnavailable = api.RuntimeUnavailable
	// instanceRunning is the root's InstanceRunning: an instance record in use.
	instanceRunning = "running"
)

// NodeLossSweep is how often the leader compares the projects' runtime status with the nodes' liveness
// besides the membership's events (which it acts on at once): a leader elected after a node was lost,
// or an event it could not act on (no quorum at that moment), is caught up within it.
const NodeLossSweep = 5 * time.Second

// nodeLossMetaPrefix keys, in the store's meta, the runtime status a project had before its node was
// lost, after the node's id, and the time of the loss (RFC 3339), space-separated: the status it returns
// to when that node is back.
const nodeLossMetaPrefix = "node_loss/"

// Watch runs, until ctx ends, the cluster's handling of lost nodes on this node: while it leads,
// every project whose node (store.ProjectNode) holds no lease is runtime_status unavailable, with the
// node_unavailable alert and the project.unavailable event; when its node holds a lease again it
// returns to the status it had (project.available, the alert resolved).
func (s *Service) Watch(ctx context.Context, m lease.Membership) {
	events := m.Watch(ctx)
	// Fenced by this node's previous run (or its watchdog) and still this node's: taking logins again.
	s.unfenceOwn(ctx)
	tick := time.NewTicker(NodeLossSweep)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			if ev.Kind == lease.Lost && ev.Node == m.Node() {
				// This node may no longer take itself for alive: its instances take no client writes
				// before the cluster may restore its projects elsewhere (the watchdog does it too,
				// should this process be frozen).
				s.selfFence()
				continue
			}
			if ev.Kind == lease.Held && ev.Node == m.Node() {
				// This node holds a lease again (it lost it: a pause, a partition): the projects moved
				// to another node meanwhile are not to run here any more; its own take logins again.
				s.fenceForeign(ctx)
				s.unfenceOwn(ctx)
				continue
			}
			if ev.Kind != lease.NodeDown && ev.Kind != lease.NodeUp && ev.Kind != lease.Elected {
				continue
			}
		case <-tick.C:
		}
		if err := s.sweepNodeLoss(ctx, m); err != nil && ctx.Err() == nil {
			s.log.Warn("node loss: compare the projects with the nodes' liveness", "err", err)
		}
	}
}

// sweepNodeLoss marks the projects of the nodes that hold no lease unavailable and returns those of the
// nodes that hold one again to their status; only the leader does.
func (s *Service) sweepNodeLoss(ctx context.Context, m lease.Membership) error {
	if !m.IsLeader() {
		return nil
	}
	members, err := m.Live(ctx)
	if err != nil {
		return err
	}
	live := map[string]bool{}
	for _, mb := range members {
		live[mb.Node] = true
	}
	type change struct {
		id, node string
		down     bool
	}
	var changes []change
	var restores []string
	err = s.db.View(func(tx *store.Tx) error {
		prjs, err := store.Projects.All(tx, func(p *store.Project) bool { return p.State != projectDeleted })
		if err != nil {
			return err
		}
		for _, p := range prjs {
			node := store.ProjectNode(tx, p)
			switch {
			case node == "":
			case !live[node] && p.RuntimeStatus != runtimeUnavailable:
				changes = append(changes, change{p.ID, node, true})
			case live[node] && p.RuntimeStatus == runtimeUnavailable:
				changes = append(changes, change{p.ID, node, false})
			case !live[node]:
				restores = append(restores, p.ID)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range changes {
		if err := s.markNodeLoss(c.id, c.node, c.down); err != nil {
			errs = append(errs, fmt.Errorf("project %s: %w", c.id, err))
		}
	}
	// Lost for --node-loss-restore-after, with an off-machine backup store: restored on this node.
	for _, id := range restores {
		var j *store.Job
		if err := s.db.Update(func(tx *store.Tx) error {
			p, err := store.Projects.Get(tx, id)
			if err != nil {
				return err
			}
			j, err = s.autoRestore(tx, p)
			return err
		}); err != nil {
			errs = append(errs, fmt.Errorf("project %s: enqueue its restore on this node: %w", id, err))
		} else if j != nil {
			s.log.Warn("node loss: a lost project is restored on this node from the backup store", "project", id, "job", j.ID,
				"after", s.cfg.RestoreAfter)
			s.host.Notify()
		}
	}
	return errors.Join(errs...)
}

// markNodeLoss makes the project unavailable (down) or returns it to the status it had, if it is still
// on node and its status still calls for it.
func (s *Service) markNodeLoss(projectID, node string, down bool) error {
	var status string
	err := s.db.Update(func(tx *store.Tx) error {
		p, err := store.Projects.Get(tx, projectID)
		if err != nil {
			return err
		}
		if store.ProjectNode(tx, p) != node || (p.RuntimeStatus == runtimeUnavailable) == down {
			return nil // moved, or changed since the sweep read it
		}
		now := s.now()
		key := nodeLossMetaPrefix + p.ID
		if down {
			was := p.RuntimeStatus
			if was == "" {
				was = runtimeActive
			}
			if err := tx.SetMeta(key, node+" "+was+" "+now.UTC().Format(time.RFC3339Nano)); err != nil {
				return err
			}
			p.RuntimeStatus, status = runtimeUnavailable, runtimeUnavailable
		} else {
			kept := append(strings.Fields(tx.Meta(key)), "", "")
			if kept[0] != node {
				return nil // moved to another node since: its restore there sets its status
			}
			status = kept[1]
			if status == "" || status == runtimeUnavailable {
				status = runtimeActive
			}
			if err := tx.SetMeta(key, ""); err != nil {
				return err
			}
			p.RuntimeStatus = status
		}
		p.UpdatedAt = now
		if err := store.Projects.Put(tx, p); err != nil {
			return err
		}
		if down {
			return s.observe.NodeLost(tx, p, node, now)
		}
		return s.observe.NodeBack(tx, p, node, status, now)
	})
	if err == nil && status != "" {
		s.log.Warn("node loss: a project's runtime status follows its node's lease", "project", projectID, "node", node, "runtime_status", status)
	}
	return err
}

// Fence keeps the stale copy of a project another node hosts now (restored there while this node
// was away) from running here: its server and pooler are stopped if they run, and its directory is moved
// aside to <dir>.fenced-<time> (never deleted: the operator decides).
func (s *Service) Fence(ctx context.Context, inst *store.Instance, prj *store.Project, owner string) {
	local := *inst // its directory on this node (the record names the directory on the node that made it)
	local.Dir = filepath.Join(s.host.InstancesDir(), inst.ID)
	inst = &local
	if _, err := os.Stat(inst.Dir); err != nil {
		return // nothing of it here
	}
	if err := s.host.StopStale(ctx, inst, prj); err != nil {
		s.log.Error("fencing: stop the stale copy of a project hosted on another node", "project", prj.ID, "instance", inst.ID, "node", owner, "err", err)
		return
	}
	aside := fmt.Sprintf("%s.fenced-%s", inst.Dir, s.now().UTC().Format("20060102T150405Z"))
	if err := os.Rename(inst.Dir, aside); err != nil {
		s.log.Error("fencing: move the stale copy of a project hosted on another node aside", "project", prj.ID, "dir", inst.Dir, "err", err)
		return
	}
	s.log.Warn("fencing: this node kept the stale copy of a project now hosted on another node aside, not started",
		"project", prj.ID, "instance", inst.ID, "node", owner, "moved_to", aside)
	if err := s.db.Update(func(tx *store.Tx) error {
		return s.host.AuditSystem(tx, "instance.fenced", prj.OrganizationID, prj.ID,
			map[string]any{"node": s.cfg.NodeID, "hosted_on": owner, "moved_to": aside})
	}); err != nil {
		s.log.Error("fencing: record the audit event", "project", prj.ID, "err", err)
	}
}

// fenceForeign fences the instances of this node's data directory whose projects another node hosts.
func (s *Service) fenceForeign(ctx context.Context) {
	if s.cfg.NodeID == "" {
		return
	}
	type foreign struct {
		inst  *store.Instance
		prj   *store.Project
		owner string
	}
	var fs []foreign
	err := s.db.View(func(tx *store.Tx) error {
		insts, err := store.Instances.All(tx, func(i *store.Instance) bool { return i.State == instanceRunning && i.ProjectID != "" })
		if err != nil {
			return err
		}
		for _, in := range insts {
			prj, err := store.Projects.Get(tx, in.ProjectID)
			if err != nil {
				continue
			}
			if owner := store.ProjectNode(tx, prj); owner != s.cfg.NodeID {
				fs = append(fs, foreign{in, prj, owner})
			}
		}
		return nil
	})
	if err != nil {
		s.log.Warn("fencing: list the instances of projects on other nodes", "err", err)
		return
	}
	for _, f := range fs {
		s.Fence(ctx, f.inst, f.prj, f.owner)
	}
}
