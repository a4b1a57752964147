package kv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/redis"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// RegisterJobs registers the area's job handlers on the runner (the root's RegisterJobs calls it).
func (s *Service) RegisterJobs(r *scheduler.Runner) {
	r.Handle(JobCreate, s.createJob)
	r.Handle(JobFlush, s.flushJob)
	r.Handle(JobDelete, s.deleteJob)
}

// target starts a kv job: the data plane and the job's store.
func (s *Service) target(run *scheduler.Run) (*Plane, *store.KVStore, error) {
	dp, err := s.dataPlane()
	if err != nil {
		return nil, nil, err
	}
	if dp.RedisServer == "" {
		return nil, nil, errors.New("redis-server is not installed (Debian package redis-server)")
	}
	var pl payload
	if err := run.DecodePayload(&pl); err != nil {
		return nil, nil, err
	}
	var kv *store.KVStore
	err = s.db.View(func(tx *store.Tx) error {
		kv, err = store.KVStores.Get(tx, pl.KVStoreID)
		return err
	})
	return dp, kv, err
}

// update applies fn to the stored record.
func (s *Service) update(id string, fn func(*store.KVStore)) error {
	return s.db.Update(func(tx *store.Tx) error {
		kv, err := store.KVStores.Get(tx, id)
		if err != nil {
			return err
		}
		fn(kv)
		kv.UpdatedAt = s.now()
		return store.KVStores.Put(tx, kv)
	})
}

// createJob starts the store's server and puts it under supervision. When it fails for good, the store
// is in error with last_error and nothing of it runs.
func (s *Service) createJob(ctx context.Context, run *scheduler.Run) (any, error) {
	dp, kv, err := s.target(run)
	if errors.Is(err, store.ErrNotFound) { // deleted with its project meanwhile
		return map[string]any{"skipped": "the store is gone"}, nil
	}
	if err != nil {
		return nil, err
	}
	if kv.State != StateProvisioning {
		return map[string]any{"skipped": "the store is " + kv.State}, nil
	}
	if want := filepath.Join(s.cfg.Dir, kv.ID); kv.Dir != want {
		// Created through another cluster node's API, which named its own directory: the store's files are
		// on the node hosting its project, which runs this job.
		if err := s.update(kv.ID, func(r *store.KVStore) { r.Dir = want }); err != nil {
			return nil, err
		}
		kv.Dir = want
	}
	srv, _, err := s.Server(kv)
	if err == nil {
		// A store being created was never running, so never shipped: nothing to fetch, and a create does
		// not wait for the backup store. Its later starts (adoption, restarts) fetch.
		srv.Seed = nil
		err = s.start(ctx, dp, srv)
	}
	if err != nil {
		if ctx.Err() != nil { // the appliance stops: the retry after its next start starts the server again
			s.stopUnsupervised(srv)
			return nil, err
		}
		if srv != nil {
			dp.Supervisor.Unwatch(supervisorKey(kv.ID))
			if rerr := srv.Remove(context.WithoutCancel(ctx)); rerr != nil {
				s.log.Warn("remove a key-value store that failed to start", "kv_store", kv.ID, "err", rerr)
			}
		}
		if uerr := s.update(kv.ID, func(r *store.KVStore) { r.State, r.LastError = StateError, err.Error() }); uerr != nil {
			s.log.Error("mark key-value store failed", "kv_store", kv.ID, "err", uerr)
		}
		return nil, err
	}
	if err := s.update(kv.ID, func(r *store.KVStore) {
		if r.State == StateProvisioning {
			r.State, r.LastError = StateRunning, ""
		}
	}); err != nil {
		return nil, err
	}
	return map[string]any{"kv_store_id": kv.ID, "maxmemory_mb": kv.MaxMemoryMB}, nil
}

// start starts a server and watches it.
func (s *Service) start(ctx context.Context, dp *Plane, srv *redis.Server) error {
	if err := s.makeDir(); err != nil {
		return err
	}
	if err := srv.Start(ctx, dp.Supervisor.Exec); err != nil {
		return err
	}
	return dp.Supervisor.Watch(supervisorKey(srv.ID), srv)
}

// makeDir makes the stores' directory (searchable by the OS user: each store's own is its).
func (s *Service) makeDir() error {
	if err := os.MkdirAll(s.cfg.Dir, 0o711); err != nil {
		return err
	}
	return os.Chmod(s.cfg.Dir, 0o711)
}

func (s *Service) stopUnsupervised(srv *redis.Server) {
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Stop(ctx, nil, daemon.StopFast); err != nil {
		s.log.Warn("stop the server of an interrupted key-value create", "kv_store", srv.ID, "err", err)
	}
}

// flushJob deletes every key (FLUSHALL as the appliance's user) and saves the empty snapshot, so a
// restart cannot bring keys back.
func (s *Service) flushJob(ctx context.Context, run *scheduler.Run) (any, error) {
	_, kv, err := s.target(run)
	if err != nil {
		return nil, err
	}
	if kv.State != StateRunning {
		return nil, fmt.Errorf("the key-value store is %s, not running", kv.State)
	}
	srv, admin, err := s.Server(kv)
	if err != nil {
		return nil, err
	}
	out, err := srv.Admin(ctx, admin, []string{"DBSIZE"}, []string{"FLUSHALL", "SYNC"}, []string{"SAVE"})
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	n, _ := strconv.Atoi(strings.TrimPrefix(out[0], ":"))
	return map[string]any{"kv_store_id": kv.ID, "keys_deleted": n}, nil
}

// deleteJob stops the server, removes its directory (socket, snapshot, configuration), its snapshots in the
// backup store and the record.
func (s *Service) deleteJob(ctx context.Context, run *scheduler.Run) (any, error) {
	dp, kv, err := s.target(run)
	if errors.Is(err, store.ErrNotFound) {
		return map[string]any{"skipped": "already deleted"}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := s.remove(ctx, dp, kv); err != nil {
		return nil, scheduler.Transient(err)
	}
	return map[string]any{"kv_store_id": kv.ID, "deleted": true}, nil
}

// remove ends a store: its server, its directory, its snapshots in the backup store, then its record (with
// the project's lock on rotations).
func (s *Service) remove(ctx context.Context, dp *Plane, kv *store.KVStore) error {
	unlock := s.locks.lock(kv.ProjectID)
	defer unlock()
	dp.Supervisor.Unwatch(supervisorKey(kv.ID))
	srv, _, err := s.Server(kv)
	if err != nil {
		return err
	}
	if err := srv.Remove(ctx); err != nil {
		return err
	}
	if err := s.removeSnapshots(ctx, kv); err != nil {
		return err
	}
	return s.db.Update(func(tx *store.Tx) error {
		err := store.KVStores.Delete(tx, kv.ID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return err
	})
}

// RemoveProject removes a deleted project's store, if it has one (the root's project delete job).
func (s *Service) RemoveProject(ctx context.Context, projectID string) error {
	var kv *store.KVStore
	err := s.db.View(func(tx *store.Tx) error {
		var err error
		kv, err = projectStore(tx, projectID)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	dp, err := s.dataPlane()
	if err != nil {
		return err
	}
	return s.remove(ctx, dp, kv)
}

// running is every running store's record.
func (s *Service) running() ([]*store.KVStore, error) {
	var live []*store.KVStore
	err := s.db.View(func(tx *store.Tx) error {
		var err error
		live, err = store.KVStores.All(tx, func(r *store.KVStore) bool { return r.State == StateRunning && store.LocalProject(tx, r.ProjectID) })
		return err
	})
	return live, err
}

// Adopt puts every running store's server under supervision at start: a live one is adopted, a dead one
// (the machine rebooted) is started by the supervisor from its snapshot (the backup store's newest when
// its directory has none: snapshots.go).
func (s *Service) Adopt(ctx context.Context) error {
	dp, err := s.dataPlane()
	if err != nil {
		return err
	}
	live, err := s.running()
	if err != nil {
		return err
	}
	if len(live) > 0 { // a recovered machine has none yet: its stores start from the backup store's snapshots
		if err := s.makeDir(); err != nil {
			return err
		}
	}
	for _, kv := range live {
		srv, _, err := s.Server(kv)
		if err != nil {
			return err
		}
		if err := dp.Supervisor.Watch(supervisorKey(kv.ID), srv); err != nil {
			return err
		}
	}
	return nil
}

// OnEvent records what the supervisor saw of a store's server as an audit event of its project.
func (s *Service) OnEvent(e daemon.Event) {
	id := strings.TrimPrefix(e.Key, "kv/")
	err := s.db.Update(func(tx *store.Tx) error {
		kv, err := store.KVStores.Get(tx, id)
		if err != nil {
			return err
		}
		md := map[string]any{"kv_store_id": id, "pid": e.PID}
		if e.Err != nil {
			md["error"] = e.Err.Error()
		}
		return s.host.Audit(tx, &authz.Principal{AuthSource: authz.ActorSystem}, "kv."+string(e.Kind), kv.OrganizationID, kv.ProjectID, md)
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Error("record a key-value server event", "key", e.Key, "err", err)
	}
}

// Health is the status page's row of the stores: how many run, any whose server is down, and any that
// refuses writes because its last snapshot failed.
func (s *Service) Health(ctx context.Context) (string, string) {
	dp, err := s.dataPlane()
	if err != nil {
		return api.StatusDown, err.Error()
	}
	if dp.RedisServer == "" {
		return api.StatusDegraded, Feature + " disabled: redis-server is not installed (Debian package redis-server)"
	}
	live, err := s.running()
	if err != nil {
		return api.StatusDown, err.Error()
	}
	var down, unsaved, unknown []string
	for _, kv := range live {
		srv, admin, err := s.Server(kv)
		if err != nil {
			down = append(down, kv.ID)
			continue
		}
		if _, running, _ := srv.Status(); !running {
			down = append(down, kv.ID)
			continue
		}
		// A store whose snapshot cannot be written (its disk full) refuses writes with MISCONF.
		switch failed, err := srv.SaveFailed(ctx, admin); {
		case err != nil:
			unknown = append(unknown, kv.ID)
		case failed:
			unsaved = append(unsaved, kv.ID)
		}
	}
	shipping, shipFailed := s.shipHealth(live)
	var bad []string
	if len(shipFailed) > 0 {
		bad = append(bad, fmt.Sprintf("%d of %d stores' last RDB snapshot could not be shipped to the backup store: %s",
			len(shipFailed), len(live), strings.Join(shipFailed, ", ")))
	}
	if len(down) > 0 {
		bad = append(bad, fmt.Sprintf("%d of %d stores not running: %s", len(down), len(live), strings.Join(down, ", ")))
	}
	if len(unsaved) > 0 {
		bad = append(bad, fmt.Sprintf("%d of %d stores refuse writes (MISCONF): their last snapshot could not be saved (disk full or unwritable): %s",
			len(unsaved), len(live), strings.Join(unsaved, ", ")))
	}
	if len(unknown) > 0 {
		bad = append(bad, fmt.Sprintf("%d of %d stores do not answer the appliance's INFO: %s", len(unknown), len(live), strings.Join(unknown, ", ")))
	}
	if len(bad) > 0 {
		return api.StatusDegraded, strings.Join(bad, "; ")
	}
	return api.StatusOperational, fmt.Sprintf("%d stores running (redis-server %s)%s", len(live), dp.RedisServer, shipping)
}

// projectStore is the project's store, nil when it has none.
func (s *Service) projectStore(projectID string) (*store.KVStore, error) {
	var kv *store.KVStore
	err := s.db.View(func(tx *store.Tx) error {
		r, err := store.KVStores.First(tx, store.KVStoresByProject, projectID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		kv = r
		return err
	})
	return kv, err
}

// ApplyPlan gives the project's store its plan's maxmemory (the project.apply_plan job's part): the record
// first (every start of the server writes it), then the running server (CONFIG SET). It returns the size
// in force, 0 when the project has no store.
func (s *Service) ApplyPlan(ctx context.Context, projectID, plan string) (int, error) {
	kv, err := s.projectStore(projectID)
	if err != nil || kv == nil {
		return 0, err
	}
	mb := s.host.PlanKVMemoryMB(plan)
	if mb == kv.MaxMemoryMB {
		return mb, nil
	}
	if err := s.update(kv.ID, func(r *store.KVStore) { r.MaxMemoryMB = mb }); err != nil {
		return 0, err
	}
	if kv.State != StateRunning {
		return mb, nil
	}
	srv, admin, err := s.Server(kv)
	if err != nil {
		return 0, err
	}
	if err := srv.SetMaxMemory(ctx, admin, mb); err != nil {
		return 0, fmt.Errorf("resize the key-value store: %w", err)
	}
	return mb, nil
}

// Disconnect closes every client connection of the project's running store (an organization's
// suspension: the fronts refuse new ones meanwhile).
func (s *Service) Disconnect(ctx context.Context, projectID string) error {
	kv, err := s.projectStore(projectID)
	if err != nil || kv == nil || kv.State != StateRunning {
		return err
	}
	srv, admin, err := s.Server(kv)
	if err != nil {
		return err
	}
	if err := srv.KillClients(ctx, admin); err != nil {
		return fmt.Errorf("disconnect the key-value store's clients: %w", err)
	}
	return nil
}
