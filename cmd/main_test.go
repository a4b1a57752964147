package cmd

import (
	"testing"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/testtools"
)

// TestMain installs what the tests run when it is missing (see testtools), and removes the process's
// initdb templates (appliancetest) after the tests.
func TestMain(m *testing.M) {
	appliancetest.MainOnScratchFS(m, testtools.Versitygw, testtools.StripeMock)
}
