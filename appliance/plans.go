package appliance

import (
	"slices"

	"github.com/theappliance/appliance/api"
)

// Plan is a project's size and quota, defined here once for the whole appliance.
type Plan struct {
	Name              string `json:"name"`
	MaxConnections    int    `json:"max_connections"`
	StorageLimitBytes int64  `json:"storage_limit_bytes"`
	KVMemoryMB        int    `json:"kv_memory_mb"`
	PreviewsLimit     int    `json:"previews_limit"` // preview databases per project
	AIUsesPerMonth    int    `json:"ai_uses_per_month"`
	// MemoryBytes and CPUCores are what the plan's server is held to (its cgroup: appliance/cgroups, up
	// --cgroups) and what the observability history shows as the quota lines beside the measured use.
	MemoryBytes int64   `json:"memory_bytes"`
	CPUCores    float64 `json:"cpu_cores"`
}

const gib = int64(1) << 30

// Plans are the project plans, smallest first.
var Plans = []Plan{
	{Name: api.PlanFree, MaxConnections: 20, StorageLimitBytes: 1 * gib, KVMemoryMB: 32, PreviewsLimit: 2, AIUsesPerMonth: 100, MemoryBytes: 512 << 20, CPUCores: 0.5},
	{Name: api.PlanPro, MaxConnections: 100, StorageLimitBytes: 10 * gib, KVMemoryMB: 256, PreviewsLimit: 10, AIUsesPerMonth: 1000, MemoryBytes: 4 * gib, CPUCores: 2},
	{Name: api.PlanScale, MaxConnections: 300, StorageLimitBytes: 50 * gib, KVMemoryMB: 1024, PreviewsLimit: 25, AIUsesPerMonth: 5000, MemoryBytes: 16 * gib, CPUCores: 4},
}

// DefaultPlan is the plan of a new project.
const DefaultPlan = api.PlanFree

// PlanByName finds a plan.
func PlanByName(name string) (Plan, bool) {
	i := slices.IndexFunc(Plans, func(p Plan) bool { return p.Name == name })
	if i < 0 {
		return Plan{}, false
	}
	return Plans[i], true
}

// OrganizationQuota bounds what one organization may hold on this appliance.
type OrganizationQuota struct {
	ProjectsLimit     int
	PreviewsLimit     int
	StorageLimitBytes int64
}

// DefaultOrganizationQuota applies to every organization (the operator may raise it with flags later).
var DefaultOrganizationQuota = OrganizationQuota{ProjectsLimit: 20, PreviewsLimit: 50, StorageLimitBytes: 200 * gib}
