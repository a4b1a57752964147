package appliance_test

import (
	"context"
	"net/url"
	"os"
	"testing"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/integrations/edgec"
	"github.com/theappliance/appliance/appliance/integrations/edgec/edgectest"
	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/scheduler"
)

// publicEdge is the real edge_c whose pushes name a public host instead of the test appliance's
// loopback one (Hyperdrive refuses a host Cloudflare's network cannot reach; the fake dials nothing).
type publicEdge struct{ edgec.Provider }

func (p publicEdge) Push(ctx context.Context, env provider.Env, t provider.Target, s provider.Settings) ([]string, error) {
	if u, err := url.Parse(s.Direct); err == nil {
		u.Host = "db.example.com:" + u.Port()
		s.Direct = u.String()
	}
	return p.Provider.Push(ctx, env, t, s)
}

// TestIntegrationEdgeCHyperdriveCA: edge_c's Hyperdrive configuration verifies the server with
// sslmode verify-full against the appliance's CA, which the area hands the provider
// (provider.Settings.CACert) and edge_c uploads once as an mTLS CA certificate; a re-push reuses it;
// disconnecting deletes the configuration and then the certificate.
func TestIntegrationEdgeCHyperdriveCA(t *testing.T) {
	t.Parallel()
	cloudflare := edgectest.Start(t)
	e, p := keyEnv(t, appliancetest.Options{Instances: true, IntegrationBaseURLs: map[string]string{provider.EdgeC: cloudflare.URL()},
		IntegrationProviders: []provider.Provider{publicEdge{}}})
	prj := provision(t, e, p, "edge", "development")
	svc := e.Svc.Integrations()
	ca, err := os.ReadFile(e.CA.CertPath())
	if err != nil {
		t.Fatal(err)
	}

	var certID string
	for k := range 2 { // connect, then again: the same certificate
		ce, err := svc.ConnectEdgeC(t.Context(), p, prj.ID, &api.ConnectEdgeCRequest{AccountID: cloudflare.AccountID, APIToken: cloudflare.Token})
		if err != nil {
			t.Fatal(err)
		}
		if j := e.WaitJob(t, ce.Job.ID); j.State != scheduler.StateCompleted {
			t.Fatalf("edge_c hyperdrive push %d: %s", k, j.Error)
		}
		c, ok := cloudflare.Config("appliance-production")
		if !ok || c.Origin.Host != "db.example.com" || c.MTLS == nil || c.MTLS.SSLMode != "verify-full" {
			t.Fatalf("push %d: the hyperdrive config %+v", k, c)
		}
		cert, ok := cloudflare.Certificate(c.MTLS.CACertificateID)
		if !ok || !cert.CA || cert.Certificates != string(ca) {
			t.Fatalf("push %d: the config's CA certificate %+v is not the appliance's CA", k, cert)
		}
		if k == 1 && cert.ID != certID {
			t.Fatalf("the second push uploaded the CA again (%s, then %s)", certID, cert.ID)
		}
		certID = cert.ID
		if n := len(cloudflare.Certificates()); n != 1 {
			t.Fatalf("push %d: %d certificates in the account", k, n)
		}
	}
	if i := integrationOfProvider(t, e, p, prj.ID, provider.EdgeC); i.State != api.IntegrationActive {
		t.Fatalf("edge_c: %+v", i)
	}

	d, err := svc.Delete(t.Context(), p, prj.ID, provider.EdgeC)
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, d.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("disconnect: %s", j.Error)
	}
	if c, cs := cloudflare.Configs(), cloudflare.Certificates(); len(c) != 0 || len(cs) != 0 {
		t.Fatalf("after disconnect: configs %+v, certificates %+v", c, cs)
	}
}
