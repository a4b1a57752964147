// Package kv is the key-value store area: a project's redis-server, its endpoints (create, get,
// credentials, list, rotate-token, flush, delete), its jobs, the adoption of the running servers at start,
// their supervisor events, the token resolver of the kv fronts (kvproxy.Resolver) and the status page's row.
//
// It is the first API area moved out of the root package `appliance`: it reaches the rest of the domain
// only through Host (declared here, given by the root's Service), the kernel packages (apperr, authz),
// the records (store) and the job runner (scheduler). It never imports `appliance`.
package kv

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/backup"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/redis"
	"github.com/theappliance/appliance/store"
)

// The eviction policy the API declares (api.Enums["KVEvictionPolicy"]) is redis-server's: a map literal
// with a duplicate key (two false ones) fails to compile when they differ.
var _ = map[bool]int{false: 0, redis.MaxMemoryPolicy == api.KVEvictionVolatileLRU: 1}

// Key-value store states (see the spec's state table and docs/api-decisions.md).
const (
	StateProvisioning = api.KVProvisioning
	StateRunning      = api.KVRunning
	StateError        = api.KVError
	StateDestroying   = api.KVDestroying
)

// The key-value store jobs; each holds the lock "kv:<project>", so a project's store changes one at a time.
const (
	JobCreate = "kv.create"
	JobFlush  = "kv.flush"
	JobDelete = "kv.delete"
)

// Feature is what needs redis-server.
const Feature = "key-value stores"

// TokenPrefix starts every store token: kv_ and 52 base32 characters (260 random bits).
const TokenPrefix = "kv_"

// ErrInvalidToken is returned for a key-value token that is no running store's current token.
var ErrInvalidToken = errors.New("invalid key-value token")

// Front is where tenants reach the stores: the RESP front's port (its host is the public host) and the
// REST front's base URL.
type Front struct {
	RESPPort int
	RESTURL  string
}

// Host is what the area takes from the rest of the domain: the records and rules every area shares, which
// the root package keeps (appliance/areas.go gives them). Keep it small: what an area can own, it owns.
type Host interface {
	// VisibleProject is a project the caller may see (404 for another organization's or a preview's, 403
	// off a project-scoped key's own): projects and their visibility are one rule for every area.
	VisibleProject(tx *store.Tx, p *authz.Principal, projectID string) (*store.Project, error)
	// ActiveProject is a visible project that is also active with an instance (else 409): a store is
	// created beside a running project only, and what "active" means is the projects' rule.
	ActiveProject(tx *store.Tx, p *authz.Principal, projectID string) (*store.Project, error)
	// Enqueue adds a job of the project in tx and makes it the project's latest_job_id (a field of the
	// project record, which the root writes).
	Enqueue(tx *store.Tx, prj *store.Project, jobType, lock string, payload any) (*store.Job, error)
	// AnswerJob is a job-returning call's answer once its transaction committed (err its error): it pokes
	// the job runner, which the root holds, and shows the job as every job is shown.
	AnswerJob(job *store.Job, err error) (*api.JobResponse, error)
	// Audit writes an audit event of the caller in tx: one event shape and one clock for every area.
	Audit(tx *store.Tx, p *authz.Principal, action, orgID, projectID string, metadata any) error
	// RevokeKVToken appends a replaced token's hash to the data directory's revocation record (read when an
	// older metadata is put back): one record for every kind of credential.
	RevokeKVToken(hash string) error
	// PlanKVMemoryMB is the store size of a plan (the default plan's when it gives none): plans are the
	// root's table.
	PlanKVMemoryMB(plan string) int
}

// Plane is the data plane pieces the stores' servers need: the supervisor, the OS user they run as and
// the redis-server program ("": not installed, the feature is off).
type Plane struct {
	Supervisor  *daemon.Supervisor
	User        *daemon.OSUser
	RedisServer string
}

// Box seals and opens the stores' admin passwords (the root's SecretBox).
type Box interface {
	Seal(plaintext []byte) []byte
	Open(sealed []byte) ([]byte, error)
}

// Config is the deployment the area needs to know.
type Config struct {
	PublicHost string // host name clients use
	Front      Front  // where tenants reach the stores
	Dir        string // where the stores' servers live, one directory each (<data-dir>/kv)
}

// Deps are the area's collaborators; New takes them all.
type Deps struct {
	DB    *store.DB
	Box   Box
	Log   *slog.Logger
	Clock func() time.Time // UTC
	// Plane is nil in a process without a data plane (tests of the API alone): jobs fail, endpoints that
	// need a running server answer 503.
	Plane *Plane
	Host  Host
	// Snapshots is where the stores' RDB snapshots are shipped and fetched back from (snapshots.go); nil
	// ships none (the backup store is the local disk, the stores' own).
	Snapshots *backup.Store
}

// Service is the key-value store area.
type Service struct {
	cfg   Config
	db    *store.DB
	box   Box
	log   *slog.Logger
	now   func() time.Time
	plane *Plane
	host  Host
	// locks orders a project's store's rotations and removal, and a store's snapshot shipping and removal.
	locks keyLocks
	// snapshots is Deps.Snapshots; shipped what ShipSnapshots knows of each store's (snapshots.go).
	snapshots *backup.Store
	shipMu    sync.Mutex
	shipped   map[string]*shipState
	tokens    store.Cache[resolved] // ResolveToken's answers by the token's hash
}

// New returns the area built with its collaborators.
func New(cfg Config, deps Deps) *Service {
	return &Service{cfg: cfg, db: deps.DB, box: deps.Box, log: deps.Log, now: deps.Clock, plane: deps.Plane, host: deps.Host,
		snapshots: deps.Snapshots, shipped: map[string]*shipState{}}
}

// dataPlane is the data plane, or the error of a process without one.
func (s *Service) dataPlane() (*Plane, error) {
	if s.plane == nil {
		return nil, errors.New("no data plane: PostgreSQL instances cannot run in this process")
	}
	return s.plane, nil
}

// credentials builds the credentials; token is "" where it is not shown.
func (s *Service) credentials(host string, front Front, token string) api.KVCredentials {
	hp := net.JoinHostPort(host, strconv.Itoa(front.RESPPort))
	c := api.KVCredentials{RedisHost: host, RedisPort: front.RESPPort, RESTURL: front.RESTURL, TokenRequired: true,
		RedisURL: (&url.URL{Scheme: "rediss", Host: hp}).String()}
	if token != "" {
		c.RESTToken = &token
		c.RedisURL = (&url.URL{Scheme: "rediss", User: url.UserPassword("default", token), Host: hp}).String()
	}
	return c
}

// frontOf is the host and fronts a project's store is reached at: its node's in a cluster (the node's
// record: --public-host and its fronts' ports), this appliance's otherwise. tx nil: read in a transaction
// of its own.
func (s *Service) frontOf(tx *store.Tx, projectID string) (string, Front) {
	host, front := s.cfg.PublicHost, s.cfg.Front
	if s.db.Node() == "" {
		return host, front
	}
	read := func(tx *store.Tx) error {
		p, err := store.Projects.Get(tx, projectID)
		if err != nil {
			return err
		}
		id := store.ProjectNode(tx, p)
		if id == s.db.Node() {
			return nil
		}
		n, err := store.Nodes.Get(tx, id)
		if err != nil {
			return err
		}
		if n.KVRESPPort != 0 && n.PublicHost != "" {
			host, front = n.PublicHost, Front{RESPPort: n.KVRESPPort, RESTURL: n.KVRESTURL}
		}
		return nil
	}
	if tx != nil {
		read(tx)
	} else {
		s.db.View(read)
	}
	return host, front
}

func (s *Service) view(tx *store.Tx, r *store.KVStore, token string) *api.KVStore {
	host, front := s.frontOf(tx, r.ProjectID)
	v := &api.KVStore{ID: r.ID, ProjectID: r.ProjectID, OrganizationID: r.OrganizationID, HostID: r.HostID, State: r.State,
		LastError: r.LastError, MaxmemoryPolicy: redis.MaxMemoryPolicy, MemMaxMB: r.MaxMemoryMB, MaxmemoryMB: r.MaxMemoryMB,
		Persistence: "rdb", PublicHost: host, TokenPrefix: r.TokenPrefix, Credentials: s.credentials(host, front, token),
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if token != "" {
		v.Token = &token
	}
	return v
}

// Server is the redis.Server of a store record and its admin password (the root stops every server of
// the data plane at shutdown with it).
func (s *Service) Server(r *store.KVStore) (*redis.Server, string, error) {
	dp, err := s.dataPlane()
	if err != nil {
		return nil, "", err
	}
	admin, err := s.box.Open(r.SealedAdmin)
	if err != nil {
		return nil, "", fmt.Errorf("open the key-value store's admin password: %w", err)
	}
	return &redis.Server{ID: r.ID, Program: dp.RedisServer, User: dp.User, Config: redis.Config{Dir: r.Dir,
		MaxMemoryMB: r.MaxMemoryMB, TokenHash: r.TokenHash, AdminHash: redis.Hash(string(admin))},
		Seed: s.seed(r)}, string(admin), nil
}

// keyLocks serializes work per key (a project's store: rotations and removal).
type keyLocks struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

func (k *keyLocks) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*sync.Mutex{}
	}
	m := k.locks[key]
	if m == nil {
		m = &sync.Mutex{}
		k.locks[key] = m
	}
	k.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// supervisorKey is a store's key in the supervisor.
func supervisorKey(id string) string { return "kv/" + id }

// NewToken mints a token: its plaintext, SHA-256 and prefix.
func NewToken() (token, hash, prefix string) {
	token = TokenPrefix + ids.Secret(32)
	return token, ids.Hash(token), token[:11]
}

// projectStore reads the project's store (store.ErrNotFound when it has none).
func projectStore(tx *store.Tx, projectID string) (*store.KVStore, error) {
	return store.KVStores.First(tx, store.KVStoresByProject, projectID)
}
