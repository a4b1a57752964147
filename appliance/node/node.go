// Package node is a whole appliance in one process, as `appliance up` runs it: the settings (Config), the
// checks of the machine (doctor's), the components started in order and stopped in reverse (Start, Stop,
// Run), and `appliance recover` (Recover). cmd/ holds the commands, their flags and what they print; a Go
// test starts an appliance in its own process with Start.
package node

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/certs"
	"github.com/theappliance/appliance/appliance/cluster"
	"github.com/theappliance/appliance/appliance/cluster/lease"
	"github.com/theappliance/appliance/appliance/heapfloor"
	"github.com/theappliance/appliance/appliance/outbound"
	"github.com/theappliance/appliance/appliance/programs"
	"github.com/theappliance/appliance/httpapi"
	"github.com/theappliance/appliance/httpapi/connlimit"
	"github.com/theappliance/appliance/kvproxy"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/scheduler/lane"
	"github.com/theappliance/appliance/store"
)

// Config is what an appliance is started with: each field is filled by a flag of up's (cmd's upFlagTable
// says what it means; each flag has an environment variable), but Version.
type Config struct {
	DataDir, Listen, PublicHost, Region, LogLevel, KVListen, KVRESTListen, MetricsToken, MetricsListen  string
	ACMEDomain, ACMEEmail, ACMECA, ACMECARoot, OutboundAllow, OutboundDeny                              string
	PGBin, PGUser, PGListen, PGPorts, PGEmbeddedCache, PGEmbeddedMirror                                 string
	RatePerIP, RatePerCredential, RateStrict                                                            string
	OperatorEmail                                                                                       string
	PlansFile                                                                                           string
	Signup                                                                                              string
	NoInstall, NetworkExtensions, RateLimitLoopback, AcceptOlderMetadata, BackupStorePathStyle          bool
	Spares, MaxConnections, MaxConnectionsPerAddress, LogArchiveDays, BackupRetentionDays               int
	KVMaxConnections, KVMaxUnauthenticated, KVMaxUnauthenticatedPerAddress                              int
	KVAuthTimeout, VerifyBackupsEvery                                                                   time.Duration
	HeapFloorMB, DiskReserveMB, BackupCacheMB                                                           int
	BackupStore, BackupStoreEndpoint, BackupStoreRegion, BackupStoreCredentialsFile, BackupStoreKeyFile string
	EphemeralMax, EphemeralStorageMB, EphemeralTotalStorageMB, EphemeralMemoryMB, EphemeralConnections  int
	Cgroups                                                                                             string
	// PGDist are the other PostgreSQL majors up obtains (--pg-dist <major>=<tgz>|npm: programs.ParseDists).
	PGDist                                                                      string
	BillingProvider, StripeSecretKeyFile, StripeWebhookSecretFile, StripeAPIURL string
	// IntegrationsBaseURL overrides integration providers' API base URLs: provider=URL,…
	IntegrationsBaseURL string
	// IntegrationsOAuthFile is the JSON file of the appliance's OAuth clients at the providers.
	IntegrationsOAuthFile string
	// Ephemeral makes a throwaway appliance (up --ephemeral, ephemeral.go): DataDir is the directory its
	// new temporary data directory is made in ("": the system's), every listener takes a free port, the
	// instances run without durability, and Stop removes everything. ExitWithParent stops it when the
	// process that started it is gone; EnvFile is where up writes its credentials in dotenv form.
	Ephemeral, ExitWithParent bool
	EnvFile                   string
	// ConfigFile is the TOML file up read these settings from ("": none; cmd reads it, Start does not).
	ConfigFile string
	// Join is a join token (up --join): a new data directory becomes a node of the cluster the token
	// names (cluster.Join) before anything else; Advertise is this machine's address the other nodes
	// reach it at, and the Etcd*Port and JoinPort its etcd member's and join listener's ports (0: free
	// ones). A data directory that is a node already ignores Join.
	Join, Advertise                        string
	EtcdClientPort, EtcdPeerPort, JoinPort int

	// NodeLossRestoreAfter is --node-loss-restore-after: how long a lost node's projects wait before the
	// leader restores them on itself from the backup store (0: only by an operator).
	NodeLossRestoreAfter time.Duration
	// FenceWatchdog is the program of the self-fence watchdog a cluster node starts (`<it> fence-watchdog
	// --data-dir <dir>`: nodeloss.RunWatchdog), fed the deadline of its lease; "" (an appliance run in
	// a test binary): none, the appliance fences on its lease's loss itself only (not while frozen).
	FenceWatchdog string

	// Version is the appliance's version (not a flag: the binary's, cmd.Version), reported by /status and
	// printed at start.
	Version string
}

// Node is a running appliance: the settings and what was prepared before its components (data directory,
// CA, listeners, the complete outbound policy), and what each component makes for those after it.
type Node struct {
	cfg      Config
	out      io.Writer
	log      *slog.Logger
	ports    appliance.PortRange
	limits   httpapi.RateLimits
	kvLimits connlimit.Limits
	pol      *outbound.Policy
	set      *programs.Set
	dataDir  string
	ca       *certs.CA
	box      *appliance.SecretBox
	certMgr  *certs.Manager
	apiURL   string
	// ln is the API's listener, opLn the operator listener's (--metrics-listen; nil: none), kvLn and
	// kvRESTLn the key-value fronts'.
	ln, opLn, kvLn, kvRESTLn net.Listener
	// lane is the process's background lane (Start).
	lane *lane.Lane

	db     *store.DB
	member *cluster.Member // a cluster node's etcd member (nil: single node, bbolt)
	api    *httpapi.Server // the API, which the join listener serves to the other nodes (forwarded requests)
	svc    *appliance.Service
	runner *scheduler.Runner
	kv     *kvproxy.Server
	kvREST *kvproxy.REST

	// members is this node's place in its cluster, handed to the scheduler (issue 35's hook): the cluster's
	// start sets it to its started *lease.Etcd (on the etcd client the store uses, with the node's id)
	// before the instance-supervisor component makes the runner, and stops it after the scheduler
	// component stopped (the runner's tasks end before the leadership is given up). nil on a single node:
	// the runner uses lease.Single on the hostname, and everything runs as before.
	members lease.Membership

	boot       *appliance.Bootstrap // the first start's credentials (nil on a later start)
	eph        *ephemeral           // a throwaway appliance's directory and guard (nil: not one)
	components []*component
}

// Start checks the settings and the machine, prepares what the components share, and starts every
// component in order (those started are stopped again when one fails). It prints where the appliance
// answers to out, and on a first start its credentials.
func Start(ctx context.Context, cfg Config, out io.Writer) (_ *Node, err error) {
	var eph *ephemeral
	if cfg.Ephemeral {
		if eph, cfg, err = startEphemeral(cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				eph.finish()
			}
		}()
	}
	u, err := prepareUp(ctx, cfg, out)
	if err != nil {
		return nil, err
	}
	u.eph = eph
	// The background lane of this process: the job runner's bookkeeping and the webhook deliveries work in
	// it, paced by the API's and the key-value fronts' requests. Its threads live as long as the process.
	u.lane = lane.NewBackground()
	u.components = []*component{
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
		u.clusterComponent(),
		u.nodeLossComponent(),
	}
	if err := startAll(ctx, u.components, u.log); err != nil {
		u.close()
		return nil, err
	}
	u.printUp()
	return u, nil
}

// Stop stops the components in reverse order (each with a timeout of its own under ctx) and closes what
// Start prepared. A second call does nothing.
func (u *Node) Stop(ctx context.Context) {
	stopAll(ctx, u.components, u.log)
	u.close()
	if u.eph != nil {
		u.eph.finish()
	}
}

// Run is Start, then Stop once ctx is done (`appliance up`).
func Run(ctx context.Context, cfg Config, out io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	u, err := Start(ctx, cfg, out)
	if err != nil {
		return err
	}
	<-ctx.Done()
	u.Stop(context.Background())
	return nil
}

// APIURL is the HTTPS API's base URL (the dashboard's too).
func (u *Node) APIURL() string { return u.apiURL }

// Config is the configuration the appliance runs with (a throwaway one's: on its own directory and ports).
func (u *Node) Config() Config { return u.cfg }

// DataDir is the data directory (absolute).
func (u *Node) DataDir() string { return u.dataDir }

// CACertPath is the file of the appliance CA's certificate (PEM), which the API's and the key-value
// fronts' certificates chain to unless an ACME CA issued them.
func (u *Node) CACertPath() string { return u.ca.CertPath() }

// CACertPEM is the appliance CA's certificate (PEM).
func (u *Node) CACertPEM() ([]byte, error) { return os.ReadFile(u.ca.CertPath()) }

// Bootstrap is what a first start made (the organization, its owner's email and password, an admin API
// key) and printed; nil on a later start (bootstrap.json in the data directory keeps it).
func (u *Node) Bootstrap() *appliance.Bootstrap { return u.boot }

// KVAddr is the host:port of the key-value stores' RESP front (TLS), KVRESTAddr the REST front's.
func (u *Node) KVAddr() string { return u.kv.ListenAddr() }

// KVRESTAddr is the host:port of the key-value stores' REST front (TLS; Upstash's protocol).
func (u *Node) KVRESTAddr() string { return u.kvREST.ListenAddr() }

// Service is the appliance's service (the domain behind every endpoint).
func (u *Node) Service() *appliance.Service { return u.svc }

// printUp tells where the appliance answers.
func (u *Node) printUp() {
	fmt.Fprintf(u.out, "appliance %s is up\n  Dashboard: %s/ (API reference: %s/docs)\n  API:       %s\n  KV:        %s (RESP over TLS), https://%s (REST)\n  CA cert:   %s\n  data:      %s\n",
		u.cfg.Version, u.apiURL, u.apiURL, u.apiURL, u.kv.ListenAddr(), u.kvREST.ListenAddr(), u.ca.CertPath(), u.dataDir)
	if u.opLn != nil {
		fmt.Fprintf(u.out, "  Operator:  https://%s/metrics and /status (--metrics-listen)\n", u.opLn.Addr())
	}
	fmt.Fprintln(u.out, "Press Ctrl-C to stop.")
}

// prepareUp checks up's settings and the machine (as doctor does), then prepares what the components
// share: the data directory, its CA and secret box, every listener (so that the outbound policy names
// all of the appliance's own ports before any component reads it) and the certificates.
func prepareUp(parent context.Context, cfg Config, out io.Writer) (_ *Node, err error) {
	u := &Node{cfg: cfg, out: out}
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

// parseFlags parses the settings the components take parsed (the log level, the port range, the rate
// limits, the outbound policy's lists), sets the heap floor and makes the logger. The checks of each
// flag's own value are up's (its flag table), before.
func (u *Node) parseFlags() error {
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
	heapfloor.Set(uint64(mib(u.cfg.HeapFloorMB)))
	u.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return nil
}

// checkMachine fits the listeners' connection caps to the open-files limit, and refuses to start when a
// check of doctor's fails (missing programs are installed or obtained first).
func (u *Node) checkMachine(ctx context.Context) error {
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
	checks, set := Doctor{Install: true, Log: log}.Run(ctx, u.cfg)
	u.set = set
	var failed []string
	for _, c := range checks {
		if c.Level == LevelFail {
			failed = append(failed, fmt.Sprintf("%s: %s (fix: %s)", c.Name, c.Detail, c.Fix))
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

// openDataDir makes the data directory (and its metadata store on a first start), its CA and secret box;
// with --join, a new data directory first joins the cluster (which hands it the CA and secret key).
func (u *Node) openDataDir(ctx context.Context) error {
	if err := os.MkdirAll(u.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	dataDir, err := filepath.Abs(u.cfg.DataDir)
	if err != nil {
		return err
	}
	u.dataDir = dataDir
	if u.cfg.Join != "" {
		if cluster.IsNode(dataDir) {
			u.log.Info("--join ignored: the data directory is a cluster node's already", "cluster", cluster.File(dataDir))
		} else {
			c, err := cluster.Join(ctx, cluster.JoinOptions{DataDir: dataDir, Token: u.cfg.Join, Advertise: u.cfg.Advertise,
				ClientPort: u.cfg.EtcdClientPort, PeerPort: u.cfg.EtcdPeerPort, JoinPort: u.cfg.JoinPort})
			if err != nil {
				return err
			}
			fmt.Fprintf(u.out, "joined the cluster as node %s (etcd member %s on %s)\n", c.NodeID, c.MemberName, c.Advertise)
		}
	}
	// A first start makes its metadata store before anything else, so a data directory with a CA (or
	// anything) but no meta.db is never one a first start left. A cluster node's metadata is in etcd.
	if _, err := os.Stat(MetaFile(dataDir)); errors.Is(err, os.ErrNotExist) && !cluster.IsNode(dataDir) {
		db, err := store.Open(MetaFile(dataDir))
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
func (u *Node) listen(ctx context.Context) error {
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
func (u *Node) makeInstancesDir(context.Context) error {
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

// mib is a size in MiB in bytes.
func mib(n int) int64 { return int64(n) << 20 }

// firstNonEmpty is the first of vs that is not "".
func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
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
func (u *Node) newCertManager(ctx context.Context, host string) (*certs.Manager, error) {
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
