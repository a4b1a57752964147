package appliance

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// A spare is a prepared cluster owned by no project: initialized (initdb, TLS, configuration), running
// under supervision on a port reserved for it, with a placeholder role, second login and database, and its
// PgBouncer running on a second reserved port. Provisioning claims one and renames the placeholders
// instead of running initdb, starting a server and a pooler and creating a database, which are nearly all
// of its cost.
const (
	InstanceSpare          = "spare"
	InstanceSparePreparing = "spare-preparing" // a crash leaves it behind; EnsureSpares removes it
)

// EnsureSpares tops the pool of prepared clusters up to Config.Spares. It is safe to call at any time;
// concurrent calls do not overfill the pool.
func (s *Service) EnsureSpares(ctx context.Context) error {
	if s.cfg.Spares <= 0 || s.storage.Disk().Low { // no new clusters while short of disk space
		return nil
	}
	dp, err := s.dataPlane()
	if err != nil {
		return err
	}
	if !s.sparesMu.TryLock() {
		return nil // another call is filling the pool
	}
	defer s.sparesMu.Unlock()
	if s.sparesStopped {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.sparesStop, cancel)()
	if err := s.removeAbandonedSpares(); err != nil {
		return err
	}
	for {
		var have int
		err := s.db.View(func(tx *store.Tx) error {
			spares, err := store.Instances.All(tx, func(i *store.Instance) bool { return i.State == InstanceSpare && store.LocalInstance(tx, i) })
			have = len(spares)
			return err
		})
		if err != nil {
			return err
		}
		if have >= s.cfg.Spares || ctx.Err() != nil {
			return ctx.Err()
		}
		if err := s.prepareSpare(ctx, dp); err != nil {
			return fmt.Errorf("prepare a spare cluster: %w", err)
		}
	}
}

// endSpares, at shutdown, interrupts a refill under way and waits for it to return (a preparation stops
// what it started when it fails; one that completed is recorded, and StopInstances stops it with the
// rest), and lets no refill start after it.
func (s *Service) endSpares() {
	s.stopSpares()
	s.sparesMu.Lock()
	defer s.sparesMu.Unlock()
	s.sparesStopped = true
}

// removeAbandonedSpares deletes what an interrupted preparation left: temporary directories and records
// still marked preparing (only EnsureSpares prepares, and it holds sparesMu).
func (s *Service) removeAbandonedSpares() error {
	if s.eng != nil {
		s.eng.RemoveSpareLeftovers()
	}
	// Their files are removed first (outside a transaction, which etcd may run more than once), then the
	// records: an interruption between leaves the records for the next start.
	var stale []*store.Instance
	if err := s.db.View(func(tx *store.Tx) (err error) {
		stale, err = store.Instances.All(tx, func(i *store.Instance) bool {
			return i.State == InstanceSparePreparing && store.LocalInstance(tx, i)
		})
		return err
	}); err != nil {
		return err
	}
	if len(stale) == 0 {
		return nil
	}
	for _, in := range stale {
		if s.eng != nil {
			s.eng.Remove(context.Background(), in)
		}
	}
	return s.db.Update(func(tx *store.Tx) error {
		for _, in := range stale {
			if cur, err := store.Instances.Get(tx, in.ID); err == nil && cur.State == InstanceSparePreparing {
				if err := store.Instances.Delete(tx, in.ID); err != nil {
					return err
				}
			} else if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		return nil
	})
}

// prepareSpare initializes a cluster in a temporary directory, moves it to its final place, starts it on
// its reserved port, creates the placeholders and records it as a spare.
func (s *Service) prepareSpare(ctx context.Context, dp *DataPlane) error {
	id := ids.New("ins")
	password := ids.Secret(24)
	now := s.now()
	rec := &store.Instance{ID: id, Dir: filepath.Join(s.instancesDir(), id), Major: dp.Bin.Major, BinDir: dp.Bin.Dir,
		AdminPassword: s.box.Seal([]byte(password)), State: InstanceSparePreparing, CreatedAt: now, UpdatedAt: now,
		NodeID: s.db.Node()} // this node's (a cluster's other nodes leave it alone)
	err := s.db.Update(func(tx *store.Tx) error {
		ports, err := s.allocatePorts(tx, 2)
		if err != nil {
			return err
		}
		rec.Port, rec.PooledPort = ports[0], ports[1]
		return store.Instances.Put(tx, rec)
	})
	if err != nil {
		return err
	}
	defaults := s.planOrDefault(DefaultPlan)
	settings, err := s.settingsFor(dp, &store.Project{MaxConnections: defaults.MaxConnections}, rec)
	if err != nil {
		return err
	}
	return s.eng.PrepareSpare(ctx, rec, password, settings, defaults.MaxConnections, func() error {
		return s.db.Update(func(tx *store.Tx) error {
			cur, err := store.Instances.Get(tx, rec.ID)
			if err != nil {
				return err
			}
			cur.State, cur.UpdatedAt = InstanceSpare, s.now()
			return store.Instances.Put(tx, cur)
		})
	})
}

// claimSpare hands a spare to the project inside tx (nil when the pool is empty). A spare whose directory a
// project claimed already (metadata older than the directory) is never handed out: reconcile reports it.
func claimSpare(tx *store.Tx) (*store.Instance, error) {
	spares, err := store.Instances.All(tx, func(i *store.Instance) bool {
		return i.State == InstanceSpare && store.LocalInstance(tx, i) && instanceOwner(i.Dir) == ""
	})
	if err != nil || len(spares) == 0 {
		return nil, err
	}
	if !(&postgres.Instance{Dir: spares[0].Dir}).Initialized() {
		// Its directory is gone (removed by hand?): forget it rather than provision on nothing.
		return nil, store.Instances.Delete(tx, spares[0].ID)
	}
	return spares[0], nil
}
