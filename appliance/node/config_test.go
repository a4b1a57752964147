package node

import (
	"fmt"
	"testing"

	"github.com/caddyserver/certmagic"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/heapfloor"
	"github.com/theappliance/appliance/appliance/previews"
	"github.com/theappliance/appliance/appliance/programs"
	"github.com/theappliance/appliance/httpapi"
	"github.com/theappliance/appliance/kvproxy"
)

// testConfig is up's defaults (cmd's flag table) on a temporary data directory the instances' OS user can
// reach, free ports for every listener and a port range of the test's own, no spare clusters, no restore
// tests, nothing installed.
func testConfig(t *testing.T) Config {
	t.Helper()
	ports := appliancetest.FreePorts(t, 40)
	d, kv := previews.DefaultEphemeralLimits, kvproxy.DefaultLimits
	return Config{
		DataDir: appliancetest.TraversableTempDir(t) + "/data", Listen: "127.0.0.1:0", KVListen: "127.0.0.1:0", KVRESTListen: "127.0.0.1:0",
		PublicHost: "localhost", Region: "local", LogLevel: "warn", ACMECA: certmagic.LetsEncryptProductionCA,
		PGListen: "127.0.0.1", PGPorts: fmt.Sprintf("%d-%d", ports.First, ports.Last), Cgroups: "auto",
		RatePerIP: "100:400", RatePerCredential: "500:5000", RateStrict: "1:20",
		MaxConnections: httpapi.DefaultMaxConnections, MaxConnectionsPerAddress: httpapi.DefaultMaxConnectionsPerAddress,
		KVMaxConnections: kv.Max, KVMaxUnauthenticated: kv.MaxPending, KVMaxUnauthenticatedPerAddress: kv.PendingPerAddr, KVAuthTimeout: kv.AuthTimeout,
		BackupRetentionDays: appliance.DefaultRetentionDays, BackupCacheMB: int(appliance.DefaultBackupCache >> 20),
		HeapFloorMB: int(heapfloor.Default >> 20), DiskReserveMB: int(appliance.DefaultDiskReserve >> 20),
		EphemeralMax: d.Live, EphemeralStorageMB: int(d.StorageBytes >> 20), EphemeralTotalStorageMB: int(d.TotalStorageBytes >> 20),
		EphemeralMemoryMB: int(d.ProcessMemoryBytes >> 20), EphemeralConnections: d.MaxConnections,
		NoInstall: true, PGEmbeddedMirror: programs.DefaultMirror, Version: "test",
	}
}
