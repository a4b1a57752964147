package appliance_test

import (
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/testtools"
)

// TestMain installs what the tests run when it is missing (see testtools), and runs the tests with their
// appliances' directories on a filesystem of the process's own (appliancetest.MainOnScratchFS).
//
// The S3 client's retries wait less between tries here (20 ms growing to 100 ms, not 200 ms to 1 s): the
// tests' bucket is a local server that is up or killed, never slow, and a request to a killed one was
// retried 10 times over about 8 s, each attempt of a job that fails with it (an export with the bucket
// down took 55 s). The number of tries is the client's own.
func TestMain(m *testing.M) {
	minio.DefaultRetryUnit, minio.DefaultRetryCap = 20*time.Millisecond, 100*time.Millisecond
	appliancetest.MainOnScratchFS(m, testtools.Versitygw)
}
