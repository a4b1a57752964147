package integrations

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/store"
)

// EventRetention is how long a received event's id is kept to deduplicate the provider's retries.
const EventRetention = 7 * 24 * time.Hour

// errUnsigned is the one answer of a webhook that does not verify, whatever the reason (an unknown
// project, no integration, no secret, a bad signature): which projects exist is not told.
var errUnsigned = apperr.Unauthenticated("%s", provider.ErrBadSignature.Error())

// Receive is POST /v1/integrations/{provider}/webhook/{projectID}: the body (at most 1 MB) verified by the
// provider with the secret stored at connect, deduplicated by the event's id, answered at once; the work
// is a job.
func (s *Service) Receive(ctx context.Context, name, projectID string, h http.Header, body io.Reader) (*api.IntegrationWebhookResponse, error) {
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, io.LimitReader(body, MaxWebhookBody+1)); err != nil {
		return nil, apperr.Invalid("read the webhook body: %v", err)
	}
	if buf.Len() > MaxWebhookBody {
		return nil, &apperr.Error{Kind: apperr.KindTooLarge, Msg: fmt.Sprintf("a webhook body may have at most %d bytes", MaxWebhookBody)}
	}
	prov, ok := s.providers[name]
	if !ok {
		return nil, errUnsigned
	}
	var rec *store.Integration
	if err := s.db.View(func(tx *store.Tx) (err error) { rec, err = find(tx, projectID, name); return err }); err != nil {
		return nil, apperr.Internal(err, "read integration")
	}
	if rec == nil || rec.State == api.IntegrationDisconnecting {
		return nil, errUnsigned
	}
	creds, err := s.open(rec)
	if err != nil {
		return nil, apperr.Internal(err, "open credentials")
	}
	if creds.WebhookSecret == "" {
		return nil, errUnsigned
	}
	evID, err := prov.VerifyWebhook(s.env(prov, rec, creds), h, buf.Bytes(), s.now())
	if err != nil {
		if errors.Is(err, provider.ErrNoWebhooks) {
			return nil, apperr.NotFound("%s sends no webhooks", name)
		}
		s.log.Info("integration webhook refused", "provider", name, "project", projectID, "err", err)
		return nil, errUnsigned
	}
	// What the event asks for: a deployment (platforms) or a user change (directories); another event
	// type is acknowledged and ignored.
	var typ string
	var payload any
	switch pv := prov.(type) {
	case provider.Platform:
		ev, err := pv.DeployEvent(buf.Bytes())
		if err == nil {
			if ev.ID == "" {
				ev.ID = evID
			}
			typ, payload = JobDeploy, deployPayload{IntegrationID: rec.ID, Event: ev}
		} else if !errors.Is(err, provider.ErrIgnored) {
			return nil, apperr.Invalid("the %s event cannot be read: %v", name, err)
		}
	case provider.Directory:
		ev, err := pv.UserEvent(buf.Bytes())
		if err == nil {
			if ev.ID == "" {
				ev.ID = evID
			}
			up := userEventPayload{IntegrationID: rec.ID, Event: ev}
			if _, multi := pv.(MultiEvent); multi {
				up.Body = buf.Bytes() // the job reads every event of the delivery (UserEvent found one)
			}
			typ, payload = JobUserEvent, up
		} else if !errors.Is(err, provider.ErrIgnored) {
			return nil, apperr.Invalid("the %s event cannot be read: %v", name, err)
		}
	}
	enqueued := false
	err = s.db.Update(func(tx *store.Tx) error {
		enqueued = false // a run again starts over
		key := name + "/" + projectID + "/" + evID
		if _, err := store.IntegrationEvents.Get(tx, key); err == nil {
			return nil // a redelivery: done already
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err := store.IntegrationEvents.Put(tx, &store.IntegrationEvent{ID: key, ProjectID: projectID, ReceivedAt: s.now()}); err != nil {
			return err
		}
		md := map[string]any{"provider": name, "integration_id": rec.ID, "event_id": evID}
		if typ != "" {
			cur, err := store.Integrations.Get(tx, rec.ID)
			if err != nil {
				return err
			}
			lock := cur.ID
			if d, ok := payload.(deployPayload); ok {
				lock += "/" + d.Event.Branch // branches' previews are made side by side
			}
			j, err := s.enqueue(tx, cur, typ, lock, payload)
			if err != nil {
				return err
			}
			md["job_id"], enqueued = j.ID, true
		}
		return s.host.Audit(tx, system(rec.OrganizationID), "integration.webhook", rec.OrganizationID, rec.ProjectID, md)
	})
	if err != nil {
		return nil, apperr.Internal(err, "record webhook event")
	}
	if enqueued {
		s.host.Notify()
	}
	return &api.IntegrationWebhookResponse{Received: true}, nil
}

// SweepEvents forgets the received events' ids older than EventRetention.
func (s *Service) SweepEvents(ctx context.Context) (int, error) {
	cutoff := s.now().Add(-EventRetention)
	n := 0
	err := s.db.Update(func(tx *store.Tx) error {
		n = 0 // a run again starts over
		old, err := store.IntegrationEvents.All(tx, func(e *store.IntegrationEvent) bool { return e.ReceivedAt.Before(cutoff) })
		if err != nil {
			return err
		}
		for _, e := range old {
			if err := store.IntegrationEvents.Delete(tx, e.ID); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}
