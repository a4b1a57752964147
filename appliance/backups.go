package appliance

import (
	"github.com/theappliance/appliance/appliance/backups"
)

// The backups area lives in appliance/backups: a project's base backups, its backup schedule and
// retention, its restore points and its restores (the backup.create and backup.restore jobs); the service
// holds it, built in New. The backup store they live in (backupstore.go) stays here: the data plane's
// settings, its start and the project jobs use it too.

// Backup states (state) and verification states (verification_state); see docs/api-decisions.md.
const (
	BackupPending   = backups.StatePending
	BackupRunning   = backups.StateRunning
	BackupCompleted = backups.StateCompleted
	BackupFailed    = backups.StateFailed

	VerificationPending  = backups.VerificationPending
	VerificationVerified = backups.VerificationVerified
	VerificationFailed   = backups.VerificationFailed
)

// JobBackupCreate takes a base backup.
const JobBackupCreate = backups.JobCreate

// Restore point kinds and states.
const (
	RestorePointNamed   = backups.RestorePointNamed
	RestorePointActive  = backups.RestorePointActive
	RestorePointDeleted = backups.RestorePointDeleted
)

// The backup schedule: its id, the label of the backups it takes, the default retention.
const (
	ScheduledBackupID    = backups.ScheduledBackupID
	ScheduledBackupLabel = backups.ScheduledBackupLabel
	DefaultRetentionDays = backups.DefaultRetentionDays
)

// ScheduledRunResult says what one run of the scheduled-backups task did.
type ScheduledRunResult = backups.ScheduledRunResult

// Backups is the backups area: httpapi's backup, schedule, restore point and restore routes call its
// methods.
func (s *Service) Backups() *backups.Service { return s.backups }

// newBackups builds the area with the service's collaborators (New, after useDataPlane: its jobs drive
// the instance engine).
func (s *Service) newBackups(cfg Config, deps Deps) *backups.Service {
	var plane *backups.Plane
	var eng backups.Engine
	if dp := deps.DataPlane; dp != nil {
		plane = &backups.Plane{User: dp.User, Reflink: s.reflinks, Tools: dp.Bin}
		eng = s.eng
	}
	return backups.New(backups.Config{RetentionDays: cfg.BackupRetentionDays, FirstBackups: deps.BackupObjects != nil},
		backups.Deps{DB: deps.DB, Box: deps.Box, Log: deps.Log, Clock: s.now, Engine: eng, Plane: plane, Host: areaHost{s}})
}
