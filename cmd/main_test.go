package cmd

import (
	"flag"
	"testing"

	"github.com/theappliance/appliance/appliance/testtools"
)

// e2eParallel is how many of this package's parallel tests run at once unless -test.parallel says: they
// are end-to-end runs of whole appliances (three-node clusters among them) that spend most of their time
// waiting on leases, restores and servers starting, not on the CPU, so four at a time on two cores keep
// the package well inside go test's -timeout where GOMAXPROCS (2) at a time took 18.7 minutes.
const e2eParallel = "4"

// TestMain installs what the tests run when it is missing (see testtools).
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", e2eParallel); err != nil {
			panic(err)
		}
	}
	testtools.Main(m, testtools.Versitygw, testtools.StripeMock)
}
