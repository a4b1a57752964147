package api

// Enums are the closed sets of values the wire types' string fields take, each built from the constants
// the server itself uses (the domain's constants are these): a field tagged enum:"Name" takes the values
// of Enums["Name"], which the OpenAPI document declares once, as the component schema Name, so typed
// clients get a union they can switch on exhaustively. A value is never typed a second time.
var Enums = map[string][]string{
	"BackupState":             {BackupPending, BackupRunning, BackupCompleted, BackupFailed},
	"BackupVerificationState": {VerificationPending, VerificationVerified, VerificationFailed},
	"BackupStorageKind":       {BackupStorageBucket, BackupStorageLocal},
	"ExportState":             {ExportPending, ExportRunning, ExportCompleted, ExportFailed, ExportExpired},
	"RestorePointKind":        {RestorePointNamed},
	"RestorePointState":       {RestorePointActive},
	"AlertKind": {AlertStorage, AlertConnections, AlertLongTransaction, AlertBackupFailed, AlertInstanceCrashed,
		AlertBackupUnrestorable, AlertDataMissing, AlertBackupStoreUnreachable},
	"AlertSeverity":   {SeverityWarning, SeverityCritical},
	"LogSeverity":     LogSeverities,
	"ComponentStatus": {StatusOperational, StatusDegraded, StatusDown},
	"HealthStatus":    {HealthOK, HealthDegraded},
	"Plan":            {PlanFree, PlanPro, PlanScale},
	"Environment":     Environments,
	"ApprovalAction":  {ActionProjectDelete},
	"ProjectState":    {ProjectProvisioning, ProjectActive, ProjectFailed, ProjectDeleting, ProjectDeleted},
	"RuntimeStatus":   {RuntimeProvisioning, RuntimeActive, RuntimeRestarting, RuntimeDown, RuntimeStopped},
}

// Backup verification states (Backup.VerificationState).
const (
	VerificationPending  = "pending"  // not verified yet
	VerificationVerified = "verified" // pg_verifybackup accepted it
	VerificationFailed   = "failed"   // pg_verifybackup refused it (verification_error), or there is no copy
)

// Export states (Export.State); see docs/api-decisions.md (Exports).
const (
	ExportPending   = "pending"   // recorded, its export.create job not started yet
	ExportRunning   = "running"   // pg_dump is writing
	ExportCompleted = "completed" // the dump is in the backup store until expires_at
	ExportFailed    = "failed"    // pg_dump failed; the job carries its output
	ExportExpired   = "expired"   // past expires_at: the sweep deleted the file (and the bucket's object)
)

// Restore point kinds and states (deleted points are not listed, so "deleted" is no value of the API).
const (
	RestorePointNamed   = "named"   // made by pg_create_restore_point through the API
	RestorePointActive  = "active"  // restorable
	RestorePointDeleted = "deleted" // deleted: no longer listed nor restorable; deleting it again succeeds
)

// Alert kinds (ProjectAlert.Kind) and severities; appliance/observe raises them.
const (
	AlertStorage                = "storage"
	AlertConnections            = "connections"
	AlertLongTransaction        = "long_transaction"
	AlertBackupFailed           = "backup_failed"
	AlertInstanceCrashed        = "instance_crashed"
	AlertBackupUnrestorable     = "backup_unrestorable"
	AlertDataMissing            = "data_missing"
	AlertBackupStoreUnreachable = "backup_store_unreachable"

	SeverityWarning  = "warning"
	SeverityCritical = "critical"
)

// LogSeverities are the log entries' severities (PostgreSQL's, mapped: DEBUG1-5 → debug, LOG → log, …),
// in order.
var LogSeverities = []string{"debug", "log", "info", "notice", "warning", "error", "fatal", "panic", "detail"}

// Health statuses (GET /healthz; when the appliance is down it answers 503 with an error instead).
const (
	HealthOK       = "ok"
	HealthDegraded = StatusDegraded
)

// The plans' names, smallest first (appliance.Plans holds their sizes).
const (
	PlanFree  = "free"
	PlanPro   = "pro"
	PlanScale = "scale"
)

// Environments are a project's environments.
var Environments = []string{"production", "staging", "development"}
