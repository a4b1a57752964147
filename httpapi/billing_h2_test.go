package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/billing"
	"github.com/theappliance/appliance/appliance/billing/stripetest"
	"github.com/theappliance/appliance/store"
)

// TestStripeWebhookBodyLimitOverHTTP2AndHTTP1: a webhook body past billing.MaxPayload, correctly signed, is
// refused with the JSON 413 over HTTP/2 (TLS, as Stripe sends) and HTTP/1.1, and changes nothing: no
// billing field, no recorded event id — the same event at its normal size is then applied.
func TestStripeWebhookBodyLimitOverHTTP2AndHTTP1(t *testing.T) {
	for _, h2 := range []bool{true, false} {
		t.Run(map[bool]string{true: "HTTP/2", false: "HTTP/1.1"}[h2], func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{http2: h2, billing: stripeProvider(t),
				limits: RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6}})
			if _, err := b.svc.Billing().EnsureCustomers(context.Background()); err != nil {
				t.Fatal(err)
			}
			r := b.do("GET", "/v1/organizations/"+b.org.ID, b.adminKey, nil)
			cus := r.json["organization"].(map[string]any)["billing_customer_id"].(string)
			deliver := func(payload []byte) (int, map[string]any) {
				t.Helper()
				req, err := http.NewRequestWithContext(t.Context(), "POST", b.ts.URL+"/v1/billing/stripe/webhook", bytes.NewReader(payload))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Stripe-Signature", stripetest.Sign(payload, testWebhookSecret))
				res, err := b.ts.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				if want := map[bool]int{true: 2, false: 1}[h2]; res.ProtoMajor != want {
					t.Fatalf("spoke HTTP/%d, want HTTP/%d", res.ProtoMajor, want)
				}
				body, _ := io.ReadAll(res.Body)
				var v map[string]any
				if err := json.Unmarshal(body, &v); err != nil || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
					t.Fatalf("%d, not a JSON answer (%s): %s", res.StatusCode, res.Header.Get("Content-Type"), body)
				}
				return res.StatusCode, v
			}
			ev := stripetest.Subscription{EventID: "evt_big", Type: "customer.subscription.created", Customer: cus, ID: "sub_big",
				Status: "active", LookupKey: "pro", Product: "prod_pro", Created: time.Now().Add(-time.Minute), PeriodEnd: time.Now().Add(720 * time.Hour)}.JSON()
			for _, size := range []int{billing.MaxPayload + 1, 8 * billing.MaxPayload} {
				// The same event padded with JSON whitespace past the limit: still a valid, signed event.
				big := append(append([]byte{}, ev...), bytes.Repeat([]byte(" "), size-len(ev))...)
				if code, v := deliver(big); code != http.StatusRequestEntityTooLarge || !strings.Contains(v["error"].(string), "at most") {
					t.Fatalf("a %d-byte webhook body: %d %v", size, code, v)
				}
			}
			if o := b.do("GET", "/v1/organizations/"+b.org.ID, b.adminKey, nil).json["organization"].(map[string]any); o["billing_status"] != "" || o["billing_plan"] != "none" {
				t.Fatalf("an oversized webhook changed the organization: %v", o)
			}
			if err := b.db.View(func(tx *store.Tx) error {
				_, err := store.BillingEvents.Get(tx, "evt_big")
				if err == nil {
					t.Error("an oversized webhook's event id was recorded")
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if code, v := deliver(ev); code != http.StatusOK || v["outcome"] != api.BillingOutcomeApplied {
				t.Fatalf("the same event at its size: %d %v", code, v)
			}
		})
	}
}
