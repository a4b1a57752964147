package appliance

import (
	"context"
	"time"

	"github.com/theappliance/appliance/store"
)

// sweepRetention is how long expired records stay readable (for audit and support) before the sweep
// deletes them.
const sweepRetention = 24 * time.Hour

// SweepResult counts what a sweep did.
type SweepResult struct {
	LoginsExpired, LoginsDeleted, ApprovalsDeleted, SessionsDeleted int
}

// Sweep is the periodic expiry work: CLI logins past their deadline are expired (revoking keys nobody
// collected), and expired logins, approvals and sessions older than a day are deleted.
func (s *Service) Sweep(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	now := s.now()
	err := s.db.Update(func(tx *store.Tx) error {
		logins, err := store.CLILogins.All(tx, nil)
		if err != nil {
			return err
		}
		for _, l := range logins {
			changed, err := s.expireLogin(tx, l)
			if err != nil {
				return err
			}
			switch {
			case now.Sub(l.ExpiresAt) > sweepRetention:
				res.LoginsDeleted++
				if err := store.CLILogins.Delete(tx, l.ID); err != nil {
					return err
				}
			case changed:
				res.LoginsExpired++
				if err := store.CLILogins.Put(tx, l); err != nil {
					return err
				}
			}
		}
		approvals, err := store.Approvals.All(tx, func(a *store.Approval) bool { return now.Sub(a.ExpiresAt) > sweepRetention })
		if err != nil {
			return err
		}
		for _, a := range approvals {
			res.ApprovalsDeleted++
			if err := store.Approvals.Delete(tx, a.ID); err != nil {
				return err
			}
		}
		sessions, err := store.Sessions.All(tx, func(x *store.Session) bool { return now.Sub(x.ExpiresAt) > sweepRetention })
		if err != nil {
			return err
		}
		for _, x := range sessions {
			res.SessionsDeleted++
			if err := store.Sessions.Delete(tx, x.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return res, Internal(err, "sweep expired records")
	}
	return res, nil
}
