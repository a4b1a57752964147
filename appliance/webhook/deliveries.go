package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/batch"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/store"
)

// eventBody is the JSON body of a delivery: {type, timestamp, data}.
func eventBody(typ string, at time.Time, data any) (json.RawMessage, error) {
	return json.Marshal(struct {
		Type      string    `json:"type"`
		Timestamp time.Time `json:"timestamp"`
		Data      any       `json:"data"`
	}{typ, at, data})
}

// FanOut queues a delivery of e to every active endpoint of its organization that takes its type,
// in the transaction that appends e.
func (s *Service) FanOut(tx *store.Tx, e *store.Event) error {
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
		EventSeq: seq, State: DeliveryPending, MaxAttempts: s.opts.MaxAttempts(),
		NextAttemptAt: &now, CreatedAt: now, UpdatedAt: now}
	if err := store.WebhookDeliveries.Put(tx, d); err != nil {
		return nil, apperr.Internal(err, "store delivery")
	}
	if err := store.WebhookPayloads.Put(tx, &store.WebhookPayload{ID: d.ID, Body: body}); err != nil {
		return nil, apperr.Internal(err, "store delivery payload")
	}
	tx.OnCommit(s.worker.Poke)
	return d, nil
}

// disableEndpoint stops an endpoint inside tx: its pending deliveries fail (they can be redelivered once
// it is active again) and webhook_endpoint.disabled is appended. The caller stores ep.
func (s *Service) disableEndpoint(tx *store.Tx, ep *store.WebhookEndpoint, reason string) error {
	now := s.now()
	ep.IsActive, ep.DisabledReason, ep.UpdatedAt = false, reason, now
	if err := store.WebhookEndpoints.Put(tx, ep); err != nil {
		return apperr.Internal(err, "store webhook endpoint")
	}
	ds, err := store.WebhookDeliveries.Lookup(tx, store.WebhookDeliveriesByEndpoint, ep.ID, store.Query{})
	if err != nil {
		return apperr.Internal(err, "read deliveries")
	}
	for _, d := range ds {
		if d.State != DeliveryPending {
			continue
		}
		d.State, d.NextAttemptAt, d.ClaimedAt, d.UpdatedAt = DeliveryFailed, nil, nil, now
		d.LastError = "endpoint disabled: " + reason
		if err := store.WebhookDeliveries.Put(tx, d); err != nil {
			return apperr.Internal(err, "store delivery")
		}
	}
	return s.host.AppendEvent(tx, "webhook_endpoint.disabled", ep.OrganizationID, "",
		DisabledEvent{WebhookEndpoint: s.endpointView(ep), Reason: reason})
}

// DisabledEvent is the data of webhook_endpoint.disabled.
type DisabledEvent struct {
	WebhookEndpoint api.WebhookEndpoint `json:"webhook_endpoint"`
	Reason          string              `json:"reason"`
}

// Start starts the delivery worker (worker.go) and the recorder of its attempts' outcomes:
// outcomes that arrive together share a commit, in the background lane.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recorder != nil {
		return errors.New("webhooks: already started")
	}
	s.recorder = batch.New(s.db, s.lane, 256, 0, 0, s.log, "webhook attempt outcomes",
		func(tx *store.Tx, o outcome) error { return s.applyAttempt(tx, o.id, o.res, s.now()) })
	s.recorded = make(chan struct{})
	go func() { defer close(s.recorded); s.recorder.Run() }()
	if err := s.worker.Start(ctx); err != nil {
		s.recorder.Close()
		<-s.recorded
		return err
	}
	return nil
}

// Stop stops the worker (attempts under way are cut short and stay due), then the recorder once the
// attempts recorded. It is idempotent.
func (s *Service) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.worker.Stop(ctx); err != nil {
		return err // attempts may still record: the recorder stays
	}
	if s.recorded != nil {
		select {
		case <-s.recorded:
		default:
			s.recorder.Close()
			<-s.recorded
		}
	}
	return nil
}

// deliveryStore is the delivery worker's view of the records (a type of its own: what the worker calls
// is not part of the area's API).
type deliveryStore struct{ s *Service }

var _ Store[*store.WebhookEndpoint] = deliveryStore{}

// activeEndpoints are the endpoints deliveries are made to, decoded once per change of the endpoints'
// table (recording an attempt writes an endpoint only when its health changes).
func (s *Service) activeEndpoints(tx *store.Tx, version uint64) ([]*store.WebhookEndpoint, error) {
	if eps, ok := s.endpoints.Get("active", version); ok {
		return eps, nil
	}
	eps, err := store.WebhookEndpoints.All(tx, func(e *store.WebhookEndpoint) bool { return e.IsActive })
	if err != nil {
		return nil, err
	}
	s.endpoints.Put("active", version, eps)
	return eps, nil
}

// Due returns up to free due deliveries that held does not hold, respecting each endpoint's share, in a
// read transaction (a claim is the worker's record in memory). Endpoints take turns being served first
// (round robin), so a few with a backlog do not starve the rest.
func (st deliveryStore) Due(turn, free int, held Held) ([]Claim[*store.WebhookEndpoint], error) {
	s := st.s
	var out []Claim[*store.WebhookEndpoint]
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
				out = append(out, Claim[*store.WebhookEndpoint]{ID: id, EndpointID: ep.ID, URL: ep.URL, Endpoint: ep, Body: body})
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
func (st deliveryStore) Record(deliveryID string, res Result) error {
	st.s.host.CountWebhookAttempt(res.OK(), res.Duration)
	return st.s.recorder.Write(outcome{deliveryID, res})
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
	res Result
}

// applyAttempt stores an attempt's outcome in tx: delivered, or the next try by the schedule (or the
// receiver's Retry-After, whichever is later), or failed; and the endpoint's health. It reads everything it
// changes from tx, so running it again after a rollback records the attempt once.
func (s *Service) applyAttempt(tx *store.Tx, deliveryID string, res Result, now time.Time) error {
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
	o := s.opts
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
func (s *Service) DeliveryRate(tx *store.Tx, orgID string, since time.Time) (float64, error) {
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

// SweepDeliveries deletes ended deliveries older than DeliveryRetention.
func (s *Service) SweepDeliveries(tx *store.Tx) (int, error) {
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

// Health is the webhook worker's component check (/status): down unless the worker runs; its
// message counts endpoints by health and the deliveries waiting. A tenant's failing receiver does not
// degrade the appliance.
func (s *Service) Health(ctx context.Context) (status, message string) {
	if !s.worker.Running() {
		return api.StatusDown, "the delivery worker is not running"
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
		return api.StatusDegraded, "cannot read webhook records: " + err.Error()
	}
	return api.StatusOperational, fmt.Sprintf("%d endpoints (%d failing, %d disabled), %d deliveries pending", endpoints, failing, disabled, pending)
}
