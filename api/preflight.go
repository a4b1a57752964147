package api

// PreflightRequest is the body of POST /v1/projects/{projectID}/imports/preflight.
type PreflightRequest struct {
	SourceURL string `json:"source_url" api:"required" schema:"format=uri,pattern=^postgres(ql)?://,example=postgres://app:secret@db.example.com:5432/shop?sslmode=require" doc:"postgres://user:password@host:port/dbname[?sslmode=...]; only sslmode, connect_timeout and application_name are accepted as parameters"`
}

// PreflightResponse wraps a preflight.
type PreflightResponse struct {
	Preflight *Preflight `json:"preflight"`
}

// Preflight is what the appliance found out about a source database, and whether importing it into the
// project can work.
type Preflight struct {
	OK                bool             `json:"ok" doc:"no check failed"`
	StorageLimitBytes int64            `json:"storage_limit_bytes" doc:"the project's storage limit"`
	TargetVersion     string           `json:"target_version" doc:"the project's PostgreSQL version"`
	Checks            []PreflightCheck `json:"checks"`
	Source            *SourceInfo      `json:"source" api:"nullable" doc:"null when the source could not be reached (see the connect check)"`
}

// PreflightCheck is one finding: status pass, warn or fail.
type PreflightCheck struct {
	Name   string `json:"name" doc:"connect, version, size, extensions, provider_objects, event_triggers, replication"`
	Status string `json:"status" doc:"pass, warn or fail"`
	Detail string `json:"detail"`
}

// SourceInfo describes the source database.
type SourceInfo struct {
	DatabaseSizeBytes        int64                 `json:"database_size_bytes"`
	ServerVersion            string                `json:"server_version"`
	Extensions               []SourceExtension     `json:"extensions"`
	AppSchemas               []string              `json:"app_schemas" doc:"schemas an import copies"`
	ProviderSchemas          []string              `json:"provider_schemas" doc:"schemas that belong to the hosting provider; never copied"`
	ProviderAuthPolicyTables []string              `json:"provider_auth_policy_tables" doc:"app tables whose row-level security policies use the provider's schemas or roles"`
	EventTriggers            []string              `json:"event_triggers"`
	ProviderSignals          []string              `json:"provider_signals" doc:"what identified the provider, e.g. host:*.supabase.co, schema:auth, role:rds_superuser"`
	ProviderAuthFKs          []ProviderAuthFK      `json:"provider_auth_fks" doc:"foreign keys from app tables into provider schemas"`
	Provider                 string                `json:"provider" doc:"supabase, neon, aws_rds, google_cloud_sql, azure, heroku, aiven, crunchy_bridge, render, railway, digitalocean, timescale, or self_hosted"`
	Replication              *ReplicationReadiness `json:"replication"`
}

// SourceExtension is an extension installed in the source database.
type SourceExtension struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// ProviderAuthFK is a foreign key from an app table into a provider schema.
type ProviderAuthFK struct {
	Constraint  string `json:"constraint"`
	SourceTable string `json:"source_table"`
	TargetTable string `json:"target_table"`
}

// ReplicationReadiness says whether the source can feed logical replication (imports/follow).
type ReplicationReadiness struct {
	WALLevel             string   `json:"wal_level"`
	MaxReplicationSlots  int      `json:"max_replication_slots"`
	MaxWALSenders        int      `json:"max_wal_senders"`
	UsedReplicationSlots int      `json:"used_replication_slots"`
	RoleCanReplicate     bool     `json:"role_can_replicate" doc:"the URL's role is a superuser or has REPLICATION (or rds_replication)"`
	Ready                bool     `json:"ready"`
	Blockers             []string `json:"blockers" doc:"each names what to change on the source"`
}
