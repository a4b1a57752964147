package httpapi

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance/integrations"
	"github.com/theappliance/appliance/appliance/integrations/deploya"
	"github.com/theappliance/appliance/appliance/integrations/deploya/deployatest"
	"github.com/theappliance/appliance/store"
)

// TestIntegrationWebhookBodyLimitOverHTTP2AndHTTP1: an inbound deploy_a webhook whose body is past
// integrations.MaxWebhookBody (1 MB), correctly signed, is refused with the JSON 413 over HTTP/2 (TLS, as
// the platforms send) and HTTP/1.1, with a Content-Length and streamed without one (chunked; HTTP/2
// DATA frames with no length), and changes nothing: no job, no recorded event id, no audit. A body of
// exactly the cap is received and verified, either way.
func TestIntegrationWebhookBodyLimitOverHTTP2AndHTTP1(t *testing.T) {
	for _, h2 := range []bool{true, false} {
		t.Run(map[bool]string{true: "HTTP/2", false: "HTTP/1.1"}[h2], func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{http2: h2})
			prj := b.project("hooks", "development")
			const secret = "h2-webhook-secret"
			if r := b.do("POST", "/v1/projects/"+prj.ID+"/integrations/deploy_a/connect", b.adminKey,
				map[string]any{"deploy_a_project_id": "prj_fixture", "token": fixtureDeployAToken, "webhook_secret": secret}); r.status != http.StatusAccepted {
				t.Fatalf("connect: %d %s", r.status, r.body)
			}
			// deliver posts body signed as Vercel signs; streamed hides its length from the transport.
			deliver := func(body []byte, streamed bool) (int, map[string]any) {
				t.Helper()
				var rd io.Reader = bytes.NewReader(body)
				if streamed {
					rd = struct{ io.Reader }{rd}
				}
				req, err := http.NewRequestWithContext(t.Context(), "POST", b.ts.URL+"/v1/integrations/deploy_a/webhook/"+prj.ID, rd)
				if err != nil {
					t.Fatal(err)
				}
				if streamed {
					req.ContentLength = -1
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(deploya.SignatureHeader, hex.EncodeToString(deploya.Sign([]byte(secret), body)))
				res, err := b.ts.Client().Do(req)
				if err != nil {
					t.Fatalf("a %d-byte body (streamed %v): %v", len(body), streamed, err)
				}
				defer res.Body.Close()
				if want := map[bool]int{true: 2, false: 1}[h2]; res.ProtoMajor != want {
					t.Fatalf("spoke HTTP/%d, want HTTP/%d", res.ProtoMajor, want)
				}
				raw, _ := io.ReadAll(res.Body)
				var v map[string]any
				if err := json.Unmarshal(raw, &v); err != nil || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
					t.Fatalf("%d, not a JSON answer (%s): %s", res.StatusCode, res.Header.Get("Content-Type"), raw)
				}
				return res.StatusCode, v
			}
			// A preview branch's deployment, padded with JSON whitespace to size: still a valid event.
			event := func(id, branch string, size int) []byte {
				ev, _ := deployatest.SignedEvent(secret, id, "deployment.created", branch, "")
				if size < len(ev) {
					t.Fatalf("an event of %d bytes cannot be %d", len(ev), size)
				}
				return append(ev, bytes.Repeat([]byte(" "), size-len(ev))...)
			}
			// changes are the project's deploy jobs, received event ids and webhook audit events.
			changes := func() (jobs, events, audits int) {
				t.Helper()
				if err := b.db.View(func(tx *store.Tx) error {
					j, err := store.Jobs.All(tx, func(j *store.Job) bool { return j.ProjectID == prj.ID && j.Type == integrations.JobDeploy })
					if err != nil {
						return err
					}
					e, err := store.IntegrationEvents.All(tx, func(e *store.IntegrationEvent) bool { return e.ProjectID == prj.ID })
					jobs, events = len(j), len(e)
					return err
				}); err != nil {
					t.Fatal(err)
				}
				for _, a := range b.auditEvents() {
					if a.Action == "integration.webhook" {
						audits++
					}
				}
				return jobs, events, audits
			}

			for _, size := range []int{integrations.MaxWebhookBody + 1, 8 * integrations.MaxWebhookBody} {
				for _, streamed := range []bool{false, true} {
					code, v := deliver(event("evt_big", "feature-big", size), streamed)
					if msg, _ := v["error"].(string); code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "at most") {
						t.Fatalf("a %d-byte webhook body (streamed %v): %d %v", size, streamed, code, v)
					}
				}
			}
			if j, e, a := changes(); j != 0 || e != 0 || a != 0 {
				t.Fatalf("oversized webhooks changed something: %d deploy jobs, %d event ids, %d audit events", j, e, a)
			}

			// Exactly the cap, with a length and streamed: received (the signature verified), one job each.
			for k, streamed := range []bool{false, true} {
				id, branch := []string{"evt_cap", "evt_cap_streamed"}[k], []string{"feature-cap", "feature-cap-streamed"}[k]
				code, v := deliver(event(id, branch, integrations.MaxWebhookBody), streamed)
				if code != http.StatusOK || v["received"] != true {
					t.Fatalf("a body of the cap (streamed %v): %d %v", streamed, code, v)
				}
			}
			if j, e, a := changes(); j != 2 || e != 2 || a != 2 {
				t.Fatalf("two received webhooks: %d deploy jobs, %d event ids, %d audit events", j, e, a)
			}
			// The cap's size, badly signed: 401, nothing new.
			body := event("evt_forged", "feature-forged", integrations.MaxWebhookBody)
			req, _ := http.NewRequestWithContext(t.Context(), "POST", b.ts.URL+"/v1/integrations/deploy_a/webhook/"+prj.ID, bytes.NewReader(body))
			req.Header.Set(deploya.SignatureHeader, hex.EncodeToString(deploya.Sign([]byte("another secret"), body)))
			res, err := b.ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusUnauthorized {
				t.Fatalf("a badly signed webhook: %d", res.StatusCode)
			}
			if j, e, a := changes(); j != 2 || e != 2 || a != 2 {
				t.Fatalf("after a badly signed webhook: %d deploy jobs, %d event ids, %d audit events", j, e, a)
			}
		})
	}
}
