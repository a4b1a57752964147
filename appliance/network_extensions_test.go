package appliance_test

import (
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance"
)

// TestNetworkExtensionsNeedTheOperator: dblink and postgres_fdw (which connect out from inside the
// database, past the outbound policy) are neither listed nor enabled unless the operator allows them, and
// the project role cannot create them itself.
func TestNetworkExtensionsNeedTheOperator(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "nonet", "development")
	list, err := e.Svc.Extensions().List(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range list.Extensions {
		if x.Name == "dblink" || x.Name == "postgres_fdw" {
			t.Errorf("%s is listed", x.Name)
		}
	}
	for _, name := range []string{"dblink", "postgres_fdw"} {
		_, err := e.Svc.Extensions().Enable(t.Context(), p, prj.ID, &appliance.ExtensionRequest{Name: name})
		if appliance.KindOf(err) != appliance.KindForbidden || !strings.Contains(err.Error(), "--allow-network-extensions") {
			t.Errorf("enable %s: %v", name, err)
		}
	}
	conns, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	c := connect(t, conns.Connections.DirectURL)
	for _, name := range []string{"dblink", "postgres_fdw"} {
		if _, err := c.Exec(t.Context(), "CREATE EXTENSION "+name); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("the project role creates %s itself: %v", name, err)
		}
	}
}
