package appliance_test

import (
	"testing"

	"github.com/theappliance/appliance/appliance"
)

func TestParsePortRange(t *testing.T) {
	t.Parallel()
	if r, err := appliance.ParsePortRange(" 20000-20039 "); err != nil || r != (appliance.PortRange{First: 20000, Last: 20039}) {
		t.Fatalf("20000-20039: %+v %v", r, err)
	}
	for _, bad := range []string{"", "20000", "20000-", "-20000", "a-b", "20039-20000", "20000-20000", "80-90", "60000-70000"} {
		if _, err := appliance.ParsePortRange(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
