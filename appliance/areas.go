package appliance

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/kv"
	"github.com/theappliance/appliance/appliance/observe"
	"github.com/theappliance/appliance/store"
)

// areaHost is the root's side of the API areas that live in packages of their own (appliance/kv): the
// records and rules they share with the rest of the domain, which each area declares as its Host. It is a
// type of its own rather than methods of Service so that what the areas need is not part of the service's
// API (httpapi cannot call it).
type areaHost struct{ s *Service }

var _ kv.Host = areaHost{}

func (h areaHost) VisibleProject(tx *store.Tx, p *Principal, projectID string) (*store.Project, error) {
	return h.s.visibleProject(tx, p, projectID)
}

func (h areaHost) ActiveProject(tx *store.Tx, p *Principal, projectID string) (*store.Project, error) {
	return h.s.visibleActiveProject(tx, p, projectID)
}

func (h areaHost) Enqueue(tx *store.Tx, prj *store.Project, jobType, lock string, payload any) (*store.Job, error) {
	return h.s.enqueue(tx, prj, jobType, lock, payload)
}

func (h areaHost) AnswerJob(job *store.Job, err error) (*JobResponse, error) {
	return h.s.answerJob(job, err)
}

func (h areaHost) Audit(tx *store.Tx, p *Principal, action, orgID, projectID string, metadata any) error {
	return h.s.audit(tx, p, action, orgID, projectID, metadata)
}

func (h areaHost) RevokeKVToken(hash string) error { return h.s.recordRevocation(revokedKVToken, hash) }

// PlanKVMemoryMB is the plan's store size, the default plan's when the plan gives none.
func (h areaHost) PlanKVMemoryMB(name string) int {
	plan, _ := PlanByName(name)
	if plan.KVMemoryMB <= 0 {
		plan, _ = PlanByName(DefaultPlan)
	}
	return plan.KVMemoryMB
}

var _ observe.Host = areaHost{}

func (h areaHost) ActiveInstance(p *Principal, projectID string) (*store.Project, *store.Instance, error) {
	return h.s.activeProject(p, projectID)
}

func (h areaHost) QuietAdminConn(ctx context.Context, inst *store.Instance, db string) (*pgx.Conn, error) {
	return h.s.quietAdminConn(ctx, inst, db)
}

// WithTenantSession takes a session of the studio's pool for the project, under the studio's timeout.
func (h areaHost) WithTenantSession(ctx context.Context, p *Principal, prj *store.Project, fn func(context.Context, *pgx.Conn) error) error {
	_, tenant, err := h.s.studioSession(ctx, p, prj.ID)
	if err != nil {
		return err
	}
	defer tenant.Release()
	qctx, cancel := studioContext(ctx, prj)
	defer cancel()
	return fn(qctx, tenant.Conn())
}

func (h areaHost) AppendEvent(tx *store.Tx, typ, orgID, projectID string, data any) error {
	return h.s.appendEvent(tx, typ, orgID, projectID, data)
}

// Plan is the plan's server sizes (zero for a plan the table does not have).
func (h areaHost) Plan(name string) observe.Plan {
	plan, _ := PlanByName(name)
	return observe.Plan{MemoryBytes: plan.MemoryBytes, CPUCores: plan.CPUCores}
}
