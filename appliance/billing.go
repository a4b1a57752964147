package appliance

import (
	"context"

	"github.com/theappliance/appliance/appliance/billing"
)

// BillingStripe is the Stripe provider's name (its webhook route's).
const BillingStripe = billing.StripeName

// BillingProvider is appliance/billing's Provider (Deps.Billing).
type BillingProvider = billing.Provider

// Billing is the billing area: the organizations' customers at the provider and its webhook events. A new
// organization gets its customer from Billing().EnsureCustomer (a no-op with billing off).
func (s *Service) Billing() *billing.Service { return s.billing }

// billingTasks are the billing's periodic work, with billing on: customers for the organizations the
// provider could not be reached for before, and the sweep of old event ids.
func (s *Service) billingTasks() []periodicTask {
	if !s.billing.Enabled() {
		return nil
	}
	return []periodicTask{{"@every 10m", "billing", func(ctx context.Context) {
		if n, err := s.billing.EnsureCustomers(ctx); err != nil {
			s.log.Warn("billing: customers at the provider", "made", n, "err", err)
		} else if n > 0 {
			s.log.Info("billing: customers made at the provider", "made", n)
		}
		if n, err := s.billing.SweepEvents(ctx); err != nil {
			s.log.Error("billing: sweep of received events", "err", err)
		} else if n > 0 {
			s.log.Info("billing: received events swept", "deleted", n)
		}
	}}}
}
