package cmd

import (
	"testing"

	"github.com/theappliance/appliance/appliance/testtools"
)

// TestMain installs what the tests run when it is missing (see testtools).
func TestMain(m *testing.M) { testtools.Main(m, testtools.Versitygw, testtools.StripeMock) }
