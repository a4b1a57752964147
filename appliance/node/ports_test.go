package node

import (
	"io"
	"net"
	"testing"

	"github.com/theappliance/appliance/appliance/outbound"
)

// TestUpOwnPorts: before any component starts, the outbound policy refuses the instance port range and
// the port of every listener of the appliance's (API, operator, both key-value fronts).
func TestUpOwnPorts(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.MetricsListen = "127.0.0.1:0"
	u, err := prepareUp(t.Context(), cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer u.close()
	want := []outbound.PortRange{{First: u.ports.First, Last: u.ports.Last}}
	for _, l := range []net.Listener{u.ln, u.opLn, u.kvLn, u.kvRESTLn} {
		n := portOf(l.Addr().String())
		want = append(want, outbound.PortRange{First: n, Last: n})
	}
	for _, w := range want {
		found := false
		for _, r := range u.pol.OwnPorts {
			found = found || r == w
		}
		if !found {
			t.Errorf("the outbound policy's own ports %v lack %v", u.pol.OwnPorts, w)
		}
	}
	if len(u.pol.OwnPorts) != len(want) {
		t.Errorf("own ports %v, want %v", u.pol.OwnPorts, want)
	}
}
