package httpapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance/eventlog"
)

// TestWebhookEventTypesEnum: the document's event_types are the EventType schema, whose enum is the
// event table's names (the one list, alerts included); the server takes each of them and refuses an
// unknown one with a 400 that names it.
func TestWebhookEventTypesEnum(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var doc struct {
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b.api.openapi, &doc); err != nil {
		t.Fatal(err)
	}
	var et struct {
		Type string   `json:"type"`
		Enum []string `json:"enum"`
	}
	if err := json.Unmarshal(doc.Components.Schemas["EventType"], &et); err != nil || et.Type != "string" {
		t.Fatalf("EventType schema: %s (%v)", doc.Components.Schemas["EventType"], err)
	}
	if !slices.Equal(et.Enum, eventlog.Names()) || !slices.Contains(et.Enum, "alert.triggered") || !slices.Contains(et.Enum, "alert.resolved") {
		t.Fatalf("EventType enum %v, want the event table's %v", et.Enum, eventlog.Names())
	}
	for _, name := range []string{"WebhookEndpoint", "CreateWebhookEndpointRequest", "PatchWebhookEndpointRequest"} {
		var s struct {
			Properties map[string]struct {
				Items struct {
					Ref string `json:"$ref"`
				} `json:"items"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(doc.Components.Schemas[name], &s); err != nil || s.Properties["event_types"].Items.Ref != "#/components/schemas/EventType" {
			t.Errorf("%s.event_types: %s (%v)", name, doc.Components.Schemas[name], err)
		}
	}

	base := "/v1/organizations/" + b.org.ID + "/webhook-endpoints"
	r := b.do("POST", base, b.adminKey, map[string]any{"url": "https://example.com/all-events", "event_types": et.Enum})
	if r.status != http.StatusCreated {
		t.Fatalf("create with every event type: %d %s", r.status, r.body)
	}
	r = b.do("POST", base, b.adminKey, map[string]any{"url": "https://example.com/bad", "event_types": []string{"alert.triggered", "alert.exploded"}})
	if r.status != http.StatusBadRequest || !strings.Contains(r.json["error"].(string), "unknown event types: alert.exploded") {
		t.Fatalf("an unknown event type: %d %s", r.status, r.body)
	}
}
