package cmd

import (
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/store"
)

// zeroSuspended suspends the project (scale to zero) for ui/e2e/zero.mjs and moves the start of its
// suspension 20 minutes back (the record, and the project's idle_suspended_at), so the history's 1-hour
// window shows a band wide enough to see.
func zeroSuspended(t *testing.T, e *cliEnv, p *appliance.Principal, projectID string) {
	t.Helper()
	if _, err := e.svc.SuspendProject(t.Context(), p, projectID); err != nil {
		t.Fatalf("suspend %s: %v", projectID, err)
	}
	err := e.svc.DB().Update(func(tx *store.Tx) error {
		recs, err := store.Suspensions.Lookup(tx, store.SuspensionsByProject, projectID, store.Query{})
		if err != nil {
			return err
		}
		for _, r := range recs {
			if r.To != nil {
				continue
			}
			if err := store.Suspensions.Delete(tx, r.ID); err != nil {
				return err
			}
			r.From = r.From.Add(-20 * time.Minute)
			if err := store.Suspensions.Put(tx, r); err != nil {
				return err
			}
			prj, err := store.Projects.Get(tx, projectID)
			if err != nil {
				return err
			}
			prj.IdleSuspendedAt = &r.From
			return store.Projects.Put(tx, prj)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
