package deploya_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/integrations/deploya"
	"github.com/theappliance/appliance/appliance/integrations/provider"
)

// TestVerifyWebhook: x-vercel-signature is the hex HMAC-SHA1 of the raw body (the vector computed with
// Python's hmac, not this package); any other signature, secret or body is refused.
func TestVerifyWebhook(t *testing.T) {
	body := []byte(`{"id":"evt_1","type":"deployment.created","payload":{"target":null,"deployment":{"meta":{"githubCommitRef":"feat/x"}}}}`)
	const sig = "3b3a67262c84a5b3f9d5adce44b179ad3cace20e"
	p := deploya.New()
	env := provider.Env{Credentials: provider.Credentials{WebhookSecret: "secret"}}
	id, err := p.VerifyWebhook(env, http.Header{"X-Vercel-Signature": {sig}}, body, time.Now())
	if err != nil || id != "evt_1" {
		t.Fatalf("a good signature: %q %v", id, err)
	}
	ev, err := p.DeployEvent(body)
	if err != nil || ev.Branch != "feat/x" || ev.Production || ev.Closed {
		t.Fatalf("event %+v %v", ev, err)
	}
	for name, c := range map[string]struct {
		h    http.Header
		body []byte
		env  provider.Env
	}{
		"no signature":   {http.Header{}, body, env},
		"another body":   {http.Header{"X-Vercel-Signature": {sig}}, append([]byte(" "), body...), env},
		"another secret": {http.Header{"X-Vercel-Signature": {sig}}, body, provider.Env{Credentials: provider.Credentials{WebhookSecret: "other"}}},
		"no secret":      {http.Header{"X-Vercel-Signature": {sig}}, body, provider.Env{}},
		"not hex":        {http.Header{"X-Vercel-Signature": {"zz" + sig[2:]}}, body, env},
	} {
		if _, err := p.VerifyWebhook(c.env, c.h, c.body, time.Now()); !errors.Is(err, provider.ErrBadSignature) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := p.DeployEvent([]byte(`{"id":"e","type":"project.created"}`)); !errors.Is(err, provider.ErrIgnored) {
		t.Errorf("another event type: %v", err)
	}
}

// TestValidateConfig: the defaults, and refusals naming the field.
func TestValidateConfig(t *testing.T) {
	p := deploya.New()
	out, err := p.ValidateConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	var c deploya.Config
	if err := json.Unmarshal(out, &c); err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.Targets, ",") != "preview,production" || c.Variables.Pooled != "DATABASE_URL" || c.Variables.Direct != "DIRECT_URL" ||
		*c.Variables.CA != "DATABASE_CA_CERT" || !*c.PreviewDatabases || !*c.DeletePreviewsOnClose || c.PreviewMode != "clone" {
		t.Fatalf("defaults: %s", out)
	}
	for raw, field := range map[string]string{
		`{"targets":["staging"]}`:                   "targets",
		`{"variables":{"pooled":"1BAD"}}`:           "variables.pooled",
		`{"variables":{"pooled":"X","direct":"X"}}`: "differ",
		`{"preview_mode":"copy"}`:                   "preview_mode",
		`{"nope":true}`:                             "nope",
		`{"variables":{"ca":"DIRECT_URL"}}`:         "differ",
	} {
		if _, err := p.ValidateConfig(json.RawMessage(raw)); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v", raw, err)
		}
	}
	if out, err := p.ValidateConfig(json.RawMessage(`{"variables":{"ca":""}}`)); err != nil || !strings.Contains(string(out), `"ca":""`) {
		t.Errorf("no CA: %s %v", out, err)
	}
}
