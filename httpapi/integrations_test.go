package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"time"

	"github.com/theappliance/appliance/appliance/integrations/deploya"
	"github.com/theappliance/appliance/appliance/integrations/deploya/deployatest"
	"github.com/theappliance/appliance/appliance/integrations/provider"
)

const (
	fixtureDeployAToken = "fixture-vercel-token"
	fixtureSecret       = "fixture-webhook-secret"
	fixtureSigHeader    = "X-Fixture-Signature"
)

// fixtureProviders are the area's providers in these tests: deploy_a (against the bundle's fake
// platform) and, for the providers written elsewhere, stand-ins that verify a hex HMAC-SHA256 of the body
// in X-Fixture-Signature and act on no event (the real providers' own tests check theirs).
func fixtureProviders() []provider.Provider {
	return []provider.Provider{deploya.New(), standInPlatform{provider.DeployB}, standInPlatform{provider.EdgeC},
		standInDirectory{provider.AuthA}, standInDirectory{provider.AuthB}, standInDirectory{provider.AuthC}}
}

type standIn struct{ name string }

func (p standIn) Name() string           { return p.name }
func (p standIn) DefaultBaseURL() string { return "https://" + p.name + ".invalid" }
func (p standIn) ValidateConfig(raw json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`{}`), nil
}
func (p standIn) Check(context.Context, provider.Env) error { return nil }
func (p standIn) VerifyWebhook(env provider.Env, h http.Header, body []byte, _ time.Time) (string, error) {
	got, err := hex.DecodeString(h.Get(fixtureSigHeader))
	if err != nil || env.Credentials.WebhookSecret == "" || !hmac.Equal(got, fixtureSign(env.Credentials.WebhookSecret, body)) {
		return "", provider.ErrBadSignature
	}
	var ev struct{ ID string }
	if json.Unmarshal(body, &ev) != nil || ev.ID == "" {
		return "", provider.ErrBadSignature
	}
	return ev.ID, nil
}

func fixtureSign(secret string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return m.Sum(nil)
}

type standInPlatform standIn

func (p standInPlatform) Name() string           { return standIn(p).Name() }
func (p standInPlatform) DefaultBaseURL() string { return standIn(p).DefaultBaseURL() }
func (p standInPlatform) ValidateConfig(r json.RawMessage) (json.RawMessage, error) {
	return standIn(p).ValidateConfig(r)
}
func (p standInPlatform) Check(ctx context.Context, env provider.Env) error { return nil }
func (p standInPlatform) VerifyWebhook(env provider.Env, h http.Header, b []byte, now time.Time) (string, error) {
	return standIn(p).VerifyWebhook(env, h, b, now)
}
func (p standInPlatform) Push(context.Context, provider.Env, provider.Target, provider.Settings) ([]string, error) {
	return []string{"DATABASE_URL", "DIRECT_URL"}, nil
}
func (p standInPlatform) Remove(context.Context, provider.Env, provider.Target) error { return nil }
func (p standInPlatform) DeployEvent([]byte) (provider.DeployEvent, error) {
	return provider.DeployEvent{}, provider.ErrIgnored
}

type standInDirectory standIn

func (p standInDirectory) Name() string           { return standIn(p).Name() }
func (p standInDirectory) DefaultBaseURL() string { return standIn(p).DefaultBaseURL() }
func (p standInDirectory) ValidateConfig(r json.RawMessage) (json.RawMessage, error) {
	return standIn(p).ValidateConfig(r)
}
func (p standInDirectory) Check(ctx context.Context, env provider.Env) error { return nil }
func (p standInDirectory) VerifyWebhook(env provider.Env, h http.Header, b []byte, now time.Time) (string, error) {
	return standIn(p).VerifyWebhook(env, h, b, now)
}
func (p standInDirectory) ListUsers(context.Context, provider.Env, string) ([]provider.User, string, error) {
	return nil, "", nil
}
func (p standInDirectory) UserEvent([]byte) (provider.UserEvent, error) {
	return provider.UserEvent{}, provider.ErrIgnored
}

// integrationFixtures connect prjA to every provider (with the webhook secret the signed webhooks use) and
// give the integration routes their bodies, headers and query.
func (f *fixtures) integrationFixtures() {
	b := f.b
	f.params["provider"] = fixtureParam{value: provider.DeployA}
	if f.signed == nil {
		f.signed = map[string]func() http.Header{}
	}
	f.query["project_id"], f.query["code"], f.query["state"] = f.prjA.ID, "fixture-code", "fixture-state"
	connects := map[string]any{
		"POST /v1/projects/{projectID}/integrations/deploy_a/connect": map[string]any{"deploy_a_project_id": "prj_fixture", "token": fixtureDeployAToken, "webhook_secret": fixtureSecret},
		"POST /v1/projects/{projectID}/integrations/deploy_b/connect": map[string]any{"site_id": "site_fixture", "token": "fixture", "webhook_secret": fixtureSecret},
		"POST /v1/projects/{projectID}/integrations/edge_c/connect":   map[string]any{"account_id": "acct_fixture", "api_token": "fixture"},
		"POST /v1/projects/{projectID}/integrations/auth_a/connect":   map[string]any{"secret_key": "sk_fixture", "webhook_secret": fixtureSecret},
	}
	for route, body := range connects {
		f.bodies[route] = body
		r := b.do("POST", "/v1/projects/"+f.prjA.ID+"/integrations/"+route[len("POST /v1/projects/{projectID}/integrations/"):], b.adminKey, body)
		if r.status != http.StatusAccepted {
			b.t.Fatalf("%s: %d %s", route, r.status, r.body)
		}
	}
	for _, name := range []string{provider.AuthB, provider.AuthC} {
		r := b.do("PUT", "/v1/projects/"+f.prjA.ID+"/integrations/"+name, b.adminKey,
			map[string]any{"credentials": map[string]any{"token": "fixture", "external_id": "fixture", "webhook_secret": fixtureSecret}})
		if r.status != http.StatusOK {
			b.t.Fatalf("put %s: %d %s", name, r.status, r.body)
		}
	}
	f.bodies["PUT /v1/projects/{projectID}/integrations/{provider}"] = map[string]any{"config": map[string]any{"targets": []string{"production"}}}
	// deploy_a's webhook: a production deployment (no preview), signed as Vercel signs; the others signed
	// for the stand-ins.
	body, sig := deployatest.SignedEvent(fixtureSecret, "evt_fixture", "deployment.created", "main", "production")
	route := "POST /v1/integrations/deploy_a/webhook/{projectID}"
	f.bodies[route] = string(body)
	f.signed[route] = func() http.Header { return http.Header{deploya.SignatureHeader: {sig}} }
	for _, name := range []string{provider.DeployB, provider.AuthA, provider.AuthB, provider.AuthC} {
		route := "POST /v1/integrations/" + name + "/webhook/{projectID}"
		body := []byte(`{"id":"evt_fixture_` + name + `","type":"fixture"}`)
		f.bodies[route] = string(body)
		f.signed[route] = func() http.Header {
			return http.Header{fixtureSigHeader: {hex.EncodeToString(fixtureSign(fixtureSecret, body))}}
		}
	}
}
