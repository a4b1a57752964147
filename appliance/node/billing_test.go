package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBillingProvider: --billing-provider and the Stripe secret files as up reads them, and what it refuses.
func TestBillingProvider(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key, whsec := write("stripe.key", "sk_test_abc\n"), write("whsec", "  whsec_abc  \n")
	if p, err := billingProvider(Config{}); p != nil || err != nil {
		t.Fatalf("no --billing-provider: %v %v", p, err)
	}
	p, err := billingProvider(Config{BillingProvider: "stripe", StripeSecretKeyFile: key, StripeWebhookSecretFile: whsec, StripeAPIURL: "http://127.0.0.1:1"})
	if err != nil || p == nil || p.Name() != "stripe" {
		t.Fatalf("stripe: %v %v", p, err)
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{BillingProvider: "stripe", StripeWebhookSecretFile: whsec}, "--stripe-secret-key-file is required"},
		{Config{BillingProvider: "stripe", StripeSecretKeyFile: key}, "--stripe-webhook-secret-file is required"},
		{Config{BillingProvider: "stripe", StripeSecretKeyFile: filepath.Join(dir, "absent"), StripeWebhookSecretFile: whsec}, "--stripe-secret-key-file"},
		{Config{BillingProvider: "stripe", StripeSecretKeyFile: write("empty", "\n"), StripeWebhookSecretFile: whsec}, "the secret alone"},
		{Config{BillingProvider: "stripe", StripeSecretKeyFile: write("two", "sk_a\nsk_b\n"), StripeWebhookSecretFile: whsec}, "the secret alone"},
		{Config{StripeSecretKeyFile: key}, "need --billing-provider stripe"},
	} {
		if _, err := billingProvider(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}
