package edgec_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/integrations/edgec"
	"github.com/theappliance/appliance/appliance/integrations/edgec/edgectest"
	"github.com/theappliance/appliance/appliance/integrations/provider"
)

func setup(t *testing.T, config string) (provider.Platform, provider.Env, *edgectest.Server) {
	t.Helper()
	fake := edgectest.Start(t)
	p := edgec.New()
	cfg, err := p.ValidateConfig(json.RawMessage(config))
	if err != nil {
		t.Fatal(err)
	}
	env := provider.Env{HTTP: fake.Client(), BaseURL: fake.URL(), Config: cfg,
		Credentials: provider.Credentials{Token: fake.Token, ExternalID: fake.AccountID}}
	return p, env, fake
}

const direct = "postgres://app_owner:s3cret%2Fpw@db.example.com:6543/app?sslmode=verify-full"

// newCA is a self-signed CA certificate's PEM.
func newCA(cn string) string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

var testCA = newCA("appliance test CA")

func settings(pooled, direct string) provider.Settings {
	return provider.Settings{Vars: map[string]string{"DATABASE_URL": pooled, "DIRECT_URL": direct}, Direct: direct, CACert: testCA}
}

// verifies fails unless the config verifies the server (verify-full) against the uploaded certificate
// whose PEM is ca, a CA certificate named by edge_c; it returns the certificate.
func verifies(t *testing.T, fake *edgectest.Server, c edgectest.Hyperdrive, ca string) edgectest.Certificate {
	t.Helper()
	if c.MTLS == nil || c.MTLS.SSLMode != "verify-full" || c.MTLS.CACertificateID == "" {
		t.Fatalf("config %s: mtls %+v, want verify-full with a CA", c.Name, c.MTLS)
	}
	cert, ok := fake.Certificate(c.MTLS.CACertificateID)
	if !ok || !cert.CA || cert.Certificates != ca || !strings.HasPrefix(cert.Name, "appliance-ca-") && !strings.HasPrefix(cert.Name, "shop-ca-") {
		t.Fatalf("config %s names certificate %+v (found %v), want the CA uploaded as a CA", c.Name, cert, ok)
	}
	return cert
}

func writes(calls []edgectest.Call) []string {
	var out []string
	for _, c := range calls {
		if c.Method != http.MethodGet {
			out = append(out, c.Method+" "+c.Path)
		}
	}
	return out
}

func TestHyperdrive(t *testing.T) {
	ctx := context.Background()
	p, env, fake := setup(t, "")
	if err := p.Check(ctx, env); err != nil {
		t.Fatalf("check: %v", err)
	}
	pushed, err := p.Push(ctx, env, provider.Target{}, settings("postgres://pooled", direct))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pushed, []string{"appliance-production"}) {
		t.Fatalf("pushed %v", pushed)
	}
	c, ok := fake.Config("appliance-production")
	want := edgectest.Origin{Host: "db.example.com", Port: 6543, Database: "app", User: "app_owner", Password: "s3cret/pw", Scheme: "postgres"}
	if !ok || c.Origin != want {
		t.Fatalf("config %+v, want origin %+v", c, want)
	}
	cert := verifies(t, fake, c, testCA)

	// Again: the same config is updated in place (PUT by id), not duplicated.
	fake.ResetCalls()
	rotated := strings.Replace(direct, "s3cret%2Fpw", "n3w", 1)
	if _, err := p.Push(ctx, env, provider.Target{}, settings("postgres://pooled", rotated)); err != nil {
		t.Fatal(err)
	}
	if w := writes(fake.Calls()); !slices.Equal(w, []string{"PUT /client/v4/accounts/" + fake.AccountID + "/hyperdrive/configs/" + c.ID}) {
		t.Fatalf("writes %v", w)
	}
	if c2, _ := fake.Config("appliance-production"); c2.ID != c.ID || c2.Origin.Password != "n3w" || len(fake.Configs()) != 1 ||
		verifies(t, fake, c2, testCA).ID != cert.ID || len(fake.Certificates()) != 1 {
		t.Fatalf("after the update: %+v (%d configs, certificates %+v)", c2, len(fake.Configs()), fake.Certificates())
	}

	// A branch's preview has its own config; removing it leaves production's.
	pushed, err = p.Push(ctx, env, provider.Target{Branch: "Feature/Login"}, settings("x", strings.Replace(direct, "/app?", "/preview?", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if len(pushed) != 1 || !strings.HasPrefix(pushed[0], "appliance-preview-feature-login-") {
		t.Fatalf("branch pushed %v", pushed)
	}
	if bc, ok := fake.Config(pushed[0]); !ok || verifies(t, fake, bc, testCA).ID != cert.ID {
		t.Fatalf("config %s: %+v, want production's CA certificate reused", pushed[0], bc)
	}
	for range 2 {
		if err := p.Remove(ctx, env, provider.Target{Branch: "Feature/Login"}); err != nil {
			t.Fatal(err)
		}
	}
	if got := fake.Configs(); len(got) != 1 || got[0].Name != "appliance-production" {
		t.Fatalf("configs %+v", got)
	}
	if got := fake.Certificates(); len(got) != 1 {
		t.Fatalf("production's CA certificate went with the branch: %+v", got)
	}
	if err := p.Remove(ctx, env, provider.Target{}); err != nil {
		t.Fatal(err)
	}
	if got := fake.Configs(); len(got) != 0 {
		t.Fatalf("configs %+v", got)
	}
	if got := fake.Certificates(); len(got) != 0 {
		t.Fatalf("the CA certificate outlived the last config: %+v", got)
	}
	if err := p.Remove(ctx, env, provider.Target{}); err != nil {
		t.Fatalf("removing what is gone: %v", err)
	}
}

// The appliance's CA is uploaded once per CA: a replaced CA gets its own certificate, the old one goes
// once no config names it; a certificate edge_c did not upload is never touched; no CA, no push.
func TestHyperdriveCA(t *testing.T) {
	ctx := context.Background()
	p, env, fake := setup(t, "")
	// Someone's own certificates in the account: one unused, and one of another config whose name
	// starts like our certificates'.
	foreign := newCA("someone else")
	fake.AddCertificate("appliance-ca", foreign, true)
	other, _ := p.ValidateConfig(json.RawMessage(`{"name":"appliance-ca-0123456789abcdef"}`))
	oenv := env
	oenv.Config = other
	fs := settings("x", direct)
	fs.CACert = foreign
	if _, err := p.Push(ctx, oenv, provider.Target{}, fs); err != nil {
		t.Fatal(err)
	}
	if err := p.Remove(ctx, oenv, provider.Target{}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Push(ctx, oenv, provider.Target{}, fs); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Push(ctx, env, provider.Target{}, settings("x", direct)); err != nil {
		t.Fatal(err)
	}
	c, _ := fake.Config("appliance-production")
	first := verifies(t, fake, c, testCA)
	if _, err := p.Push(ctx, env, provider.Target{Branch: "feature"}, settings("x", direct)); err != nil {
		t.Fatal(err)
	}

	// A new CA: production's config moves to a new certificate; the old one stays while the branch's
	// config names it, and goes when the branch moves too.
	rotated := newCA("appliance test CA 2")
	s := settings("x", direct)
	s.CACert = rotated
	if _, err := p.Push(ctx, env, provider.Target{}, s); err != nil {
		t.Fatal(err)
	}
	c, _ = fake.Config("appliance-production")
	second := verifies(t, fake, c, rotated)
	if second.ID == first.ID {
		t.Fatal("a new CA reused the old CA's certificate")
	}
	if _, ok := fake.Certificate(first.ID); !ok {
		t.Fatal("the old CA's certificate went while the branch's config names it")
	}
	if _, err := p.Push(ctx, env, provider.Target{Branch: "feature"}, s); err != nil {
		t.Fatal(err)
	}
	if _, ok := fake.Certificate(first.ID); ok {
		t.Fatal("the old CA's certificate outlived every config naming it")
	}
	for _, tg := range []provider.Target{{Branch: "feature"}, {}} {
		if err := p.Remove(ctx, env, tg); err != nil {
			t.Fatal(err)
		}
	}
	// What is left is someone's certificate and the other config's.
	if got := fake.Certificates(); len(got) != 2 || got[0].Name != "appliance-ca" || !strings.HasPrefix(got[1].Name, "appliance-ca-0123456789abcdef-ca-") {
		t.Fatalf("certificates left %+v", got)
	}

	// No CA, or a PEM that is none: nothing is written.
	fake.ResetCalls()
	for _, ca := range []string{"", "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n", "not pem"} {
		s := settings("x", direct)
		s.CACert = ca
		if _, err := p.Push(ctx, env, provider.Target{}, s); err == nil {
			t.Fatalf("pushed with CA %q", ca)
		}
	}
	if w := writes(fake.Calls()); len(w) != 0 {
		t.Fatalf("pushes without a CA wrote %v", w)
	}
}

func TestHyperdriveNeedsAPublicHost(t *testing.T) {
	ctx := context.Background()
	p, env, fake := setup(t, `{"name":"shop"}`)
	for _, d := range []string{
		"postgres://u:p@127.0.0.1:5432/db",
		"postgres://u:p@localhost/db",
		"postgres://u:p@10.1.2.3/db",
		"postgres://u:p@[::1]:5432/db",
		"postgres://u:p@169.254.169.254/db",
		"postgres://u:p@db.example.com/",
		"postgres://db.example.com/db",
		"mysql://u:p@db.example.com/db",
		"",
	} {
		if _, err := p.Push(ctx, env, provider.Target{}, settings("x", d)); err == nil {
			t.Errorf("pushed %q", d)
		} else if strings.Contains(err.Error(), ":p@") {
			t.Errorf("the error tells the password: %v", err)
		}
	}
	if w := writes(fake.Calls()); len(w) != 0 {
		t.Fatalf("refused pushes wrote %v", w)
	}
	pushed, err := p.Push(ctx, env, provider.Target{}, settings("x", "postgresql://u:p@203.0.113.7/db"))
	if err != nil || !slices.Equal(pushed, []string{"shop-production"}) {
		t.Fatalf("a public address: %v %v", pushed, err)
	}
	if c, _ := fake.Config("shop-production"); c.Origin.Port != 5432 || c.Origin.Scheme != "postgresql" {
		t.Fatalf("origin %+v", c.Origin)
	}
}

func TestWorkerSecrets(t *testing.T) {
	ctx := context.Background()
	p, env, fake := setup(t, `{"mode":"worker_secret","script":"my-worker","variables":{"ca":"PG_CA"}}`)
	if err := p.Check(ctx, env); err != nil {
		t.Fatalf("check: %v", err)
	}
	s := settings("postgres://pooled", direct)
	s.Vars["PG_CA"] = "-----BEGIN CERTIFICATE-----"
	for range 2 {
		pushed, err := p.Push(ctx, env, provider.Target{}, s)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(pushed, []string{"DATABASE_URL", "DIRECT_URL", "PG_CA"}) {
			t.Fatalf("pushed %v", pushed)
		}
	}
	got := fake.Secrets("my-worker")
	if len(got) != 3 || got["DATABASE_URL"] != "postgres://pooled" || got["DIRECT_URL"] != direct || got["PG_CA"] == "" {
		t.Fatalf("secrets %v", got)
	}
	if len(fake.Configs()) != 0 {
		t.Fatal("worker_secret made a hyperdrive config")
	}
	if _, err := p.Push(ctx, env, provider.Target{Branch: "feature"}, s); err == nil {
		t.Fatal("a branch push of worker secrets worked")
	}
	if err := p.Remove(ctx, env, provider.Target{Branch: "feature"}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := p.Remove(ctx, env, provider.Target{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := fake.Secrets("my-worker"); len(got) != 0 {
		t.Fatalf("left %v", got)
	}

	missing := env
	missing.Config, _ = p.ValidateConfig(json.RawMessage(`{"mode":"worker_secret","script":"other-worker"}`))
	if err := p.Check(ctx, missing); err == nil || !strings.Contains(err.Error(), "other-worker") {
		t.Fatalf("check of a missing script: %v", err)
	}
}

func TestCredentials(t *testing.T) {
	ctx := context.Background()
	p, env, fake := setup(t, "")
	bad := env
	bad.Credentials.Token = "cf-wrong-secret-token"
	for name, err := range map[string]error{
		"check": p.Check(ctx, bad),
		"push": func() error {
			_, err := p.Push(ctx, bad, provider.Target{}, settings("a", direct))
			return err
		}(),
		"remove": p.Remove(ctx, bad, provider.Target{}),
	} {
		if !errors.Is(err, provider.ErrCredentials) {
			t.Fatalf("%s with a wrong token: %v, want ErrCredentials", name, err)
		}
		if strings.Contains(err.Error(), "cf-wrong-secret-token") || strings.Contains(err.Error(), "Authentication error") {
			t.Fatalf("%s: the error tells the token or the answer: %v", name, err)
		}
	}
	other := env
	other.Credentials.ExternalID = "0000000000000000000000000000000f"
	if err := p.Check(ctx, other); !errors.Is(err, provider.ErrCredentials) {
		t.Fatalf("check of another account: %v", err)
	}

	// An account-owned token: /user/tokens/verify refuses it, the account's endpoint takes it.
	fake.SetToken("active", true)
	if err := p.Check(ctx, env); err != nil {
		t.Fatalf("account-owned token: %v", err)
	}
	fake.SetToken("expired", false)
	if err := p.Check(ctx, env); !errors.Is(err, provider.ErrCredentials) {
		t.Fatalf("expired token: %v", err)
	}
	fake.SetToken("active", false)

	fake.Fail(http.StatusBadGateway)
	err := p.Check(ctx, env)
	if err == nil || errors.Is(err, provider.ErrCredentials) || !strings.Contains(err.Error(), "502") || strings.Contains(err.Error(), "failing") {
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
	p := edgec.New()
	got, err := p.ValidateConfig(json.RawMessage(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `{"mode":"hyperdrive","name":"appliance","script":"","variables":{"pooled":"DATABASE_URL","direct":"DIRECT_URL","ca":""}}` {
		t.Fatalf("defaults %s", got)
	}
	for _, c := range []struct{ in, field string }{
		{`{"mode":"tunnel"}`, "mode"},
		{`{"mode":"worker_secret"}`, "script"},
		{`{"mode":"worker_secret","script":"My Worker"}`, "script"},
		{`{"name":"Not A Name"}`, "name"},
		{`{"name":"` + strings.Repeat("a", 40) + `"}`, "name"},
		{`{"variables":{"pooled":"DATABASE-URL"}}`, "variables.pooled"},
		{`{"variables":{"ca":"9CA"}}`, "variables.ca"},
		{`{"variables":{"direct":"DATABASE_URL"}}`, "variables"},
		{`{"names":"x"}`, `"names"`},
	} {
		_, err := p.ValidateConfig(json.RawMessage(c.in))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v, want an error naming %s", c.in, err, c.field)
		}
	}
}

func TestNoWebhooks(t *testing.T) {
	p := edgec.New()
	if _, err := p.VerifyWebhook(provider.Env{}, http.Header{}, []byte("{}"), time.Now()); !errors.Is(err, provider.ErrNoWebhooks) {
		t.Fatal(err)
	}
	if _, err := p.DeployEvent([]byte("{}")); !errors.Is(err, provider.ErrIgnored) {
		t.Fatal(err)
	}
}

func TestHyperdriveNames(t *testing.T) {
	cfg, err := edgec.ParseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, b := range []string{"main", "feature/x", "feature-x", "Feature-X", strings.Repeat("long-branch-", 20), strings.Repeat("long-branch-", 20) + "2", "ünïcode"} {
		n := cfg.HyperdriveName(provider.Target{Branch: b})
		if len(n) > 63 || strings.ToLower(n) != n || strings.Contains(n, "/") {
			t.Errorf("%q → %q", b, n)
		}
		if prev, dup := seen[n]; dup {
			t.Errorf("%q and %q share %q", prev, b, n)
		}
		seen[n] = b
	}
	if n := cfg.HyperdriveName(provider.Target{Branch: "main"}); n != "appliance-preview-main" {
		t.Errorf("main → %q", n)
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
	if _, err := p.Push(ctx, env, provider.Target{}, settings("a", direct)); err != nil {
		t.Fatal(err)
	}
	if err := p.Remove(ctx, env, provider.Target{}); err != nil {
		t.Fatal(err)
	}
	if calls := len(fake.Calls()); ct.n != calls || calls == 0 {
		t.Fatalf("%d requests through Env.HTTP, %d answered", ct.n, calls)
	}
}
