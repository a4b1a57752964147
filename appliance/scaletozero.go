package appliance

import (
	"context"

	"github.com/theappliance/appliance/store"
)

// Scale to zero (issue 33) is appliance/scaletozero: the idle pass, the suspension and the wake, the wake
// front of the suspended projects' ports. The root builds it (New), gives it its Host (areas.go) and
// forwards the endpoints.

// SuspendIdle is the periodic pass of scale to zero (scaletozero.Service.SuspendIdle): it reports how many
// projects it suspended.
func (s *Service) SuspendIdle(ctx context.Context) (int, error) { return s.z.SuspendIdle(ctx) }

// SuspendProject suspends the project now, idle or not (POST /v1/projects/{id}/suspend, for operators and
// tests): its sessions end. The caller is the audit event's actor.
func (s *Service) SuspendProject(ctx context.Context, p *Principal, projectID string) (*ProjectResponse, error) {
	if err := s.z.Suspend(ctx, p, projectID); err != nil {
		return nil, err
	}
	return s.projectAnswer(p, projectID)
}

// ResumeProject wakes a suspended project now (POST /v1/projects/{id}/resume); a running one is left as it
// is. The caller is the audit event's actor.
func (s *Service) ResumeProject(ctx context.Context, p *Principal, projectID string) (*ProjectResponse, error) {
	if err := s.z.Resume(ctx, p, projectID); err != nil {
		return nil, err
	}
	return s.projectAnswer(p, projectID)
}

func (s *Service) projectAnswer(p *Principal, projectID string) (*ProjectResponse, error) {
	var out *ProjectResponse
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := s.visibleProject(tx, p, projectID)
		if err == nil {
			out = &ProjectResponse{Project: s.projectView(prj)}
		}
		return err
	})
	return out, err
}
