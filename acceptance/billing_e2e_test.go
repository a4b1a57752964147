package acceptance

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/billing/stripetest"
)

// TestUpWithStripeBilling: `appliance up --billing-provider stripe` against a real stripe-mock gives the
// first start's organization its Stripe customer, and serves the signed webhook over HTTPS: a delivery is
// applied to the organization, a bad signature is 400.
func TestUpWithStripeBilling(t *testing.T) {
	mock := stripetest.Start(t)
	dir := t.TempDir()
	key, whsec := filepath.Join(dir, "stripe.key"), filepath.Join(dir, "stripe-webhook.secret")
	const secret = "whsec_e2e"
	if err := os.WriteFile(key, []byte("sk_test_e2e\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(whsec, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(appliancetest.TraversableTempDir(t), "data")
	p := e2eStartWith(t, e2eBuild(t), dataDir, nil, []string{"--spare-clusters", "0", "--billing-provider", "stripe",
		"--stripe-secret-key-file", key, "--stripe-webhook-secret-file", whsec, "--stripe-api-url", mock.URL})
	admin := e2eAdminKey(t, dataDir)
	var me struct {
		Organization api.Organization `json:"organization"`
	}
	p.do(t, admin, "GET", "/v1/me", nil, http.StatusOK, &me)
	org := me.Organization
	if !strings.HasPrefix(org.BillingCustomerID, "cus_") || org.BillingProvider != "stripe" {
		t.Fatalf("the first organization's billing: customer %q provider %q", org.BillingCustomerID, org.BillingProvider)
	}
	payload := stripetest.Subscription{EventID: "evt_e2e", Type: "customer.subscription.created", Customer: org.BillingCustomerID,
		ID: "sub_e2e", Status: "trialing", LookupKey: "pro", Product: "prod_pro", Created: time.Now(), PeriodEnd: time.Now().Add(14 * 24 * time.Hour)}.JSON()
	deliver := func(sig string) int {
		req, err := http.NewRequest("POST", p.api+"/v1/billing/stripe/webhook", bytes.NewReader(payload))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stripe-Signature", sig)
		resp, err := p.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := deliver(stripetest.Sign(payload, "whsec_wrong")); code != http.StatusBadRequest {
		t.Fatalf("bad signature: %d, want 400", code)
	}
	if code := deliver(stripetest.Sign(payload, secret)); code != http.StatusOK {
		t.Fatalf("signed delivery: %d, want 200", code)
	}
	var got api.OrganizationResponse
	p.do(t, admin, "GET", "/v1/organizations/"+org.ID, nil, http.StatusOK, &got)
	if o := got.Organization; o.BillingStatus != "trialing" || o.BillingPlan != "pro" || o.BillingSubscriptionID != "sub_e2e" || o.BillingPeriodEnd == nil {
		t.Fatalf("after the delivery: %+v", o)
	}
}
