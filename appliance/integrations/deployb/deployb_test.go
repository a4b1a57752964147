package deployb_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/theappliance/appliance/appliance/integrations/deployb"
	"github.com/theappliance/appliance/appliance/integrations/deployb/deploybtest"
	"github.com/theappliance/appliance/appliance/integrations/provider"
)

func setup(t *testing.T, config string) (provider.Platform, provider.Env, *deploybtest.Server) {
	t.Helper()
	fake := deploybtest.Start(t)
	p := deployb.New()
	cfg, err := p.ValidateConfig(json.RawMessage(config))
	if err != nil {
		t.Fatal(err)
	}
	env := provider.Env{HTTP: fake.Client(), BaseURL: fake.URL(), Config: cfg,
		Credentials: provider.Credentials{Token: fake.Token, ExternalID: fake.SiteID, WebhookSecret: "jws-secret"}}
	return p, env, fake
}

func settings(pooled, direct string) provider.Settings {
	return provider.Settings{Vars: map[string]string{"DATABASE_URL": pooled, "DIRECT_URL": direct}, Direct: direct}
}

// writes are the calls that change something.
func writes(calls []deploybtest.Call) []string {
	var out []string
	for _, c := range calls {
		if c.Method != http.MethodGet {
			out = append(out, c.Method+" "+c.Path)
		}
	}
	return out
}

func wantValue(t *testing.T, fake *deploybtest.Server, key, context, branch, want string) {
	t.Helper()
	got, ok := fake.Value(key, context, branch)
	if want == "" {
		if ok {
			t.Fatalf("%s[%s %s] = %q, want none", key, context, branch, got)
		}
		return
	}
	if !ok || got != want {
		t.Fatalf("%s[%s %s] = %q (%v), want %q", key, context, branch, got, ok, want)
	}
}

func TestPushProductionIsIdempotent(t *testing.T) {
	ctx := context.Background()
	p, env, fake := setup(t, "")
	pushed, err := p.Push(ctx, env, provider.Target{}, settings("postgres://pooled", "postgres://direct"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pushed, []string{"DATABASE_URL", "DIRECT_URL"}) {
		t.Fatalf("pushed %v", pushed)
	}
	wantValue(t, fake, "DATABASE_URL", "production", "", "postgres://pooled")
	wantValue(t, fake, "DIRECT_URL", "production", "", "postgres://direct")
	for _, c := range fake.Calls() {
		if c.Path != "/api/v1/sites/"+fake.SiteID && !strings.HasPrefix(c.Path, "/api/v1/accounts/"+fake.AccountID+"/env") {
			t.Fatalf("call outside the documented paths: %+v", c)
		}
		if c.Path != "/api/v1/sites/"+fake.SiteID && c.Query != "site_id="+fake.SiteID {
			t.Fatalf("env call without the site: %+v", c)
		}
	}

	fake.ResetCalls()
	if _, err := p.Push(ctx, env, provider.Target{}, settings("postgres://pooled", "postgres://direct")); err != nil {
		t.Fatal(err)
	}
	if w := writes(fake.Calls()); len(w) != 0 {
		t.Fatalf("a second push of the same settings wrote %v", w)
	}

	// A rotation: only the changed value is set, with setEnvVarValue.
	fake.ResetCalls()
	if _, err := p.Push(ctx, env, provider.Target{}, settings("postgres://pooled2", "postgres://direct")); err != nil {
		t.Fatal(err)
	}
	if w := writes(fake.Calls()); !slices.Equal(w, []string{"PATCH /api/v1/accounts/" + fake.AccountID + "/env/DATABASE_URL"}) {
		t.Fatalf("writes %v", w)
	}
	wantValue(t, fake, "DATABASE_URL", "production", "", "postgres://pooled2")
	if v, _ := fake.Var("DATABASE_URL"); len(v.Values) != 1 {
		t.Fatalf("values %+v", v.Values)
	}
}

func TestPushContextsAndCA(t *testing.T) {
	ctx := context.Background()
	p, env, fake := setup(t, `{"contexts":["production","deploy-preview"],"variables":{"pooled":"PG_URL","ca":"PG_CA"}}`)
	s := provider.Settings{Vars: map[string]string{"PG_URL": "pooled", "DIRECT_URL": "direct", "PG_CA": "-----BEGIN CERTIFICATE-----"}}
	pushed, err := p.Push(ctx, env, provider.Target{}, s)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pushed, []string{"DIRECT_URL", "PG_CA", "PG_URL"}) {
		t.Fatalf("pushed %v", pushed)
	}
	for _, c := range []string{"production", "deploy-preview"} {
		wantValue(t, fake, "PG_URL", c, "", "pooled")
		wantValue(t, fake, "PG_CA", c, "", "-----BEGIN CERTIFICATE-----")
	}
	wantValue(t, fake, "PG_URL", "branch-deploy", "", "")

	if err := p.Remove(ctx, env, provider.Target{}); err != nil {
		t.Fatal(err)
	}
	if v := fake.Vars(); len(v) != 0 {
		t.Fatalf("left after remove: %v", v)
	}
}

func TestBranchTargets(t *testing.T) {
	ctx := context.Background()
	p, env, fake := setup(t, "")
	if _, err := p.Push(ctx, env, provider.Target{}, settings("prod-pooled", "prod-direct")); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"feature/login", "fix-1"} {
		if _, err := p.Push(ctx, env, provider.Target{Branch: b}, settings(b+"-pooled", b+"-direct")); err != nil {
			t.Fatal(err)
		}
	}
	wantValue(t, fake, "DATABASE_URL", "production", "", "prod-pooled")
	wantValue(t, fake, "DATABASE_URL", "branch", "feature/login", "feature/login-pooled")
	wantValue(t, fake, "DIRECT_URL", "branch", "fix-1", "fix-1-direct")

	// Removing one branch's values leaves production's and the other branch's.
	for range 2 {
		if err := p.Remove(ctx, env, provider.Target{Branch: "feature/login"}); err != nil {
			t.Fatal(err)
		}
	}
	wantValue(t, fake, "DATABASE_URL", "branch", "feature/login", "")
	wantValue(t, fake, "DATABASE_URL", "branch", "fix-1", "fix-1-pooled")
	wantValue(t, fake, "DATABASE_URL", "production", "", "prod-pooled")

	// A person's value of another context survives production's removal; the variable stays.
	fake.SetValue("DIRECT_URL", "dev", "", "postgres://localhost/dev")
	if err := p.Remove(ctx, env, provider.Target{}); err != nil {
		t.Fatal(err)
	}
	wantValue(t, fake, "DIRECT_URL", "production", "", "")
	wantValue(t, fake, "DIRECT_URL", "dev", "", "postgres://localhost/dev")
	if err := p.Remove(ctx, env, provider.Target{Branch: "fix-1"}); err != nil {
		t.Fatal(err)
	}
	if v := fake.Vars(); !slices.Equal(v, []string{"DIRECT_URL"}) {
		t.Fatalf("left %v", v)
	}
	// Removing what is gone is not an error.
	if err := p.Remove(ctx, env, provider.Target{Branch: "never-pushed"}); err != nil {
		t.Fatal(err)
	}
}

func TestCredentials(t *testing.T) {
	ctx := context.Background()
	p, env, fake := setup(t, "")
	if err := p.Check(ctx, env); err != nil {
		t.Fatalf("check: %v", err)
	}
	bad := env
	bad.Credentials.Token = "nfp_wrong_secret_token"
	for name, err := range map[string]error{
		"check": p.Check(ctx, bad),
		"push": func() error {
			_, err := p.Push(ctx, bad, provider.Target{}, settings("a", "b"))
			return err
		}(),
		"remove": p.Remove(ctx, bad, provider.Target{}),
	} {
		if !errors.Is(err, provider.ErrCredentials) {
			t.Fatalf("%s with a wrong token: %v, want ErrCredentials", name, err)
		}
		if strings.Contains(err.Error(), "nfp_wrong_secret_token") || strings.Contains(err.Error(), "Access Denied") {
			t.Fatalf("%s: the error tells the token or the answer: %v", name, err)
		}
	}
	other := env
	other.Credentials.ExternalID = "another-site"
	if err := p.Check(ctx, other); !errors.Is(err, provider.ErrCredentials) {
		t.Fatalf("check of a site the token cannot see: %v", err)
	}
	none := env
	none.Credentials.Token = ""
	if err := p.Check(ctx, none); !errors.Is(err, provider.ErrCredentials) {
		t.Fatalf("check without a token: %v", err)
	}
	if v := fake.Vars(); len(v) != 0 {
		t.Fatalf("refused calls changed %v", v)
	}

	fake.Fail(http.StatusServiceUnavailable)
	err := p.Check(ctx, env)
	if err == nil || errors.Is(err, provider.ErrCredentials) || !strings.Contains(err.Error(), "503") || strings.Contains(err.Error(), "failing") {
		t.Fatalf("check with the platform down: %v", err)
	}
	fake.Fail(0)
	nohttp := env
	nohttp.HTTP = nil
	if err := p.Check(ctx, nohttp); err == nil {
		t.Fatal("a check without the policy's client worked")
	}
}

func TestValidateConfig(t *testing.T) {
	p := deployb.New()
	got, err := p.ValidateConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `{"contexts":["production"],"variables":{"pooled":"DATABASE_URL","direct":"DIRECT_URL","ca":""},"preview_databases":true,"preview_mode":"clone"}` {
		t.Fatalf("defaults %s", got)
	}
	got, err = p.ValidateConfig(json.RawMessage(`{"contexts":["production","branch-deploy","production"],"variables":{"direct":"PG_DIRECT"},"preview_databases":false,"preview_mode":"empty"}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `{"contexts":["production","branch-deploy"],"variables":{"pooled":"DATABASE_URL","direct":"PG_DIRECT","ca":""},"preview_databases":false,"preview_mode":"empty"}` {
		t.Fatalf("normalized %s", got)
	}
	for _, c := range []struct{ in, field string }{
		{`{"contexts":["staging"]}`, "contexts[0]"},
		{`{"contexts":["production","all"]}`, "contexts[1]"},
		{`{"contexts":["branch"]}`, "contexts[0]"},
		{`{"variables":{"pooled":"1DATABASE"}}`, "variables.pooled"},
		{`{"variables":{"direct":"DIRECT URL"}}`, "variables.direct"},
		{`{"variables":{"ca":"CA-PEM"}}`, "variables.ca"},
		{`{"variables":{"pooled":"X","direct":"X"}}`, "variables"},
		{`{"context":["production"]}`, `"context"`},
		{`{"contexts":"production"}`, "contexts"},
		{`[]`, "deploy_b config"},
	} {
		_, err := p.ValidateConfig(json.RawMessage(c.in))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v, want an error naming %s", c.in, err, c.field)
		}
	}
}

func verify(h http.Header, body []byte, secret string) (string, error) {
	env := provider.Env{Credentials: provider.Credentials{WebhookSecret: secret}}
	return deployb.New().VerifyWebhook(env, h, body, time.Now())
}

func TestVerifyWebhook(t *testing.T) {
	const secret = "short-secret"
	h, body := deploybtest.Notification(secret, deploybtest.Deploy{ID: "5ebc34bf4fea0b01f02efa3a", SiteID: "site", State: "ready", Branch: "feature/login", Context: "deploy-preview"})
	id, err := verify(h, body, secret)
	if err != nil {
		t.Fatal(err)
	}
	if id != "5ebc34bf4fea0b01f02efa3a:ready" {
		t.Fatalf("event id %q", id)
	}

	// Signed but no deploy: accepted, deduplicated by its hash (DeployEvent ignores it).
	odd := []byte(`{"hello":"netlify"}`)
	if id, err := verify(http.Header{"X-Webhook-Signature": {deploybtest.Sign(secret, odd)}}, odd, secret); err != nil || id != "sha256:"+hexSHA(odd) {
		t.Fatalf("a signed body that is no deploy: %q, %v", id, err)
	}

	// A second implementation: go-jose's signer (its keys must be 32 bytes or more).
	long := strings.Repeat("k", 40)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: []byte(long)}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	claims := func(b []byte) []byte {
		c, _ := json.Marshal(map[string]string{"iss": "netlify", "sha256": hexSHA(b)})
		return c
	}
	jws, err := signer.Sign(claims(body))
	if err != nil {
		t.Fatal(err)
	}
	compact, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := verify(http.Header{"X-Webhook-Signature": {compact}}, body, long); err != nil {
		t.Fatalf("go-jose's JWS: %v", err)
	}

	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaSigner, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: rsaKey}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rsaJWS, _ := rsaSigner.Sign(claims(body))
	rsaCompact, _ := rsaJWS.CompactSerialize()
	noneJWS := strings.Join(strings.Split(deploybtest.SignRaw(secret, `{"alg":"none","typ":"JWT"}`, claims(body)), ".")[:2], ".") + "."
	wrongIss, _ := json.Marshal(map[string]string{"iss": "someone", "sha256": hexSHA(body)})
	expired, _ := json.Marshal(map[string]any{"iss": "netlify", "sha256": hexSHA(body), "exp": time.Now().Add(-time.Hour).Unix()})
	tampered := []byte(strings.Replace(string(body), "feature/login", "feature/logout", 1))
	sig := h.Get("X-Webhook-Signature")
	for name, c := range map[string]struct {
		sig, secret string
		body        []byte
	}{
		"tampered body":       {sig, secret, tampered},
		"wrong secret":        {sig, "another-secret", body},
		"no secret":           {sig, "", body},
		"missing header":      {"", secret, body},
		"alg none":            {noneJWS, secret, body},
		"alg none, no sig":    {strings.TrimSuffix(noneJWS, "."), secret, body},
		"RS256 header, HMAC":  {deploybtest.SignRaw(secret, `{"alg":"RS256","typ":"JWT"}`, claims(body)), secret, body},
		"RS256":               {rsaCompact, secret, body},
		"HS512":               {hs512(t, secret, claims(body)), secret, body},
		"wrong issuer":        {deploybtest.SignRaw(secret, `{"alg":"HS256","typ":"JWT"}`, wrongIss), secret, body},
		"expired":             {deploybtest.SignRaw(secret, `{"alg":"HS256","typ":"JWT"}`, expired), secret, body},
		"hash of another":     {deploybtest.Sign(secret, tampered), secret, body},
		"signature truncated": {sig[:len(sig)-4], secret, body},
		"garbage":             {"not.a.jws", secret, body},
	} {
		hh := http.Header{}
		if c.sig != "" {
			hh.Set("X-Webhook-Signature", c.sig)
		}
		if _, err := verify(hh, c.body, c.secret); !errors.Is(err, provider.ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", name, err)
		}
	}
}

func hs512(t *testing.T, secret string, claims []byte) string {
	key := []byte(secret + strings.Repeat("x", 64))
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS512, Key: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	j, _ := s.Sign(claims)
	c, _ := j.CompactSerialize()
	return c
}

func hexSHA(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func TestDeployEvent(t *testing.T) {
	p := deployb.New()
	for _, c := range []struct {
		d    deploybtest.Deploy
		want provider.DeployEvent
		err  error
	}{
		{deploybtest.Deploy{ID: "d1", State: "ready", Branch: "main", Context: "production"}, provider.DeployEvent{ID: "d1:ready", Branch: "main", Production: true}, nil},
		{deploybtest.Deploy{ID: "d2", State: "building", Branch: "feature/x", Context: "deploy-preview"}, provider.DeployEvent{ID: "d2:building", Branch: "feature/x"}, nil},
		{deploybtest.Deploy{ID: "d3", State: "error", Branch: "staging", Context: "branch-deploy"}, provider.DeployEvent{ID: "d3:error", Branch: "staging"}, nil},
		{deploybtest.Deploy{ID: "d4", State: "ready", Branch: "main", Context: "dev"}, provider.DeployEvent{}, provider.ErrIgnored},
		{deploybtest.Deploy{ID: "d5", State: "ready", Context: "deploy-preview"}, provider.DeployEvent{}, provider.ErrIgnored},
	} {
		_, body := deploybtest.Notification("s", c.d)
		got, err := p.DeployEvent(body)
		if !errors.Is(err, c.err) || got != c.want {
			t.Errorf("%+v: %+v, %v; want %+v, %v", c.d, got, err, c.want, c.err)
		}
	}
	if _, err := p.DeployEvent([]byte("{")); err == nil || errors.Is(err, provider.ErrIgnored) {
		t.Fatalf("a body that is not json: %v", err)
	}
}

type countingTransport struct {
	n    int
	next http.RoundTripper
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n++
	return c.next.RoundTrip(r)
}

// Every call goes through Env.HTTP (the outbound policy's client), none through another.
func TestUsesEnvClient(t *testing.T) {
	ctx := context.Background()
	p, env, fake := setup(t, "")
	ct := &countingTransport{next: fake.Client().Transport}
	env.HTTP = &http.Client{Transport: ct}
	if err := p.Check(ctx, env); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Push(ctx, env, provider.Target{Branch: "b"}, settings("a", "b")); err != nil {
		t.Fatal(err)
	}
	if err := p.Remove(ctx, env, provider.Target{Branch: "b"}); err != nil {
		t.Fatal(err)
	}
	if calls := len(fake.Calls()); ct.n != calls || calls == 0 {
		t.Fatalf("%d requests through Env.HTTP, %d answered", ct.n, calls)
	}
}
