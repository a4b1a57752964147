package tenancy

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/store"
)

// Plans and organization quotas are the operators' configuration, kept in the metadata store (so they
// survive restarts and travel in its backups): seeded at the first start with the built-in values
// (Deps.Seed), replaced at a start by up --plans (ReplacePlans), changed by the platform-admin routes
// (PutPlan, DeletePlan, PatchQuota). Until the store was seeded (a store older than this configuration),
// the built-in values are in force.

const metaPlansSeeded = "plans_seeded"

// Seed is the built-in configuration: the plans and the default organization quota.
type Seed func() ([]api.Plan, api.OrganizationQuota)

var planNameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// Minimums of a plan's sizes: less would not run a server (or its pooler).
const (
	minMaxConnections = 10
	minStorageBytes   = 16 << 20
	minMemoryBytes    = 64 << 20
)

// CheckPlan is the rule of a plan; field prefixes the fields' names in the error ("plans[1]." in a file).
func CheckPlan(p api.Plan, field string) error {
	switch {
	case !planNameRE.MatchString(p.Name):
		return apperr.Invalid("%sname must be 1 to 32 lowercase letters, digits, dashes or underscores, starting with a letter (got %q)", field, p.Name)
	case p.MaxConnections < minMaxConnections:
		return apperr.Invalid("%smax_connections must be at least %d (got %d)", field, minMaxConnections, p.MaxConnections)
	case p.StorageLimitBytes < minStorageBytes:
		return apperr.Invalid("%sstorage_limit_bytes must be at least %d (16 MiB) (got %d)", field, minStorageBytes, p.StorageLimitBytes)
	case p.KVMemoryMB < 1:
		return apperr.Invalid("%skv_memory_mb must be positive (got %d)", field, p.KVMemoryMB)
	case p.PreviewsLimit < 0:
		return apperr.Invalid("%spreviews_limit must be 0 or more (got %d)", field, p.PreviewsLimit)
	case p.AIUsesPerMonth < 0:
		return apperr.Invalid("%sai_uses_per_month must be 0 or more (got %d)", field, p.AIUsesPerMonth)
	case p.MemoryBytes < minMemoryBytes:
		return apperr.Invalid("%smemory_bytes must be at least %d (64 MiB) (got %d)", field, minMemoryBytes, p.MemoryBytes)
	case !(p.CPUCores > 0) || p.CPUCores > 1024:
		return apperr.Invalid("%scpu_cores must be positive, at most 1024 (got %v)", field, p.CPUCores)
	}
	if err := checkSuspendAfter(field+"suspend_after_seconds", p.SuspendAfterSeconds); err != nil {
		return err
	}
	return checkSuspendAfter(field+"production_suspend_after_seconds", p.ProductionSuspendAfterSeconds)
}

// checkQuota is the rule of an organization quota.
func checkQuota(q api.OrganizationQuota, field string) error {
	switch {
	case q.ProjectsLimit < 0:
		return apperr.Invalid("%sprojects_limit must be 0 or more (got %d)", field, q.ProjectsLimit)
	case q.PreviewsLimit < 0:
		return apperr.Invalid("%spreviews_limit must be 0 or more (got %d)", field, q.PreviewsLimit)
	case q.StorageLimitBytes < 1:
		return apperr.Invalid("%sstorage_limit_bytes must be positive (got %d)", field, q.StorageLimitBytes)
	}
	return nil
}

// ParsePlansConfig reads and checks the file of up --plans: JSON with no unknown key, every plan valid,
// names unique, the free plan (new projects' default) among them, the organization quota valid.
func ParsePlansConfig(r io.Reader) (*api.PlansConfig, error) {
	data, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var cfg api.PlansConfig
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("not a plans file: %w", err)
	}
	if dec.More() {
		return nil, errors.New("not a plans file: something follows its JSON object")
	}
	// A plan given without the scale-to-zero defaults gets the built-in ones (0 would mean never).
	var keys struct {
		Plans []map[string]json.RawMessage `json:"plans"`
	}
	if err := json.Unmarshal(data, &keys); err == nil && len(keys.Plans) == len(cfg.Plans) {
		for i, k := range keys.Plans {
			if _, ok := k["suspend_after_seconds"]; !ok {
				cfg.Plans[i].SuspendAfterSeconds = api.DefaultSuspendAfterSeconds
			}
			if _, ok := k["production_suspend_after_seconds"]; !ok {
				cfg.Plans[i].ProductionSuspendAfterSeconds = api.DefaultProductionSuspendAfterSeconds
			}
		}
	}
	if len(cfg.Plans) == 0 {
		return nil, errors.New("plans: none given (the free plan at least)")
	}
	seen := map[string]bool{}
	for i, p := range cfg.Plans {
		if err := CheckPlan(p, fmt.Sprintf("plans[%d].", i)); err != nil {
			return nil, err
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("plans[%d].name: %q is given twice", i, p.Name)
		}
		seen[p.Name] = true
	}
	if !seen[api.PlanFree] {
		return nil, fmt.Errorf("plans: the %q plan is missing (new projects get it)", api.PlanFree)
	}
	if err := checkQuota(cfg.OrganizationQuota, "organization_quota."); err != nil {
		return nil, err
	}
	return &cfg, nil
}

func planRecord(p api.Plan, now time.Time) *store.Plan {
	return &store.Plan{Name: p.Name, MaxConnections: p.MaxConnections, StorageLimitBytes: p.StorageLimitBytes, KVMemoryMB: p.KVMemoryMB,
		PreviewsLimit: p.PreviewsLimit, AIUsesPerMonth: p.AIUsesPerMonth, MemoryBytes: p.MemoryBytes, CPUCores: p.CPUCores, UpdatedAt: now,
		SuspendAfterSeconds: &p.SuspendAfterSeconds, ProductionSuspendAfterSeconds: &p.ProductionSuspendAfterSeconds}
}

func planView(r *store.Plan) api.Plan {
	return api.Plan{Name: r.Name, MaxConnections: r.MaxConnections, StorageLimitBytes: r.StorageLimitBytes, KVMemoryMB: r.KVMemoryMB,
		PreviewsLimit: r.PreviewsLimit, AIUsesPerMonth: r.AIUsesPerMonth, MemoryBytes: r.MemoryBytes, CPUCores: r.CPUCores,
		SuspendAfterSeconds:           orDefault(r.SuspendAfterSeconds, api.DefaultSuspendAfterSeconds),
		ProductionSuspendAfterSeconds: orDefault(r.ProductionSuspendAfterSeconds, api.DefaultProductionSuspendAfterSeconds)}
}

func orDefault(v *int, def int) int {
	if v == nil {
		return def
	}
	return *v
}

// Bounds of a plan's suspend_after_seconds (those of a project's own, appliance/scaletozero).
const (
	minSuspendAfterSeconds = 60
	maxSuspendAfterSeconds = 30 * 24 * 3600
)

func checkSuspendAfter(field string, v int) error {
	if v != 0 && (v < minSuspendAfterSeconds || v > maxSuspendAfterSeconds) {
		return apperr.Invalid("%s must be 0 (never) or %d to %d seconds (got %d)", field, minSuspendAfterSeconds, maxSuspendAfterSeconds, v)
	}
	return nil
}

func quotaView(r *store.OrganizationQuota) api.OrganizationQuota {
	return api.OrganizationQuota{ProjectsLimit: r.ProjectsLimit, PreviewsLimit: r.PreviewsLimit, StorageLimitBytes: r.StorageLimitBytes}
}

// sortPlans orders plans smallest first (by storage, then connections, then name).
func sortPlans(ps []api.Plan) {
	slices.SortFunc(ps, func(a, b api.Plan) int {
		return cmp.Or(cmp.Compare(a.StorageLimitBytes, b.StorageLimitBytes), cmp.Compare(a.MaxConnections, b.MaxConnections), strings.Compare(a.Name, b.Name))
	})
}

// SeedPlans writes the built-in configuration into the store in tx, once (the first start's, and before
// the first change of a store that was never seeded).
func (s *Service) SeedPlans(tx *store.Tx) error {
	if tx.Meta(metaPlansSeeded) != "" {
		return nil
	}
	plans, quota := s.seed()
	now := s.now()
	for _, p := range plans {
		if err := store.Plans.Put(tx, planRecord(p, now)); err != nil {
			return err
		}
	}
	if err := store.OrganizationQuotas.Put(tx, &store.OrganizationQuota{ID: store.DefaultQuotaID, ProjectsLimit: quota.ProjectsLimit,
		PreviewsLimit: quota.PreviewsLimit, StorageLimitBytes: quota.StorageLimitBytes, UpdatedAt: now}); err != nil {
		return err
	}
	return tx.SetMeta(metaPlansSeeded, now.Format(time.RFC3339))
}

// plansIn are the plans in force, read in tx, smallest first.
func (s *Service) plansIn(tx *store.Tx) ([]api.Plan, error) {
	var out []api.Plan
	if tx.Meta(metaPlansSeeded) == "" {
		plans, _ := s.seed()
		out = slices.Clone(plans)
	} else {
		recs, err := store.Plans.All(tx, nil)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			out = append(out, planView(r))
		}
	}
	sortPlans(out)
	return out, nil
}

// Plans are the plans in force, smallest first (cached until the plans table changes).
func (s *Service) Plans() []api.Plan {
	version := store.Plans.Version(s.db)
	if ps, ok := s.plans.Get("", version); ok {
		return ps
	}
	var ps []api.Plan
	if err := s.db.View(func(tx *store.Tx) (err error) { ps, err = s.plansIn(tx); return err }); err != nil {
		plans, _ := s.seed() // an unreadable store: the built-in plans (every store read fails then)
		return plans
	}
	s.plans.Put("", version, ps)
	return ps
}

// Plan is the plan of that name in force.
func (s *Service) Plan(name string) (api.Plan, bool) {
	ps := s.Plans()
	i := slices.IndexFunc(ps, func(p api.Plan) bool { return p.Name == name })
	if i < 0 {
		return api.Plan{}, false
	}
	return ps[i], true
}

// QuotaIn is the organization's quota read in tx: its own when an operator set one, else the default
// (isDefault), and when it was last set.
func (s *Service) QuotaIn(tx *store.Tx, orgID string) (q api.OrganizationQuota, isDefault bool, updated *time.Time, err error) {
	if tx.Meta(metaPlansSeeded) == "" {
		_, q := s.seed()
		return q, true, nil, nil
	}
	for _, id := range []string{orgID, store.DefaultQuotaID} {
		r, err := store.OrganizationQuotas.Get(tx, id)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return q, false, nil, err
		}
		return quotaView(r), id == store.DefaultQuotaID, &r.UpdatedAt, nil
	}
	_, q = s.seed()
	return q, true, nil, nil
}

// ListPlans is GET /v1/plans: every signed-in caller may read the plans (their projects are on them).
func (s *Service) ListPlans(ctx context.Context, p *authz.Principal) (*api.PlanList, error) {
	return &api.PlanList{Plans: s.Plans()}, nil
}

// PutPlan creates or replaces a plan (the same values again change nothing); a changed plan is applied to each of its projects: their records'
// connection and storage limits at once, and a project.apply_plan job per active project for its server
// (max_connections, memory and CPU) and key-value store (maxmemory). A project of a suspended organization
// gets its job when the organization resumes.
func (s *Service) PutPlan(ctx context.Context, p *authz.Principal, name string, req *api.PutPlanRequest) (*api.PlanChange, error) {
	if err := p.RequireOperator("managing plans and quotas"); err != nil {
		return nil, err
	}
	plan := api.Plan{Name: name, MaxConnections: req.MaxConnections, StorageLimitBytes: req.StorageLimitBytes, KVMemoryMB: req.KVMemoryMB,
		PreviewsLimit: req.PreviewsLimit, AIUsesPerMonth: req.AIUsesPerMonth, MemoryBytes: req.MemoryBytes, CPUCores: req.CPUCores,
		SuspendAfterSeconds:           orDefault(req.SuspendAfterSeconds, api.DefaultSuspendAfterSeconds),
		ProductionSuspendAfterSeconds: orDefault(req.ProductionSuspendAfterSeconds, api.DefaultProductionSuspendAfterSeconds)}
	if err := CheckPlan(plan, ""); err != nil {
		return nil, err
	}
	var out *api.PlanChange
	err := s.db.Update(func(tx *store.Tx) error {
		out = &api.PlanChange{Plan: &plan, Jobs: []*api.Job{}} // a run again starts over
		if err := s.SeedPlans(tx); err != nil {
			return apperr.Internal(err, "seed the plans")
		}
		old, err := store.Plans.Get(tx, name)
		if errors.Is(err, store.ErrNotFound) {
			out.Created = true
		} else if err != nil {
			return apperr.Internal(err, "read plan")
		}
		if err := store.Plans.Put(tx, planRecord(plan, s.now())); err != nil {
			return apperr.Internal(err, "store plan")
		}
		var jobs []*store.Job
		// An unchanged plan has nothing to apply to servers, nor one whose scale-to-zero defaults alone
		// changed (the idle pass reads them; applying would wake the suspended projects for nothing).
		sizes := func(p api.Plan) api.Plan { p.SuspendAfterSeconds, p.ProductionSuspendAfterSeconds = 0, 0; return p }
		if old == nil || sizes(planView(old)) != sizes(plan) {
			if jobs, err = s.applyPlan(tx, plan); err != nil {
				return err
			}
		}
		meta := map[string]any{"plan": plan, "created": out.Created, "job_ids": jobIDs(jobs)}
		if old != nil {
			meta["previous"] = planView(old)
		}
		for _, j := range jobs {
			out.Jobs = append(out.Jobs, s.host.JobView(j))
		}
		if err := s.host.Audit(tx, p, "plan.put", "", "", meta); err != nil {
			return apperr.Internal(err, "audit")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.host.Notify()
	return out, nil
}

func jobIDs(jobs []*store.Job) []string {
	ids := []string{}
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	return ids
}

// planProjects are the projects on the plan that it sizes: not deleted, and not an unclaimed ephemeral
// database (those have the ephemeral limits).
func planProjects(tx *store.Tx, name string) ([]*store.Project, error) {
	prjs, err := store.Projects.All(tx, func(p *store.Project) bool {
		return p.Plan == name && p.DeletedAt == nil && p.State != api.ProjectDeleted && p.State != api.ProjectDeleting && !(p.Ephemeral && p.ClaimedAt == nil)
	})
	if err != nil {
		return nil, apperr.Internal(err, "list projects")
	}
	slices.SortFunc(prjs, func(a, b *store.Project) int { return strings.Compare(a.ID, b.ID) })
	return prjs, nil
}

// applyPlan gives the plan's limits to its projects in tx and queues the application to each active
// server (not those of a suspended organization: its resume does).
func (s *Service) applyPlan(tx *store.Tx, plan api.Plan) ([]*store.Job, error) {
	prjs, err := planProjects(tx, plan.Name)
	if err != nil {
		return nil, err
	}
	var jobs []*store.Job
	for _, prj := range prjs {
		if prj.MaxConnections != plan.MaxConnections || prj.StorageLimitBytes != plan.StorageLimitBytes {
			prj.MaxConnections, prj.StorageLimitBytes, prj.UpdatedAt = plan.MaxConnections, plan.StorageLimitBytes, s.now()
			if err := store.Projects.Put(tx, prj); err != nil {
				return nil, apperr.Internal(err, "store project")
			}
		}
		if prj.State != api.ProjectActive || prj.PrimaryInstanceID == "" {
			continue // a provision reads the record; a failed project runs nothing
		}
		if suspended, err := store.Suspended(tx, prj.OrganizationID); err != nil {
			return nil, apperr.Internal(err, "read organization")
		} else if suspended {
			continue
		}
		j, err := s.host.ApplyPlan(tx, prj)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// DeletePlan deletes a plan no project uses (409 naming one that does); never the free plan, which new
// projects get.
func (s *Service) DeletePlan(ctx context.Context, p *authz.Principal, name string) (*api.DeletedPlan, error) {
	if err := p.RequireOperator("managing plans and quotas"); err != nil {
		return nil, err
	}
	if name == api.PlanFree {
		return nil, apperr.Conflict("the %s plan is new projects' plan: it cannot be deleted", api.PlanFree)
	}
	err := s.db.Update(func(tx *store.Tx) error {
		if err := s.SeedPlans(tx); err != nil {
			return apperr.Internal(err, "seed the plans")
		}
		old, err := store.Plans.Get(tx, name)
		if err != nil {
			return apperr.NotFoundAs(err, "plan %s not found", name)
		}
		prjs, err := store.Projects.All(tx, func(r *store.Project) bool { return r.Plan == name && r.State != api.ProjectDeleted })
		if err != nil {
			return apperr.Internal(err, "list projects")
		}
		if len(prjs) > 0 {
			slices.SortFunc(prjs, func(a, b *store.Project) int { return strings.Compare(a.ID, b.ID) })
			return apperr.Conflict("plan %s is the plan of %d project(s), %s (%s) among them: move them to another plan first", name, len(prjs), prjs[0].ID, prjs[0].Name)
		}
		if err := store.Plans.Delete(tx, name); err != nil {
			return apperr.Internal(err, "delete plan")
		}
		if err := s.host.Audit(tx, p, "plan.delete", "", "", map[string]any{"plan": planView(old)}); err != nil {
			return apperr.Internal(err, "audit")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &api.DeletedPlan{Deleted: true, Name: name}, nil
}

// ReplacePlans makes cfg (up --plans, checked by ParsePlansConfig) the plans and default organization
// quota in force: plans it lacks are deleted (refused while a project is on one), the others put and
// applied to their projects as PutPlan does. Audited with the system as the actor.
func (s *Service) ReplacePlans(ctx context.Context, cfg *api.PlansConfig) (changed int, err error) {
	sys := &authz.Principal{AuthSource: authz.ActorSystem}
	err = s.db.Update(func(tx *store.Tx) error {
		changed = 0 // a run again starts over
		if err := s.SeedPlans(tx); err != nil {
			return err
		}
		old, err := store.Plans.All(tx, nil)
		if err != nil {
			return err
		}
		keep := map[string]bool{}
		for _, p := range cfg.Plans {
			keep[p.Name] = true
		}
		for _, o := range old {
			if keep[o.Name] {
				continue
			}
			prjs, err := planProjects(tx, o.Name)
			if err != nil {
				return err
			}
			if len(prjs) > 0 {
				return fmt.Errorf("the file has no plan %s, the plan of project %s (%s): keep the plan or move its projects first", o.Name, prjs[0].ID, prjs[0].Name)
			}
			if err := store.Plans.Delete(tx, o.Name); err != nil {
				return err
			}
			changed++
		}
		now := s.now()
		var jobs []*store.Job
		for _, p := range cfg.Plans {
			if prev, err := store.Plans.Get(tx, p.Name); err == nil && planView(prev) == p {
				continue
			}
			if err := store.Plans.Put(tx, planRecord(p, now)); err != nil {
				return err
			}
			js, err := s.applyPlan(tx, p)
			if err != nil {
				return err
			}
			jobs = append(jobs, js...)
			changed++
		}
		q := cfg.OrganizationQuota
		if cur, err := store.OrganizationQuotas.Get(tx, store.DefaultQuotaID); err != nil || quotaView(cur) != q {
			if err := store.OrganizationQuotas.Put(tx, &store.OrganizationQuota{ID: store.DefaultQuotaID, ProjectsLimit: q.ProjectsLimit,
				PreviewsLimit: q.PreviewsLimit, StorageLimitBytes: q.StorageLimitBytes, UpdatedAt: now}); err != nil {
				return err
			}
			changed++
		}
		if changed == 0 {
			return nil
		}
		return s.host.Audit(tx, sys, "plans.replace", "", "", map[string]any{"plans": cfg.Plans, "organization_quota": q, "job_ids": jobIDs(jobs)})
	})
	if err == nil && changed > 0 {
		s.host.Notify()
	}
	return changed, err
}

// GetQuota is an organization's quota (platform operators).
func (s *Service) GetQuota(ctx context.Context, p *authz.Principal, orgID string) (*api.OrganizationQuotaResponse, error) {
	if err := p.RequireOperator("managing plans and quotas"); err != nil {
		return nil, err
	}
	var out *api.OrganizationQuotaResponse
	err := s.db.View(func(tx *store.Tx) error {
		if _, err := store.Organizations.Get(tx, orgID); err != nil {
			return apperr.NotFoundAs(err, "organization %s not found", orgID)
		}
		q, def, at, err := s.QuotaIn(tx, orgID)
		if err != nil {
			return apperr.Internal(err, "read quota")
		}
		out = &api.OrganizationQuotaResponse{OrganizationID: orgID, Quota: q, IsDefault: def, UpdatedAt: at}
		return nil
	})
	return out, err
}

// PatchQuota sets an organization's own quota (the fields given; the others keep their values in force),
// or, with default, drops it so the default applies again. Lowering a limit under what the organization
// holds deletes nothing: it can make no more.
func (s *Service) PatchQuota(ctx context.Context, p *authz.Principal, orgID string, req *api.PatchOrganizationQuotaRequest) (*api.OrganizationQuotaResponse, error) {
	if err := p.RequireOperator("managing plans and quotas"); err != nil {
		return nil, err
	}
	some := req.ProjectsLimit != nil || req.PreviewsLimit != nil || req.StorageLimitBytes != nil
	switch {
	case req.Default && some:
		return nil, apperr.Invalid("default drops the organization's own quota: give no limit with it")
	case !req.Default && !some:
		return nil, apperr.Invalid("give projects_limit, previews_limit or storage_limit_bytes (or default: true)")
	}
	var out *api.OrganizationQuotaResponse
	err := s.db.Update(func(tx *store.Tx) error {
		if _, err := store.Organizations.Get(tx, orgID); err != nil {
			return apperr.NotFoundAs(err, "organization %s not found", orgID)
		}
		if err := s.SeedPlans(tx); err != nil {
			return apperr.Internal(err, "seed the plans")
		}
		q, _, _, err := s.QuotaIn(tx, orgID)
		if err != nil {
			return apperr.Internal(err, "read quota")
		}
		before := q
		now := s.now()
		if req.Default {
			if err := store.OrganizationQuotas.Delete(tx, orgID); err != nil && !errors.Is(err, store.ErrNotFound) {
				return apperr.Internal(err, "delete quota")
			}
		} else {
			if req.ProjectsLimit != nil {
				q.ProjectsLimit = *req.ProjectsLimit
			}
			if req.PreviewsLimit != nil {
				q.PreviewsLimit = *req.PreviewsLimit
			}
			if req.StorageLimitBytes != nil {
				q.StorageLimitBytes = *req.StorageLimitBytes
			}
			if err := checkQuota(q, ""); err != nil {
				return err
			}
			if err := store.OrganizationQuotas.Put(tx, &store.OrganizationQuota{ID: orgID, ProjectsLimit: q.ProjectsLimit,
				PreviewsLimit: q.PreviewsLimit, StorageLimitBytes: q.StorageLimitBytes, UpdatedAt: now}); err != nil {
				return apperr.Internal(err, "store quota")
			}
		}
		q, def, at, err := s.QuotaIn(tx, orgID)
		if err != nil {
			return apperr.Internal(err, "read quota")
		}
		out = &api.OrganizationQuotaResponse{OrganizationID: orgID, Quota: q, IsDefault: def, UpdatedAt: at}
		if err := s.host.Audit(tx, p, "organization.quota", orgID, "", map[string]any{"before": before, "after": q, "default": def}); err != nil {
			return apperr.Internal(err, "audit")
		}
		return nil
	})
	return out, err
}
