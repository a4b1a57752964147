package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/outbound"
	"github.com/theappliance/appliance/store"
)

func (s *Service) endpointView(e *store.WebhookEndpoint) api.WebhookEndpoint {
	health := HealthHealthy
	switch {
	case !e.IsActive:
		health = HealthDisabled
	case e.ConsecutiveFailures >= s.opts.FailingAfter:
		health = HealthFailing
	}
	types := make([]api.EventType, 0, len(e.EventTypes))
	for _, t := range e.EventTypes {
		types = append(types, api.EventType(t))
	}
	return api.WebhookEndpoint{ID: e.ID, OrganizationID: e.OrganizationID, Description: e.Description, URL: e.URL,
		EventTypes: types, IsActive: e.IsActive, Health: health, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt}
}

// payloadOf reads a delivery's body (null when missing).
func payloadOf(tx *store.Tx, id string) (json.RawMessage, error) {
	p, err := store.WebhookPayloads.Get(tx, id)
	if errors.Is(err, store.ErrNotFound) {
		return json.RawMessage("null"), nil
	}
	if err != nil {
		return nil, apperr.Internal(err, "read delivery payload")
	}
	return p.Body, nil
}

// deleteDelivery removes a delivery and its payload.
func deleteDelivery(tx *store.Tx, id string) error {
	if err := store.WebhookPayloads.Delete(tx, id); err != nil {
		return err
	}
	return store.WebhookDeliveries.Delete(tx, id)
}

func deliveryView(d *store.WebhookDelivery, payload json.RawMessage) api.WebhookDelivery {
	hist := make([]api.WebhookAttempt, 0, len(d.History))
	for _, a := range d.History {
		hist = append(hist, api.WebhookAttempt(a))
	}
	return api.WebhookDelivery{ID: d.ID, EndpointID: d.EndpointID, OrganizationID: d.OrganizationID, EventType: d.EventType,
		State: d.State, Attempts: d.Attempts, MaxAttempts: d.MaxAttempts, ResponseStatus: d.ResponseStatus,
		LastError: d.LastError, Payload: payload, AttemptHistory: hist, CreatedAt: d.CreatedAt,
		DeliveredAt: d.DeliveredAt, NextAttemptAt: d.NextAttemptAt, UpdatedAt: d.UpdatedAt}
}

// checkEndpointURL validates a URL and puts its host under the outbound policy now (it is checked again
// at every attempt, after DNS). A name that does not resolve yet is accepted: its deliveries fail until
// it does.
func (s *Service) checkEndpointURL(ctx context.Context, raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	u, err := CheckURL(raw)
	if err != nil {
		return "", apperr.Invalid("%s", err.Error())
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	host := u.Hostname()
	if _, err := s.policy.Resolve(ctx, host, Port(u)); errors.Is(err, outbound.ErrRefused) {
		if _, lit := netip.ParseAddr(host); lit == nil {
			return "", apperr.Invalid("url: refused by the outbound policy: %s %s", host, outbound.Why(err))
		}
		return "", apperr.Invalid("url: refused by the outbound policy: %s resolves to an address that %s", host, outbound.Why(err))
	}
	return u.String(), nil
}

// checkEventTypes validates an endpoint's event type filter (names of the event table, Config.EventTypes).
func (s *Service) checkEventTypes(types []api.EventType) ([]string, error) {
	out := []string{}
	var unknown []string
	for _, et := range types {
		t := string(et)
		if !slices.Contains(s.eventTypes, t) {
			unknown = append(unknown, t)
			continue
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	if len(unknown) > 0 {
		return nil, apperr.Invalid("event_types: unknown event types: %s", strings.Join(unknown, ", "))
	}
	return out, nil
}

// checkAdmin checks what every endpoint change needs: the organization, the admin role (an endpoint
// receives every project's events), and no project-scoped key.
func checkAdmin(p *authz.Principal, orgID string) error {
	if err := p.CheckOrganization(orgID); err != nil {
		return err
	}
	if p.ProjectID != "" {
		return apperr.Forbidden("a project-scoped key cannot manage webhook endpoints")
	}
	return p.RequireAdminRole("managing webhook endpoints")
}

// orgEndpoint reads an endpoint of the organization (404 otherwise).
func orgEndpoint(tx *store.Tx, orgID, endpointID string) (*store.WebhookEndpoint, error) {
	ep, err := store.WebhookEndpoints.Get(tx, endpointID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && ep.OrganizationID != orgID) {
		return nil, apperr.NotFound("webhook endpoint %s not found", endpointID)
	}
	if err != nil {
		return nil, apperr.Internal(err, "read webhook endpoint")
	}
	return ep, nil
}

// ListEndpoints lists an organization's endpoints, newest first.
func (s *Service) ListEndpoints(ctx context.Context, p *authz.Principal, orgID string) (*api.WebhookEndpointList, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	out := &api.WebhookEndpointList{WebhookEndpoints: []api.WebhookEndpoint{}}
	err := s.db.View(func(tx *store.Tx) error {
		if _, err := store.Organizations.Get(tx, orgID); err != nil {
			return apperr.NotFoundAs(err, "organization %s not found", orgID)
		}
		eps, err := store.WebhookEndpoints.Lookup(tx, store.WebhookEndpointsByOrg, orgID, store.Query{Newest: true})
		if err != nil {
			return apperr.Internal(err, "list webhook endpoints")
		}
		for _, e := range eps {
			out.WebhookEndpoints = append(out.WebhookEndpoints, s.endpointView(e))
		}
		return nil
	})
	return out, err
}

// CreateEndpoint registers an endpoint; its signing secret is in the result only.
func (s *Service) CreateEndpoint(ctx context.Context, p *authz.Principal, orgID string, req *api.CreateWebhookEndpointRequest) (*api.WebhookEndpointWithSecret, error) {
	if err := checkAdmin(p, orgID); err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.URL) == "" {
		return nil, apperr.Invalid("url is required")
	}
	desc := strings.TrimSpace(req.Description)
	if err := s.host.CheckDisplayText("description", desc, 0, 500); err != nil {
		return nil, err
	}
	types, err := s.checkEventTypes(req.EventTypes)
	if err != nil {
		return nil, err
	}
	u, err := s.checkEndpointURL(ctx, req.URL)
	if err != nil {
		return nil, err
	}
	secret := NewSecret()
	now := s.now()
	ep := &store.WebhookEndpoint{ID: ids.New("whe"), OrganizationID: orgID, URL: u, Description: desc, EventTypes: types,
		IsActive: req.IsActive == nil || *req.IsActive, SealedSecret: s.box.Seal([]byte(secret)), CreatedAt: now, UpdatedAt: now}
	var out *api.WebhookEndpointWithSecret
	err = s.db.Update(func(tx *store.Tx) error {
		if _, err := store.Organizations.Get(tx, orgID); err != nil {
			return apperr.NotFoundAs(err, "organization %s not found", orgID)
		}
		if err := store.WebhookEndpoints.Put(tx, ep); err != nil {
			return apperr.Internal(err, "store webhook endpoint")
		}
		out = &api.WebhookEndpointWithSecret{WebhookEndpoint: s.endpointView(ep), PlaintextSecret: secret}
		return s.host.Audit(tx, p, "webhook_endpoint.create", orgID, "", map[string]any{"webhook_endpoint_id": ep.ID, "url": ep.URL, "event_types": types})
	})
	return out, err
}

// PatchEndpoint changes an endpoint.
func (s *Service) PatchEndpoint(ctx context.Context, p *authz.Principal, orgID, endpointID string, req *api.PatchWebhookEndpointRequest) (*api.WebhookEndpointResult, error) {
	if err := checkAdmin(p, orgID); err != nil {
		return nil, err
	}
	var newURL, desc string
	var types []string
	var err error
	if req.URL != nil {
		if newURL, err = s.checkEndpointURL(ctx, *req.URL); err != nil {
			return nil, err
		}
	}
	if req.Description != nil {
		desc = strings.TrimSpace(*req.Description)
		if err := s.host.CheckDisplayText("description", desc, 0, 500); err != nil {
			return nil, err
		}
	}
	if req.EventTypes != nil {
		if types, err = s.checkEventTypes(*req.EventTypes); err != nil {
			return nil, err
		}
	}
	var out *api.WebhookEndpointResult
	err = s.db.Update(func(tx *store.Tx) error {
		ep, err := orgEndpoint(tx, orgID, endpointID)
		if err != nil {
			return err
		}
		changed := map[string]any{}
		if req.URL != nil {
			ep.URL, changed["url"] = newURL, newURL
		}
		if req.Description != nil {
			ep.Description, changed["description"] = desc, desc
		}
		if req.EventTypes != nil {
			ep.EventTypes, changed["event_types"] = types, types
		}
		ep.UpdatedAt = s.now()
		if req.IsActive != nil && *req.IsActive != ep.IsActive {
			changed["is_active"] = *req.IsActive
			if *req.IsActive {
				ep.IsActive, ep.DisabledReason, ep.ConsecutiveFailures, ep.FailingSince = true, "", 0, nil
			} else if err := s.disableEndpoint(tx, ep, "disabled through the API"); err != nil {
				return err
			}
		}
		if err := store.WebhookEndpoints.Put(tx, ep); err != nil {
			return apperr.Internal(err, "store webhook endpoint")
		}
		out = &api.WebhookEndpointResult{WebhookEndpoint: s.endpointView(ep)}
		return s.host.Audit(tx, p, "webhook_endpoint.update", orgID, "", map[string]any{"webhook_endpoint_id": ep.ID, "changed": changed})
	})
	return out, err
}

// DeleteEndpoint removes an endpoint and its deliveries.
func (s *Service) DeleteEndpoint(ctx context.Context, p *authz.Principal, orgID, endpointID string) (*api.DeletedResponse, error) {
	if err := checkAdmin(p, orgID); err != nil {
		return nil, err
	}
	err := s.db.Update(func(tx *store.Tx) error {
		ep, err := orgEndpoint(tx, orgID, endpointID)
		if err != nil {
			return err
		}
		ds, err := store.WebhookDeliveries.Lookup(tx, store.WebhookDeliveriesByEndpoint, ep.ID, store.Query{})
		if err != nil {
			return apperr.Internal(err, "read deliveries")
		}
		for _, d := range ds {
			if err := deleteDelivery(tx, d.ID); err != nil {
				return apperr.Internal(err, "delete delivery")
			}
		}
		if err := store.WebhookEndpoints.Delete(tx, ep.ID); err != nil {
			return apperr.Internal(err, "delete webhook endpoint")
		}
		return s.host.Audit(tx, p, "webhook_endpoint.delete", orgID, "", map[string]any{"webhook_endpoint_id": ep.ID, "url": ep.URL})
	})
	if err != nil {
		return nil, err
	}
	return &api.DeletedResponse{Deleted: true}, nil
}

// RotateSecret issues a new signing secret, returned once.
func (s *Service) RotateSecret(ctx context.Context, p *authz.Principal, orgID, endpointID string) (*api.WebhookEndpointWithSecret, error) {
	if err := checkAdmin(p, orgID); err != nil {
		return nil, err
	}
	secret := NewSecret()
	var out *api.WebhookEndpointWithSecret
	err := s.db.Update(func(tx *store.Tx) error {
		ep, err := orgEndpoint(tx, orgID, endpointID)
		if err != nil {
			return err
		}
		now := s.now()
		ep.SealedPrevious, ep.PreviousUntil = ep.SealedSecret, ptr(now.Add(SecretOverlap))
		ep.SealedSecret, ep.UpdatedAt = s.box.Seal([]byte(secret)), now
		if err := store.WebhookEndpoints.Put(tx, ep); err != nil {
			return apperr.Internal(err, "store webhook endpoint")
		}
		out = &api.WebhookEndpointWithSecret{WebhookEndpoint: s.endpointView(ep), PlaintextSecret: secret}
		return s.host.Audit(tx, p, "webhook_endpoint.rotate_secret", orgID, "", map[string]any{"webhook_endpoint_id": ep.ID})
	})
	return out, err
}

// ListDeliveries lists an endpoint's deliveries, newest first.
func (s *Service) ListDeliveries(ctx context.Context, p *authz.Principal, orgID, endpointID string, limit int) (*api.WebhookDeliveryList, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	out := &api.WebhookDeliveryList{Deliveries: []api.WebhookDelivery{}}
	err := s.db.View(func(tx *store.Tx) error {
		if _, err := orgEndpoint(tx, orgID, endpointID); err != nil {
			return err
		}
		ds, err := store.WebhookDeliveries.Lookup(tx, store.WebhookDeliveriesByEndpoint, endpointID, store.Query{Newest: true, Limit: limit})
		if err != nil {
			return apperr.Internal(err, "list deliveries")
		}
		for _, d := range ds {
			payload, err := payloadOf(tx, d.ID)
			if err != nil {
				return err
			}
			out.Deliveries = append(out.Deliveries, deliveryView(d, payload))
		}
		return nil
	})
	return out, err
}

// sendingOn runs fn in a transaction on an active endpoint of the organization, for the actions that send
// (test, redeliver): the admin checks, 404 for an endpoint of another organization, 409 when disabled.
func (s *Service) sendingOn(p *authz.Principal, orgID, endpointID string, fn func(tx *store.Tx, ep *store.WebhookEndpoint) error) error {
	if err := checkAdmin(p, orgID); err != nil {
		return err
	}
	return s.db.Update(func(tx *store.Tx) error {
		ep, err := orgEndpoint(tx, orgID, endpointID)
		if err != nil {
			return err
		}
		if !ep.IsActive {
			return apperr.Conflict("webhook endpoint %s is disabled; set is_active to true first", ep.ID)
		}
		return fn(tx, ep)
	})
}

// TestEndpoint queues a signed webhook.test delivery to the endpoint.
func (s *Service) TestEndpoint(ctx context.Context, p *authz.Principal, orgID, endpointID string) (*api.WebhookDeliveryResult, error) {
	var out *api.WebhookDeliveryResult
	err := s.sendingOn(p, orgID, endpointID, func(tx *store.Tx, ep *store.WebhookEndpoint) error {
		body, err := eventBody("webhook.test", s.now(), map[string]any{"webhook_endpoint_id": ep.ID, "organization_id": orgID})
		if err != nil {
			return apperr.Internal(err, "encode test event")
		}
		d, err := s.queueDelivery(tx, ep, "webhook.test", 0, body)
		if err != nil {
			return err
		}
		out = &api.WebhookDeliveryResult{Delivery: deliveryView(d, body)}
		return s.host.Audit(tx, p, "webhook_endpoint.test", orgID, "", map[string]any{"webhook_endpoint_id": ep.ID, "delivery_id": d.ID})
	})
	return out, err
}

// Redeliver sends a recorded delivery again as a new attempt (the same webhook-id).
func (s *Service) Redeliver(ctx context.Context, p *authz.Principal, orgID, endpointID, deliveryID string) (*api.WebhookDeliveryResult, error) {
	var out *api.WebhookDeliveryResult
	err := s.sendingOn(p, orgID, endpointID, func(tx *store.Tx, ep *store.WebhookEndpoint) error {
		d, err := store.WebhookDeliveries.Get(tx, deliveryID)
		if errors.Is(err, store.ErrNotFound) || (err == nil && (d.EndpointID != ep.ID || d.OrganizationID != orgID)) {
			return apperr.NotFound("delivery %s not found", deliveryID)
		}
		if err != nil {
			return apperr.Internal(err, "read delivery")
		}
		if d.State == DeliveryPending {
			return apperr.Conflict("delivery %s is pending: its next attempt is already queued", d.ID)
		}
		now := s.now()
		d.State, d.MaxAttempts, d.NextAttemptAt, d.UpdatedAt = DeliveryPending, d.Attempts+1, &now, now
		if err := store.WebhookDeliveries.Put(tx, d); err != nil {
			return apperr.Internal(err, "store delivery")
		}
		tx.OnCommit(s.worker.Poke)
		payload, err := payloadOf(tx, d.ID)
		if err != nil {
			return err
		}
		out = &api.WebhookDeliveryResult{Delivery: deliveryView(d, payload)}
		return s.host.Audit(tx, p, "webhook_delivery.redeliver", orgID, "", map[string]any{"webhook_endpoint_id": ep.ID, "delivery_id": d.ID})
	})
	return out, err
}
