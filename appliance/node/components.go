package node

import (
	"context"
	"errors"
	"fmt"
	"github.com/theappliance/appliance/appliance/cluster"
	"github.com/theappliance/appliance/appliance/cluster/forward"
	"github.com/theappliance/appliance/appliance/cluster/lease"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/backup/walsock"
	"github.com/theappliance/appliance/appliance/cgroups"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/previews"
	"github.com/theappliance/appliance/appliance/storageguard"
	"github.com/theappliance/appliance/httpapi"
	"github.com/theappliance/appliance/httpapi/connlimit"
	"github.com/theappliance/appliance/kvproxy"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/ui"
)

// component is the lifecycle contract of everything `up` runs: started in order, stopped in reverse
// order, and only once it started. Stop is idempotent.
type component struct {
	name  string
	start func(ctx context.Context) error
	stop  func(ctx context.Context) error // nil: nothing to stop

	once    sync.Once
	stopErr error
}

// Start starts the component.
func (c *component) Start(ctx context.Context) error { return c.start(ctx) }

// Stop stops the component; a second call returns what the first did.
func (c *component) Stop(ctx context.Context) error {
	c.once.Do(func() {
		if c.stop != nil {
			c.stopErr = c.stop(ctx)
		}
	})
	return c.stopErr
}

// startAll starts cs in order; when one fails, those started are stopped (in reverse order).
func startAll(ctx context.Context, cs []*component, log *slog.Logger) error {
	for i, c := range cs {
		if err := c.Start(ctx); err != nil {
			stopAll(context.Background(), cs[:i], log)
			return fmt.Errorf("start %s: %w", c.name, err)
		}
	}
	return nil
}

// stopAll stops components in reverse order, each with a timeout under parent.
func stopAll(parent context.Context, cs []*component, log *slog.Logger) {
	for i := len(cs) - 1; i >= 0; i-- {
		ctx, cancel := context.WithTimeout(parent, 30*time.Second)
		if err := cs[i].Stop(ctx); err != nil {
			log.Error("stop", "component", cs[i].name, "err", err)
		}
		cancel()
	}
}

// inBackground is a component that runs fn in a goroutine until it is stopped (fn's context is not
// cancelled by the signal that ends up: Stop cancels it, then waits for fn to return).
func inBackground(name string, fn func(ctx context.Context)) *component {
	var cancel context.CancelFunc
	var done chan struct{}
	return &component{name: name, start: func(ctx context.Context) error {
		var bg context.Context
		bg, cancel = context.WithCancel(context.WithoutCancel(ctx))
		done = make(chan struct{})
		go func() { defer close(done); fn(bg) }()
		return nil
	}, stop: func(ctx context.Context) error { cancel(); <-done; return nil }}
}

// close closes what prepareUp opened (the listeners a component took over are closed by it already).
func (u *Node) close() {
	if u.certMgr != nil {
		u.certMgr.Stop()
	}
	for _, l := range []net.Listener{u.kvRESTLn, u.kvLn, u.opLn, u.ln} {
		if l != nil {
			l.Close()
		}
	}
}

// storeComponent is the metadata store.
func (u *Node) storeComponent() *component {
	var membership *lease.Etcd
	var watchdog *fenceWatchdog
	return &component{name: "store", start: func(ctx context.Context) error {
		if cluster.IsNode(u.dataDir) {
			// A cluster node: its etcd member, and the store on the cluster.
			sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			m, err := cluster.StartMember(sctx, u.dataDir)
			if err != nil {
				return err
			}
			u.member, u.db = m, m.DB()
			// Its place in the cluster: liveness on a lease and the leader election, which the job runner
			// claims and runs its periodic work under (a restart after a SIGKILL waits up to one TTL here).
			// Its self-fence watchdog, fed the lease's deadline, first: it fences this node's instances
			// should the lease lapse while this process is frozen.
			wd, err := startFenceWatchdog(u.cfg.FenceWatchdog, u.dataDir, u.log)
			if err != nil {
				m.Stop()
				u.member, u.db = nil, nil
				return err
			}
			watchdog = wd
			lm, err := lease.NewEtcd(lease.Config{Client: m.Client(), Prefix: cluster.LeasePrefix, Node: m.Config().NodeID, Log: u.log,
				Renewed: wd.renewed})
			if err == nil {
				err = lm.Start(sctx)
			}
			if err != nil {
				wd.stop()
				m.Stop()
				u.member, u.db = nil, nil
				return fmt.Errorf("this node's place in the cluster: %w", err)
			}
			u.members, membership = lm, lm
			return nil
		}
		var err error
		u.db, err = openStore(u.cfg, u.dataDir)
		return err
	}, stop: func(ctx context.Context) error {
		if u.member != nil {
			if membership != nil { // the runner, stopped before, no longer claims under its lease
				if err := membership.Stop(ctx); err != nil {
					u.log.Warn("leave the cluster's membership", "err", err)
				}
			}
			watchdog.stop()
			u.member.Stop()
			return nil
		}
		return u.db.Close()
	}}
}

// clusterComponent is a cluster node's part: it registers the node (its record: addresses, capacity,
// version), reports the cluster in /status and serves joins. Nothing on a single node.
func (u *Node) clusterComponent() *component {
	var joins *cluster.JoinServer
	return &component{name: "cluster", start: func(ctx context.Context) error {
		if u.member == nil {
			return nil
		}
		info := cluster.NodeInfo{APIURL: u.apiURL, PublicHost: u.cfg.PublicHost, Version: u.cfg.Version,
			PortsFirst: u.ports.First, PortsLast: u.ports.Last}
		if u.kvLn != nil && u.kvRESTLn != nil { // its projects' key-value credentials name these
			info.KVRESPPort = portOf(u.kvLn.Addr().String())
			info.KVRESTURL = "https://" + net.JoinHostPort(u.cfg.PublicHost, strconv.Itoa(portOf(u.kvRESTLn.Addr().String())))
		}
		if err := u.member.Register(info); err != nil {
			return fmt.Errorf("register this node: %w", err)
		}
		u.svc.Cluster = u.member.Status
		u.svc.NodeList = func(ctx context.Context, planMemory func(string) int64) ([]api.ClusterNode, error) {
			return cluster.Nodes(ctx, u.member.Client(), u.db, planMemory)
		}
		var err error
		if joins, err = u.member.ServeJoins(u.ca, u.log); err != nil {
			return err
		}
		if u.api != nil { // the nodes' channel: requests the other nodes forward here
			joins.SetPeerHandler(u.api)
		}
		return nil
	}, stop: func(ctx context.Context) error { return joins.Close(ctx) }}
}

// serviceComponent is the service, the supervisor of its instances and the job runner it enqueues for
// (made here, started by the scheduler component).
func (u *Node) serviceComponent() *component {
	cfg, log := u.cfg, u.log
	var sup *daemon.Supervisor
	var groups *cgroups.Groups
	return &component{name: "instance-supervisor", start: func(ctx context.Context) error {
		bin, err := postgres.FindBinaries(u.set.PG.Dir)
		if err != nil {
			return err
		}
		user, err := daemon.EnsureOSUser(firstNonEmpty(cfg.PGUser, daemon.DefaultOSUserName()))
		if err != nil {
			return err
		}
		bouncer, err := u.set.Path("pgbouncer")
		if err != nil {
			return err
		}
		redisServer, err := u.set.Path("redis-server")
		if err != nil { // key-value stores are off; /status says so
			log.Warn("key-value stores are disabled", "err", err)
			redisServer = ""
		}
		if groups, err = openCgroups(cfg, u.dataDir, log); err != nil {
			return err
		}
		sup = daemon.NewSupervisor()
		hostname, _ := os.Hostname()
		u.runner = scheduler.New(u.db, scheduler.Options{ID: fmt.Sprintf("%s/%d", hostname, os.Getpid()), HostID: hostname, Log: log, Lane: u.lane,
			Members: u.members})
		respPort, restPort := 0, 0 // recover runs the service without the key-value fronts
		if u.kvLn != nil {
			respPort, restPort = portOf(u.kvLn.Addr().String()), portOf(u.kvRESTLn.Addr().String())
		}
		// A bucket as the backup store: PostgreSQL's WAL commands run a copy of this program (replaced at each
		// start: the settings written at start name it) that talks to the service's WAL socket.
		deps := appliance.Deps{DB: u.db, Box: u.box, Log: log, Jobs: u.runner, JobStepHook: testJobStepHook(), Lane: u.lane,
			Members:   u.members,
			DataPlane: &appliance.DataPlane{Supervisor: sup, User: user, Bin: bin, CA: u.ca, PgBouncer: bouncer, RedisServer: redisServer, Cgroups: groups}}
		if u.member != nil && u.members != nil { // a cluster: new projects go to live nodes
			members := u.members
			deps.LiveNodes = func(ctx context.Context) (map[string]bool, error) {
				live, err := members.Live(ctx)
				if err != nil {
					return nil, err
				}
				out := map[string]bool{}
				for _, m := range live {
					out[m.Node] = true
				}
				return out, nil
			}
		}
		if deps.Billing, err = billingProvider(cfg); err != nil {
			return err
		}
		var walProgram []string
		if bucket, err := openBackupStore(cfg, u.dataDir, u.box, user.Chown); err != nil {
			return err
		} else if bucket != nil {
			deps.BackupObjects = bucket
			prog, err := walsock.InstallProgram(filepath.Join(u.dataDir, "bin", "appliance"))
			if err != nil {
				return err
			}
			walProgram = []string{prog}
			log.Info("backup store", "bucket", bucket.String())
		}
		integrationURLs, err := appliance.ParseIntegrationBaseURLs(cfg.IntegrationsBaseURL)
		if err != nil {
			return fmt.Errorf("--integrations-base-url: %w", err)
		}
		integrationOAuth, err := appliance.ReadIntegrationOAuth(cfg.IntegrationsOAuthFile)
		if err != nil {
			return fmt.Errorf("--integrations-oauth-file: %w", err)
		}
		svc := appliance.New(appliance.Config{APIURL: u.apiURL, PublicHost: cfg.PublicHost, Region: cfg.Region,
			Version: u.cfg.Version, CACertPath: u.ca.CertPath(), ListenHost: cfg.PGListen, DataDir: u.dataDir, Spares: cfg.Spares,
			Ports: u.ports, Outbound: u.pol, NetworkExtensions: cfg.NetworkExtensions, LogArchiveDays: cfg.LogArchiveDays, BackupRetentionDays: cfg.BackupRetentionDays,
			VerifyBackupsEvery: cfg.VerifyBackupsEvery,
			KVFront:            appliance.KVFront{RESPPort: respPort, RESTURL: "https://" + net.JoinHostPort(cfg.PublicHost, strconv.Itoa(restPort))},
			DiskReserve:        mib(cfg.DiskReserveMB), BackupCache: backupCache(cfg.BackupCacheMB),
			Ephemeral: &previews.EphemeralLimits{PerIPPerHour: previews.DefaultEphemeralLimits.PerIPPerHour,
				Live: cfg.EphemeralMax, StorageBytes: mib(cfg.EphemeralStorageMB), TotalStorageBytes: mib(cfg.EphemeralTotalStorageMB),
				MaxConnections: cfg.EphemeralConnections, ProcessMemoryBytes: mib(cfg.EphemeralMemoryMB),
				TempFileBytes: mib(cfg.EphemeralStorageMB)},
			WALProgram: walProgram, NoSync: cfg.Ephemeral, NodeID: u.nodeID(), NodeLossRestoreAfter: cfg.NodeLossRestoreAfter, TemplateDir: u.templateDir(), IntegrationBaseURLs: integrationURLs,
			IntegrationOAuth: integrationOAuth}, deps)
		u.svc = svc
		if err := svc.StartWAL(ctx); err != nil {
			return err
		}
		sup.OnEvent = svc.OnInstanceEvent
		svc.Probe.Register("disk", svc.Storage().DiskHealth)
		if d := svc.Storage().CheckDisk(); d.Low {
			log.Warn("starting degraded: the data directory's free space is under the reserve; instances are supervised and reads served, writes are refused (507) until space is freed",
				"free_bytes", d.FreeBytes, "reserve_bytes", d.ReserveBytes, "flag", "--disk-reserve-mb")
		}
		svc.Probe.Register("instance-supervisor", func(ctx context.Context) (string, string) {
			status, msg := sup.Health(ctx)
			return status, fmt.Sprintf("PostgreSQL %d at %s; %s", bin.Major, bin.Dir, msg)
		})
		return nil
	}, stop: func(ctx context.Context) error {
		// The WAL socket last: the instances' shutdown archives through it.
		return errors.Join(sup.Stop(ctx), u.svc.StopInstances(ctx), u.svc.StopWAL(ctx), groups.Close())
	}}
}

// openCgroups opens the cgroups that hold the projects' servers (nil with --cgroups off): a parent group
// named after the data directory, so that two appliances on a machine do not share one.
func openCgroups(cfg Config, dataDir string, log *slog.Logger) (*cgroups.Groups, error) {
	if cfg.Cgroups == "off" {
		log.Info("cgroups: off (--cgroups off): projects' memory and CPU are not held")
		return nil, nil
	}
	return cgroups.Open(cgroups.Options{Name: cgroups.ParentName(dataDir), Log: log})
}

// bootstrapComponent makes the first organization, its owner and key on a first start (and prints
// them), and reports what the metadata says against what the data directory holds.
func (u *Node) bootstrapComponent() *component {
	return &component{name: "bootstrap", start: func(ctx context.Context) error {
		path := filepath.Join(u.dataDir, "bootstrap.json")
		b, err := u.svc.EnsureBootstrap(ctx, path, u.ca.CertPath())
		if err != nil {
			return err
		}
		if b != nil {
			u.boot = b
			printBootstrap(u.out, b, path)
		}
		// Billing on: every organization gets its customer at the provider; those it cannot be made for
		// within a short wait (the provider down) are left to the periodic task, not to hold the start.
		bctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		n, err := u.svc.Billing().EnsureCustomers(bctx)
		cancel()
		if err != nil {
			u.log.Warn("billing: customers at the provider (retried every 10 minutes)", "made", n, "err", err)
		}
		// What the metadata says against what the data directory holds (an older meta.db put back).
		return u.svc.ReportMismatches(ctx)
	}}
}

// schedulerComponent starts the job runner with the service's job handlers and periodic work, the first
// fill of the spare clusters and the adoption of the instances and key-value stores already there.
func (u *Node) schedulerComponent() *component {
	var firstFill chan struct{}
	return &component{name: "scheduler", start: func(ctx context.Context) error {
		svc, runner := u.svc, u.runner
		svc.Probe.Register("scheduler", runner.Health)
		registerTestHooks(runner)
		if err := svc.RegisterPeriodic(runner); err != nil {
			return err
		}
		svc.RegisterJobs(runner)
		// The jobs an earlier process left running are made pending first (the adoption's repairs leave
		// to such a job's next attempt what it clears itself), and no job runs until every instance is
		// under supervision again (a job's attempt that took one from supervision before the adoption
		// put it back would have its server started under it).
		if err := runner.Recover(ctx); err != nil {
			return err
		}
		if err := svc.AdoptInstances(ctx); err != nil {
			return err
		}
		if err := svc.KV().Adopt(ctx); err != nil {
			return err
		}
		if err := runner.Start(ctx); err != nil {
			return err
		}
		// The spare clusters' first fill runs now, beside the runner; stopping waits for it as for the
		// runner's own runs, so no spare's postmaster is started after the supervisor stopped (or the
		// process exited).
		firstFill = make(chan struct{})
		go func() { defer close(firstFill); svc.RefillSpares(ctx) }()
		return nil
	}, stop: func(ctx context.Context) error {
		err := u.runner.Stop(ctx)
		if firstFill != nil {
			select {
			case <-firstFill:
			case <-ctx.Done():
			}
		}
		return err
	}}
}

// nodeID is this node's id in its cluster ("" on a single node).
func (u *Node) nodeID() string {
	if u.member == nil {
		return ""
	}
	return u.member.Config().NodeID
}

// nodeLossComponent is, on a cluster node, the handling of lost nodes (appliance.WatchNodeLoss: the
// leader marks the projects of a node whose lease lapsed unavailable, and back; every node fences the
// stale copies of projects moved elsewhere when it holds its lease again). Nothing on a single node.
func (u *Node) nodeLossComponent() *component {
	return inBackground("node-loss", func(ctx context.Context) {
		if u.members != nil {
			u.svc.WatchNodeLoss(ctx, u.members)
		}
	})
}

// storageGuardComponent holds projects to their storage limits.
func (u *Node) storageGuardComponent() *component {
	return inBackground("storage-guard", func(ctx context.Context) { u.svc.Storage().Run(ctx, storageguard.Interval) })
}

// webhooksComponent delivers webhooks (the service's webhook worker).
func (u *Node) webhooksComponent() *component {
	return &component{name: "webhooks", start: func(ctx context.Context) error {
		if err := u.svc.Webhooks().Start(ctx); err != nil {
			return err
		}
		u.svc.Probe.Register("webhooks", u.svc.Webhooks().Health)
		return nil
	}, stop: func(ctx context.Context) error { return u.svc.Webhooks().Stop(ctx) }}
}

// kvFrontComponent is the key-value stores' fronts (RESP and REST, over TLS) on their listeners.
func (u *Node) kvFrontComponent() *component {
	return &component{name: "kv-front", start: func(ctx context.Context) error {
		svc, log, tlsCfg := u.svc, u.log, u.certMgr.TLSConfig()
		u.kv = &kvproxy.Server{Addr: u.cfg.KVListen, Listener: u.kvLn, TLS: tlsCfg, Resolver: svc.KV(), Log: log, Limits: u.kvLimits, Lane: u.lane}
		u.kvREST = &kvproxy.REST{Addr: u.cfg.KVRESTListen, Listener: u.kvRESTLn, TLS: tlsCfg, Resolver: svc.KV(), Log: log, Limits: u.kvLimits, Lane: u.lane}
		kv, kvREST := u.kv, u.kvREST
		svc.Probe.Register("kv-front", func(ctx context.Context) (string, string) {
			return worst(ctx, kv.Health, kvREST.Health)
		})
		svc.Probe.Register("kv-stores", svc.KV().Health)
		if err := kv.Start(ctx); err != nil {
			return err
		}
		if err := kvREST.Start(ctx); err != nil {
			kv.Stop(ctx)
			return err
		}
		return nil
	}, stop: func(ctx context.Context) error { return errors.Join(u.kvREST.Stop(ctx), u.kv.Stop(ctx)) }}
}

// apiComponent is the HTTPS API with the dashboard, the operator listener (--metrics-listen), and the
// ACME certificate of --acme-domain (which the API's listener answers the challenge of).
func (u *Node) apiComponent() *component {
	var srv, opSrv *http.Server
	var api *httpapi.Server
	return &component{name: "api", start: func(ctx context.Context) error {
		cfg, log, tlsCfg := u.cfg, u.log, u.certMgr.TLSConfig()
		var fwd *forward.Forwarder
		if u.member != nil { // a cluster node forwards what runs where a project lives to its node
			tc, err := cluster.PeerClientTLS(u.dataDir)
			if err != nil {
				return err
			}
			fwd = forward.New(u.member.Config().NodeID, u.db, tc, log)
		}
		api = httpapi.New(u.svc, httpapi.Options{Log: log, Limits: u.limits, Extra: testRoutes(u.svc, u.runner), MetricsToken: cfg.MetricsToken,
			OperatorListener: u.opLn != nil, Lane: u.lane, Forward: fwd})
		u.api = api
		handler := ui.Mount(api)
		if cfg.ACMEDomain != "" {
			handler = httpapi.HSTS(cfg.ACMEDomain, handler)
		}
		var apiLn net.Listener
		srv, apiLn = httpapi.HTTPServer(handler, u.ln, connlimit.Limits{Max: cfg.MaxConnections, PerAddr: cfg.MaxConnectionsPerAddress}, log)
		srv.TLSConfig = tlsCfg
		go func() {
			if err := srv.ServeTLS(apiLn, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("api server", "err", err)
			}
		}()
		if u.opLn != nil {
			var cl net.Listener
			opSrv, cl = httpapi.HTTPServer(api.OperatorHandler(), u.opLn, connlimit.Limits{Max: 64}, log)
			opSrv.TLSConfig = tlsCfg
			go func() {
				if err := opSrv.ServeTLS(cl, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
					log.Error("operator listener", "err", err)
				}
			}()
		}
		// The public domain's certificate, now that the API answers the ACME CA's challenge.
		return u.certMgr.StartACME(context.WithoutCancel(ctx))
	}, stop: func(ctx context.Context) error {
		api.Close() // event streams end first: Shutdown waits for every handler
		if opSrv != nil {
			opSrv.Shutdown(ctx)
		}
		return srv.Shutdown(ctx)
	}}
}

// backupCache is appliance.Config.BackupCache for --backup-cache-mb, whose 0 keeps nothing.
func backupCache(mb int) int64 {
	if mb == 0 {
		return -1
	}
	return mib(mb)
}

// templateDir is where the initdb templates are kept (postgres.Instance.TemplateDir): in the data
// directory; a throwaway appliance's, removed at its exit, would keep none for the next one, so it uses
// the user's cache directory ($XDG_CACHE_HOME/appliance/initdb-templates), or none when there is no such
// directory.
func (u *Node) templateDir() string {
	if u.eph == nil {
		return filepath.Join(u.dataDir, "initdb-templates")
	}
	cache, err := os.UserCacheDir()
	if err == nil {
		dir := filepath.Join(cache, "appliance", "initdb-templates")
		if err = postgres.CheckTemplateDir(dir); err == nil {
			return dir
		}
	}
	u.log.Warn("no usable cache directory for initdb templates: every instance runs initdb", "err", err)
	return ""
}
