package nodeloss

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// JobRestoreElsewhere rebuilds, on the node it runs on (Job.Node), a project whose node was lost, from the
// backup store: its newest base backup and the whole WAL archive, as recover does.
const JobRestoreElsewhere = "project.restore_elsewhere"

// DefaultNodeLossRestoreAfter is up --node-loss-restore-after's default.
const DefaultNodeLossRestoreAfter = 5 * time.Minute

// nodeLossRestorePrefix keys, in the store's meta, the restore-elsewhere job enqueued for a lost project
// (the sweep enqueues one only).
const nodeLossRestorePrefix = "node_loss_restore/"

// restoreElsewherePayload is the job's payload: the node the project was lost with.
type restoreElsewherePayload struct {
	From string `json:"from_node"`
}

// RestoreElsewhereResult is the job's result: where the project came back, and to which point.
type RestoreElsewhereResult struct {
	From      string     `json:"from_node"`
	To        string     `json:"to_node"`
	BackupKey string     `json:"backup_key"`
	LSN       string     `json:"lsn"`
	At        *time.Time `json:"at"`
	Timeline  int        `json:"timeline"`
	Notes     []string   `json:"notes,omitempty"`
}

// RestoreElsewhere is POST /v1/projects/{projectID}/restore-elsewhere (platform operators; the root answers
// the job): a project whose
// node holds no lease is restored on the node that answers, from the backup store, at once. 409 on a
// single node, when its node is alive, and without an off-machine backup store (the answer says what is
// lost).
func (s *Service) RestoreElsewhere(ctx context.Context, projectID string) (*store.Job, error) {
	if s.cfg.NodeID == "" || s.members == nil {
		return nil, apperr.Conflict("this appliance is a single node: there is no other node to restore a project on")
	}
	var prj *store.Project
	var node string
	if err := s.db.View(func(tx *store.Tx) error {
		var err error
		if prj, err = store.Projects.Get(tx, projectID); err != nil {
			return err
		}
		node = store.ProjectNode(tx, prj)
		return nil
	}); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, apperr.NotFound("project %s not found", projectID)
		}
		return nil, err
	}
	if prj.State == projectDeleted {
		return nil, apperr.NotFound("project %s not found", projectID)
	}
	alive, err := s.members.Alive(ctx, node)
	if err != nil {
		return nil, err
	}
	if alive {
		return nil, apperr.Conflict("project %s's node %s holds its lease: the project is not lost", projectID, node)
	}
	if !s.backupObjects {
		return nil, apperr.Conflict("no off-machine backup store (up --backup-store): project %s's data — its data directory, its WAL and its backups in the local backup directory — exists only on node %s, which holds no lease; nothing can be restored on another node: bring node %s back (its data comes back with it), or the project's data is lost",
			projectID, node, node)
	}
	var j *store.Job
	err = s.db.Update(func(tx *store.Tx) error {
		// One restore at a time: a second would rebuild over the first's result.
		if id := tx.Meta(nodeLossRestorePrefix + prj.ID); id != "" {
			if cur, err := store.Jobs.Get(tx, id); err == nil && (cur.State == scheduler.StatePending || cur.State == scheduler.StateRunning) {
				return apperr.Conflict("a restore of project %s is under way already: job %s (%s)", prj.ID, cur.ID, cur.State)
			}
		}
		j, err = s.enqueueRestoreElsewhere(tx, prj, node)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.host.Notify()
	return j, nil
}

// enqueueRestoreElsewhere enqueues the restore of prj (lost with node) on this node.
func (s *Service) enqueueRestoreElsewhere(tx *store.Tx, prj *store.Project, node string) (*store.Job, error) {
	j, err := s.host.Enqueue(tx, prj, JobRestoreElsewhere, prj.ID, restoreElsewherePayload{From: node})
	if err != nil {
		return nil, err
	}
	j.Node = s.cfg.NodeID
	if err := store.Jobs.Put(tx, j); err != nil {
		return nil, err
	}
	return j, tx.SetMeta(nodeLossRestorePrefix+prj.ID, j.ID)
}

// autoRestore enqueues, on the leader, the restore of the projects lost for NodeLossRestoreAfter (with
// an off-machine backup store; never when that is 0).
func (s *Service) autoRestore(tx *store.Tx, p *store.Project) (*store.Job, error) {
	after := s.cfg.RestoreAfter
	if after <= 0 || !s.backupObjects || p.RuntimeStatus != runtimeUnavailable || !s.restoreRetryDue(tx, p.ID, after) {
		return nil, nil
	}
	parts := strings.Fields(tx.Meta(nodeLossMetaPrefix + p.ID))
	if len(parts) < 3 {
		return nil, nil
	}
	lostAt, err := time.Parse(time.RFC3339Nano, parts[2])
	if err != nil || s.now().Sub(lostAt) < after || parts[0] != store.ProjectNode(tx, p) {
		return nil, nil
	}
	return s.enqueueRestoreElsewhere(tx, p, parts[0])
}

// restoreElsewhereJob moves the project's records to this node (its instance's directory under this data
// directory, ports in this node's range, Project.NodeID) and rebuilds its instance from the backup store.
func (s *Service) restoreElsewhereJob(ctx context.Context, run *scheduler.Run) (any, error) {
	var pl restoreElsewherePayload
	if err := run.DecodePayload(&pl); err != nil {
		return nil, err
	}
	if s.cfg.NodeID == "" {
		return nil, errors.New("restore elsewhere runs on a cluster node")
	}
	// A job that followed its project back to the lost node (scheduler: pinned to a leader lost since), or
	// whose lost node is back: nothing to restore, the node serves its own data.
	if pl.From == s.cfg.NodeID {
		return nil, fmt.Errorf("node %s, which project %s was lost with, is back and runs this job: there is nothing to restore elsewhere", pl.From, run.Job.ProjectID)
	}
	// Restored already (another restore job of the project ran first, an operator's or the sweep's), or
	// moved: a second restore would throw away what was written since.
	var owner, status string
	if err := s.db.View(func(tx *store.Tx) error {
		p, err := store.Projects.Get(tx, run.Job.ProjectID)
		if err != nil {
			return err
		}
		owner, status = store.ProjectNode(tx, p), p.RuntimeStatus
		return nil
	}); err != nil {
		return nil, err
	}
	retry := owner == s.cfg.NodeID && (status == api.RuntimeDown || status == api.RuntimeRestarting) // an attempt here that could not move it back
	if owner != pl.From && !retry {
		return nil, fmt.Errorf("project %s is on node %s now (runtime status %s), not on the lost node %s: nothing to restore", run.Job.ProjectID, owner, status, pl.From)
	}
	if s.members != nil {
		if alive, err := s.members.Alive(ctx, pl.From); err == nil && alive {
			return nil, fmt.Errorf("node %s, which project %s was lost with, holds its lease again: there is nothing to restore elsewhere", pl.From, run.Job.ProjectID)
		}
	}
	rp, err := s.host.Rebuild(ctx, run.Job.ProjectID, pl.From)
	if err != nil {
		return nil, err
	}
	prj := rp.Project
	res := RestoreElsewhereResult{From: pl.From, To: s.cfg.NodeID, BackupKey: rp.BackupKey, LSN: rp.LSN, At: rp.At, Timeline: rp.Timeline, Notes: rp.Notes}
	err = s.db.Update(func(tx *store.Tx) error {
		if err := tx.SetMeta(nodeLossMetaPrefix+prj.ID, ""); err != nil {
			return err
		}
		if err := tx.SetMeta(nodeLossRestorePrefix+prj.ID, ""); err != nil {
			return err
		}
		if err := s.host.AuditSystem(tx, "project.restored_elsewhere", prj.OrganizationID, prj.ID, res); err != nil {
			return err
		}
		return s.observe.NodeBack(tx, prj, s.cfg.NodeID, prj.RuntimeStatus, s.now())
	})
	if err != nil {
		return nil, err
	}
	s.log.Warn("node loss: a project was restored on this node from the backup store", "project", prj.ID, "from_node", pl.From,
		"backup", rp.BackupKey, "lsn", rp.LSN, "at", rp.At)
	return res, nil
}

// restoreRetryDue reports whether the sweep may enqueue a restore of the project: none was enqueued, or
// the last one failed (its records went back to the lost node: the bucket unreachable, say) at least
// after ago — it is tried again then, one at a time.
func (s *Service) restoreRetryDue(tx *store.Tx, projectID string, after time.Duration) bool {
	id := tx.Meta(nodeLossRestorePrefix + projectID)
	if id == "" {
		return true
	}
	j, err := store.Jobs.Get(tx, id)
	if errors.Is(err, store.ErrNotFound) {
		return true
	}
	if err != nil || j.State != scheduler.StateFailed {
		return false // pending or running (a completed one cleared the key)
	}
	return j.CompletedAt != nil && s.now().Sub(*j.CompletedAt) >= after
}
