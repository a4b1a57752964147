package observe

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/pgstat"
	"github.com/theappliance/appliance/store"
)

// HygieneMinIndexBytes: smaller unused indexes are not worth reporting.
const HygieneMinIndexBytes = 64 << 10

// IndexAdvice suggests indexes for the predicates pg_qualstats saw filter many rows, with hypopg's
// estimates. The candidates are read as the appliance; the estimates (EXPLAIN with hypothetical
// indexes) run as the project's own role: planning can run a tenant's functions, never as a superuser.
func (s *Service) IndexAdvice(ctx context.Context, p *authz.Principal, projectID string, minFilter, minSelectivity int) (*api.AdvisorResponse, error) {
	if minFilter < 1 || minFilter > api.AdvisorMinFilterMax {
		return nil, apperr.Invalid("min_filter must be between 1 and %d", api.AdvisorMinFilterMax)
	}
	if minSelectivity < 1 || minSelectivity > api.AdvisorMinSelectivityMax {
		return nil, apperr.Invalid("min_selectivity must be between 1 and %d", api.AdvisorMinSelectivityMax)
	}
	var advice *pgstat.Advice
	err := s.withQuietAdmin(ctx, p, projectID, func(prj *store.Project, admin *pgx.Conn) error {
		return s.host.WithTenantSession(ctx, p, prj, func(qctx context.Context, tenant *pgx.Conn) (err error) {
			if advice, err = pgstat.IndexAdvice(qctx, admin, tenant, minFilter, minSelectivity); err != nil {
				return apperr.Server(err, "compute index advice")
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return &api.AdvisorResponse{Advisor: advice}, nil
}

// IndexHygiene reports unused and redundant indexes of the project's database.
func (s *Service) IndexHygiene(ctx context.Context, p *authz.Principal, projectID string) (*api.HygieneResponse, error) {
	var h *pgstat.Hygiene
	err := s.withQuietAdmin(ctx, p, projectID, func(_ *store.Project, admin *pgx.Conn) (err error) {
		if h, err = pgstat.IndexHygiene(ctx, admin, HygieneMinIndexBytes); err != nil {
			return apperr.Server(err, "read the indexes")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &api.HygieneResponse{Hygiene: h}, nil
}

// withQuietAdmin runs fn on a quiet admin session (Host.QuietAdminConn) to the active project's database.
func (s *Service) withQuietAdmin(ctx context.Context, p *authz.Principal, projectID string, fn func(*store.Project, *pgx.Conn) error) error {
	prj, inst, err := s.host.ActiveInstance(p, projectID)
	if err != nil {
		return err
	}
	admin, err := s.host.QuietAdminConn(ctx, inst, prj.DatabaseName)
	if err != nil {
		return err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	return fn(prj, admin)
}
