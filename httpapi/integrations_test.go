package httpapi

import (
	"net/http"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/integrations/autha/authatest"
	"github.com/theappliance/appliance/appliance/integrations/authb/authbtest"
	"github.com/theappliance/appliance/appliance/integrations/authc/authctest"
	"github.com/theappliance/appliance/appliance/integrations/deploya"
	"github.com/theappliance/appliance/appliance/integrations/deploya/deployatest"
	"github.com/theappliance/appliance/appliance/integrations/deployb/deploybtest"
	"github.com/theappliance/appliance/appliance/integrations/edgec/edgectest"
	"github.com/theappliance/appliance/appliance/integrations/provider"
)

const (
	fixtureDeployAToken = "fixture-vercel-token"
	fixtureSecret       = "fixture-webhook-secret"
	// fixtureSvixSecret is auth_a's webhook secret: Svix's whsec_ and a base64 key.
	fixtureSvixSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	fixtureAuthAKey   = "sk_test_fixture"
	fixtureAuthCKey   = "sk_test_workos_fixture"
	fixtureAuthBID    = "fixture-client"
	fixtureAuthBKey   = "fixture-client-secret"
	fixtureAuthBHost  = "fixture.eu.auth0.com"
)

// platformFakes are the six providers' platforms in these tests: the real providers
// (appliance.IntegrationProviders) pointed at their local fakes.
type platformFakes struct {
	deployA *deployatest.Server
	deployB *deploybtest.Server
	edgeC   *edgectest.Server
	authA   *authatest.Server
	authB   *authbtest.Server
	authC   *authctest.Server
}

func startPlatformFakes(t testing.TB) platformFakes {
	f := platformFakes{deployA: deployatest.Start(t, fixtureDeployAToken, "prj_fixture"), deployB: deploybtest.Start(t), edgeC: edgectest.Start(t),
		authA: authatest.New(t, fixtureAuthAKey), authB: authbtest.New(t, fixtureAuthBHost, fixtureAuthBID, fixtureAuthBKey),
		authC: authctest.New(t, fixtureAuthCKey)}
	f.authA.Put(authatest.User{ID: "user_fixture", Email: "a@example.com", CreatedAt: time.Unix(1700000000, 0), UpdatedAt: time.Unix(1700000000, 0)})
	return f
}

// baseURLs point each provider at its fake.
func (f platformFakes) baseURLs() map[string]string {
	return map[string]string{provider.DeployA: f.deployA.URL, provider.DeployB: f.deployB.URL(), provider.EdgeC: f.edgeC.URL(),
		provider.AuthA: f.authA.URL, provider.AuthB: f.authB.URL, provider.AuthC: f.authC.URL}
}

// fixtureProviders are the appliance's own providers.
func fixtureProviders() []provider.Provider { return appliance.IntegrationProviders() }

// integrationFixtures connect prjA to every provider (with the webhook secrets the signed webhooks use)
// and give the integration routes their bodies, headers and query: each provider's webhook is signed as
// its platform signs (deploy_a's HMAC-SHA1, deploy_b's JWS, auth_a's Svix by the standardwebhooks
// library, auth_b's log stream bearer, auth_c's t=,v1=) at the appliance's clock.
func (f *fixtures) integrationFixtures() {
	b := f.b
	fk := b.fakes
	f.params["provider"] = fixtureParam{value: provider.DeployA}
	if f.signed == nil {
		f.signed = map[string]func() http.Header{}
	}
	f.query["project_id"], f.query["code"], f.query["state"] = f.prjA.ID, "fixture-code", "fixture-state"
	connects := map[string]any{
		"POST /v1/projects/{projectID}/integrations/deploy_a/connect": map[string]any{"deploy_a_project_id": "prj_fixture", "token": fixtureDeployAToken, "webhook_secret": fixtureSecret},
		"POST /v1/projects/{projectID}/integrations/deploy_b/connect": map[string]any{"site_id": fk.deployB.SiteID, "token": fk.deployB.Token, "webhook_secret": fixtureSecret},
		"POST /v1/projects/{projectID}/integrations/edge_c/connect": map[string]any{"account_id": fk.edgeC.AccountID, "api_token": fk.edgeC.Token,
			"config": map[string]any{"mode": "worker_secret", "script": "my-worker"}},
		"POST /v1/projects/{projectID}/integrations/auth_a/connect": map[string]any{"secret_key": fixtureAuthAKey, "webhook_secret": fixtureSvixSecret},
	}
	for route, body := range connects {
		f.bodies[route] = body
		r := b.do("POST", "/v1/projects/"+f.prjA.ID+"/integrations/"+route[len("POST /v1/projects/{projectID}/integrations/"):], b.adminKey, body)
		if r.status != http.StatusAccepted {
			b.t.Fatalf("%s: %d %s", route, r.status, r.body)
		}
	}
	puts := map[string]map[string]any{
		provider.AuthB: {"external_id": fixtureAuthBHost, "client_id": fixtureAuthBID, "client_secret": fixtureAuthBKey, "webhook_secret": fixtureSecret},
		provider.AuthC: {"token": fixtureAuthCKey, "external_id": "directory_fixture", "webhook_secret": fixtureSecret},
	}
	for name, creds := range puts {
		r := b.do("PUT", "/v1/projects/"+f.prjA.ID+"/integrations/"+name, b.adminKey, map[string]any{"credentials": creds})
		if r.status != http.StatusOK {
			b.t.Fatalf("put %s: %d %s", name, r.status, r.body)
		}
	}
	f.bodies["PUT /v1/projects/{projectID}/integrations/{provider}"] = map[string]any{"config": map[string]any{"targets": []string{"production"}}}
	// Each webhook a production deployment (no preview) or a user event, its signature made when sent.
	t0 := time.Unix(1700000001, 0)
	authA := authatest.EventBody("user.updated", authatest.User{ID: "user_fixture", Email: "a@example.com", UpdatedAt: t0}, t0)
	authC := authctest.EventBody("event_fixture", "dsync.user.deleted", authctest.User{ID: "directory_user_fixture", Directory: "directory_fixture",
		UpdatedAt: t0}, t0)
	deployA, sigA := deployatest.SignedEvent(fixtureSecret, "evt_fixture", "deployment.created", "main", "production")
	hB, deployB := deploybtest.Notification(fixtureSecret, deploybtest.Deploy{ID: "dpl_fixture", SiteID: fk.deployB.SiteID, State: "ready",
		Branch: "main", Context: "production"})
	webhooks := map[string]struct {
		body []byte
		sign func() http.Header
	}{
		provider.DeployA: {deployA, func() http.Header { return http.Header{deploya.SignatureHeader: {sigA}} }},
		provider.DeployB: {deployB, func() http.Header { return hB.Clone() }},
		provider.AuthA: {authA, func() http.Header {
			return authatest.Sign(b.t, fixtureSvixSecret, "msg_fixture", b.env.Clock.Now(), authA)
		}},
		provider.AuthB: {authbtest.LogBatch(authbtest.DeletionLog("log_fixture", "auth0|fixture", t0)), func() http.Header {
			return authbtest.Headers(fixtureSecret)
		}},
		provider.AuthC: {authC, func() http.Header { return authctest.Sign(fixtureSecret, b.env.Clock.Now(), authC) }},
	}
	for name, w := range webhooks {
		route := "POST /v1/integrations/" + name + "/webhook/{projectID}"
		f.bodies[route] = string(w.body)
		f.signed[route] = w.sign
	}
}
