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
		AlertBackupUnrestorable, AlertDataMissing, AlertBackupStoreUnreachable, AlertNodeUnavailable},
	"AlertSeverity":     {SeverityWarning, SeverityCritical},
	"LogSeverity":       LogSeverities,
	"ComponentStatus":   {StatusOperational, StatusDegraded, StatusDown},
	"HealthStatus":      {HealthOK, HealthDegraded},
	"NodeStatus":        {NodeStatusAlive, NodeStatusJoining, NodeStatusDraining, NodeStatusUnavailable},
	"NodeRole":          {NodeRoleVoter, NodeRoleLearner, NodeRoleNone},
	"Environment":       Environments,
	"ApprovalAction":    {ActionProjectDelete},
	"ProjectState":      {ProjectProvisioning, ProjectActive, ProjectFailed, ProjectDeleting, ProjectDeleted},
	"RuntimeStatus":     {RuntimeProvisioning, RuntimeActive, RuntimeRestarting, RuntimeDown, RuntimeStopped, RuntimeSuspended, RuntimeUnavailable},
	"Scope":             scopeNames(AllScopes),
	"Role":              {RoleOwner, RoleAdmin, RoleMember},
	"PreviewMode":       {PreviewModeEmpty, PreviewModeClone},
	"PreviewSourceKind": {PreviewSourceNone, PreviewSourceLive, PreviewSourceBackup},
	"KVState":           {KVProvisioning, KVRunning, KVError, KVDestroying},
	"CutoverStatus":     {CutoverOpen, CutoverApproved, CutoverPromoting, CutoverCompleted, CutoverRejected, CutoverFailed},
	"JobState":          {JobPending, JobRunning, JobCompleted, JobFailed},
	"KVEvictionPolicy":  {KVEvictionVolatileLRU},
	"WebhookHealth":     {WebhookHealthy, WebhookFailing, WebhookDisabled},
	"DeliveryState":     {DeliveryPending, DeliveryDelivered, DeliveryFailed},
	"CutoverActorKind":  {ActorUser, ActorAPIKey},
	"UploadState":       {UploadPending, UploadUploaded, UploadConsumed, UploadExpired},
	"BillingEventOutcome": {BillingOutcomeApplied, BillingOutcomeUnchanged, BillingOutcomeIgnored, BillingOutcomeUnknownCustomer,
		BillingOutcomeStale, BillingOutcomeOtherSubscription, BillingOutcomeDuplicate},
	"Program":                  {ProgramStartup, ProgramPartner},
	"ProgramApplicationStatus": {ProgramApplicationReceived, ProgramApplicationApproved, ProgramApplicationRejected},
	"IntegrationState":         IntegrationStates,
	"IntegrationProvider":      IntegrationProviders,
	"UpgradeMethod":            {UpgradeMethodPgUpgrade, UpgradeMethodLogical},
}

// Job states (the scheduler's: appliance checks they are the same at compile time).
const (
	JobPending   = "pending"
	JobRunning   = "running"
	JobCompleted = "completed"
	JobFailed    = "failed"
)

// KVEvictionVolatileLRU is the key-value stores' maxmemory-policy: keys with a TTL are evicted first.
const KVEvictionVolatileLRU = "volatile-lru"

// Webhook endpoint health and delivery states.
const (
	WebhookHealthy  = "healthy"  // delivering
	WebhookFailing  = "failing"  // its last attempts in a row failed
	WebhookDisabled = "disabled" // not active

	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
)

// Actor kinds recorded on audit events and on what a caller requested.
const (
	ActorUser      = "user"
	ActorAPIKey    = "api_key"
	ActorSystem    = "system"
	ActorAnonymous = "anonymous"
	// ActorBillingProvider is a billing provider's webhook event (its actor id: the provider, "stripe").
	ActorBillingProvider = "billing_provider"
	// ActorServiceToken is a service token's call (a program application submitted by the public website).
	ActorServiceToken = "service_token"
)

// Upload states; see docs/api-decisions.md (Imports).
const (
	UploadPending  = "pending"  // the signed URL is issued, nothing received yet
	UploadUploaded = "uploaded" // the dump is in the backup store, ready for import.restore
	UploadConsumed = "consumed" // import.restore restored it; its dump is deleted
	UploadExpired  = "expired"  // the sweep deleted it: pending past its URL's expiry, or never imported
)

func scopeNames(scopes []Scope) []string {
	out := make([]string, len(scopes))
	for i, s := range scopes {
		out[i] = string(s)
	}
	return out
}

// Organization roles.
const (
	RoleOwner  = "owner"
	RoleAdmin  = "admin"
	RoleMember = "member"
)

// Preview modes and the sources of their data.
const (
	PreviewModeEmpty    = "empty"  // the project's database and role names, no data (from a spare cluster)
	PreviewModeClone    = "clone"  // the project's data as of now (an online copy of its running server)
	PreviewSourceNone   = "none"   // an empty preview
	PreviewSourceLive   = "live"   // a copy of the running server
	PreviewSourceBackup = "backup" // a base backup and the WAL archive, recovered to source_restore_time
)

// Key-value store states (see the spec's state table and docs/api-decisions.md).
const (
	KVProvisioning = "provisioning"
	KVRunning      = "running"
	KVError        = "error"
	KVDestroying   = "destroying"
)

// Cutover request statuses:
//
//	open → approved → promoting → completed
//	open → rejected;  approved or promoting → failed (the project as it was)
const (
	CutoverOpen      = "open"      // requested; an organization admin approves or rejects it
	CutoverApproved  = "approved"  // approved: the pre-cutover backup is being taken
	CutoverPromoting = "promoting" // the promotion job copies the preview's data in
	CutoverCompleted = "completed" // the project's database holds the preview's data; the preview is deleted
	CutoverRejected  = "rejected"  // an admin refused it (rejected_reason)
	CutoverFailed    = "failed"    // the backup or the promotion failed (last_error); nothing changed
)

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
	AlertNodeUnavailable        = "node_unavailable"

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

// The built-in plans' names, smallest first (appliance.Plans holds their sizes; the plans in force are the operators' configuration, GET /v1/plans).
const (
	PlanFree  = "free"
	PlanPro   = "pro"
	PlanScale = "scale"
)

// Environments are a project's environments.
var Environments = []string{"production", "staging", "development"}
