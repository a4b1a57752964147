package acceptance

import (
	"flag"
	"os"
	"testing"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/testtools"
)

// e2eParallel is how many of this package's parallel tests run at once unless -test.parallel says: they
// are end-to-end runs of whole appliances (three-node clusters among them) that spend most of their time
// waiting on leases, restores and servers starting, not on the CPU, so four at a time on two cores keep
// the package shorter than GOMAXPROCS (2) at a time (1000 against 1120 s in a fresh-clone run). Each test
// has its own ports (e2ePorts) and instances.Bindable checks every address a server binds, so tests at
// once do not take each other's ports.
const e2eParallel = "4"

// TestMain installs what the tests run when it is missing (see testtools), and removes the binary the
// tests built (e2eBuild) at the end.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", e2eParallel); err != nil {
			panic(err)
		}
	}
	// The e2e appliances' data directories (TraversableTempDir) on a filesystem of the process's own: see
	// appliancetest.MainOnScratchFS.
	code := appliancetest.RunOnScratchFS(m, testtools.Versitygw, testtools.StripeMock)
	e2eBinary.remove()
	os.Exit(code)
}
