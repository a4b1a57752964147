package node

import (
	"fmt"
	"os"
	"strings"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/billing"
)

// billingProvider is the provider up --billing-provider names, with its secrets read from their files (nil:
// billing is off).
func billingProvider(cfg Config) (appliance.BillingProvider, error) {
	if cfg.BillingProvider == "" {
		if cfg.StripeSecretKeyFile != "" || cfg.StripeWebhookSecretFile != "" {
			return nil, fmt.Errorf("--stripe-secret-key-file and --stripe-webhook-secret-file need --billing-provider stripe")
		}
		return nil, nil
	}
	key, err := readSecretFile("--stripe-secret-key-file", cfg.StripeSecretKeyFile)
	if err != nil {
		return nil, err
	}
	whsec, err := readSecretFile("--stripe-webhook-secret-file", cfg.StripeWebhookSecretFile)
	if err != nil {
		return nil, err
	}
	p, err := billing.NewStripe(billing.StripeConfig{SecretKey: key, WebhookSecret: whsec, URL: cfg.StripeAPIURL})
	if err != nil {
		return nil, fmt.Errorf("--billing-provider stripe: %w", err)
	}
	return p, nil
}

// readSecretFile reads a secret kept alone in a file (surrounding white space dropped); flag names the flag
// for the errors.
func readSecretFile(flag, path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("%s is required with --billing-provider", flag)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	secret := strings.TrimSpace(string(data))
	if secret == "" || strings.ContainsAny(secret, " \t\r\n") {
		return "", fmt.Errorf("%s: %s must hold the secret alone, on one line", flag, path)
	}
	return secret, nil
}
