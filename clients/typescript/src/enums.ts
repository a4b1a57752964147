// Generated from /v1/openapi.json by TestTypeScriptClient (UPDATE_CLIENT=1 go test ./httpapi -run
// TestTypeScriptClient): the values of each enum schema of the document. Do not edit.
import type { components } from './schema'

/** The values of EventType, in the document's order. */
export const EventTypeValues = ["job.completed","job.failed","project.ready","project.deleted","backup.completed","backup.verified","backup.verification_failed","restore.completed","export.completed","import.completed","credentials.rotated","preview.ready","preview.reset","preview.deleted","cutover.requested","cutover.completed","ephemeral.claimed","kv.ready","kv.deleted","instance.crashed","backup_store.unreachable","alert.triggered","alert.resolved","webhook.test","webhook_endpoint.disabled"] as const satisfies readonly components['schemas']['EventType'][]
