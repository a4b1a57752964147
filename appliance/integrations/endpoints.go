package integrations

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// providerOf is the named provider, a 400 for a name the spec does not have and a 409 for one this
// appliance was built without.
func (s *Service) providerOf(name string) (provider.Provider, error) {
	if !slices.Contains(provider.Names, name) {
		return nil, apperr.Invalid("provider must be one of %s", strings.Join(provider.Names, ", "))
	}
	p, ok := s.providers[name]
	if !ok {
		return nil, apperr.Conflict("the %s integration is not available on this appliance", name)
	}
	return p, nil
}

// find is the project's integration with the provider (nil when there is none).
func find(tx *store.Tx, projectID, name string) (*store.Integration, error) {
	rec, err := store.Integrations.First(tx, store.IntegrationsByProvider, projectID+"/"+name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return rec, err
}

// List is GET /v1/projects/{projectID}/integrations.
func (s *Service) List(ctx context.Context, p *authz.Principal, projectID string) (*api.IntegrationList, error) {
	out := &api.IntegrationList{Integrations: []*api.Integration{}}
	err := s.db.View(func(tx *store.Tx) error {
		if _, err := s.host.VisibleProject(tx, p, projectID); err != nil {
			return err
		}
		recs, err := store.Integrations.Lookup(tx, store.IntegrationsByProject, projectID, store.Query{})
		if err != nil {
			return apperr.Internal(err, "list integrations")
		}
		slices.SortFunc(recs, func(a, b *store.Integration) int {
			return slices.Index(provider.Names, a.Provider) - slices.Index(provider.Names, b.Provider)
		})
		for _, r := range recs {
			out.Integrations = append(out.Integrations, view(r))
		}
		return nil
	})
	return out, err
}

// Put is PUT /v1/projects/{projectID}/integrations/{provider}: the config (validated by the provider) and,
// when given, credentials (sealed), which start a sync. A config change of a connected integration syncs
// again.
func (s *Service) Put(ctx context.Context, p *authz.Principal, projectID, name string, req *api.PutIntegrationRequest) (*api.IntegrationResponse, error) {
	var creds *sealed
	if c := req.Credentials; c != nil {
		creds = &sealed{Credentials: provider.Credentials{Token: c.Token, ExternalID: c.ExternalID, WebhookSecret: c.WebhookSecret,
			ClientID: c.ClientID, ClientSecret: c.ClientSecret, TeamID: c.TeamID}}
	}
	rec, job, err := s.save(p, projectID, name, req.Config, creds, "integration.put")
	if err != nil {
		return nil, err
	}
	if job != nil {
		s.host.Notify()
	}
	return &api.IntegrationResponse{Integration: view(rec)}, nil
}

// ConnectDeployA is POST …/integrations/deploy_a/connect. The token may be omitted when the OAuth flow
// stored one.
func (s *Service) ConnectDeployA(ctx context.Context, p *authz.Principal, projectID string, req *api.ConnectDeployARequest) (*api.IntegrationJobResponse, error) {
	if strings.TrimSpace(req.DeployAProjectID) == "" {
		return nil, apperr.Invalid("deploy_a_project_id is required")
	}
	return s.connect(p, projectID, provider.DeployA, req.Config, provider.Credentials{Token: req.Token, ExternalID: strings.TrimSpace(req.DeployAProjectID),
		TeamID: req.TeamID, WebhookSecret: req.WebhookSecret})
}

// ConnectDeployB is POST …/integrations/deploy_b/connect.
func (s *Service) ConnectDeployB(ctx context.Context, p *authz.Principal, projectID string, req *api.ConnectDeployBRequest) (*api.IntegrationJobResponse, error) {
	if strings.TrimSpace(req.SiteID) == "" || req.Token == "" {
		return nil, apperr.Invalid("site_id and token are required")
	}
	return s.connect(p, projectID, provider.DeployB, req.Config, provider.Credentials{Token: req.Token, ExternalID: strings.TrimSpace(req.SiteID),
		WebhookSecret: req.WebhookSecret})
}

// ConnectEdgeC is POST …/integrations/edge_c/connect.
func (s *Service) ConnectEdgeC(ctx context.Context, p *authz.Principal, projectID string, req *api.ConnectEdgeCRequest) (*api.IntegrationJobResponse, error) {
	if strings.TrimSpace(req.AccountID) == "" || req.APIToken == "" {
		return nil, apperr.Invalid("account_id and api_token are required")
	}
	return s.connect(p, projectID, provider.EdgeC, req.Config, provider.Credentials{Token: req.APIToken, ExternalID: strings.TrimSpace(req.AccountID)})
}

// ConnectAuthA is POST …/integrations/auth_a/connect.
func (s *Service) ConnectAuthA(ctx context.Context, p *authz.Principal, projectID string, req *api.ConnectAuthARequest) (*api.IntegrationJobResponse, error) {
	if req.SecretKey == "" {
		return nil, apperr.Invalid("secret_key is required")
	}
	return s.connect(p, projectID, provider.AuthA, req.Config, provider.Credentials{Token: req.SecretKey, WebhookSecret: req.WebhookSecret})
}

func (s *Service) connect(p *authz.Principal, projectID, name string, config json.RawMessage, c provider.Credentials) (*api.IntegrationJobResponse, error) {
	rec, job, err := s.save(p, projectID, name, config, &sealed{Credentials: c}, "integration.connect")
	if err != nil {
		return nil, err
	}
	jr, err := s.host.AnswerJob(job, nil)
	if err != nil {
		return nil, err
	}
	return &api.IntegrationJobResponse{Integration: view(rec), Job: jr.Job}, nil
}

// save writes the integration: config (nil: the stored one, else the defaults) and credentials (nil: the
// stored ones), and enqueues a sync when it has credentials and something changed. A connect without a
// token keeps the token an OAuth flow stored.
func (s *Service) save(p *authz.Principal, projectID, name string, config json.RawMessage, creds *sealed, action string) (*store.Integration, *store.Job, error) {
	prov, err := s.providerOf(name)
	if err != nil {
		return nil, nil, err
	}
	var rec *store.Integration
	var job *store.Job
	given := creds
	err = s.db.Update(func(tx *store.Tx) error {
		job = nil // a run again starts over, from the credentials given (the run completes a copy of them)
		if given != nil {
			c := *given
			creds = &c
		}
		prj, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		if prj.State == api.ProjectDeleting || prj.State == api.ProjectDeleted {
			return apperr.Conflict("project %s is %s", prj.ID, prj.State)
		}
		if rec, err = find(tx, projectID, name); err != nil {
			return apperr.Internal(err, "read integration")
		}
		now := s.now()
		if rec == nil {
			rec = &store.Integration{ID: ids.New("int"), OrganizationID: prj.OrganizationID, ProjectID: prj.ID, Provider: name,
				State: api.IntegrationPending, CreatedAt: now}
		} else if rec.State == api.IntegrationDisconnecting {
			return apperr.Conflict("the %s integration is being disconnected", name)
		}
		changed := false
		if config != nil || rec.Config == nil {
			cfg, err := prov.ValidateConfig(config)
			if err != nil {
				return apperr.Invalid("%s", err.Error())
			}
			changed = string(cfg) != string(rec.Config)
			rec.Config = cfg
		}
		if creds != nil {
			old, err := s.open(rec)
			if err != nil {
				return apperr.Internal(err, "open credentials")
			}
			if creds.Token == "" && old.Token != "" && creds.ExternalID != "" { // a connect after OAuth
				creds.Token, creds.RefreshToken, creds.Expiry = old.Token, old.RefreshToken, old.Expiry
				if creds.TeamID == "" {
					creds.TeamID = old.TeamID
				}
			}
			if creds.Token == "" && creds.ClientSecret == "" {
				return apperr.Invalid("the credentials need a token (or, for a client-credentials grant, client_id and client_secret)")
			}
			if rec.Credentials, err = s.seal(*creds); err != nil {
				return apperr.Internal(err, "seal credentials")
			}
			rec.ExternalID, rec.State, rec.LastError, changed = creds.ExternalID, api.IntegrationPending, "", true
		}
		rec.UpdatedAt = now
		if changed && len(rec.Credentials) > 0 {
			if job, err = s.enqueue(tx, rec, JobSync, rec.ID, syncPayload{IntegrationID: rec.ID}); err != nil {
				return err
			}
		}
		if err := store.Integrations.Put(tx, rec); err != nil {
			return apperr.Internal(err, "store integration")
		}
		md := map[string]any{"provider": name, "integration_id": rec.ID, "credentials_stored": creds != nil}
		if job != nil {
			md["job_id"] = job.ID
		}
		return s.host.Audit(tx, p, action, rec.OrganizationID, rec.ProjectID, md)
	})
	if err != nil {
		return nil, nil, err
	}
	return rec, job, nil
}

// Delete is DELETE …/integrations/{provider}: a job removes what the integration pushed (best effort,
// reported in its result), then the record and its credentials are gone.
func (s *Service) Delete(ctx context.Context, p *authz.Principal, projectID, name string) (*api.IntegrationDeletedResponse, error) {
	if _, err := s.providerOf(name); err != nil && apperr.KindOf(err) == apperr.KindInvalid {
		return nil, err
	}
	var job *store.Job
	err := s.db.Update(func(tx *store.Tx) error {
		if _, err := s.host.VisibleProject(tx, p, projectID); err != nil {
			return err
		}
		rec, err := find(tx, projectID, name)
		if err != nil {
			return apperr.Internal(err, "read integration")
		}
		if rec == nil {
			return apperr.NotFound("project %s has no %s integration", projectID, name)
		}
		if rec.State == api.IntegrationDisconnecting {
			return apperr.Conflict("the %s integration is being disconnected already", name)
		}
		if _, ok := s.providers[name]; ok && len(rec.Credentials) > 0 {
			rec.State, rec.UpdatedAt = api.IntegrationDisconnecting, s.now()
			if job, err = s.enqueue(tx, rec, JobRemove, rec.ID, syncPayload{IntegrationID: rec.ID}); err != nil {
				return err
			}
			if err := store.Integrations.Put(tx, rec); err != nil {
				return apperr.Internal(err, "store integration")
			}
		} else if err := s.forget(tx, rec); err != nil {
			return err
		}
		md := map[string]any{"provider": name, "integration_id": rec.ID}
		if job != nil {
			md["job_id"] = job.ID
		}
		return s.host.Audit(tx, p, "integration.delete", rec.OrganizationID, rec.ProjectID, md)
	})
	if err != nil {
		return nil, err
	}
	out := &api.IntegrationDeletedResponse{Deleted: true}
	if job != nil {
		jr, err := s.host.AnswerJob(job, nil)
		if err != nil {
			return nil, err
		}
		out.Job = jr.Job
	}
	return out, nil
}

// forget deletes the record (its sealed credentials with it) and tells integration.disconnected.
func (s *Service) forget(tx *store.Tx, rec *store.Integration) error {
	if err := store.Integrations.Delete(tx, rec.ID); err != nil {
		return apperr.Internal(err, "delete integration")
	}
	return s.host.AppendEvent(tx, EventDisconnected, rec.OrganizationID, rec.ProjectID, eventData(rec, nil))
}

// enqueue adds one of the area's jobs (5 attempts with the runner's backoff); the caller pokes the runner
// after the commit.
func (s *Service) enqueue(tx *store.Tx, rec *store.Integration, typ, lock string, payload any) (*store.Job, error) {
	b, err := json.Marshal(payload)
	if err != nil {
		return nil, apperr.Internal(err, "encode job payload")
	}
	j := &store.Job{Type: typ, OrganizationID: rec.OrganizationID, ProjectID: rec.ProjectID, LockedResource: "integration/" + lock,
		MaxAttempts: 5, Payload: b}
	if err := scheduler.Enqueue(tx, j); err != nil {
		return nil, apperr.Internal(err, "enqueue %s", typ)
	}
	return j, nil
}

// Repush enqueues, in tx, a sync of every active platform integration of the project: its password was
// rotated or a cutover swapped its data (the root's job end hook calls it).
func (s *Service) Repush(tx *store.Tx, projectID string) (int, error) {
	recs, err := store.Integrations.Lookup(tx, store.IntegrationsByProject, projectID, store.Query{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, rec := range recs {
		if _, ok := s.providers[rec.Provider].(provider.Platform); !ok || rec.State != api.IntegrationActive {
			continue
		}
		if _, err := s.enqueue(tx, rec, JobSync, rec.ID, syncPayload{IntegrationID: rec.ID}); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// ForgetProject deletes a deleted project's integrations, in tx (what they pushed stays at the
// providers: the project's URLs no longer work).
func (s *Service) ForgetProject(tx *store.Tx, projectID string) error {
	recs, err := store.Integrations.Lookup(tx, store.IntegrationsByProject, projectID, store.Query{})
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if err := store.Integrations.Delete(tx, rec.ID); err != nil {
			return err
		}
	}
	return nil
}

// eventData is the payload of the integration.* events.
func eventData(rec *store.Integration, extra map[string]any) map[string]any {
	d := map[string]any{"integration": view(rec)}
	for k, v := range extra {
		d[k] = v
	}
	return d
}
