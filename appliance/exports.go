package appliance

import (
	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/dumpcache"
	"github.com/theappliance/appliance/appliance/exports"
)

// The exports area lives in appliance/exports (its endpoints, its job, the sweep); the service holds it,
// built in New. The dumps' directory and pg_dump are areaHost's (PrepareDumpDir, DumpDatabase): the
// cutover (appliance/migrate) dumps a preview with them too.

// Exports is the exports area: httpapi's export routes call its methods, the sweep calls Sweep.
func (s *Service) Exports() *exports.Service { return s.exports }

// newExports builds the area with the service's collaborators (New).
func (s *Service) newExports(cfg Config, deps Deps) *exports.Service {
	// With a bucket the exports are its objects too (their local files a bounded cache); without one the
	// local files are the exports.
	var bucket *backup.Store
	if deps.BackupObjects != nil {
		bucket = backup.New(deps.BackupObjects)
	}
	return exports.New(exports.Config{DataDir: cfg.DataDir},
		exports.Deps{DB: deps.DB, Log: deps.Log, Clock: s.now, URLs: s.urls, Host: areaHost{s}, Bucket: bucket, Cache: s.dumps})
}

// DefaultBackupCache is Config.BackupCache's default: the bytes of the bucket's exports and uploaded dumps
// kept on the local disk too (up --backup-cache-mb).
const DefaultBackupCache = dumpcache.DefaultBytes
