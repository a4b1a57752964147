package cmd

import (
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance/integrations/deploya/deployatest"
	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/httpapi"
)

// TestCLIIntegrations: connect (the token from the environment) pushes the project's variables to
// deploy_a's platform (a fake of Vercel's API) and waits for it; list shows the state and what was pushed,
// never the token; disconnect needs --confirm and removes what was pushed.
func TestCLIIntegrations(t *testing.T) {
	fake := deployatest.Start(t, "vercel-cli-token", "prj_web")
	e := setupCLI(t, cliSetupOpts{instances: true, limits: httpapi.RateLimits{PerSecond: 1e6, Burst: 1e6, StrictPerSecond: 1e6, StrictBurst: 1e6},
		integrationURLs: map[string]string{provider.DeployA: fake.URL}})
	p := e.login(t)
	prj := e.activeProject(t, p, "site")
	if _, _, err := e.run("", "integrations", "connect", prj, "deploy_z"); err == nil || !strings.Contains(err.Error(), "provider must be one of") {
		t.Fatalf("an unknown provider: %v", err)
	}
	t.Setenv("APPLIANCE_INTEGRATION_TOKEN", "vercel-cli-token")
	out, _ := e.mustRunJob("integrations", "connect", prj, "deploy_a", "--external-id", "prj_web", "--webhook-secret", "whsec", "--wait")
	if !strings.Contains(out, "Connecting "+prj+" to deploy_a") {
		t.Fatalf("connect:\n%s", out)
	}
	if _, ok := fake.Value("DATABASE_URL", "", "production"); !ok {
		t.Fatalf("nothing pushed: %+v", fake.Vars())
	}
	list, _ := e.mustRun("", "integrations", "list", prj)
	if !strings.Contains(list, "deploy_a") || !strings.Contains(list, "active") || !strings.Contains(list, "DATABASE_URL,DIRECT_URL,DATABASE_CA_CERT") ||
		strings.Contains(list, "vercel-cli-token") {
		t.Fatalf("list:\n%s", list)
	}
	if _, _, err := e.run("", "integrations", "disconnect", prj, "deploy_a"); err == nil || !strings.Contains(err.Error(), "--confirm") {
		t.Fatalf("disconnect without --confirm: %v", err)
	}
	e.mustRunJob("integrations", "disconnect", prj, "deploy_a", "--confirm", "--wait")
	if vars := fake.Vars(); len(vars) != 0 {
		t.Fatalf("left at the platform: %+v", vars)
	}
	if list, _ := e.mustRun("", "integrations", "list", prj); strings.Contains(list, "deploy_a") {
		t.Fatalf("still listed:\n%s", list)
	}
}
