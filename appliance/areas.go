package appliance

import (
	"github.com/theappliance/appliance/appliance/kv"
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
