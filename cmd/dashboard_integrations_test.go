package cmd

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance/integrations"
	"github.com/theappliance/appliance/appliance/integrations/deploya"
	"github.com/theappliance/appliance/appliance/integrations/deploya/deployatest"
	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// e2eDeployA is the dashboard test's deploy_a platform: a fake of Vercel's API; e2eWebhookSecret is the
// webhook signing secret the page gives at connect.
const e2eDeployAProject, e2eDeployAToken, e2eWebhookSecret = "prj_e2e", "e2e-vercel-token", "e2e-webhook-secret"

// integrationsStep answers ui/e2e/integrations.mjs: "integrations-platform" names the fake platform's
// project and token; "integrations-pushed" checks the variables the page's connect pushed there;
// "integrations-branch-failed PROJECT BRANCH" makes a deployment of the branch whose preview cannot be
// made (the project's plan allowed no previews while it ran: the limit is put back after) and waits for
// its job to fail; "integrations-removed" checks that the disconnect removed the variables.
func integrationsStep(t *testing.T, e *cliEnv, fake *deployatest.Server, what, arg string) string {
	t.Helper()
	switch what {
	case "integrations-branch-failed":
		prjID, branch, _ := strings.Cut(arg, " ")
		plan := e.env.Project(t, prjID).Plan
		limit := setPreviewsLimit(t, e, plan, 0)
		defer setPreviewsLimit(t, e, plan, limit)
		body, sig := deployatest.SignedEvent(e2eWebhookSecret, "evt_e2e_"+branch, "deployment.created", branch, "")
		h := http.Header{}
		h.Set(deploya.SignatureHeader, sig)
		if r, err := e.svc.Integrations().Receive(t.Context(), provider.DeployA, prjID, h, bytes.NewReader(body)); err != nil || !r.Received {
			t.Fatalf("the deployment of %s: %v", branch, err)
		}
		var jobs []*store.Job
		if err := e.env.DB.View(func(tx *store.Tx) (err error) {
			jobs, err = store.Jobs.All(tx, func(j *store.Job) bool { return j.ProjectID == prjID && j.Type == integrations.JobDeploy })
			return err
		}); err != nil || len(jobs) == 0 {
			t.Fatalf("no deploy job for %s: %v", branch, err)
		}
		if j := e.env.WaitJob(t, jobs[len(jobs)-1].ID); j.State != scheduler.StateFailed || !strings.Contains(j.Error, "preview quota") {
			t.Fatalf("the deployment of %s over the previews limit: %s: %s", branch, j.State, j.Error)
		}
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

// setPreviewsLimit sets the plan's previews limit and returns the one it had.
func setPreviewsLimit(t *testing.T, e *cliEnv, name string, limit int) (was int) {
	t.Helper()
	if err := e.env.DB.Update(func(tx *store.Tx) error {
		plan, err := store.Plans.Get(tx, name)
		if err != nil {
			return err
		}
		was, plan.PreviewsLimit = plan.PreviewsLimit, limit
		return store.Plans.Put(tx, plan)
	}); err != nil {
		t.Fatal(err)
	}
	return was
}
