package cmd

import (
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/store"
)

// zeroSuspended suspends the project (scale to zero) for ui/e2e/zero.mjs, and records an earlier
// suspension that ended a minute ago (a fixture: the samples of the window were taken meanwhile), so the
// history's 1-hour window shows a band wide enough to see beside the one that starts now.
func zeroSuspended(t *testing.T, e *cliEnv, p *appliance.Principal, projectID string) {
	t.Helper()
	if _, err := e.svc.SuspendProject(t.Context(), p, projectID); err != nil {
		t.Fatalf("suspend %s: %v", projectID, err)
	}
	err := e.svc.DB().Update(func(tx *store.Tx) error {
		prj, err := store.Projects.Get(tx, projectID)
		if err != nil {
			return err
		}
		// Within the project's life (the usage counts from its creation): from 15 minutes ago or its
		// creation, to a minute ago.
		from, to := time.Now().UTC().Add(-15*time.Minute), time.Now().UTC().Add(-time.Minute)
		if from.Before(prj.CreatedAt) {
			from = prj.CreatedAt.Add(time.Second)
		}
		if !to.After(from) {
			to = from.Add(time.Second)
		}
		return store.Suspensions.Put(tx, &store.Suspension{ID: projectID + "/e2e", ProjectID: projectID, OrganizationID: prj.OrganizationID, From: from, To: &to})
	})
	if err != nil {
		t.Fatal(err)
	}
}
