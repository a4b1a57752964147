package programs_test

import (
	"testing"

	"github.com/theappliance/appliance/appliance/appliancetest"
)

// TestMain installs what the tests run when it is missing (see testtools), and removes the process's
// initdb templates (appliancetest) after the tests.
func TestMain(m *testing.M) { appliancetest.Main(m) }
