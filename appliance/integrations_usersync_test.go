package appliance_test

import (
	"testing"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
)

func integrationOfProvider(t *testing.T, e *appliancetest.Env, p *appliance.Principal, projectID, name string) *api.Integration {
	t.Helper()
	l, err := e.Svc.Integrations().List(t.Context(), p, projectID)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range l.Integrations {
		if i.Provider == name {
			return i
		}
	}
	t.Fatalf("no %s integration", name)
	return nil
}
