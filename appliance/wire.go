package appliance

import (
	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/store"
)

// The API's wire types live in package api (one file per API area), which the CLI and httpapi import without
// the domain; the service speaks them under their old names through these aliases.

// Scope is a permission an API key carries.
type Scope = api.Scope

// api/advisor.go
type (
	AdvisorResponse = api.AdvisorResponse
	HygieneResponse = api.HygieneResponse
)

// api/alerts.go
type (
	ProjectAlert  = api.ProjectAlert
	AlertList     = api.AlertList
	AlertResponse = api.AlertResponse
)

// api/apikeys.go
type (
	APIKey              = api.APIKey
	APIKeyList          = api.APIKeyList
	CreateAPIKeyRequest = api.CreateAPIKeyRequest
	CreatedAPIKey       = api.CreatedAPIKey
	Revoked             = api.Revoked
)

// api/approvals.go
type (
	Approval         = api.Approval
	ApprovalRequest  = api.ApprovalRequest
	ApprovalResponse = api.ApprovalResponse
)

// api/audit.go
type (
	AuditEventList = api.AuditEventList
)

// api/backups.go
type (
	Backup              = api.Backup
	BackupList          = api.BackupList
	CreateBackupRequest = api.CreateBackupRequest
)

// api/clilogin.go
type (
	CLILoginStartRequest = api.CLILoginStartRequest
	CLILoginStart        = api.CLILoginStart
	CLILoginResult       = api.CLILoginResult
	CLILoginDetails      = api.CLILoginDetails
)

// api/connections.go
type (
	Connections              = api.Connections
	ConnectionsResponse      = api.ConnectionsResponse
	RotateCredentialsRequest = api.RotateCredentialsRequest
)

// api/cutover.go
type (
	CutoverRequest         = api.CutoverRequest
	CutoverRequestList     = api.CutoverRequestList
	CutoverRequestResponse = api.CutoverRequestResponse
	CutoverJobResponse     = api.CutoverJobResponse
	SchemaChange           = api.SchemaChange
	SchemaDiff             = api.SchemaDiff
	CreateCutoverRequest   = api.CreateCutoverRequest
	ApproveCutoverRequest  = api.ApproveCutoverRequest
	RejectCutoverRequest   = api.RejectCutoverRequest
)

// api/ephemeral.go
type (
	EphemeralDatabase      = api.EphemeralDatabase
	CreateEphemeralRequest = api.CreateEphemeralRequest
	EphemeralCreated       = api.EphemeralCreated
	EphemeralResponse      = api.EphemeralResponse
	ClaimRequest           = api.ClaimRequest
	ClaimResponse          = api.ClaimResponse
	ClaimedProjectView     = api.ClaimedProjectView
)

// api/exports.go
type (
	Export              = api.Export
	ExportList          = api.ExportList
	CreateExportRequest = api.CreateExportRequest
	ExportJobResponse   = api.ExportJobResponse
	Download            = api.Download
	DownloadResponse    = api.DownloadResponse
)

// api/extensions.go
type (
	Extension        = api.Extension
	ExtensionList    = api.ExtensionList
	ExtensionRequest = api.ExtensionRequest
)

// api/follow.go
type (
	FollowRequest        = api.FollowRequest
	FollowCutoverRequest = api.FollowCutoverRequest
)

// api/follow.go (the jobs' reports)
type (
	FollowReport = api.FollowReport
	FollowTable  = api.FollowTable
)

// api/health.go
type (
	Health       = api.Health
	Component    = api.Component
	RegionStatus = api.RegionStatus
	Status       = api.Status
)

// api/identity.go
type (
	SessionRequest = api.SessionRequest
	SessionResult  = api.SessionResult
)

// api/imports.go
type (
	Upload              = api.Upload
	CreateUploadRequest = api.CreateUploadRequest
	UploadResponse      = api.UploadResponse
	ImportRequest       = api.ImportRequest
)

// api/jobs.go
type (
	Job         = api.Job
	JobResponse = api.JobResponse
	JobList     = api.JobList
)

// api/kv.go
type (
	KVCredentials    = api.KVCredentials
	KVStore          = api.KVStore
	KVStoreList      = api.KVStoreList
	KVCreateResponse = api.KVCreateResponse
	KVStoreResult    = api.KVStoreResult
)

// api/logs.go
type (
	Logs         = api.Logs
	LogsResponse = api.LogsResponse
)

// api/members.go
type (
	Member                = api.Member
	MemberList            = api.MemberList
	MemberResponse        = api.MemberResponse
	AddMemberRequest      = api.AddMemberRequest
	AddedMember           = api.AddedMember
	Invitation            = api.Invitation
	InvitationList        = api.InvitationList
	InvitationDone        = api.InvitationDone
	SetMemberRoleRequest  = api.SetMemberRoleRequest
	RemovedMember         = api.RemovedMember
	ChangePasswordRequest = api.ChangePasswordRequest
	PasswordChanged       = api.PasswordChanged
	SignedOut             = api.SignedOut
)

// api/observability.go
type (
	ObservabilitySnapshot = api.ObservabilitySnapshot
	ObservabilityResponse = api.ObservabilityResponse
	HistoryResponse       = api.HistoryResponse
	TopQuery              = api.TopQuery
	TopQueriesResponse    = api.TopQueriesResponse
	QueryPoint            = api.QueryPoint
	QueryDetail           = api.QueryDetail
	QueryDetailResponse   = api.QueryDetailResponse
)

// api/organizations.go
type (
	OrganizationResponse     = api.OrganizationResponse
	MeResponse               = api.MeResponse
	PatchOrganizationRequest = api.PatchOrganizationRequest
)

// api/preflight.go
type (
	PreflightRequest     = api.PreflightRequest
	PreflightResponse    = api.PreflightResponse
	Preflight            = api.Preflight
	PreflightCheck       = api.PreflightCheck
	SourceInfo           = api.SourceInfo
	SourceExtension      = api.SourceExtension
	ProviderAuthFK       = api.ProviderAuthFK
	ReplicationReadiness = api.ReplicationReadiness
)

// api/previews.go
type (
	PreviewDatabase      = api.PreviewDatabase
	PreviewList          = api.PreviewList
	PreviewJobResponse   = api.PreviewJobResponse
	PreviewResponse      = api.PreviewResponse
	CreatePreviewRequest = api.CreatePreviewRequest
	ExtendPreviewRequest = api.ExtendPreviewRequest
)

// api/projects.go
type (
	Project              = api.Project
	ProjectResponse      = api.ProjectResponse
	ProjectList          = api.ProjectList
	ProjectJobResponse   = api.ProjectJobResponse
	CreateProjectRequest = api.CreateProjectRequest
	PatchProjectRequest  = api.PatchProjectRequest
)

// api/restorepoints.go
type (
	RestorePoint         = api.RestorePoint
	RestorePointRequest  = api.RestorePointRequest
	RestorePointResponse = api.RestorePointResponse
	RestorePointList     = api.RestorePointList
	DeletedResponse      = api.DeletedResponse
)

// api/restores.go
type (
	RestoreRequest = api.RestoreRequest
)

// api/observability.go (samples)
type (
	ObservabilitySample = api.ObservabilitySample
)

// api/scheduled_backups.go
type (
	ScheduledBackup           = api.ScheduledBackup
	ScheduledBackupList       = api.ScheduledBackupList
	ScheduledBackupResponse   = api.ScheduledBackupResponse
	PutScheduledBackupRequest = api.PutScheduledBackupRequest
)

// api/studio.go
type (
	SQLRequest        = api.SQLRequest
	SQLResultResponse = api.SQLResultResponse
	SQLHistoryList    = api.SQLHistoryList
	TableList         = api.TableList
	ColumnList        = api.ColumnList
	RowsRead          = api.RowsRead
	RowsReadResponse  = api.RowsReadResponse
	RowsWritten       = api.RowsWritten
	RowsWriteResponse = api.RowsWriteResponse
	InsertRowsRequest = api.InsertRowsRequest
	UpdateRowsRequest = api.UpdateRowsRequest
	DeleteRowsRequest = api.DeleteRowsRequest
	AIUsage           = api.AIUsage
	AIUsageResponse   = api.AIUsageResponse
)

// api/usage.go
type (
	UsageTotals   = api.UsageTotals
	ProjectUsage  = api.ProjectUsage
	StorageSample = api.StorageSample
	Usage         = api.Usage
	UsageResponse = api.UsageResponse
)

// api/webhooks.go
type (
	WebhookEndpoint              = api.WebhookEndpoint
	WebhookEndpointList          = api.WebhookEndpointList
	WebhookEndpointResult        = api.WebhookEndpointResult
	WebhookEndpointWithSecret    = api.WebhookEndpointWithSecret
	CreateWebhookEndpointRequest = api.CreateWebhookEndpointRequest
	PatchWebhookEndpointRequest  = api.PatchWebhookEndpointRequest
	WebhookAttempt               = api.WebhookAttempt
	WebhookDelivery              = api.WebhookDelivery
	WebhookDeliveryList          = api.WebhookDeliveryList
	WebhookDeliveryResult        = api.WebhookDeliveryResult
)

// The wire format's values and bounds (package api).
const (
	ScopeProjectsRead       = api.ScopeProjectsRead
	ScopeProjectsWrite      = api.ScopeProjectsWrite
	ScopeCredentialsRead    = api.ScopeCredentialsRead
	ScopeBackupsRead        = api.ScopeBackupsRead
	ScopeBackupsWrite       = api.ScopeBackupsWrite
	ScopeJobsRead           = api.ScopeJobsRead
	ScopeOrganizationsRead  = api.ScopeOrganizationsRead
	ScopeOrganizationsWrite = api.ScopeOrganizationsWrite
	ScopeAPIKeysRead        = api.ScopeAPIKeysRead
	ScopeAPIKeysWrite       = api.ScopeAPIKeysWrite

	ProjectProvisioning = api.ProjectProvisioning
	ProjectActive       = api.ProjectActive
	ProjectFailed       = api.ProjectFailed
	ProjectDeleting     = api.ProjectDeleting
	ProjectDeleted      = api.ProjectDeleted
	RuntimeProvisioning = api.RuntimeProvisioning
	RuntimeActive       = api.RuntimeActive
	RuntimeRestarting   = api.RuntimeRestarting
	RuntimeDown         = api.RuntimeDown
	RuntimeStopped      = api.RuntimeStopped
	RuntimeSuspended    = api.RuntimeSuspended
	RuntimeUnavailable  = api.RuntimeUnavailable

	FollowStarting    = api.FollowStarting
	FollowFollowing   = api.FollowFollowing
	FollowCuttingOver = api.FollowCuttingOver
	FollowAborting    = api.FollowAborting
	FollowCompleted   = api.FollowCompleted
	FollowAborted     = api.FollowAborted
	FollowFailed      = api.FollowFailed

	StatusOperational = api.StatusOperational
	StatusDegraded    = api.StatusDegraded
	StatusDown        = api.StatusDown

	DefaultPreviewTTLHours = api.DefaultPreviewTTLHours
	MaxPreviewTTLHours     = api.MaxPreviewTTLHours
	ActionProjectDelete    = api.ActionProjectDelete
	JobBackupRestore       = api.JobBackupRestore

	MaxQueryBytes = api.MaxQueryBytes
	RowsDefault   = api.RowsDefault
	RowsMax       = api.RowsMax

	AdvisorMinFilterMax          = api.AdvisorMinFilterMax
	AdvisorMinFilterDefault      = api.AdvisorMinFilterDefault
	AdvisorMinSelectivityMax     = api.AdvisorMinSelectivityMax
	AdvisorMinSelectivityDefault = api.AdvisorMinSelectivityDefault
	LogsHoursMax                 = api.LogsHoursMax
	LogsHoursArchiveMax          = api.LogsHoursArchiveMax
	LogsHoursDefault             = api.LogsHoursDefault
	LogsLimitMax                 = api.LogsLimitMax
	LogsLimitDefault             = api.LogsLimitDefault
	HistoryHoursMax              = api.HistoryHoursMax
	HistoryHoursDefault          = api.HistoryHoursDefault
	QueriesHoursMax              = api.QueriesHoursMax
	QueriesHoursDefault          = api.QueriesHoursDefault
)

// AllScopes lists every scope in a stable order.
var AllScopes = api.AllScopes

// The records and domain values the API shows field for field. A record's wire type has exactly its fields,
// so the conversion stops compiling when one changes without the other.

func wireAuditEvents(evs []*store.AuditEvent) []*api.AuditEvent {
	if evs == nil {
		return nil
	}
	out := make([]*api.AuditEvent, len(evs))
	for i, e := range evs {
		out[i] = (*api.AuditEvent)(e)
	}
	return out
}
