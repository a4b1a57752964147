package appliance

import (
	"fmt"
	"os"
	"strings"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/tenancy"
	"github.com/theappliance/appliance/store"
)

// Plan is a project's size and quota. MemoryBytes and CPUCores are what the plan's server is held to (its
// cgroup: appliance/cgroups, up --cgroups) and what the observability history shows as the quota lines
// beside the measured use.
type Plan = api.Plan

// OrganizationQuota bounds what one organization may hold on this appliance.
type OrganizationQuota = api.OrganizationQuota

const gib = int64(1) << 30

// Plans are the built-in plans, smallest first: the first start seeds the store's plans with them; from
// then on the operators' configuration (appliance/tenancy: up --plans, PUT /v1/plans/{name}) is in force.
var Plans = []Plan{
	{Name: api.PlanFree, MaxConnections: 20, StorageLimitBytes: 1 * gib, KVMemoryMB: 32, PreviewsLimit: 2, AIUsesPerMonth: 100, MemoryBytes: 512 << 20, CPUCores: 0.5, SuspendAfterSeconds: api.DefaultSuspendAfterSeconds},
	{Name: api.PlanPro, MaxConnections: 100, StorageLimitBytes: 10 * gib, KVMemoryMB: 256, PreviewsLimit: 10, AIUsesPerMonth: 1000, MemoryBytes: 4 * gib, CPUCores: 2, SuspendAfterSeconds: api.DefaultSuspendAfterSeconds},
	{Name: api.PlanScale, MaxConnections: 300, StorageLimitBytes: 50 * gib, KVMemoryMB: 1024, PreviewsLimit: 25, AIUsesPerMonth: 5000, MemoryBytes: 16 * gib, CPUCores: 4, SuspendAfterSeconds: api.DefaultSuspendAfterSeconds},
}

// DefaultPlan is the plan of a new project.
const DefaultPlan = api.PlanFree

// DefaultOrganizationQuota is the built-in default organization quota the first start seeds (operators
// change it with up --plans, one organization's with PATCH /v1/organizations/{orgID}/quota).
var DefaultOrganizationQuota = OrganizationQuota{ProjectsLimit: 20, PreviewsLimit: 50, StorageLimitBytes: 200 * gib}

// builtinPlans is the seed of the operators' configuration (read at the seeding: benchmarks raise the quota
// before their appliance's first start).
func builtinPlans() ([]api.Plan, api.OrganizationQuota) { return Plans, DefaultOrganizationQuota }

// PlanByName finds a plan in force.
func (s *Service) PlanByName(name string) (Plan, bool) { return s.tenancy.Plan(name) }

// planOrDefault is the plan of that name, or the default plan for a name the plans lack.
func (s *Service) planOrDefault(name string) Plan {
	if p, ok := s.tenancy.Plan(name); ok {
		return p
	}
	p, _ := s.tenancy.Plan(DefaultPlan)
	return p
}

// planNames are the names of the plans in force.
func (s *Service) planNames() string {
	var names []string
	for _, p := range s.tenancy.Plans() {
		names = append(names, p.Name)
	}
	return strings.Join(names, ", ")
}

// organizationQuota is the organization's quota in force, read in tx.
func (s *Service) organizationQuota(tx *store.Tx, orgID string) (OrganizationQuota, error) {
	q, _, _, err := s.tenancy.QuotaIn(tx, orgID)
	return q, err
}

// ReadPlansFile reads and checks the file of up --plans (tenancy.ParsePlansConfig: JSON with no unknown
// key, every plan valid, the free plan among them, the organization quota valid).
func ReadPlansFile(path string) (*api.PlansConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cfg, err := tenancy.ParsePlansConfig(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}
