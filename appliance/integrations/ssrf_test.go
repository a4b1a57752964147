package integrations

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance/integrations/deploya"
	"github.com/theappliance/appliance/appliance/integrations/deploya/deployatest"
	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/appliance/outbound"
	"github.com/theappliance/appliance/store"
)

// TestProviderBaseURLRefusedByPolicy: a provider base URL naming a loopback address (by address or by a
// name resolving to it) is refused by the outbound policy when dialed, nothing reaches it, the failure is
// permanent and tells only the refusal; the operator's allow list lets it through, and the deny list wins
// over the allow list.
func TestProviderBaseURLRefusedByPolicy(t *testing.T) {
	fake := deployatest.Start(t, "tok", "prj_web")
	byName := strings.Replace(fake.URL, "127.0.0.1", "localhost", 1)
	creds := sealed{Credentials: provider.Credentials{Token: "tok", ExternalID: "prj_web"}}
	loop := netip.MustParsePrefix("127.0.0.0/8")
	for _, c := range []struct {
		name    string
		base    string
		policy  *outbound.Policy
		refused bool
	}{
		{"loopback address, defaults", fake.URL, &outbound.Policy{}, true},
		{"a name of loopback, defaults", byName, &outbound.Policy{}, true},
		{"loopback allowed by the operator", fake.URL, &outbound.Policy{Allow: []netip.Prefix{loop}}, false},
		{"the deny list wins", fake.URL, &outbound.Policy{Allow: []netip.Prefix{loop}, Deny: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(fake.Calls())
			s := New(Config{BaseURLs: map[string]string{provider.DeployA: c.base}}, Deps{Policy: c.policy, Providers: []provider.Provider{deploya.New()}})
			p := s.providers[provider.DeployA]
			err := p.Check(t.Context(), s.env(p, &store.Integration{Provider: provider.DeployA}, creds))
			if !c.refused {
				if err != nil || len(fake.Calls()) != before+1 {
					t.Fatalf("allowed: %v, calls %v", err, fake.Calls())
				}
				return
			}
			if !errors.Is(err, outbound.ErrRefused) {
				t.Fatalf("not refused: %v", err)
			}
			if len(fake.Calls()) != before {
				t.Fatalf("the refused destination was reached: %v", fake.Calls())
			}
			if msg := public(provider.DeployA, err); msg != "deploy_a: refused by the outbound policy" || !permanent(err) {
				t.Fatalf("public %q, permanent %v", msg, permanent(err))
			}
		})
	}
}
