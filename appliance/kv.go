package appliance

import (
	"path/filepath"

	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/kv"
)

// The key-value store area lives in appliance/kv (its endpoints, jobs, adoption, events, the kv fronts'
// resolver and the status page's row); the service holds it, built in New.

// KVFront is where tenants reach the key-value stores (Config.KVFront).
type KVFront = kv.Front

// KV is the key-value store area: httpapi's kv routes call its methods, the kv fronts resolve tokens with
// it, up adopts the stores' servers and registers its status row.
func (s *Service) KV() *kv.Service { return s.kv }

// newKV builds the area with the service's collaborators (New).
func (s *Service) newKV(cfg Config, deps Deps) *kv.Service {
	var plane *kv.Plane
	if dp := deps.DataPlane; dp != nil {
		plane = &kv.Plane{Supervisor: dp.Supervisor, User: dp.User, RedisServer: dp.RedisServer}
	}
	// The stores' RDB snapshots go to a bucket only: the local directory store is on the stores' own disk.
	var snapshots *backup.Store
	if deps.BackupObjects != nil {
		snapshots = backup.New(deps.BackupObjects)
	}
	return kv.New(kv.Config{PublicHost: cfg.PublicHost, Front: cfg.KVFront, Dir: filepath.Join(cfg.DataDir, "kv")},
		kv.Deps{DB: deps.DB, Box: deps.Box, Log: deps.Log, Clock: s.now, Plane: plane, Host: areaHost{s}, Snapshots: snapshots})
}
