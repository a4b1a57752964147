package bench

import (
	"os"
	"testing"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/testtools"
)

// TestMain installs what the tests run when it is missing (see testtools), and removes the process's
// initdb templates (appliancetest) after the tests. Run with frontChildEnv, the
// binary is the kv front's own process of BenchmarkKVRESPvsHAProxy instead.
func TestMain(m *testing.M) {
	if dir := os.Getenv(frontChildEnv); dir != "" {
		os.Exit(runFrontChild(dir))
	}
	appliancetest.Main(m, testtools.Versitygw)
}
