package cmd

import (
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance/integrations/deploya/deployatest"
)

// e2eDeployA is the dashboard test's deploy_a platform: a fake of Vercel's API.
const e2eDeployAProject, e2eDeployAToken = "prj_e2e", "e2e-vercel-token"

// integrationsStep answers ui/e2e/integrations.mjs: "integrations-platform" names the fake platform's
// project and token; "integrations-pushed" checks the variables the page's connect pushed there;
// "integrations-removed" checks that the disconnect removed them.
func integrationsStep(t *testing.T, fake *deployatest.Server, what string) string {
	t.Helper()
	switch what {
	case "integrations-platform":
		return e2eDeployAProject + " " + e2eDeployAToken
	case "integrations-pushed":
		for _, k := range []string{"DATABASE_URL", "DIRECT_URL", "DATABASE_CA_CERT"} {
			v, ok := fake.Value(k, "", "production")
			if !ok || (k != "DATABASE_CA_CERT" && !strings.Contains(v, "sslmode=verify-full")) {
				t.Fatalf("the platform has no %s after the dashboard's connect: %+v", k, fake.Vars())
			}
		}
	case "integrations-removed":
		if vars := fake.Vars(); len(vars) != 0 {
			t.Fatalf("left at the platform after the dashboard's disconnect: %+v", vars)
		}
	default:
		t.Fatalf("unknown step %s", what)
	}
	return ""
}
