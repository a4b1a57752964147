package appliance

import (
	"context"

	"github.com/theappliance/appliance/appliance/pgstat"
)

// The index advisor's thresholds (the spec's Limits) and the hygiene report's minimum index size.
const (
	AdvisorMinFilterMax          = 10_000_000
	AdvisorMinFilterDefault      = 1000
	AdvisorMinSelectivityMax     = 100
	AdvisorMinSelectivityDefault = 30
	// HygieneMinIndexBytes: smaller unused indexes are not worth reporting.
	HygieneMinIndexBytes = 64 << 10
)

// AdvisorResponse is GET .../advisor/indexes.
type AdvisorResponse struct {
	Advisor *pgstat.Advice `json:"advisor"`
}

// HygieneResponse is GET .../advisor/index-hygiene.
type HygieneResponse struct {
	Hygiene *pgstat.Hygiene `json:"hygiene"`
}

// IndexAdvice suggests indexes for the predicates pg_qualstats saw filter many rows, with hypopg's
// estimates. The candidates are read as the appliance; the estimates (EXPLAIN with hypothetical
// indexes) run as the project's own role: planning can run a tenant's functions, never as a superuser.
func (s *Service) IndexAdvice(ctx context.Context, p *Principal, projectID string, minFilter, minSelectivity int) (*AdvisorResponse, error) {
	if minFilter < 1 || minFilter > AdvisorMinFilterMax {
		return nil, Invalid("min_filter must be between 1 and %d", AdvisorMinFilterMax)
	}
	if minSelectivity < 1 || minSelectivity > AdvisorMinSelectivityMax {
		return nil, Invalid("min_selectivity must be between 1 and %d", AdvisorMinSelectivityMax)
	}
	prj, inst, err := s.activeProject(p, projectID)
	if err != nil {
		return nil, err
	}
	admin, err := s.quietAdminConn(ctx, inst, prj.DatabaseName)
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	_, tenant, err := s.studioSession(ctx, p, projectID)
	if err != nil {
		return nil, err
	}
	defer tenant.Release()
	qctx, cancel := studioContext(ctx, prj)
	defer cancel()
	advice, err := pgstat.IndexAdvice(qctx, admin, tenant.Conn(), minFilter, minSelectivity)
	if err != nil {
		return nil, serverErr(err, "compute index advice")
	}
	return &AdvisorResponse{Advisor: advice}, nil
}

// IndexHygiene reports unused and redundant indexes of the project's database.
func (s *Service) IndexHygiene(ctx context.Context, p *Principal, projectID string) (*HygieneResponse, error) {
	prj, inst, err := s.activeProject(p, projectID)
	if err != nil {
		return nil, err
	}
	admin, err := s.quietAdminConn(ctx, inst, prj.DatabaseName)
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	h, err := pgstat.IndexHygiene(ctx, admin, HygieneMinIndexBytes)
	if err != nil {
		return nil, serverErr(err, "read the indexes")
	}
	return &HygieneResponse{Hygiene: h}, nil
}
