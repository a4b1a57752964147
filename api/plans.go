package api

import "time"

// Plans and organization quotas, the operator's configuration (an addition to the spec: platform-admin
// routes; see docs/api-decisions.md, "Plans and quotas as operator configuration").

// Plan is a project plan: its server's size and its quotas.
type Plan struct {
	Name              string  `json:"name" schema:"minLength=1,maxLength=32,pattern=^[a-z][a-z0-9_-]*$" doc:"lowercase letters, digits, dashes and underscores, starting with a letter"`
	MaxConnections    int     `json:"max_connections" doc:"the server's max_connections (at least 10)"`
	StorageLimitBytes int64   `json:"storage_limit_bytes" doc:"a project's storage limit: past it its database turns read-only (at least 16 MiB)"`
	KVMemoryMB        int     `json:"kv_memory_mb" doc:"its key-value store's maxmemory, MiB"`
	PreviewsLimit     int     `json:"previews_limit" doc:"preview databases per project (0: none)"`
	AIUsesPerMonth    int     `json:"ai_uses_per_month" doc:"the studio's AI uses per month (0: none)"`
	MemoryBytes       int64   `json:"memory_bytes" doc:"the memory its server is held to (cgroups; at least 64 MiB)"`
	CPUCores          float64 `json:"cpu_cores" doc:"the CPU its server is held to, in cores (cgroups)"`
	// Scale to zero's defaults for the plan's projects that did not choose their suspend_after_seconds.
	SuspendAfterSeconds           int `json:"suspend_after_seconds" doc:"idle seconds after which its development projects, previews and ephemeral databases are suspended (scale to zero) unless they chose otherwise; 0 never, else 60 to 2592000 (default 300)"`
	ProductionSuspendAfterSeconds int `json:"production_suspend_after_seconds" doc:"the same for its production and staging projects (default 0: never)"`
}

// Built-in scale-to-zero defaults of a plan (a plan given without them gets these).
const (
	DefaultSuspendAfterSeconds           = 300
	DefaultProductionSuspendAfterSeconds = 0
)

// PlanList is GET /v1/plans: every plan, smallest (by storage) first.
type PlanList struct {
	Plans []Plan `json:"plans"`
}

// PutPlanRequest is PUT /v1/plans/{name}: the whole plan (the name is the path's).
type PutPlanRequest struct {
	MaxConnections    int     `json:"max_connections" api:"required"`
	StorageLimitBytes int64   `json:"storage_limit_bytes" api:"required"`
	KVMemoryMB        int     `json:"kv_memory_mb" api:"required"`
	PreviewsLimit     int     `json:"previews_limit" api:"required"`
	AIUsesPerMonth    int     `json:"ai_uses_per_month" api:"required"`
	MemoryBytes       int64   `json:"memory_bytes" api:"required"`
	CPUCores          float64 `json:"cpu_cores" api:"required"`
	// Absent: the built-in defaults (DefaultSuspendAfterSeconds, DefaultProductionSuspendAfterSeconds).
	SuspendAfterSeconds           *int `json:"suspend_after_seconds,omitempty"`
	ProductionSuspendAfterSeconds *int `json:"production_suspend_after_seconds,omitempty"`
}

// PlanChange is the answer to PUT /v1/plans/{name}: the plan, whether it is new, and the jobs that apply
// it to its projects' servers.
type PlanChange struct {
	Plan    *Plan  `json:"plan"`
	Created bool   `json:"created" doc:"true: a new plan; false: an existing plan replaced"`
	Jobs    []*Job `json:"jobs" doc:"one project.apply_plan job per active project on the plan (connection limit, storage limit, key-value memory, memory and CPU)"`
}

// DeletedPlan is the answer to DELETE /v1/plans/{name}.
type DeletedPlan struct {
	Deleted bool   `json:"deleted"`
	Name    string `json:"name"`
}

// OrganizationQuota bounds what one organization may hold.
type OrganizationQuota struct {
	ProjectsLimit     int   `json:"projects_limit" doc:"projects (previews not counted)"`
	PreviewsLimit     int   `json:"previews_limit" doc:"preview databases over all its projects"`
	StorageLimitBytes int64 `json:"storage_limit_bytes" doc:"the storage its projects and previews may add up to (usage reports the overage)"`
}

// PatchOrganizationQuotaRequest is PATCH /v1/organizations/{orgID}/quota: the fields given change.
type PatchOrganizationQuotaRequest struct {
	ProjectsLimit     *int   `json:"projects_limit,omitempty" doc:"at least 0"`
	PreviewsLimit     *int   `json:"previews_limit,omitempty" doc:"at least 0"`
	StorageLimitBytes *int64 `json:"storage_limit_bytes,omitempty" doc:"at least 1"`
	Default           bool   `json:"default,omitempty" doc:"true: the organization follows the default quota again (no other field may be given)"`
}

// OrganizationQuotaResponse is an organization's quota.
type OrganizationQuotaResponse struct {
	OrganizationID string            `json:"organization_id"`
	Quota          OrganizationQuota `json:"quota"`
	IsDefault      bool              `json:"is_default" doc:"true: the organization has the default quota (no quota of its own)"`
	UpdatedAt      *time.Time        `json:"updated_at" api:"nullable"`
}

// PlansConfig is the file of up --plans: every plan and the default organization quota, replacing those
// in the metadata store at the start.
type PlansConfig struct {
	Plans             []Plan            `json:"plans"`
	OrganizationQuota OrganizationQuota `json:"organization_quota"`
}
