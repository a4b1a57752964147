// Generated from /v1/openapi.json by TestTypeScriptClient (UPDATE_CLIENT=1 go test ./httpapi -run
// TestTypeScriptClient): the values of each enum schema of the document. Do not edit.
import type { components } from './schema'

/** The values of AlertKind, in the document's order. */
export const AlertKindValues = ["storage","connections","long_transaction","backup_failed","instance_crashed","backup_unrestorable","data_missing","backup_store_unreachable","node_unavailable"] as const satisfies readonly components['schemas']['AlertKind'][]

/** The values of AlertSeverity, in the document's order. */
export const AlertSeverityValues = ["warning","critical"] as const satisfies readonly components['schemas']['AlertSeverity'][]

/** The values of ApprovalAction, in the document's order. */
export const ApprovalActionValues = ["project.delete"] as const satisfies readonly components['schemas']['ApprovalAction'][]

/** The values of BackupState, in the document's order. */
export const BackupStateValues = ["pending","running","completed","failed"] as const satisfies readonly components['schemas']['BackupState'][]

/** The values of BackupStorageKind, in the document's order. */
export const BackupStorageKindValues = ["bucket","local"] as const satisfies readonly components['schemas']['BackupStorageKind'][]

/** The values of BackupVerificationState, in the document's order. */
export const BackupVerificationStateValues = ["pending","verified","failed"] as const satisfies readonly components['schemas']['BackupVerificationState'][]

/** The values of BillingEventOutcome, in the document's order. */
export const BillingEventOutcomeValues = ["applied","unchanged","ignored","unknown_customer","stale","other_subscription","duplicate"] as const satisfies readonly components['schemas']['BillingEventOutcome'][]

/** The values of ComponentStatus, in the document's order. */
export const ComponentStatusValues = ["operational","degraded","down"] as const satisfies readonly components['schemas']['ComponentStatus'][]

/** The values of CutoverActorKind, in the document's order. */
export const CutoverActorKindValues = ["user","api_key"] as const satisfies readonly components['schemas']['CutoverActorKind'][]

/** The values of CutoverStatus, in the document's order. */
export const CutoverStatusValues = ["open","approved","promoting","completed","rejected","failed"] as const satisfies readonly components['schemas']['CutoverStatus'][]

/** The values of DeliveryState, in the document's order. */
export const DeliveryStateValues = ["pending","delivered","failed"] as const satisfies readonly components['schemas']['DeliveryState'][]

/** The values of Environment, in the document's order. */
export const EnvironmentValues = ["production","staging","development"] as const satisfies readonly components['schemas']['Environment'][]

/** The values of EventType, in the document's order. */
export const EventTypeValues = ["job.completed","job.failed","project.ready","project.deleted","backup.completed","backup.verified","backup.verification_failed","restore.completed","export.completed","import.completed","credentials.rotated","preview.ready","preview.reset","preview.deleted","cutover.requested","cutover.completed","ephemeral.claimed","kv.ready","kv.deleted","project.suspended","project.resumed","instance.crashed","backup_store.unreachable","project.unavailable","project.available","project.moved","alert.triggered","alert.resolved","webhook.test","webhook_endpoint.disabled","program_application.received","program_application.approved","program_application.rejected","referral.rewarded","referral.voided","integration.connected","integration.synced","integration.failed","integration.disconnected"] as const satisfies readonly components['schemas']['EventType'][]

/** The values of ExportState, in the document's order. */
export const ExportStateValues = ["pending","running","completed","failed","expired"] as const satisfies readonly components['schemas']['ExportState'][]

/** The values of HealthStatus, in the document's order. */
export const HealthStatusValues = ["ok","degraded"] as const satisfies readonly components['schemas']['HealthStatus'][]

/** The values of IntegrationProvider, in the document's order. */
export const IntegrationProviderValues = ["deploy_a","deploy_b","edge_c","auth_a","auth_b","auth_c"] as const satisfies readonly components['schemas']['IntegrationProvider'][]

/** The values of IntegrationState, in the document's order. */
export const IntegrationStateValues = ["pending","active","error","disconnecting"] as const satisfies readonly components['schemas']['IntegrationState'][]

/** The values of JobState, in the document's order. */
export const JobStateValues = ["pending","running","completed","failed"] as const satisfies readonly components['schemas']['JobState'][]

/** The values of KVEvictionPolicy, in the document's order. */
export const KVEvictionPolicyValues = ["volatile-lru"] as const satisfies readonly components['schemas']['KVEvictionPolicy'][]

/** The values of KVState, in the document's order. */
export const KVStateValues = ["provisioning","running","error","destroying"] as const satisfies readonly components['schemas']['KVState'][]

/** The values of LogSeverity, in the document's order. */
export const LogSeverityValues = ["debug","log","info","notice","warning","error","fatal","panic","detail"] as const satisfies readonly components['schemas']['LogSeverity'][]

/** The values of NodeRole, in the document's order. */
export const NodeRoleValues = ["voter","learner","none"] as const satisfies readonly components['schemas']['NodeRole'][]

/** The values of NodeStatus, in the document's order. */
export const NodeStatusValues = ["alive","joining","draining","unavailable"] as const satisfies readonly components['schemas']['NodeStatus'][]

/** The values of PreviewMode, in the document's order. */
export const PreviewModeValues = ["empty","clone"] as const satisfies readonly components['schemas']['PreviewMode'][]

/** The values of PreviewSourceKind, in the document's order. */
export const PreviewSourceKindValues = ["none","live","backup"] as const satisfies readonly components['schemas']['PreviewSourceKind'][]

/** The values of Program, in the document's order. */
export const ProgramValues = ["startup","partner"] as const satisfies readonly components['schemas']['Program'][]

/** The values of ProgramApplicationStatus, in the document's order. */
export const ProgramApplicationStatusValues = ["received","approved","rejected"] as const satisfies readonly components['schemas']['ProgramApplicationStatus'][]

/** The values of ProjectState, in the document's order. */
export const ProjectStateValues = ["provisioning","active","failed","deleting","deleted"] as const satisfies readonly components['schemas']['ProjectState'][]

/** The values of ReferralCodeStatus, in the document's order. */
export const ReferralCodeStatusValues = ["none","applied","invalid","void"] as const satisfies readonly components['schemas']['ReferralCodeStatus'][]

/** The values of ReferralStatus, in the document's order. */
export const ReferralStatusValues = ["pending","rewarded","void"] as const satisfies readonly components['schemas']['ReferralStatus'][]

/** The values of RestorePointKind, in the document's order. */
export const RestorePointKindValues = ["named"] as const satisfies readonly components['schemas']['RestorePointKind'][]

/** The values of RestorePointState, in the document's order. */
export const RestorePointStateValues = ["active"] as const satisfies readonly components['schemas']['RestorePointState'][]

/** The values of Role, in the document's order. */
export const RoleValues = ["owner","admin","member"] as const satisfies readonly components['schemas']['Role'][]

/** The values of RuntimeStatus, in the document's order. */
export const RuntimeStatusValues = ["provisioning","active","restarting","down","stopped","suspended","unavailable"] as const satisfies readonly components['schemas']['RuntimeStatus'][]

/** The values of Scope, in the document's order. */
export const ScopeValues = ["projects:read","projects:write","credentials:read","backups:read","backups:write","jobs:read","organizations:read","organizations:write","api_keys:read","api_keys:write"] as const satisfies readonly components['schemas']['Scope'][]

/** The values of SignupInviteState, in the document's order. */
export const SignupInviteStateValues = ["pending","used","expired","revoked"] as const satisfies readonly components['schemas']['SignupInviteState'][]

/** The values of SignupMode, in the document's order. */
export const SignupModeValues = ["closed","invite","open"] as const satisfies readonly components['schemas']['SignupMode'][]

/** The values of UpgradeMethod, in the document's order. */
export const UpgradeMethodValues = ["pg_upgrade","logical"] as const satisfies readonly components['schemas']['UpgradeMethod'][]

/** The values of UploadState, in the document's order. */
export const UploadStateValues = ["pending","uploaded","consumed","expired"] as const satisfies readonly components['schemas']['UploadState'][]

/** The values of WebhookHealth, in the document's order. */
export const WebhookHealthValues = ["healthy","failing","disabled"] as const satisfies readonly components['schemas']['WebhookHealth'][]
