package appliance

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/observe"
	"github.com/theappliance/appliance/appliance/scaletozero"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Environments a project may declare; production deletes need an approval token.
var Environments = api.Environments

// projectView is the project's API view (its suspend_after_seconds the plan's default when it chose none).
func (s *Service) projectView(p *store.Project) *Project {
	return &Project{ID: p.ID, Name: p.Name, Slug: p.Slug, OrganizationID: p.OrganizationID, DatabaseName: p.DatabaseName,
		RoleName: p.RoleName, PublicHost: p.PublicHost, Region: p.Region, Plan: p.Plan, PostgresVersion: p.PostgresVersion,
		SSLMode: p.SSLMode, IdleTransactionTimeout: p.IdleTransactionTimeout, StatementTimeout: p.StatementTimeout,
		PrimaryInstanceID: p.PrimaryInstanceID, LatestJobID: p.LatestJobID, LastError: p.LastError,
		DirectPort: p.DirectPort, PooledPort: p.PooledPort, MaxConnections: p.MaxConnections,
		StorageLimitBytes: p.StorageLimitBytes, Environment: p.Environment, RuntimeStatus: p.RuntimeStatus,
		State: p.State, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt, SuspendAfterSeconds: int(scaletozero.SuspendAfter(p, s.planOrDefault(p.Plan)) / time.Second)}
}

// Job types of the projects area.
const (
	JobProjectProvision = "project.provision"
	JobProjectApplyPlan = "project.apply_plan"
	JobProjectDelete    = "project.delete"
	JobProjectRotate    = "project.rotate_credentials"
)

var identRE = regexp.MustCompile(`[^a-z0-9_]+`)

// identifier turns a project name into a PostgreSQL identifier: lowercase letters, digits and
// underscores, starting with a letter, at most 40 bytes.
func identifier(name string) string {
	id := strings.Trim(identRE.ReplaceAllString(strings.ToLower(foldLatin(name)), "_"), "_")
	if id == "" || id[0] < 'a' || id[0] > 'z' {
		id = "db_" + id
	}
	if len(id) > 40 {
		id = strings.TrimRight(id[:40], "_")
	}
	if slices.Contains(reservedIdents, id) {
		id += "_db"
	}
	return id
}

// instanceIdent is the database and role name a project named name gets, or a 400 when PostgreSQL
// would refuse a name its instance needs: the role and its rotation twin (altRole) may not start with
// pg_, which PostgreSQL reserves ("pg" makes the role pg_alt). Refused here, not in the provision job.
func instanceIdent(name string) (string, error) {
	id := identifier(name)
	for _, n := range []string{id, altRole(id)} {
		if strings.HasPrefix(n, "pg_") {
			return "", Invalid("name %q would make the database and role name %s and the rotation role %s, and PostgreSQL reserves names starting with pg_: choose another name", name, id, altRole(id))
		}
	}
	return id, nil
}

// reservedIdents are names PostgreSQL, PgBouncer or the appliance use for themselves ("pgbouncer" is
// PgBouncer's admin console: a database of that name would be unreachable on the pooled port).
var reservedIdents = []string{"postgres", "template0", "template1", "appliance_admin", "public", "pg_db", "db_", "pgbouncer"}

// readOnlyJobs only look at a project: they do not become its latest_job_id.
var readOnlyJobs = map[string]bool{JobImportFollowStatus: true}

// enqueue adds a job of project p inside tx and stores p with the job as its latest_job_id (unless the job
// is read-only); the runner is poked after the transaction commits (s.notify).
func (s *Service) enqueue(tx *store.Tx, p *store.Project, jobType, lock string, payload any) (*store.Job, error) {
	j := &store.Job{Type: jobType, OrganizationID: p.OrganizationID, ProjectID: p.ID, LockedResource: lock,
		InstanceID: p.PrimaryInstanceID, Node: store.ProjectNode(tx, p)}
	if payload != nil {
		if err := setPayload(j, payload); err != nil {
			return nil, err
		}
	}
	if err := scheduler.Enqueue(tx, j); err != nil {
		return nil, Internal(err, "enqueue %s", jobType)
	}
	if readOnlyJobs[jobType] {
		return j, nil
	}
	p.LatestJobID, p.UpdatedAt = j.ID, s.now()
	if err := store.Projects.Put(tx, p); err != nil {
		return nil, Internal(err, "store project")
	}
	return j, nil
}

func (s *Service) notify() {
	if s.jobs != nil {
		s.jobs.Notify()
	}
}

// CreateProject records a project and enqueues its provisioning.
func (s *Service) CreateProject(ctx context.Context, p *Principal, req *CreateProjectRequest) (*ProjectJobResponse, error) {
	if err := p.RequireAdminRole("creating a project"); err != nil {
		return nil, err
	}
	if p.ProjectID != "" {
		return nil, Forbidden("a project-scoped key cannot create projects")
	}
	orgID, err := p.OrganizationFilter(req.OrganizationID)
	if err != nil {
		return nil, err
	}
	name := strings.TrimSpace(req.Name)
	if err := checkDisplayText("name", name, 1, 63); err != nil {
		return nil, err
	}
	if _, err := instanceIdent(name); err != nil {
		return nil, err
	}
	planName := req.Plan
	if planName == "" {
		planName = DefaultPlan
	}
	plan, ok := s.PlanByName(planName)
	if !ok {
		return nil, Invalid("plan must be one of %s", s.planNames())
	}
	env := req.Environment
	if env == "" {
		env = "production"
	}
	if !slices.Contains(Environments, env) {
		return nil, Invalid("environment must be one of %s", strings.Join(Environments, ", "))
	}
	var out *ProjectJobResponse
	err = s.db.Update(func(tx *store.Tx) error {
		if _, err := store.Organizations.Get(tx, orgID); err != nil {
			return notFoundAs(err, "organization %s not found", orgID)
		}
		existing, err := store.Projects.Lookup(tx, store.ProjectsByOrg, orgID, store.Query{})
		if err != nil {
			return Internal(err, "list projects")
		}
		live := 0
		slugs := map[string]bool{}
		for _, e := range existing {
			if e.DeletedAt == nil && e.PreviewOf == "" {
				live++
				slugs[e.Slug] = true
			}
		}
		quota, err := s.organizationQuota(tx, orgID)
		if err != nil {
			return Internal(err, "read the organization's quota")
		}
		if q := quota.ProjectsLimit; live >= q {
			return Forbidden("project quota reached: the organization has %d of %d projects", live, q)
		}
		slug := slugify(name)
		for i := 2; slugs[slug]; i++ {
			slug = slugify(name) + "-" + strconv.Itoa(i)
		}
		now := s.now()
		ident := identifier(name)
		prj := &store.Project{ID: ids.New("prj"), Name: name, Slug: slug, OrganizationID: orgID,
			DatabaseName: ident, RoleName: ident, PublicHost: s.cfg.PublicHost, Region: s.cfg.Region,
			Plan: plan.Name, SSLMode: "verify-full", StatementTimeout: "0", IdleTransactionTimeout: "0",
			MaxConnections: plan.MaxConnections, StorageLimitBytes: plan.StorageLimitBytes, Environment: env,
			State: ProjectProvisioning, RuntimeStatus: RuntimeProvisioning, CreatedAt: now, UpdatedAt: now,
			PreloadLibraries: []string{}}
		if err := s.placeNew(tx, prj); err != nil {
			return err
		}
		j, err := s.enqueue(tx, prj, JobProjectProvision, prj.ID, nil)
		if err != nil {
			return err
		}
		if env == "production" { // a daily backup from the first day (docs/api-decisions.md)
			if err := s.backups.AddDefaultSchedule(tx, prj, now); err != nil {
				return Internal(err, "create the project")
			}
		}
		if err := s.audit(tx, p, "project.create", orgID, prj.ID, map[string]any{"name": name, "plan": plan.Name, "job_id": j.ID}); err != nil {
			return Internal(err, "audit")
		}
		out = &ProjectJobResponse{Job: JobView(j), Project: s.projectView(prj)}
		return nil
	})
	if err == nil {
		s.notify()
	}
	return out, err
}

// ListProjects lists the organization's projects (deleted ones excluded), oldest first.
func (s *Service) ListProjects(ctx context.Context, p *Principal, orgFilter string) (*ProjectList, error) {
	orgID, err := p.OrganizationFilter(orgFilter)
	if err != nil {
		return nil, err
	}
	out := &ProjectList{Projects: []*Project{}}
	var ids []string
	err = s.db.View(func(tx *store.Tx) error {
		prjs, err := store.Projects.Lookup(tx, store.ProjectsByOrg, orgID, store.Query{})
		if err != nil {
			return Internal(err, "list projects")
		}
		for _, prj := range prjs {
			if prj.DeletedAt != nil || prj.PreviewOf != "" || (p.ProjectID != "" && prj.ID != p.ProjectID) {
				continue
			}
			out.Projects = append(out.Projects, s.projectView(prj))
			ids = append(ids, prj.ID)
		}
		if out.OpenAlerts, err = observe.OpenAlertCounts(tx, ids); err != nil {
			return Internal(err, "count alerts")
		}
		return nil
	})
	return out, err
}

// GetProject returns one project.
func (s *Service) GetProject(ctx context.Context, p *Principal, projectID string) (*ProjectResponse, error) {
	var out *ProjectResponse
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := s.visibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		out = &ProjectResponse{Project: s.projectView(prj)}
		return nil
	})
	return out, err
}

var durationRE = regexp.MustCompile(`^(0|[1-9][0-9]{0,8}(ms|s|min|h|d)?)$`)

// PatchProject applies metadata changes at once and enqueues project.apply_plan for what the server
// must apply (plan, timeouts); latest_job_id names that job.
func (s *Service) PatchProject(ctx context.Context, p *Principal, projectID string, req *PatchProjectRequest) (*ProjectResponse, error) {
	if req.Name != nil {
		if err := checkDisplayText("name", strings.TrimSpace(*req.Name), 1, 63); err != nil {
			return nil, err
		}
	}
	if req.Environment != nil && !slices.Contains(Environments, *req.Environment) {
		return nil, Invalid("environment must be one of %s", strings.Join(Environments, ", "))
	}
	for field, v := range map[string]*string{"statement_timeout": req.StatementTimeout, "idle_transaction_timeout": req.IdleTransactionTimeout} {
		if v == nil {
			continue
		}
		if !durationRE.MatchString(*v) {
			return nil, Invalid("%s must be 0 or a positive duration with unit ms, s, min, h or d (e.g. 30s)", field)
		}
		if _, err := parsePGDuration(*v); err != nil {
			return nil, Invalid("%s: %v", field, err)
		}
	}
	if v := req.SuspendAfterSeconds; v != nil && *v != 0 && (*v < scaletozero.MinSuspendAfterSeconds || *v > scaletozero.MaxSuspendAfterSeconds) {
		return nil, Invalid("suspend_after_seconds must be 0 (never) or %d to %d", scaletozero.MinSuspendAfterSeconds, scaletozero.MaxSuspendAfterSeconds)
	}
	var plan Plan
	if req.Plan != nil {
		var ok bool
		if plan, ok = s.PlanByName(*req.Plan); !ok {
			return nil, Invalid("plan must be one of %s", s.planNames())
		}
	}
	var out *ProjectResponse
	var queued bool
	err := s.db.Update(func(tx *store.Tx) error {
		out, queued = nil, false // a run again starts over
		prj, err := s.visibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		if prj.State == ProjectDeleting || prj.State == ProjectDeleted {
			return Conflict("project %s is %s", prj.ID, prj.State)
		}
		changed := map[string]any{}
		server := false
		if req.Name != nil && strings.TrimSpace(*req.Name) != prj.Name {
			prj.Name = strings.TrimSpace(*req.Name)
			changed["name"] = prj.Name
		}
		if req.Environment != nil && *req.Environment != prj.Environment {
			prj.Environment = *req.Environment
			changed["environment"] = prj.Environment
		}
		if req.StatementTimeout != nil && *req.StatementTimeout != prj.StatementTimeout {
			prj.StatementTimeout = *req.StatementTimeout
			changed["statement_timeout"], server = prj.StatementTimeout, true
		}
		if req.IdleTransactionTimeout != nil && *req.IdleTransactionTimeout != prj.IdleTransactionTimeout {
			prj.IdleTransactionTimeout = *req.IdleTransactionTimeout
			changed["idle_transaction_timeout"], server = prj.IdleTransactionTimeout, true
		}
		if v := req.SuspendAfterSeconds; v != nil && (prj.SuspendAfterSeconds == nil || *v != *prj.SuspendAfterSeconds) {
			prj.SuspendAfterSeconds = ptr(*v)
			changed["suspend_after_seconds"] = *v
		}
		if req.Plan != nil && plan.Name != prj.Plan {
			prj.Plan, prj.MaxConnections, prj.StorageLimitBytes = plan.Name, plan.MaxConnections, plan.StorageLimitBytes
			changed["plan"], server = prj.Plan, true
		}
		if len(changed) == 0 {
			out = &ProjectResponse{Project: s.projectView(prj)}
			return nil
		}
		if server {
			if prj.State == ProjectFailed {
				return Conflict("project %s failed to provision; delete it and create a new one", prj.ID)
			}
			j, err := s.enqueue(tx, prj, JobProjectApplyPlan, prj.ID, nil)
			if err != nil {
				return err
			}
			queued = true
			changed["job_id"] = j.ID
		}
		prj.UpdatedAt = s.now()
		if err := store.Projects.Put(tx, prj); err != nil {
			return Internal(err, "store project")
		}
		if err := s.audit(tx, p, "project.update", prj.OrganizationID, prj.ID, changed); err != nil {
			return Internal(err, "audit")
		}
		out = &ProjectResponse{Project: s.projectView(prj)}
		return nil
	})
	if queued {
		s.notify()
	}
	return out, err
}

// DeleteProject enqueues the removal of the project's instance and data. A production project needs a
// valid approval token for project.delete.
func (s *Service) DeleteProject(ctx context.Context, p *Principal, projectID, approvalToken string) (*JobResponse, error) {
	if err := p.RequireAdminRole("deleting a project"); err != nil {
		return nil, err
	}
	var job *store.Job
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := s.visibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		if prj.State == ProjectDeleted {
			return Gone("project %s has been deleted", prj.ID)
		}
		if prj.State == ProjectDeleting {
			return Conflict("project %s is already being deleted (job %s)", prj.ID, prj.LatestJobID)
		}
		if prj.Environment == "production" {
			if err := s.consumeApproval(tx, approvalToken, ActionProjectDelete, prj.ID); err != nil {
				return err
			}
		}
		j, err := s.enqueue(tx, prj, JobProjectDelete, prj.ID, nil)
		if err != nil {
			return err
		}
		prj.State = ProjectDeleting
		if err := store.Projects.Put(tx, prj); err != nil {
			return Internal(err, "store project")
		}
		if err := s.audit(tx, p, "project.delete", prj.OrganizationID, prj.ID, map[string]any{"job_id": j.ID, "environment": prj.Environment}); err != nil {
			return Internal(err, "audit")
		}
		job = j
		return nil
	})
	return s.answerJob(job, err)
}

// visibleActiveProject is a project the caller may act on, active with an instance (else a Conflict).
func (s *Service) visibleActiveProject(tx *store.Tx, p *Principal, projectID string) (*store.Project, error) {
	prj, err := s.visibleProject(tx, p, projectID)
	if err != nil {
		return nil, err
	}
	if prj.State != ProjectActive || prj.PrimaryInstanceID == "" {
		return nil, Conflict("project %s is %s, not active", prj.ID, prj.State)
	}
	return prj, nil
}

// activeProject loads a project the caller may act on, requiring it active with an instance.
func (s *Service) activeProject(p *Principal, projectID string) (*store.Project, *store.Instance, error) {
	var prj *store.Project
	var inst *store.Instance
	err := s.db.View(func(tx *store.Tx) error {
		var err error
		if prj, err = s.visibleActiveProject(tx, p, projectID); err != nil {
			return err
		}
		inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, Internal(err, "project instance record missing")
	}
	return prj, inst, err
}
