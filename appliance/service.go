// Package appliance is the domain: resources, rules and the services behind every endpoint, and the job
// handlers. The HTTP layer calls exactly one Service method per request.
package appliance

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/backup/walsock"
	"github.com/theappliance/appliance/appliance/backups"
	"github.com/theappliance/appliance/appliance/billing"
	"github.com/theappliance/appliance/appliance/cgroups"
	"github.com/theappliance/appliance/appliance/cluster/lease"
	"github.com/theappliance/appliance/appliance/databases"
	"github.com/theappliance/appliance/appliance/dumpcache"
	"github.com/theappliance/appliance/appliance/eventlog"
	"github.com/theappliance/appliance/appliance/exports"
	"github.com/theappliance/appliance/appliance/extensions"
	"github.com/theappliance/appliance/appliance/identity"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/integrations"
	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/appliance/kv"
	"github.com/theappliance/appliance/appliance/migrate"
	"github.com/theappliance/appliance/appliance/moves"
	"github.com/theappliance/appliance/appliance/nodeloss"
	"github.com/theappliance/appliance/appliance/observe"
	"github.com/theappliance/appliance/appliance/outbound"
	"github.com/theappliance/appliance/appliance/previews"
	"github.com/theappliance/appliance/appliance/programapps"
	"github.com/theappliance/appliance/appliance/referrals"
	"github.com/theappliance/appliance/appliance/scaletozero"
	"github.com/theappliance/appliance/appliance/signedurl"
	"github.com/theappliance/appliance/appliance/storageguard"
	"github.com/theappliance/appliance/appliance/studio"
	"github.com/theappliance/appliance/appliance/tenancy"
	"github.com/theappliance/appliance/appliance/upgrades"
	"github.com/theappliance/appliance/appliance/webhook"
	"github.com/theappliance/appliance/scheduler/lane"
	"github.com/theappliance/appliance/store"
)

// Config is what the service needs to know about its deployment.
type Config struct {
	APIURL     string // base URL clients use for the API, e.g. https://127.0.0.1:7443
	PublicHost string // host name clients use for databases
	CACertPath string // the appliance CA certificate clients verify servers against
	ListenHost string // address instances and poolers listen on (default 127.0.0.1)
	DataDir    string // the appliance's data directory (instances live under it)
	// NoSync runs every instance without durability (fsync, synchronous_commit, full_page_writes off):
	// a throwaway appliance's (up --ephemeral, tests); never one whose data matters.
	NoSync    bool
	Ports     PortRange
	Spares    int // prepared clusters kept ready for provisioning (0: none, every project runs initdb)
	Region    string
	KeyPrefix string // API keys look like <KeyPrefix>_live_<random>
	Version   string
	// PasswordCost is the bcrypt cost of stored password hashes (0: bcrypt.DefaultCost). Tests lower it.
	PasswordCost int
	// Outbound is the destination policy of connections made for tenants (nil: the defaults).
	Outbound *outbound.Policy
	// NetworkExtensions offers dblink and postgres_fdw (the operator's --allow-network-extensions).
	NetworkExtensions bool
	// LogArchiveDays keeps the servers' rotated logs compressed this many days (up --log-archive-days; 0:
	// off, logs are kept LogRetention and the logs window is at most 168 hours).
	LogArchiveDays int
	// BackupRetentionDays is the default backup retention: of every project without a backup schedule, and
	// of a new schedule (up --backup-retention-days; 0: DefaultRetentionDays).
	BackupRetentionDays int
	// VerifyBackupsEvery is how often each project's newest backup is restore-tested (up
	// --verify-backups-every; 0: never; VerifyBackups).
	VerifyBackupsEvery time.Duration
	// KVFront is where tenants reach the key-value stores (the fronts' ports, bound before New).
	KVFront KVFront
	// DiskReserve is the free space under which the appliance runs degraded (0: DefaultDiskReserve).
	DiskReserve int64
	// BackupCache bounds, with a bucket as the backup store, the bytes of its exports and uploaded dumps
	// kept on the local disk (up --backup-cache-mb; 0: DefaultBackupCache; negative: none kept).
	BackupCache int64
	// PostgresRoot is where the distribution installs PostgreSQL majors, <root>/<major>/bin: the targets of
	// major upgrades ("": DefaultPostgresRoot).
	PostgresRoot string
	// Ephemeral bounds anonymous ephemeral databases (nil: previews.DefaultEphemeralLimits; zero sizes take
	// the defaults').
	Ephemeral *EphemeralLimits
	// Webhooks tune deliveries (nil: DefaultWebhookOptions; tests shorten the schedule).
	Webhooks *WebhookOptions
	// WALProgram is the command line (argv) whose `wal push` and `wal fetch` subcommands PostgreSQL runs to
	// archive into and fetch from a backup store it cannot reach itself (Deps.BackupObjects without a
	// WALTransport): up gives its own binary, copied under the data directory; tests, the test binary.
	WALProgram []string
	// ServerLimits, when set, are the memory and CPU a plan's servers are held to in their cgroups
	// (DataPlane.Cgroups) instead of the plan's MemoryBytes and CPUCores: tests shrink them.
	ServerLimits func(plan Plan) cgroups.Limits
	// ProgramApplicationRate is each service token's rate of program applications (zero:
	// programapps.DefaultRate; tests lower it).
	ProgramApplicationRate programapps.Rate
	// TemplateDir keeps the initdb templates new instances are copied from instead of running initdb
	// (postgres.Instance.TemplateDir); "": each runs initdb.
	TemplateDir string
	// IntegrationBaseURLs override the integration providers' API base URLs by provider name (up
	// --integrations-base-url deploy_a=URL,…; tests point them at local fakes).
	IntegrationBaseURLs map[string]string
	// IntegrationOAuth are the appliance's OAuth clients at the providers, by provider name (none: the
	// OAuth start answers 409).
	IntegrationOAuth map[string]IntegrationOAuthApp

	// NodeID is this appliance's node of its cluster ("" on a single node): it starts only the instances
	// of the projects store.ProjectNode puts on it (node loss: fencing).
	NodeID string
	// NodeLossRestoreAfter is how long a project stays unavailable with its node lost before the leader
	// restores it on itself from the backup store (up --node-loss-restore-after; 0: never by itself).
	NodeLossRestoreAfter time.Duration
}

// Deps are the service's collaborators, made before it (by up's components, by appliancetest): New
// takes them all, nothing is set afterwards.
type Deps struct {
	DB  *store.DB
	Box *SecretBox
	Log *slog.Logger
	// DataPlane is the instance machinery the job handlers drive (nil: none, as in tests of the API
	// alone; jobs that need it fail).
	DataPlane *DataPlane
	// Jobs is poked after jobs are enqueued so the runner claims them at once (nil: no runner; jobs wait
	// for one).
	Jobs Notifier
	// Clock is the time (nil: time.Now); tests of expiry give one they move.
	Clock func() time.Time
	// ImportUploadLimit, when it returns a positive size, is the upload size limit instead of the
	// project's storage_limit_bytes (nil: none; tests of 413).
	ImportUploadLimit func() int64
	// JobStepHook is called at the named steps of the restore and cutover jobs (nil: none; test builds).
	JobStepHook JobStepHook
	// Lane is the background lane where the webhook worker claims and the outcomes of its attempts are
	// recorded (nil: in their goroutines, unpaced; up gives the process's).
	Lane *lane.Lane
	// BackupObjects is where the projects' base backups and WAL archives are kept (nil: the local
	// directory <data-dir>/backups; up --backup-store gives a bucket).
	BackupObjects backup.Objects
	// Members is this node's place in its cluster (nil: a single node): node loss asks it which nodes are
	// alive.
	Members lease.Membership
	// Billing is the organizations' billing provider (nil: billing is off; up --billing-provider stripe
	// gives appliance/billing's Stripe).
	Billing billing.Provider
	// IntegrationProviders are the integrations area's providers (nil: IntegrationProviders()).
	IntegrationProviders []provider.Provider
	// LiveNodes is the set of a cluster's nodes alive now (their liveness keys), which new projects are
	// placed on (placement.go; nil: every active node, or a single node).
	LiveNodes func(ctx context.Context) (map[string]bool, error)
}

// Notifier is poked after jobs are enqueued so the runner claims them at once.
type Notifier interface{ Notify() }

// Service implements every endpoint's behaviour on top of the store.
type Service struct {
	cfg   Config
	db    *store.DB
	box   *SecretBox
	jobs  Notifier
	log   *slog.Logger
	now   func() time.Time
	Probe *Probes
	// Cluster reports the etcd cluster of a cluster node (/status's cluster section; nil: single node).
	Cluster func(ctx context.Context) *api.ClusterStatus
	// NodeList lists a cluster node's cluster's nodes (cluster.Nodes, for GET /v1/nodes; planMemory is a
	// plan's memory, as placement counts it; nil: a single node).
	NodeList func(ctx context.Context, planMemory func(plan string) int64) ([]api.ClusterNode, error)
	// liveNodes is Deps.LiveNodes.
	liveNodes func(ctx context.Context) (map[string]bool, error)
	dp        *DataPlane
	// eng runs the instances (appliance/instances); set with dp.
	eng engine
	// reflinks: the instances' directory is on a filesystem with reflinks (postgres.ReflinkSupport, probed
	// when the data plane is connected): previews, restores and base backups copy files by reflink.
	reflinks bool

	// sparesMu is held while the pool is filled; sparesStopped (under it) says StopInstances ran, and
	// sparesStop ends then: a refill the shutdown interrupts stops what it started.
	sparesMu      sync.Mutex
	sparesStopped bool
	sparesStop    context.Context
	stopSpares    context.CancelFunc
	// stepHook is Deps.JobStepHook (jobs.go).
	stepHook JobStepHook
	// hooks is the webhooks area (appliance/webhook, built in New).
	hooks *webhook.Service
	// events is the event log (appliance/eventlog, built in New after hooks, whose FanOut it calls).
	events *eventlog.Log
	// kv is the key-value store area (appliance/kv, built in New).
	kv *kv.Service
	// observe is the observability area (appliance/observe, built in New).
	observe *observe.Service
	// storage holds storage limits between samples and reads the free space under the disk reserve
	// (appliance/storageguard, built in New).
	storage *storageguard.Guard
	// studio is the studio area: the SQL console, the table editor, the history (appliance/studio, built
	// in New); studioTargets caches its projects' targets (areaHost.ProjectTarget).
	studio        *studio.Service
	studioTargets store.Cache[*studio.ProjectTarget]
	// metrics counts job ends and webhook attempts for /metrics (metrics.go).
	metrics serviceMetrics
	// backupObjects is Deps.BackupObjects; walServer carries the WAL to it when PostgreSQL cannot
	// (backups.go).
	backupObjects backup.Objects
	// members is this node's place in its cluster (nil: a single node).
	members   lease.Membership
	walServer *walsock.Server
	// nodeloss is the node-loss area (appliance/nodeloss, built in New; host: nodeloss.go).
	nodeloss *nodeloss.Service
	// moves moves projects between nodes (appliance/moves).
	moves *moves.Service
	// extensions is the extensions area (appliance/extensions, built in New).
	extensions *extensions.Service
	// databases is the databases and roles area (appliance/databases, built in New).
	databases *databases.Service
	// exports is the exports area (appliance/exports, built in New); urls signs its download URLs and the
	// imports' upload URLs (each area's signedurl.Resource); dumps is the local cache of the bucket's
	// exports and uploaded dumps (Config.BackupCache).
	exports *exports.Service
	urls    *signedurl.Signer
	dumps   *dumpcache.Cache
	// upgrades is the upgrades area (appliance/upgrades, built in New).
	upgrades *upgrades.Service
	// migrate is the migration area: preflight, uploads and import, follow, cutover requests
	// (appliance/migrate, built in New).
	migrate *migrate.Service
	// identity is the identity area: sign-in, sessions, authentication, members, CLI login, API keys,
	// organizations (appliance/identity, built in New).
	identity *identity.Service
	// previews is the previews area: preview and ephemeral databases (appliance/previews, built in New).
	previews *previews.Service
	// backups is the backups area: backups, schedules, restore points, restores (appliance/backups, built
	// in New).
	backups *backups.Service
	// billing keeps the organizations' customers at the billing provider and applies its webhook events
	// (appliance/billing, built in New; off without Deps.Billing).
	billing *billing.Service
	// tenancy is the platform operators' area: operators and organizations (appliance/tenancy, built in
	// New).
	tenancy *tenancy.Service
	// programApps is the programs area's applications and their service tokens (appliance/programapps,
	// built in New).
	programApps *programapps.Service
	// referrals is the referral codes, referrals and their rewards (appliance/referrals, built in New).
	referrals *referrals.Service
	// z is scale to zero: the wake front of suspended projects and the idle clock (appliance/scaletozero).
	z *scaletozero.Service
	// integrations is the integrations area: platforms, identity providers, their webhooks and OAuth
	// (appliance/integrations, built in New after previews).
	integrations *integrations.Service
}

// New returns a service built with its collaborators.
func New(cfg Config, deps Deps) *Service {
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "apl"
	}
	if cfg.Region == "" {
		cfg.Region = "local"
	}
	if cfg.PostgresRoot == "" {
		cfg.PostgresRoot = DefaultPostgresRoot
	}
	clock := deps.Clock
	if clock == nil {
		clock = time.Now
	}
	s := &Service{cfg: cfg, db: deps.DB, box: deps.Box, log: deps.Log, jobs: deps.Jobs, stepHook: deps.JobStepHook, liveNodes: deps.LiveNodes,
		backupObjects: deps.BackupObjects, members: deps.Members,
		now: func() time.Time { return clock().UTC() }, Probe: &Probes{}}
	s.hooks = s.newWebhooks(cfg, deps)
	s.events = eventlog.New(eventlog.Deps{DB: deps.DB, Clock: s.now, Deliveries: s.hooks, Host: areaHost{s}})
	s.studio = s.newStudio(deps)
	s.storage = storageguard.New(storageguard.Config{DataDir: cfg.DataDir, DiskReserve: cfg.DiskReserve},
		storageguard.Deps{DB: deps.DB, Log: deps.Log, Clock: s.now, Host: areaHost{s}})
	s.sparesStop, s.stopSpares = context.WithCancel(context.Background())
	if deps.DataPlane != nil {
		s.useDataPlane(deps.DataPlane)
	}
	s.kv = s.newKV(cfg, deps)
	s.observe = s.newObserve(cfg, deps)
	s.nodeloss = nodeloss.New(nodeloss.Config{NodeID: cfg.NodeID, RestoreAfter: cfg.NodeLossRestoreAfter},
		nodeloss.Deps{DB: deps.DB, Log: deps.Log, Clock: s.now, Members: deps.Members, BackupStore: deps.BackupObjects != nil,
			Observe: s.observe, Host: nodeLossHost{s}})
	s.moves = moves.New(moves.Config{NodeID: cfg.NodeID},
		moves.Deps{DB: deps.DB, Log: deps.Log, Clock: s.now, Members: deps.Members, BackupStore: deps.BackupObjects != nil, Host: moveHost{s}})
	s.extensions = s.newExtensions(cfg, deps)
	s.databases = databases.New(databases.Deps{DB: deps.DB, Host: areaHost{s}})
	s.urls = signedurl.New(cfg.APIURL, deps.Box, s.now)
	s.dumps = dumpcache.New(cfg.BackupCache, deps.Log, s.now)
	s.exports = s.newExports(cfg, deps)
	s.upgrades = s.newUpgrades(cfg, deps)
	s.identity = s.newIdentity(cfg, deps)
	s.migrate = s.newMigrate(deps)
	s.previews = s.newPreviews(cfg, deps)
	s.backups = s.newBackups(cfg, deps)
	s.integrations = s.newIntegrations(cfg, deps)
	s.billing = billing.New(billing.Deps{DB: deps.DB, Provider: deps.Billing, Host: areaHost{s}, Log: deps.Log, Clock: s.now, Hook: referralHook{s}})
	s.referrals = s.newReferrals(cfg, deps)
	s.tenancy = tenancy.New(tenancy.Deps{DB: deps.DB, Clock: s.now, Host: areaHost{s}, Seed: builtinPlans})
	s.programApps = programapps.New(programapps.Deps{DB: deps.DB, Clock: s.now, Host: areaHost{s}, Discounts: s.billing,
		Rate: cfg.ProgramApplicationRate})
	s.z = scaletozero.New(scaletozero.Deps{DB: deps.DB, Clock: s.now, Host: areaHost{s}, Log: s.log, ListenHost: s.cfg.ListenHost,
		NoWakeJobs: []string{JobProjectProvision, tenancy.JobStop, tenancy.JobStart, integrations.JobRemove, integrations.JobDeploy}, ReleaseJobs: []string{JobProjectDelete, previews.JobDelete}})
	return s
}

// Config returns the deployment configuration.
func (s *Service) Config() Config { return s.cfg }

// DB exposes the store to the packages that run beside the service (scheduler, tests).
func (s *Service) DB() *store.DB { return s.db }

// audit writes an audit event inside tx.
func (s *Service) audit(tx *store.Tx, p *Principal, action, orgID, projectID string, metadata any) error {
	kind, id := p.Actor()
	var md json.RawMessage
	if metadata != nil {
		b, err := json.Marshal(metadata)
		if err != nil {
			return err
		}
		md = b
	}
	return store.AuditEvents.Insert(tx, &store.AuditEvent{ // a new ID: not read first (etcd)
		ID: ids.New("aud"), Action: action, ActorKind: kind, ActorID: id,
		OrganizationID: orgID, ProjectID: projectID, Metadata: md, CreatedAt: s.now(),
	})
}

func ptr[T any](v T) *T { return &v }
