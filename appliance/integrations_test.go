package appliance_test

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/integrations"
	"github.com/theappliance/appliance/appliance/integrations/deploya"
	"github.com/theappliance/appliance/appliance/integrations/deploya/deployatest"
	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// integrationJobs are the project's jobs of type typ, oldest first.
func integrationJobs(t *testing.T, e *appliancetest.Env, projectID, typ string) []*store.Job {
	t.Helper()
	var out []*store.Job
	if err := e.DB.View(func(tx *store.Tx) (err error) {
		out, err = store.Jobs.All(tx, func(j *store.Job) bool { return j.ProjectID == projectID && j.Type == typ })
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func integrationOf(t *testing.T, e *appliancetest.Env, p *appliance.Principal, projectID string) *api.Integration {
	t.Helper()
	l, err := e.Svc.Integrations().List(t.Context(), p, projectID)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range l.Integrations {
		if i.Provider == provider.DeployA {
			return i
		}
	}
	return nil
}

func eventsOf(t *testing.T, e *appliancetest.Env, projectID string) map[string]int {
	t.Helper()
	seen := map[string]int{}
	if err := e.DB.View(func(tx *store.Tx) error {
		evs, err := store.Events.All(tx, func(ev *store.Event) bool { return ev.ProjectID == projectID })
		for _, ev := range evs {
			seen[ev.Type]++
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return seen
}

// TestIntegrationDeployA: connecting a project to deploy_a (a fake of Vercel's API) checks the token (a
// refused one: state error, integration.failed), pushes DATABASE_URL (pooled) and DIRECT_URL (direct) with
// sslmode=verify-full and the CA for the configured targets, which connect; a rotation pushes the new
// password; a signed deployment event of a branch makes the branch's preview database and sets that
// branch's variables (a redelivery or another deployment of the branch reuses it); unsigned, badly signed,
// unknown-project and oversized webhooks change nothing; DELETE removes what was pushed and the
// credentials.
func TestIntegrationDeployA(t *testing.T) {
	t.Parallel()
	fake := deployatest.Start(t, "vercel-token", "prj_web")
	e, p := keyEnv(t, appliancetest.Options{Instances: true, IntegrationBaseURLs: map[string]string{provider.DeployA: fake.URL}})
	res, err := e.Svc.CreateProject(t.Context(), p, &appliance.CreateProjectRequest{Name: "shop", Environment: "development", Plan: "pro"})
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, res.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("provision: %s", j.Error)
	}
	prj := e.Project(t, res.Project.ID)
	svc := e.Svc.Integrations()

	// A refused token: the job fails for good at once, the integration says why.
	bad, err := svc.ConnectDeployA(t.Context(), p, prj.ID, &api.ConnectDeployARequest{DeployAProjectID: "prj_web", Token: "wrong", WebhookSecret: "whsec"})
	if err != nil {
		t.Fatal(err)
	}
	if bad.Integration.State != api.IntegrationPending || !bad.Integration.HasCredentials {
		t.Fatalf("connect: %+v", bad.Integration)
	}
	if j := e.WaitJob(t, bad.Job.ID); j.State != scheduler.StateFailed || !strings.Contains(j.Error, "refused the credentials") || j.Attempts != 1 {
		t.Fatalf("sync with a refused token: %s after %d attempts: %s", j.State, j.Attempts, j.Error)
	}
	if i := integrationOf(t, e, p, prj.ID); i.State != api.IntegrationError || !strings.Contains(i.LastError, "refused the credentials") {
		t.Fatalf("after a refused token: %+v", i)
	}

	// The right token: pushed for production and preview.
	ok, err := svc.ConnectDeployA(t.Context(), p, prj.ID, &api.ConnectDeployARequest{DeployAProjectID: "prj_web", Token: "vercel-token", WebhookSecret: "whsec"})
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, ok.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("sync: %s: %s", j.State, j.Error)
	}
	i := integrationOf(t, e, p, prj.ID)
	if i.State != api.IntegrationActive || i.LastError != "" || i.LastSyncAt == nil || strings.Join(i.Pushed, ",") != "DATABASE_URL,DIRECT_URL,DATABASE_CA_CERT" {
		t.Fatalf("after connect: %+v", i)
	}
	conns, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{deploya.TargetProduction, deploya.TargetPreview} {
		pooled, okP := fake.Value("DATABASE_URL", "", target)
		direct, okD := fake.Value("DIRECT_URL", "", target)
		ca, okC := fake.Value("DATABASE_CA_CERT", "", target)
		if !okP || !okD || !okC || !strings.Contains(ca, "BEGIN CERTIFICATE") {
			t.Fatalf("%s: the platform has %+v", target, fake.Vars())
		}
		for _, u := range []string{pooled, direct} {
			if !strings.Contains(u, "sslmode=verify-full") || strings.Contains(u, "sslrootcert") {
				t.Fatalf("pushed URL %q", u)
			}
		}
		if withCA(pooled, e) != conns.Connections.PooledURL || withCA(direct, e) != conns.Connections.DirectURL {
			t.Fatalf("pushed %q and %q, the project's are %q and %q", pooled, direct, conns.Connections.PooledURL, conns.Connections.DirectURL)
		}
	}
	if _, ok := fake.Value("DATABASE_URL", "", deploya.TargetDevelopment); ok {
		t.Fatal("development received the variables: the config's targets are production and preview")
	}
	direct, _ := fake.Value("DIRECT_URL", "", deploya.TargetProduction)
	c := connect(t, withCA(direct, e))
	if n := scalar[int32](t, c, "SELECT 1"); n != 1 {
		t.Fatal("the pushed URL does not connect")
	}
	c.Close(t.Context())

	// A rotation pushes the new password.
	rot, err := e.Svc.RotateCredentials(t.Context(), p, prj.ID, &appliance.RotateCredentialsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, rot.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("rotate: %s", j.Error)
	}
	syncs := integrationJobs(t, e, prj.ID, integrations.JobSync)
	if j := e.WaitJob(t, syncs[len(syncs)-1].ID); j.State != scheduler.StateCompleted || len(syncs) != 3 {
		t.Fatalf("the sync after the rotation (%d syncs): %s %s", len(syncs), j.State, j.Error)
	}
	after, _ := fake.Value("DIRECT_URL", "", deploya.TargetProduction)
	if after == direct {
		t.Fatal("the rotation did not push the new password")
	}

	// Webhooks that do not verify change nothing; all are the same 401.
	body, sig := deployatest.SignedEvent("whsec", "evt_1", "deployment.created", "feature/login", "")
	hdr := func(sig string) http.Header { return http.Header{"X-Vercel-Signature": {sig}} }
	for name, call := range map[string]func() error{
		"unsigned": func() error {
			_, err := svc.Receive(t.Context(), provider.DeployA, prj.ID, http.Header{}, bytes.NewReader(body))
			return err
		},
		"badly signed": func() error {
			_, err := svc.Receive(t.Context(), provider.DeployA, prj.ID, hdr(strings.Repeat("0", 40)), bytes.NewReader(body))
			return err
		},
		"another secret": func() error {
			b, s := deployatest.SignedEvent("other", "evt_1", "deployment.created", "feature/login", "")
			_, err := svc.Receive(t.Context(), provider.DeployA, prj.ID, hdr(s), bytes.NewReader(b))
			return err
		},
		"unknown project": func() error {
			_, err := svc.Receive(t.Context(), provider.DeployA, "prj_nope", hdr(sig), bytes.NewReader(body))
			return err
		},
	} {
		if err := call(); apperr.KindOf(err) != apperr.KindUnauthenticated || !strings.Contains(err.Error(), "signature") {
			t.Errorf("%s webhook: %v", name, err)
		}
	}
	big := append(bytes.Repeat([]byte(" "), integrations.MaxWebhookBody), body...)
	if _, err := svc.Receive(t.Context(), provider.DeployA, prj.ID, hdr(sig), bytes.NewReader(big)); apperr.KindOf(err) != apperr.KindTooLarge {
		t.Errorf("oversized webhook: %v", err)
	}
	if n := len(integrationJobs(t, e, prj.ID, integrations.JobDeploy)); n != 0 {
		t.Fatalf("%d deploy jobs after refused webhooks", n)
	}

	// A signed deployment of a branch: its preview database and its variables.
	for range 2 { // the platform's redelivery of the same event does nothing again
		r, err := svc.Receive(t.Context(), provider.DeployA, prj.ID, hdr(sig), bytes.NewReader(body))
		if err != nil || !r.Received {
			t.Fatalf("signed webhook: %v %+v", err, r)
		}
	}
	deploys := integrationJobs(t, e, prj.ID, integrations.JobDeploy)
	if len(deploys) != 1 {
		t.Fatalf("%d deploy jobs for one event", len(deploys))
	}
	if j := e.WaitJob(t, deploys[0].ID); j.State != scheduler.StateCompleted {
		t.Fatalf("deploy job: %s: %s", j.State, j.Error)
	}
	i = integrationOf(t, e, p, prj.ID)
	if len(i.Previews) != 1 || i.Previews[0].Branch != "feature/login" {
		t.Fatalf("previews: %+v", i.Previews)
	}
	prvID := i.Previews[0].PreviewID
	pc, err := e.Svc.Previews().Connections(t.Context(), p, prvID)
	if err != nil {
		t.Fatal(err)
	}
	branchURL, ok2 := fake.Value("DATABASE_URL", "feature/login", deploya.TargetPreview)
	if !ok2 || withCA(branchURL, e) != pc.Connections.PooledURL {
		t.Fatalf("the branch's DATABASE_URL %q, its preview's %q", branchURL, pc.Connections.PooledURL)
	}
	bc := connect(t, withCA(mustValue(t, fake, "DIRECT_URL", "feature/login"), e))
	if n := scalar[int32](t, bc, "SELECT 1"); n != 1 {
		t.Fatal("the branch's URL does not connect")
	}
	bc.Close(t.Context())
	// Another deployment of the branch (a new event id): the same preview.
	body2, sig2 := deployatest.SignedEvent("whsec", "evt_2", "deployment.succeeded", "feature/login", "")
	if _, err := svc.Receive(t.Context(), provider.DeployA, prj.ID, hdr(sig2), bytes.NewReader(body2)); err != nil {
		t.Fatal(err)
	}
	deploys = integrationJobs(t, e, prj.ID, integrations.JobDeploy)
	if j := e.WaitJob(t, deploys[len(deploys)-1].ID); j.State != scheduler.StateCompleted || len(deploys) != 2 {
		t.Fatalf("second deploy job (%d): %s %s", len(deploys), j.State, j.Error)
	}
	if i := integrationOf(t, e, p, prj.ID); len(i.Previews) != 1 || i.Previews[0].PreviewID != prvID {
		t.Fatalf("a second deployment made another preview: %+v", i.Previews)
	}
	// A production deployment makes no preview.
	body3, sig3 := deployatest.SignedEvent("whsec", "evt_3", "deployment.created", "main", "production")
	if _, err := svc.Receive(t.Context(), provider.DeployA, prj.ID, hdr(sig3), bytes.NewReader(body3)); err != nil {
		t.Fatal(err)
	}
	deploys = integrationJobs(t, e, prj.ID, integrations.JobDeploy)
	if j := e.WaitJob(t, deploys[len(deploys)-1].ID); j.State != scheduler.StateCompleted {
		t.Fatal(j.Error)
	}
	if i := integrationOf(t, e, p, prj.ID); len(i.Previews) != 1 {
		t.Fatalf("a production deployment made a preview: %+v", i.Previews)
	}

	// Disconnect: what was pushed is removed, the credentials are gone.
	del, err := svc.Delete(t.Context(), p, prj.ID, provider.DeployA)
	if err != nil || !del.Deleted || del.Job == nil {
		t.Fatalf("delete: %v %+v", err, del)
	}
	if j := e.WaitJob(t, del.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("remove job: %s", j.Error)
	}
	if vars := fake.Vars(); len(vars) != 0 {
		t.Fatalf("left at the platform: %+v", vars)
	}
	if i := integrationOf(t, e, p, prj.ID); i != nil {
		t.Fatalf("still listed: %+v", i)
	}
	if _, err := svc.Receive(t.Context(), provider.DeployA, prj.ID, hdr(sig2), bytes.NewReader(body2)); apperr.KindOf(err) != apperr.KindUnauthenticated {
		t.Fatalf("a webhook after the disconnect: %v", err)
	}
	seen := eventsOf(t, e, prj.ID)
	for _, typ := range []string{integrations.EventFailed, integrations.EventConnected, integrations.EventSynced, integrations.EventDisconnected} {
		if seen[typ] == 0 {
			t.Errorf("no %s event (seen %v)", typ, seen)
		}
	}
	if _, err := svc.Delete(t.Context(), p, prj.ID, provider.DeployA); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("a second delete: %v", err)
	}
	if _, err := svc.Put(t.Context(), p, prj.ID, provider.DeployA, &api.PutIntegrationRequest{Config: []byte(`{"targets":["staging"]}`)}); apperr.KindOf(err) != apperr.KindInvalid {
		t.Fatalf("a bad config: %v", err)
	}
	if _, err := svc.Put(t.Context(), p, prj.ID, "deploy_z", &api.PutIntegrationRequest{}); apperr.KindOf(err) != apperr.KindInvalid {
		t.Fatalf("an unknown provider: %v", err)
	}
}

// withCA is a pushed URL with the appliance CA's path, as the API hands the URLs out.
func withCA(raw string, e *appliancetest.Env) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	q.Set("sslrootcert", e.CA.CertPath())
	u.RawQuery = q.Encode()
	return u.String()
}

func mustValue(t *testing.T, f *deployatest.Server, key, branch string) string {
	t.Helper()
	v, ok := f.Value(key, branch, deploya.TargetPreview)
	if !ok {
		t.Fatalf("no %s for %q", key, branch)
	}
	return v
}
