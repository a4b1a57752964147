package node

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/caddyserver/certmagic"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/cluster"
	"github.com/theappliance/appliance/appliance/heapfloor"
	"github.com/theappliance/appliance/appliance/previews"
	"github.com/theappliance/appliance/appliance/programs"
	"github.com/theappliance/appliance/httpapi"
	"github.com/theappliance/appliance/kvproxy"
)

// Defaults is the Config of `appliance up` without flags or environment: the one source of the defaults
// (cmd's flag table shows and reads them from here; a Go test starts from them).
func Defaults() Config {
	d, kv := previews.DefaultEphemeralLimits, kvproxy.DefaultLimits
	return Config{
		DataDir: DefaultDataDir(), Listen: "127.0.0.1:7443", PublicHost: "localhost", Region: "local", LogLevel: "info",
		KVListen: "127.0.0.1:6380", KVRESTListen: "127.0.0.1:6381",
		ACMECA:   certmagic.LetsEncryptProductionCA,
		PGListen: "127.0.0.1", PGPorts: fmt.Sprintf("%d-%d", appliance.DefaultPortRange.First, appliance.DefaultPortRange.Last),
		Spares: 2, Cgroups: "auto",
		RatePerIP: "100:400", RatePerCredential: "500:5000", RateStrict: "1:20",
		MaxConnections: httpapi.DefaultMaxConnections, MaxConnectionsPerAddress: httpapi.DefaultMaxConnectionsPerAddress,
		KVMaxConnections: kv.Max, KVMaxUnauthenticated: kv.MaxPending, KVMaxUnauthenticatedPerAddress: kv.PendingPerAddr, KVAuthTimeout: kv.AuthTimeout,
		BackupRetentionDays: appliance.DefaultRetentionDays, VerifyBackupsEvery: appliance.DefaultVerifyBackupsEvery,
		BackupCacheMB: int(appliance.DefaultBackupCache >> 20), HeapFloorMB: int(heapfloor.Default >> 20), DiskReserveMB: int(appliance.DefaultDiskReserve >> 20),
		EphemeralMax: d.Live, EphemeralStorageMB: int(d.StorageBytes >> 20), EphemeralTotalStorageMB: int(d.TotalStorageBytes >> 20),
		EphemeralMemoryMB: int(d.ProcessMemoryBytes >> 20), EphemeralConnections: d.MaxConnections,
		StripeAPIURL: "https://api.stripe.com", Signup: api.SignupModeClosed, PGEmbeddedMirror: programs.DefaultMirror,
		EtcdClientPort: cluster.DefaultClientPort, EtcdPeerPort: cluster.DefaultPeerPort, JoinPort: cluster.DefaultJoinPort,
		NodeLossRestoreAfter: appliance.DefaultNodeLossRestoreAfter,
	}
}

// DefaultDataDir is where `appliance up` keeps its data without --data-dir: /var/lib/appliance for root
// (instances run as another user, who cannot traverse /root), else the user's data directory.
func DefaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/appliance"
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "appliance")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "appliance")
	}
	return "appliance-data"
}
