package appliance

import (
	"context"

	"github.com/theappliance/appliance/appliance/billing"
	"github.com/theappliance/appliance/appliance/referrals"
	"github.com/theappliance/appliance/store"
)

// Referrals is the referral codes, the referrals made at sign-up and their rewards (appliance/referrals).
func (s *Service) Referrals() *referrals.Service { return s.referrals }

func (s *Service) newReferrals(cfg Config, deps Deps) *referrals.Service {
	return referrals.New(referrals.Deps{DB: deps.DB, Clock: s.now, Host: areaHost{s}, Discounts: s.billing, Log: deps.Log,
		SignupURL: s.signupURL()})
}

// signupURL is the dashboard's sign-up page (the dashboard is served at the API's URL).
func (s *Service) signupURL() string { return s.cfg.APIURL + "/signup" }

// referralHook is billing's Hook: the billing provider's events reach the referrals (built after billing,
// which they make their rewards through).
type referralHook struct{ s *Service }

func (h referralHook) BillingEvent(tx *store.Tx, orgID string, ev *billing.Event) error {
	return h.s.referrals.BillingEvent(tx, orgID, ev)
}

// referralTasks retry the referral rewards the billing provider did not make yet (each is first tried
// right after the commit of the invoice that made it due).
func (s *Service) referralTasks() []periodicTask {
	if !s.billing.Enabled() {
		return nil
	}
	return []periodicTask{{"@every 5m", "referral-rewards", func(ctx context.Context) {
		if n, err := s.referrals.PayRewards(ctx); err != nil {
			s.log.Warn("referral rewards: retried later", "rewarded", n, "err", err)
		} else if n > 0 {
			s.log.Info("referral rewards made", "rewarded", n)
		}
	}}}
}
