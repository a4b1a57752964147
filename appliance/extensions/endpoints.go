package extensions

import (
	"context"
	"slices"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/store"
)

// List asks the project's server.
func (s *Service) List(ctx context.Context, p *authz.Principal, projectID string) (*api.ExtensionList, error) {
	prj, inst, err := s.host.ActiveInstance(p, projectID)
	if err != nil {
		return nil, err
	}
	conn, err := s.host.AdminConn(ctx, inst, prj.DatabaseName)
	if err != nil {
		return nil, &apperr.Error{Kind: apperr.KindUnavailable, Msg: "the project's server does not answer", Cause: err}
	}
	defer conn.Close(context.Background())
	exts, err := list(ctx, conn, s.Offers)
	if err != nil {
		return nil, apperr.Internal(err, "list extensions")
	}
	return &api.ExtensionList{Extensions: exts}, nil
}

// Enable checks the name against the server's offer and enqueues extension.enable.
func (s *Service) Enable(ctx context.Context, p *authz.Principal, projectID string, req *api.ExtensionRequest) (*api.JobResponse, error) {
	if slices.Contains(networkExtensions, req.Name) && !s.cfg.NetworkExtensions {
		return nil, apperr.Forbidden("%s connects out from inside the database, past the appliance's outbound policy: it is offered only when the operator starts the appliance with --allow-network-extensions", req.Name)
	}
	return s.job(ctx, p, projectID, req.Name, JobEnable, func(e *api.Extension) error {
		if e.Enabled {
			return apperr.Conflict("extension %s is already enabled (version %s)", e.Name, e.InstalledVersion)
		}
		return nil
	})
}

// Disable enqueues extension.disable for an enabled extension.
func (s *Service) Disable(ctx context.Context, p *authz.Principal, projectID, name string) (*api.JobResponse, error) {
	return s.job(ctx, p, projectID, name, JobDisable, func(e *api.Extension) error {
		if !e.Enabled {
			return apperr.Conflict("extension %s is not enabled", e.Name)
		}
		if e.Name == "plpgsql" {
			return apperr.Invalid("plpgsql cannot be disabled")
		}
		return nil
	})
}

// Update enqueues extension.update when a newer version exists.
func (s *Service) Update(ctx context.Context, p *authz.Principal, projectID, name string) (*api.JobResponse, error) {
	return s.job(ctx, p, projectID, name, JobUpdate, func(e *api.Extension) error {
		if !e.Enabled {
			return apperr.Conflict("extension %s is not enabled", e.Name)
		}
		if !e.UpdateAvailable {
			return apperr.Conflict("extension %s is at the newest version (%s)", e.Name, e.InstalledVersion)
		}
		return nil
	})
}

type payload struct {
	Name string `json:"name"`
}

func (s *Service) job(ctx context.Context, p *authz.Principal, projectID, name, jobType string, check func(*api.Extension) error) (*api.JobResponse, error) {
	exts, err := s.List(ctx, p, projectID)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(exts.Extensions, func(e api.Extension) bool { return e.Name == name })
	if i < 0 {
		return nil, apperr.NotFound("extension %q is not available on this server", name)
	}
	if err := check(&exts.Extensions[i]); err != nil {
		return nil, err
	}
	var job *store.Job
	err = s.db.Update(func(tx *store.Tx) error {
		prj, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		j, err := s.host.Enqueue(tx, prj, jobType, prj.ID, payload{Name: name})
		if err != nil {
			return err
		}
		if err := s.host.Audit(tx, p, jobType, prj.OrganizationID, prj.ID, map[string]any{"extension": name, "job_id": j.ID}); err != nil {
			return apperr.Internal(err, "audit")
		}
		job = j
		return nil
	})
	return s.host.AnswerJob(job, err)
}
