package appliance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/theappliance/appliance/appliance/batch"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/outbound"
	"github.com/theappliance/appliance/appliance/webhook"
	"github.com/theappliance/appliance/store"
)

// WebhookOptions tune deliveries; DefaultWebhookOptions are what the appliance runs with (tests shorten
// the schedule).
type WebhookOptions = webhook.Options

// DefaultWebhookOptions: Svix's schedule and its rule of disabling an endpoint after 5 days of failures.
var DefaultWebhookOptions = webhook.DefaultOptions

// Delivery states and endpoint health.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"

	HealthHealthy  = "healthy"
	HealthFailing  = "failing"
	HealthDisabled = "disabled"
)

// DeliveryRetention is how long ended deliveries are kept.
const DeliveryRetention = 30 * 24 * time.Hour

// webhooks is the delivery machinery of a service: the worker (package webhook), which claims and makes
// the attempts, and the recorder of their outcomes while it runs.
type webhooks struct {
	opts   WebhookOptions
	worker *webhook.Worker[*store.WebhookEndpoint]

	mu sync.Mutex // StartWebhooks and StopWebhooks
	// recorder writes attempts' outcomes while the worker runs; recorded is closed when it ended.
	recorder *batch.Writer[outcome]
	recorded chan struct{}
}

func (s *Service) newWebhooks(o WebhookOptions) *webhooks {
	h := &webhooks{opts: o}
	h.worker = webhook.NewWorker(o, deliveryStore{s, h}, s.policy().DialContext, s.now, s.log, s.lane)
	return h
}

// policy is the outbound destination policy of tenant connections.
func (s *Service) policy() *outbound.Policy {
	if s.cfg.Outbound == nil {
		return &outbound.Policy{}
	}
	return s.cfg.Outbound
}

func (h *webhooks) poke() { h.worker.Poke() }

func (s *Service) endpointView(e *store.WebhookEndpoint) WebhookEndpoint {
	health := HealthHealthy
	switch {
	case !e.IsActive:
		health = HealthDisabled
	case e.ConsecutiveFailures >= s.hooks.opts.FailingAfter:
		health = HealthFailing
	}
	types := e.EventTypes
	if types == nil {
		types = []string{}
	}
	return WebhookEndpoint{ID: e.ID, OrganizationID: e.OrganizationID, Description: e.Description, URL: e.URL,
		EventTypes: types, IsActive: e.IsActive, Health: health, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt}
}

// payloadOf reads a delivery's body (null when missing).
func payloadOf(tx *store.Tx, id string) (json.RawMessage, error) {
	p, err := store.WebhookPayloads.Get(tx, id)
	if errors.Is(err, store.ErrNotFound) {
		return json.RawMessage("null"), nil
	}
	if err != nil {
		return nil, Internal(err, "read delivery payload")
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

func deliveryView(d *store.WebhookDelivery, payload json.RawMessage) WebhookDelivery {
	hist := make([]WebhookAttempt, 0, len(d.History))
	for _, a := range d.History {
		hist = append(hist, WebhookAttempt(a))
	}
	return WebhookDelivery{ID: d.ID, EndpointID: d.EndpointID, OrganizationID: d.OrganizationID, EventType: d.EventType,
		State: d.State, Attempts: d.Attempts, MaxAttempts: d.MaxAttempts, ResponseStatus: d.ResponseStatus,
		LastError: d.LastError, Payload: payload, AttemptHistory: hist, CreatedAt: d.CreatedAt,
		DeliveredAt: d.DeliveredAt, NextAttemptAt: d.NextAttemptAt, UpdatedAt: d.UpdatedAt}
}

// checkWebhookURL validates a URL and puts its host under the outbound policy now (it is checked again
// at every attempt, after DNS). A name that does not resolve yet is accepted: its deliveries fail until
// it does.
func (s *Service) checkWebhookURL(ctx context.Context, raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	u, err := webhook.CheckURL(raw)
	if err != nil {
		return "", Invalid("%s", err.Error())
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	host := u.Hostname()
	if _, err := s.policy().Resolve(ctx, host, webhook.Port(u)); errors.Is(err, outbound.ErrRefused) {
		if _, lit := netip.ParseAddr(host); lit == nil {
			return "", Invalid("url: refused by the outbound policy: %s %s", host, outbound.Why(err))
		}
		return "", Invalid("url: refused by the outbound policy: %s resolves to an address that %s", host, outbound.Why(err))
	}
	return u.String(), nil
}

// checkEventTypes validates an endpoint's event type filter (names of the event table).
func checkEventTypes(types []string) ([]string, error) {
	out := []string{}
	var unknown []string
	for _, t := range types {
		if !slices.ContainsFunc(EventTypes, func(e EventType) bool { return e.Name == t }) {
			unknown = append(unknown, t)
			continue
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	if len(unknown) > 0 {
		return nil, Invalid("event_types: unknown event types: %s", strings.Join(unknown, ", "))
	}
	return out, nil
}

// webhookAdmin checks what every endpoint change needs: the organization, the admin role (an endpoint
// receives every project's events), and no project-scoped key.
func webhookAdmin(p *Principal, orgID string) error {
	if err := p.CheckOrganization(orgID); err != nil {
		return err
	}
	if p.ProjectID != "" {
		return Forbidden("a project-scoped key cannot manage webhook endpoints")
	}
	return p.RequireAdminRole("managing webhook endpoints")
}

// orgEndpoint reads an endpoint of the organization (404 otherwise).
func orgEndpoint(tx *store.Tx, orgID, endpointID string) (*store.WebhookEndpoint, error) {
	ep, err := store.WebhookEndpoints.Get(tx, endpointID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && ep.OrganizationID != orgID) {
		return nil, NotFound("webhook endpoint %s not found", endpointID)
	}
	if err != nil {
		return nil, Internal(err, "read webhook endpoint")
	}
	return ep, nil
}

// ListWebhookEndpoints lists an organization's endpoints, newest first.
func (s *Service) ListWebhookEndpoints(ctx context.Context, p *Principal, orgID string) (*WebhookEndpointList, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	out := &WebhookEndpointList{WebhookEndpoints: []WebhookEndpoint{}}
	err := s.db.View(func(tx *store.Tx) error {
		if _, err := store.Organizations.Get(tx, orgID); err != nil {
			return notFoundAs(err, "organization %s not found", orgID)
		}
		eps, err := store.WebhookEndpoints.Lookup(tx, store.WebhookEndpointsByOrg, orgID, store.Query{Newest: true})
		if err != nil {
			return Internal(err, "list webhook endpoints")
		}
		for _, e := range eps {
			out.WebhookEndpoints = append(out.WebhookEndpoints, s.endpointView(e))
		}
		return nil
	})
	return out, err
}

// CreateWebhookEndpoint registers an endpoint; its signing secret is in the result only.
func (s *Service) CreateWebhookEndpoint(ctx context.Context, p *Principal, orgID string, req *CreateWebhookEndpointRequest) (*WebhookEndpointWithSecret, error) {
	if err := webhookAdmin(p, orgID); err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.URL) == "" {
		return nil, Invalid("url is required")
	}
	desc := strings.TrimSpace(req.Description)
	if err := checkDisplayText("description", desc, 0, 500); err != nil {
		return nil, err
	}
	types, err := checkEventTypes(req.EventTypes)
	if err != nil {
		return nil, err
	}
	u, err := s.checkWebhookURL(ctx, req.URL)
	if err != nil {
		return nil, err
	}
	secret := webhook.NewSecret()
	now := s.now()
	ep := &store.WebhookEndpoint{ID: ids.New("whe"), OrganizationID: orgID, URL: u, Description: desc, EventTypes: types,
		IsActive: req.IsActive == nil || *req.IsActive, SealedSecret: s.box.Seal([]byte(secret)), CreatedAt: now, UpdatedAt: now}
	var out *WebhookEndpointWithSecret
	err = s.db.Update(func(tx *store.Tx) error {
		if _, err := store.Organizations.Get(tx, orgID); err != nil {
			return notFoundAs(err, "organization %s not found", orgID)
		}
		if err := store.WebhookEndpoints.Put(tx, ep); err != nil {
			return Internal(err, "store webhook endpoint")
		}
		out = &WebhookEndpointWithSecret{WebhookEndpoint: s.endpointView(ep), PlaintextSecret: secret}
		return s.audit(tx, p, "webhook_endpoint.create", orgID, "", map[string]any{"webhook_endpoint_id": ep.ID, "url": ep.URL, "event_types": types})
	})
	return out, err
}

// PatchWebhookEndpoint changes an endpoint.
func (s *Service) PatchWebhookEndpoint(ctx context.Context, p *Principal, orgID, endpointID string, req *PatchWebhookEndpointRequest) (*WebhookEndpointResult, error) {
	if err := webhookAdmin(p, orgID); err != nil {
		return nil, err
	}
	var newURL, desc string
	var types []string
	var err error
	if req.URL != nil {
		if newURL, err = s.checkWebhookURL(ctx, *req.URL); err != nil {
			return nil, err
		}
	}
	if req.Description != nil {
		desc = strings.TrimSpace(*req.Description)
		if err := checkDisplayText("description", desc, 0, 500); err != nil {
			return nil, err
		}
	}
	if req.EventTypes != nil {
		if types, err = checkEventTypes(*req.EventTypes); err != nil {
			return nil, err
		}
	}
	var out *WebhookEndpointResult
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
			return Internal(err, "store webhook endpoint")
		}
		out = &WebhookEndpointResult{WebhookEndpoint: s.endpointView(ep)}
		return s.audit(tx, p, "webhook_endpoint.update", orgID, "", map[string]any{"webhook_endpoint_id": ep.ID, "changed": changed})
	})
	return out, err
}

// DeleteWebhookEndpoint removes an endpoint and its deliveries.
func (s *Service) DeleteWebhookEndpoint(ctx context.Context, p *Principal, orgID, endpointID string) (*DeletedResponse, error) {
	if err := webhookAdmin(p, orgID); err != nil {
		return nil, err
	}
	err := s.db.Update(func(tx *store.Tx) error {
		ep, err := orgEndpoint(tx, orgID, endpointID)
		if err != nil {
			return err
		}
		ds, err := store.WebhookDeliveries.Lookup(tx, store.WebhookDeliveriesByEndpoint, ep.ID, store.Query{})
		if err != nil {
			return Internal(err, "read deliveries")
		}
		for _, d := range ds {
			if err := deleteDelivery(tx, d.ID); err != nil {
				return Internal(err, "delete delivery")
			}
		}
		if err := store.WebhookEndpoints.Delete(tx, ep.ID); err != nil {
			return Internal(err, "delete webhook endpoint")
		}
		return s.audit(tx, p, "webhook_endpoint.delete", orgID, "", map[string]any{"webhook_endpoint_id": ep.ID, "url": ep.URL})
	})
	if err != nil {
		return nil, err
	}
	return &DeletedResponse{Deleted: true}, nil
}

// SecretOverlap is how long the previous signing secret keeps signing deliveries after a rotation
// (beside the new one), so receivers can switch without losing a delivery.
const SecretOverlap = 24 * time.Hour

// RotateWebhookSecret issues a new signing secret, returned once.
func (s *Service) RotateWebhookSecret(ctx context.Context, p *Principal, orgID, endpointID string) (*WebhookEndpointWithSecret, error) {
	if err := webhookAdmin(p, orgID); err != nil {
		return nil, err
	}
	secret := webhook.NewSecret()
	var out *WebhookEndpointWithSecret
	err := s.db.Update(func(tx *store.Tx) error {
		ep, err := orgEndpoint(tx, orgID, endpointID)
		if err != nil {
			return err
		}
		now := s.now()
		ep.SealedPrevious, ep.PreviousUntil = ep.SealedSecret, ptr(now.Add(SecretOverlap))
		ep.SealedSecret, ep.UpdatedAt = s.box.Seal([]byte(secret)), now
		if err := store.WebhookEndpoints.Put(tx, ep); err != nil {
			return Internal(err, "store webhook endpoint")
		}
		out = &WebhookEndpointWithSecret{WebhookEndpoint: s.endpointView(ep), PlaintextSecret: secret}
		return s.audit(tx, p, "webhook_endpoint.rotate_secret", orgID, "", map[string]any{"webhook_endpoint_id": ep.ID})
	})
	return out, err
}

// ListWebhookDeliveries lists an endpoint's deliveries, newest first.
func (s *Service) ListWebhookDeliveries(ctx context.Context, p *Principal, orgID, endpointID string, limit int) (*WebhookDeliveryList, error) {
	if err := p.CheckOrganization(orgID); err != nil {
		return nil, err
	}
	out := &WebhookDeliveryList{Deliveries: []WebhookDelivery{}}
	err := s.db.View(func(tx *store.Tx) error {
		if _, err := orgEndpoint(tx, orgID, endpointID); err != nil {
			return err
		}
		ds, err := store.WebhookDeliveries.Lookup(tx, store.WebhookDeliveriesByEndpoint, endpointID, store.Query{Newest: true, Limit: limit})
		if err != nil {
			return Internal(err, "list deliveries")
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
func (s *Service) sendingOn(p *Principal, orgID, endpointID string, fn func(tx *store.Tx, ep *store.WebhookEndpoint) error) error {
	if err := webhookAdmin(p, orgID); err != nil {
		return err
	}
	return s.db.Update(func(tx *store.Tx) error {
		ep, err := orgEndpoint(tx, orgID, endpointID)
		if err != nil {
			return err
		}
		if !ep.IsActive {
			return Conflict("webhook endpoint %s is disabled; set is_active to true first", ep.ID)
		}
		return fn(tx, ep)
	})
}

// TestWebhookEndpoint queues a signed webhook.test delivery to the endpoint.
func (s *Service) TestWebhookEndpoint(ctx context.Context, p *Principal, orgID, endpointID string) (*WebhookDeliveryResult, error) {
	var out *WebhookDeliveryResult
	err := s.sendingOn(p, orgID, endpointID, func(tx *store.Tx, ep *store.WebhookEndpoint) error {
		body, err := eventBody("webhook.test", s.now(), map[string]any{"webhook_endpoint_id": ep.ID, "organization_id": orgID})
		if err != nil {
			return Internal(err, "encode test event")
		}
		d, err := s.queueDelivery(tx, ep, "webhook.test", 0, body)
		if err != nil {
			return err
		}
		out = &WebhookDeliveryResult{Delivery: deliveryView(d, body)}
		return s.audit(tx, p, "webhook_endpoint.test", orgID, "", map[string]any{"webhook_endpoint_id": ep.ID, "delivery_id": d.ID})
	})
	return out, err
}

// RedeliverWebhook sends a recorded delivery again as a new attempt (the same webhook-id).
func (s *Service) RedeliverWebhook(ctx context.Context, p *Principal, orgID, endpointID, deliveryID string) (*WebhookDeliveryResult, error) {
	var out *WebhookDeliveryResult
	err := s.sendingOn(p, orgID, endpointID, func(tx *store.Tx, ep *store.WebhookEndpoint) error {
		d, err := store.WebhookDeliveries.Get(tx, deliveryID)
		if errors.Is(err, store.ErrNotFound) || (err == nil && (d.EndpointID != ep.ID || d.OrganizationID != orgID)) {
			return NotFound("delivery %s not found", deliveryID)
		}
		if err != nil {
			return Internal(err, "read delivery")
		}
		if d.State == DeliveryPending {
			return Conflict("delivery %s is pending: its next attempt is already queued", d.ID)
		}
		now := s.now()
		d.State, d.MaxAttempts, d.NextAttemptAt, d.UpdatedAt = DeliveryPending, d.Attempts+1, &now, now
		if err := store.WebhookDeliveries.Put(tx, d); err != nil {
			return Internal(err, "store delivery")
		}
		tx.OnCommit(s.hooks.poke)
		payload, err := payloadOf(tx, d.ID)
		if err != nil {
			return err
		}
		out = &WebhookDeliveryResult{Delivery: deliveryView(d, payload)}
		return s.audit(tx, p, "webhook_delivery.redeliver", orgID, "", map[string]any{"webhook_endpoint_id": ep.ID, "delivery_id": d.ID})
	})
	return out, err
}

// eventBody is the JSON body of a delivery: {type, timestamp, data}.
func eventBody(typ string, at time.Time, data any) (json.RawMessage, error) {
	return json.Marshal(struct {
		Type      string    `json:"type"`
		Timestamp time.Time `json:"timestamp"`
		Data      any       `json:"data"`
	}{typ, at, data})
}

// fanOut queues a delivery of e to every active endpoint of its organization that takes its type,
// in the transaction that appends e.
func (s *Service) fanOut(tx *store.Tx, e *store.Event) error {
	if e.OrganizationID == "" {
		return nil
	}
	eps, err := store.WebhookEndpoints.Lookup(tx, store.WebhookEndpointsByOrg, e.OrganizationID, store.Query{})
	if err != nil || len(eps) == 0 {
		return err
	}
	var body json.RawMessage
	for _, ep := range eps {
		if !ep.IsActive || (len(ep.EventTypes) > 0 && !slices.Contains(ep.EventTypes, e.Type)) {
			continue
		}
		if body == nil {
			if body, err = eventBody(e.Type, e.CreatedAt, e.Data); err != nil {
				return err
			}
		}
		if _, err := s.queueDelivery(tx, ep, e.Type, e.Seq, body); err != nil {
			return err
		}
	}
	return nil
}

// queueDelivery stores a pending delivery due now; the worker is poked when tx commits.
func (s *Service) queueDelivery(tx *store.Tx, ep *store.WebhookEndpoint, typ string, seq uint64, body json.RawMessage) (*store.WebhookDelivery, error) {
	now := s.now()
	d := &store.WebhookDelivery{ID: ids.New("msg"), EndpointID: ep.ID, OrganizationID: ep.OrganizationID, EventType: typ,
		EventSeq: seq, State: DeliveryPending, MaxAttempts: s.hooks.opts.MaxAttempts(),
		NextAttemptAt: &now, CreatedAt: now, UpdatedAt: now}
	if err := store.WebhookDeliveries.Put(tx, d); err != nil {
		return nil, Internal(err, "store delivery")
	}
	if err := store.WebhookPayloads.Put(tx, &store.WebhookPayload{ID: d.ID, Body: body}); err != nil {
		return nil, Internal(err, "store delivery payload")
	}
	tx.OnCommit(s.hooks.poke)
	return d, nil
}

// disableEndpoint stops an endpoint inside tx: its pending deliveries fail (they can be redelivered once
// it is active again) and webhook_endpoint.disabled is appended. The caller stores ep.
func (s *Service) disableEndpoint(tx *store.Tx, ep *store.WebhookEndpoint, reason string) error {
	now := s.now()
	ep.IsActive, ep.DisabledReason, ep.UpdatedAt = false, reason, now
	if err := store.WebhookEndpoints.Put(tx, ep); err != nil {
		return Internal(err, "store webhook endpoint")
	}
	ds, err := store.WebhookDeliveries.Lookup(tx, store.WebhookDeliveriesByEndpoint, ep.ID, store.Query{})
	if err != nil {
		return Internal(err, "read deliveries")
	}
	for _, d := range ds {
		if d.State != DeliveryPending {
			continue
		}
		d.State, d.NextAttemptAt, d.ClaimedAt, d.UpdatedAt = DeliveryFailed, nil, nil, now
		d.LastError = "endpoint disabled: " + reason
		if err := store.WebhookDeliveries.Put(tx, d); err != nil {
			return Internal(err, "store delivery")
		}
	}
	return s.appendEvent(tx, "webhook_endpoint.disabled", ep.OrganizationID, "",
		WebhookDisabledEvent{WebhookEndpoint: s.endpointView(ep), Reason: reason})
}

// WebhookDisabledEvent is the data of webhook_endpoint.disabled.
type WebhookDisabledEvent struct {
	WebhookEndpoint WebhookEndpoint `json:"webhook_endpoint"`
	Reason          string          `json:"reason"`
}

// StartWebhooks starts the delivery worker (package webhook) and the recorder of its attempts' outcomes:
// outcomes that arrive together share a commit, in the background lane.
func (s *Service) StartWebhooks(ctx context.Context) error {
	h := s.hooks
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.recorder != nil {
		return errors.New("webhooks: already started")
	}
	h.recorder = batch.New(s.db, s.lane, 256, 0, 0, s.log, "webhook attempt outcomes",
		func(tx *store.Tx, o outcome) error { return s.applyAttempt(tx, o.id, o.res, s.now()) })
	h.recorded = make(chan struct{})
	go func() { defer close(h.recorded); h.recorder.Run() }()
	if err := h.worker.Start(ctx); err != nil {
		h.recorder.Close()
		<-h.recorded
		return err
	}
	return nil
}

// StopWebhooks stops the worker (attempts under way are cut short and stay due), then the recorder once
// the attempts recorded. It is idempotent.
func (s *Service) StopWebhooks(ctx context.Context) error {
	h := s.hooks
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.worker.Stop(ctx); err != nil {
		return err // attempts may still record: the recorder stays
	}
	if h.recorded != nil {
		select {
		case <-h.recorded:
		default:
			h.recorder.Close()
			<-h.recorded
		}
	}
	return nil
}

// deliveryStore is the delivery worker's view of the records (h: the machinery it records for).
type deliveryStore struct {
	s *Service
	h *webhooks
}

var _ webhook.Store[*store.WebhookEndpoint] = deliveryStore{}

// activeEndpoints are the endpoints deliveries are made to, decoded once per change of the endpoints'
// table (recording an attempt writes an endpoint only when its health changes).
func (s *Service) activeEndpoints(tx *store.Tx, version uint64) ([]*store.WebhookEndpoint, error) {
	if eps, ok := s.endpointCache.Get("active", version); ok {
		return eps, nil
	}
	eps, err := store.WebhookEndpoints.All(tx, func(e *store.WebhookEndpoint) bool { return e.IsActive })
	if err != nil {
		return nil, err
	}
	s.endpointCache.Put("active", version, eps)
	return eps, nil
}

// Due returns up to free due deliveries that held does not hold, respecting each endpoint's share, in a
// read transaction (a claim is the worker's record in memory). Endpoints take turns being served first
// (round robin), so a few with a backlog do not starve the rest.
func (st deliveryStore) Due(turn, free int, held webhook.Held) ([]webhook.Claim[*store.WebhookEndpoint], error) {
	s := st.s
	var out []webhook.Claim[*store.WebhookEndpoint]
	version := store.WebhookEndpoints.Version(s.db)
	err := s.db.View(func(tx *store.Tx) error {
		eps, err := s.activeEndpoints(tx, version)
		if err != nil || len(eps) == 0 {
			return err
		}
		due := store.DueKey(s.now().Add(time.Nanosecond))
		for i := range eps {
			ep := eps[(turn+i)%len(eps)]
			n := min(held.Room(ep.ID), free-len(out))
			if n <= 0 {
				continue
			}
			// Claimed deliveries may still be due (their outcome is being recorded): they are passed over.
			err := store.WebhookDeliveries.Scan(tx, store.WebhookDeliveriesDue, ep.ID+" ", ep.ID+" "+due, func(id string) (bool, error) {
				if held.Holds(id) {
					return true, nil
				}
				body, err := payloadOf(tx, id)
				if err != nil {
					return false, err
				}
				out = append(out, webhook.Claim[*store.WebhookEndpoint]{ID: id, EndpointID: ep.ID, URL: ep.URL, Endpoint: ep, Body: body})
				n--
				return n > 0, nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// ReleaseClaims makes the deliveries due now that a version which wrote its claims to the store left
// claimed (a claim now lives in memory only).
func (st deliveryStore) ReleaseClaims() error {
	s := st.s
	return s.db.Update(func(tx *store.Tx) error {
		ds, err := store.WebhookDeliveries.All(tx, func(d *store.WebhookDelivery) bool {
			return d.State == DeliveryPending && d.ClaimedAt != nil
		})
		if err != nil {
			return err
		}
		now := s.now()
		for _, d := range ds {
			d.ClaimedAt, d.NextAttemptAt = nil, &now
			if err := store.WebhookDeliveries.Put(tx, d); err != nil {
				return err
			}
		}
		return nil
	})
}

// Secrets opens the endpoint's signing secrets.
func (st deliveryStore) Secrets(ep *store.WebhookEndpoint) ([]string, error) {
	return st.s.signingSecrets(ep)
}

// Record hands an attempt's outcome to the recorder and waits until it is stored.
func (st deliveryStore) Record(deliveryID string, res webhook.Result) error {
	st.s.webhookAttemptMetric(res.OK(), res.Duration)
	return st.h.recorder.Write(outcome{deliveryID, res})
}

func (s *Service) signingSecrets(ep *store.WebhookEndpoint) ([]string, error) {
	cur, err := s.box.Open(ep.SealedSecret)
	if err != nil {
		return nil, err
	}
	out := []string{string(cur)}
	if ep.SealedPrevious != nil && ep.PreviousUntil != nil && s.now().Before(*ep.PreviousUntil) {
		if prev, err := s.box.Open(ep.SealedPrevious); err == nil {
			out = append(out, string(prev))
		}
	}
	return out, nil
}

// outcome is an attempt's result on its way to the store.
type outcome struct {
	id  string
	res webhook.Result
}

// applyAttempt stores an attempt's outcome in tx: delivered, or the next try by the schedule (or the
// receiver's Retry-After, whichever is later), or failed; and the endpoint's health. It reads everything it
// changes from tx, so running it again after a rollback records the attempt once.
func (s *Service) applyAttempt(tx *store.Tx, deliveryID string, res webhook.Result, now time.Time) error {
	d, err := store.WebhookDeliveries.Get(tx, deliveryID)
	if errors.Is(err, store.ErrNotFound) {
		return nil // the endpoint was deleted meanwhile
	}
	if err != nil {
		return err
	}
	ep, err := store.WebhookEndpoints.Get(tx, d.EndpointID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	o := s.hooks.opts
	d.Attempts++
	d.UpdatedAt, d.ResponseStatus = now, res.Status
	d.LastError = o.AttemptError(res)
	d.History = append(d.History, store.WebhookAttempt{At: now, ResponseStatus: res.Status, Error: d.LastError, DurationMS: res.Duration.Milliseconds()})
	if len(d.History) > 50 {
		d.History = d.History[len(d.History)-50:]
	}
	switch {
	case res.OK():
		d.State, d.DeliveredAt, d.NextAttemptAt = DeliveryDelivered, &now, nil
	case d.State != DeliveryPending || d.Attempts >= d.MaxAttempts || res.Status == 410:
		d.State, d.NextAttemptAt = DeliveryFailed, nil
	default:
		d.NextAttemptAt = ptr(now.Add(o.RetryWait(d.Attempts, res)))
	}
	if err := store.WebhookDeliveries.Put(tx, d); err != nil {
		return err
	}
	if res.OK() {
		if ep.ConsecutiveFailures == 0 && ep.FailingSince == nil {
			return nil // healthy already: the endpoint's record (and the cache of active ones) stays
		}
		ep.ConsecutiveFailures, ep.FailingSince = 0, nil
		return store.WebhookEndpoints.Put(tx, ep)
	}
	ep.ConsecutiveFailures++
	if ep.FailingSince == nil {
		ep.FailingSince = &now
	}
	switch {
	case !ep.IsActive:
	case res.Status == 410:
		return s.disableEndpoint(tx, ep, "the endpoint answered 410 Gone")
	case now.Sub(*ep.FailingSince) >= o.DisableAfter:
		return s.disableEndpoint(tx, ep, fmt.Sprintf("no attempt succeeded for %s", o.DisableAfter))
	}
	return store.WebhookEndpoints.Put(tx, ep)
}

// DeliveryRate is an organization's delivered / (delivered + failed) deliveries ended in the window; 1
// when none ended.
func (s *Service) deliveryRate(tx *store.Tx, orgID string, since time.Time) (float64, error) {
	ds, err := store.WebhookDeliveries.Lookup(tx, store.WebhookDeliveriesByOrg, orgID, store.Query{})
	if err != nil {
		return 0, err
	}
	var ok, failed int
	for _, d := range ds {
		if d.UpdatedAt.Before(since) {
			continue
		}
		switch d.State {
		case DeliveryDelivered:
			ok++
		case DeliveryFailed:
			failed++
		}
	}
	if ok+failed == 0 {
		return 1, nil
	}
	return float64(ok) / float64(ok+failed), nil
}

// sweepDeliveries deletes ended deliveries older than DeliveryRetention.
func (s *Service) sweepDeliveries(tx *store.Tx) (int, error) {
	cutoff := s.now().Add(-DeliveryRetention)
	old, err := store.WebhookDeliveries.All(tx, func(d *store.WebhookDelivery) bool {
		return d.State != DeliveryPending && d.UpdatedAt.Before(cutoff)
	})
	if err != nil {
		return 0, err
	}
	for _, d := range old {
		if err := deleteDelivery(tx, d.ID); err != nil {
			return 0, err
		}
	}
	return len(old), nil
}

// WebhookHealth is the webhook worker's component check (/status): down unless the worker runs; its
// message counts endpoints by health and the deliveries waiting. A tenant's failing receiver does not
// degrade the appliance.
func (s *Service) WebhookHealth(ctx context.Context) (status, message string) {
	if !s.hooks.worker.Running() {
		return StatusDown, "the delivery worker is not running"
	}
	var endpoints, failing, disabled, pending int
	err := s.db.View(func(tx *store.Tx) error {
		eps, err := store.WebhookEndpoints.All(tx, nil)
		if err != nil {
			return err
		}
		for _, e := range eps {
			endpoints++
			switch s.endpointView(e).Health {
			case HealthFailing:
				failing++
			case HealthDisabled:
				disabled++
			}
		}
		ds, err := store.WebhookDeliveries.Range(tx, store.WebhookDeliveriesDue, "", "\xff", 0)
		pending = len(ds)
		return err
	})
	if err != nil {
		return StatusDegraded, "cannot read webhook records: " + err.Error()
	}
	return StatusOperational, fmt.Sprintf("%d endpoints (%d failing, %d disabled), %d deliveries pending", endpoints, failing, disabled, pending)
}
