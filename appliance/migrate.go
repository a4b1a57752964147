package appliance

import (
	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/migrate"
)

// The migration area lives in appliance/migrate (the import preflight, the dump uploads and their import,
// following a source, the cutover requests, and their jobs); the service holds it, built in New.

// The area's job types, named here too so the root's tables of job types (jobEvents, readOnlyJobs) read
// as before.
const (
	JobImportRestore       = migrate.JobImportRestore
	JobImportFollowStatus  = migrate.JobFollowStatus
	JobImportFollowCutover = migrate.JobFollowCutover
)

// Migrate is the migration area: httpapi's import, follow and cutover routes call it.
func (s *Service) Migrate() *migrate.Service { return s.migrate }

// newMigrate builds the area with the service's collaborators (New, after useDataPlane: its jobs drive
// the instance engine's programs).
func (s *Service) newMigrate(deps Deps) *migrate.Service {
	var plane *migrate.Plane
	var eng migrate.Engine
	if dp := deps.DataPlane; dp != nil {
		plane = &migrate.Plane{User: dp.User}
		eng = s.eng
	}
	var bucket *backup.Store // with a bucket the uploaded dumps are its objects too (their files cached)
	if deps.BackupObjects != nil {
		bucket = backup.New(deps.BackupObjects)
	}
	var jobs migrate.Notifier
	if deps.Jobs != nil {
		jobs = deps.Jobs
	}
	return migrate.New(migrate.Config{DataDir: s.cfg.DataDir}, migrate.Deps{DB: deps.DB, Box: deps.Box, Log: deps.Log, Clock: s.now, URLs: s.urls, Bucket: bucket, Cache: s.dumps,
		UploadLimit: deps.ImportUploadLimit, Policy: s.policy(), Engine: eng, Plane: plane, Jobs: jobs, StepHook: deps.JobStepHook,
		Host: areaHost{s}})
}
