package httpapi

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/webhook"
	"github.com/theappliance/appliance/store"
)

// TestWebhooksAPI: who may manage endpoints, and another organization's endpoints and deliveries are
// 404 by any path.
func TestWebhooksAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	prj := b.project("alpha", "development")
	theirOrg, _ := b.otherOrg("other")
	now := time.Now().UTC()
	theirs := &store.WebhookEndpoint{ID: ids.New("whe"), OrganizationID: theirOrg.ID, URL: "https://example.com/", IsActive: true,
		SealedSecret: b.box.Seal([]byte("whsec_AAAA")), CreatedAt: now, UpdatedAt: now}
	theirDelivery := &store.WebhookDelivery{ID: ids.New("msg"), EndpointID: theirs.ID, OrganizationID: theirOrg.ID,
		EventType: "job.completed", State: webhook.DeliveryFailed, Attempts: 8, MaxAttempts: 8, CreatedAt: now, UpdatedAt: now}
	if err := b.db.Update(func(tx *store.Tx) error {
		if err := store.WebhookEndpoints.Put(tx, theirs); err != nil {
			return err
		}
		return store.WebhookDeliveries.Put(tx, theirDelivery)
	}); err != nil {
		t.Fatal(err)
	}
	mine := "/v1/organizations/" + b.org.ID + "/webhook-endpoints"
	created := b.do("POST", mine, b.adminKey, map[string]any{"url": "https://example.com/hooks", "description": "mine"})
	if created.status != http.StatusCreated || !strings.HasPrefix(created.json["plaintext_secret"].(string), "whsec_") {
		t.Fatalf("create: %d %s", created.status, created.body)
	}
	if strings.Contains(string(created.body), "sealed") {
		t.Fatalf("the sealed secret leaks: %s", created.body)
	}
	myID := created.json["webhook_endpoint"].(map[string]any)["id"].(string)

	for _, c := range []struct {
		name, method, path, cred string
		body                     any
		status                   int
	}{
		{"their delivery through my endpoint", "POST", mine + "/" + myID + "/deliveries/" + theirDelivery.ID + "/redeliver", b.adminKey, nil, 404},
		{"their delivery through their endpoint", "POST", "/v1/organizations/" + theirOrg.ID + "/webhook-endpoints/" + theirs.ID + "/deliveries/" + theirDelivery.ID + "/redeliver", b.adminKey, nil, 404},
		{"their endpoint under my organization", "PATCH", mine + "/" + theirs.ID, b.adminKey, map[string]any{"is_active": false}, 404},
		{"their endpoint's deliveries", "GET", mine + "/" + theirs.ID + "/deliveries", b.adminKey, nil, 404},
		{"their endpoints", "GET", "/v1/organizations/" + theirOrg.ID + "/webhook-endpoints", b.adminKey, nil, 404},
		{"a member session creates", "POST", mine, b.session("member"), map[string]any{"url": "https://example.com/m"}, 403},
		{"a project-scoped key lists", "GET", mine, b.key(prj.ID, api.ScopeProjectsRead), nil, 403},
		{"a key without organizations:write rotates", "POST", mine + "/" + myID + "/rotate-secret", b.key("", api.ScopeOrganizationsRead), nil, 403},
		{"an unknown field", "PATCH", mine + "/" + myID, b.adminKey, map[string]any{"secret": "x"}, 400},
		{"event types must be known", "PATCH", mine + "/" + myID, b.adminKey, map[string]any{"event_types": []string{"job.completed", "nope.nope"}}, 400},
	} {
		if r := b.do(c.method, c.path, c.cred, c.body); r.status != c.status {
			t.Errorf("%s: %d, want %d: %s", c.name, r.status, c.status, r.body)
		}
	}
	var after *store.WebhookDelivery
	b.db.View(func(tx *store.Tx) (err error) {
		after, err = store.WebhookDeliveries.Get(tx, theirDelivery.ID)
		return err
	})
	if after.State != webhook.DeliveryFailed || after.Attempts != 8 {
		t.Fatalf("their delivery changed: %+v", after)
	}
	if r := b.do("GET", mine, b.adminKey, nil); r.status != 200 || !strings.Contains(string(r.body), `"description":"mine"`) || strings.Contains(string(r.body), theirs.ID) {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
}
