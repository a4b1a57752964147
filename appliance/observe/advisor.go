package observe

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/pgstat"
	"github.com/theappliance/appliance/store"
)

// HygieneMinIndexBytes: smaller unused indexes are not worth reporting.
const HygieneMinIndexBytes = 64 << 10

// adviceCache keeps the last available advice of each project and thresholds for
// api.AdvisorCacheSeconds: computing it plans every example statement twice per suggestion, too much to
// run on every visit of the Monitoring tab.
type adviceCache struct {
	mu      sync.Mutex
	entries map[adviceKey]*api.Advice
}

type adviceKey struct {
	projectID                 string
	minFilter, minSelectivity int
}

// get returns the cached advice of k computed after since, if any, and drops the expired entries.
func (c *adviceCache) get(k adviceKey, since time.Time) *api.Advice {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, a := range c.entries {
		if !a.ComputedAt.After(since) {
			delete(c.entries, key)
		}
	}
	return c.entries[k]
}

func (c *adviceCache) put(k adviceKey, a *api.Advice) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[adviceKey]*api.Advice{}
	}
	c.entries[k] = a
}

// IndexAdvice suggests indexes for the predicates pg_qualstats saw filter many rows, with hypopg's
// estimates. The candidates are read as the appliance; the estimates (EXPLAIN with hypothetical
// indexes) run as the project's own role: planning can run a tenant's functions, never as a superuser.
// An available advice is kept for api.AdvisorCacheSeconds and served again (its computed_at says when
// it was computed) unless refresh asks for a new one; an unavailable one (an extension missing) is not
// kept, so enabling the extension shows at once.
func (s *Service) IndexAdvice(ctx context.Context, p *authz.Principal, projectID string, minFilter, minSelectivity int, refresh bool) (*api.AdvisorResponse, error) {
	if minFilter < 1 || minFilter > api.AdvisorMinFilterMax {
		return nil, apperr.Invalid("min_filter must be between 1 and %d", api.AdvisorMinFilterMax)
	}
	if minSelectivity < 1 || minSelectivity > api.AdvisorMinSelectivityMax {
		return nil, apperr.Invalid("min_selectivity must be between 1 and %d", api.AdvisorMinSelectivityMax)
	}
	if prj, _, err := s.host.ActiveInstance(p, projectID); err != nil {
		return nil, err
	} else if why := suspended(prj); why != "" {
		return &api.AdvisorResponse{Advisor: &pgstat.Advice{Reason: why}}, nil
	}
	key := adviceKey{projectID, minFilter, minSelectivity}
	if !refresh {
		if a := s.advice.get(key, s.now().Add(-api.AdvisorCacheSeconds*time.Second)); a != nil {
			return &api.AdvisorResponse{Advisor: a}, nil
		}
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
	advice.ComputedAt = s.now()
	if advice.Available {
		s.advice.put(key, advice)
	}
	return &api.AdvisorResponse{Advisor: advice}, nil
}

// IndexHygiene reports unused and redundant indexes of the project's database.
func (s *Service) IndexHygiene(ctx context.Context, p *authz.Principal, projectID string) (*api.HygieneResponse, error) {
	if prj, _, err := s.host.ActiveInstance(p, projectID); err != nil {
		return nil, err
	} else if why := suspended(prj); why != "" {
		return &api.HygieneResponse{Hygiene: &pgstat.Hygiene{Reason: why}}, nil
	}
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

// suspended says why the advisor does not run on a project suspended for idleness (scale to zero): it needs
// the server, and asking for advice is no reason to wake it. The answer is an unavailable report with this
// reason (200, as for a database the advisor cannot serve), not an error: the Monitoring tab of a suspended
// project asks for it as any other. "" when the project is not suspended.
func suspended(prj *store.Project) string {
	if prj.IdleSuspendedAt != nil {
		return fmt.Sprintf("The project is suspended (scale to zero): the index advisor needs its server. Connect to it or resume it (POST /v1/projects/%s/resume), then refresh.", prj.ID)
	}
	return ""
}
