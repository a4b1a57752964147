package cmd

import (
	"strings"
	"testing"
)

// TestBillingFlags: up's flag table refuses a --billing-provider that is not one (the provider and its
// secret files: appliance/node's TestBillingProvider).
func TestBillingFlags(t *testing.T) {
	for _, fl := range upFlagTable(&UpConfig{BillingProvider: "paypal"}) {
		if fl.name == "billing-provider" {
			if err := fl.check(); err == nil || !strings.Contains(err.Error(), "not a billing provider") {
				t.Errorf("--billing-provider paypal: %v", err)
			}
		}
	}
}
