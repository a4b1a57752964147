package appliance

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/redis"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Key-value store states (see the spec's state table and docs/api-decisions.md).
const (
	KVProvisioning = "provisioning"
	KVRunning      = "running"
	KVError        = "error"
	KVDestroying   = "destroying"
)

// The key-value store jobs; each holds the lock "kv:<project>", so a project's store changes one at a time.
const (
	JobKVCreate = "kv.create"
	JobKVFlush  = "kv.flush"
	JobKVDelete = "kv.delete"
)

// FeatureKV is what needs redis-server.
const FeatureKV = "key-value stores"

// KVTokenPrefix starts every store token: kv_ and 52 base32 characters (260 random bits).
const KVTokenPrefix = "kv_"

// ErrInvalidKVToken is returned for a key-value token that is no running store's current token.
var ErrInvalidKVToken = errors.New("invalid key-value token")

// KVFront is where tenants reach the stores: the RESP front's port (its host is the public host) and the
// REST front's base URL.
type KVFront struct {
	RESPPort int
	RESTURL  string
}

// kvCredentials builds the credentials; token is "" where it is not shown.
func (s *Service) kvCredentials(token string) KVCredentials {
	host := s.cfg.PublicHost
	hp := net.JoinHostPort(host, strconv.Itoa(s.kvFront.RESPPort))
	c := KVCredentials{RedisHost: host, RedisPort: s.kvFront.RESPPort, RESTURL: s.kvFront.RESTURL, TokenRequired: true,
		RedisURL: (&url.URL{Scheme: "rediss", Host: hp}).String()}
	if token != "" {
		c.RESTToken = &token
		c.RedisURL = (&url.URL{Scheme: "rediss", User: url.UserPassword("default", token), Host: hp}).String()
	}
	return c
}

func (s *Service) kvView(r *store.KVStore, token string) *KVStore {
	v := &KVStore{ID: r.ID, ProjectID: r.ProjectID, OrganizationID: r.OrganizationID, HostID: r.HostID, State: r.State,
		LastError: r.LastError, MaxmemoryPolicy: "volatile-lru", MemMaxMB: r.MaxMemoryMB, MaxmemoryMB: r.MaxMemoryMB,
		Persistence: "rdb", PublicHost: s.cfg.PublicHost, TokenPrefix: r.TokenPrefix, Credentials: s.kvCredentials(token),
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if token != "" {
		v.Token = &token
	}
	return v
}

// kvDir is where the stores' servers live, one directory each.
func (s *Service) kvDir() string { return filepath.Join(s.cfg.DataDir, "kv") }

// kvServer is the redis.Server of a store record.
func (s *Service) kvServer(dp *DataPlane, r *store.KVStore) (*redis.Server, string, error) {
	admin, err := s.box.Open(r.SealedAdmin)
	if err != nil {
		return nil, "", fmt.Errorf("open the key-value store's admin password: %w", err)
	}
	return &redis.Server{ID: r.ID, Program: dp.RedisServer, User: dp.User, Config: redis.Config{Dir: r.Dir,
		MaxMemoryMB: r.MaxMemoryMB, TokenHash: r.TokenHash, AdminHash: redis.Hash(string(admin))}}, string(admin), nil
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

// kvKey is a store's key in the supervisor.
func kvKey(id string) string { return "kv/" + id }

// newKVToken mints a token: its plaintext, SHA-256 and prefix.
func newKVToken() (token, hash, prefix string) {
	token = KVTokenPrefix + ids.Secret(32)
	return token, ids.Hash(token), token[:11]
}

// requireKV refuses key-value work on an appliance without redis-server (503 naming the package).
func (s *Service) requireKV() error {
	if s.dp != nil && s.dp.RedisServer == "" {
		return &Error{Kind: KindUnavailable, Msg: FeatureKV + " are not available on this appliance: redis-server is not installed (Debian package redis-server)"}
	}
	return nil
}

// projectKV reads the project's store (ErrNotFound when it has none).
func projectKV(tx *store.Tx, projectID string) (*store.KVStore, error) {
	return store.KVStores.First(tx, store.KVStoresByProject, projectID)
}

// visibleKV loads the store of a project the caller may see (404 when there is none).
func (s *Service) visibleKV(tx *store.Tx, p *Principal, projectID string) (*store.Project, *store.KVStore, error) {
	prj, err := s.visibleProject(tx, p, projectID)
	if err != nil {
		return nil, nil, err
	}
	kv, err := projectKV(tx, prj.ID)
	if err != nil {
		return nil, nil, notFoundAs(err, "project %s has no key-value store", prj.ID)
	}
	return prj, kv, nil
}

// requireTokenScope: a response that carries a store token is a credential, which needs credentials:read.
func requireTokenScope(p *Principal) error {
	if !p.Has(ScopeCredentialsRead) {
		return Forbidden("the response carries the store's token: this needs the %s scope too", ScopeCredentialsRead)
	}
	return nil
}

// CreateKV records the project's store and enqueues the job that starts its server; the token is in this
// response only.
func (s *Service) CreateKV(ctx context.Context, p *Principal, projectID string) (*KVCreateResponse, error) {
	if err := requireTokenScope(p); err != nil {
		return nil, err
	}
	if err := s.requireKV(); err != nil {
		return nil, err
	}
	token, hash, prefix := newKVToken()
	var rec *store.KVStore
	var job *store.Job
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := s.visibleActiveProject(tx, p, projectID)
		if err != nil {
			return err
		}
		if old, err := projectKV(tx, prj.ID); err == nil {
			if old.State == KVDestroying {
				return Conflict("project %s's key-value store is being deleted: create a new one once job %s has ended", prj.ID, old.JobID)
			}
			return Conflict("project %s already has a key-value store (%s); a project holds one at a time", prj.ID, old.ID)
		} else if !errors.Is(err, store.ErrNotFound) {
			return Internal(err, "read key-value store")
		}
		plan, _ := PlanByName(prj.Plan)
		if plan.KVMemoryMB <= 0 {
			plan, _ = PlanByName(DefaultPlan)
		}
		now := s.now()
		host, _ := os.Hostname()
		id := ids.New("kv")
		rec = &store.KVStore{ID: id, ProjectID: prj.ID, OrganizationID: prj.OrganizationID, HostID: host,
			State: KVProvisioning, MaxMemoryMB: plan.KVMemoryMB, Dir: filepath.Join(s.kvDir(), id), TokenHash: hash,
			TokenPrefix: prefix, SealedAdmin: s.box.Seal([]byte(ids.Secret(32))), CreatedAt: now, UpdatedAt: now}
		if job, err = s.enqueue(tx, prj, JobKVCreate, "kv:"+prj.ID, kvPayload{KVStoreID: id}); err != nil {
			return err
		}
		rec.JobID = job.ID
		if err := store.KVStores.Put(tx, rec); err != nil {
			return Internal(err, "store key-value store")
		}
		return s.audit(tx, p, JobKVCreate, prj.OrganizationID, prj.ID,
			map[string]any{"kv_store_id": id, "token_prefix": prefix, "maxmemory_mb": rec.MaxMemoryMB, "job_id": job.ID})
	})
	jr, err := s.answerJob(job, err)
	if err != nil {
		return nil, err
	}
	return &KVCreateResponse{Job: jr.Job, KVStore: s.kvView(rec, token)}, nil
}

type kvPayload struct {
	KVStoreID string `json:"kv_store_id"`
}

// GetKV is the project's store.
func (s *Service) GetKV(ctx context.Context, p *Principal, projectID string) (*KVStore, error) {
	var out *KVStore
	err := s.db.View(func(tx *store.Tx) error {
		_, kv, err := s.visibleKV(tx, p, projectID)
		if err == nil {
			out = s.kvView(kv, "")
		}
		return err
	})
	return out, err
}

// KVCredentialsOf is the project's store's credentials (the token is not shown: only its hash is kept).
func (s *Service) KVCredentialsOf(ctx context.Context, p *Principal, projectID string) (*KVCredentials, error) {
	kv, err := s.GetKV(ctx, p, projectID)
	if err != nil {
		return nil, err
	}
	return &kv.Credentials, nil
}

// ListKV lists the stores of the caller's organization (platform admins name one), oldest first; a
// project-scoped key sees its project's store only.
func (s *Service) ListKV(ctx context.Context, p *Principal, orgID string) (*KVStoreList, error) {
	org, err := p.OrganizationFilter(orgID)
	if err != nil {
		return nil, err
	}
	out := &KVStoreList{KVStores: []*KVStore{}}
	err = s.db.View(func(tx *store.Tx) error {
		recs, err := store.KVStores.Lookup(tx, store.KVStoresByOrg, org, store.Query{})
		if err != nil {
			return Internal(err, "list key-value stores")
		}
		for _, r := range recs {
			if p.ProjectID != "" && r.ProjectID != p.ProjectID {
				continue
			}
			out.KVStores = append(out.KVStores, s.kvView(r, ""))
		}
		return nil
	})
	return out, err
}

// kvAction enqueues a flush or delete job on the project's store; check refuses states it cannot act in,
// change updates the record in the same transaction.
func (s *Service) kvAction(p *Principal, projectID, jobType string, check func(*store.KVStore) error, change func(*store.KVStore)) (*JobResponse, error) {
	if err := s.requireKV(); err != nil {
		return nil, err
	}
	var job *store.Job
	err := s.db.Update(func(tx *store.Tx) error {
		prj, kv, err := s.visibleKV(tx, p, projectID)
		if err != nil {
			return err
		}
		if err := check(kv); err != nil {
			return err
		}
		if job, err = s.enqueue(tx, prj, jobType, "kv:"+prj.ID, kvPayload{KVStoreID: kv.ID}); err != nil {
			return err
		}
		change(kv)
		kv.JobID, kv.UpdatedAt = job.ID, s.now()
		if err := store.KVStores.Put(tx, kv); err != nil {
			return Internal(err, "store key-value store")
		}
		return s.audit(tx, p, jobType, prj.OrganizationID, prj.ID, map[string]any{"kv_store_id": kv.ID, "job_id": job.ID})
	})
	return s.answerJob(job, err)
}

func kvMustRun(what string) func(*store.KVStore) error {
	return func(kv *store.KVStore) error {
		if kv.State != KVRunning {
			return Conflict("the key-value store is %s: %s needs it running", kv.State, what)
		}
		return nil
	}
}

// FlushKV enqueues kv.flush: every key is deleted; the endpoint and token stay.
func (s *Service) FlushKV(ctx context.Context, p *Principal, projectID string) (*JobResponse, error) {
	return s.kvAction(p, projectID, JobKVFlush, kvMustRun("flush"), func(*store.KVStore) {})
}

// DeleteKV enqueues kv.delete: the store is destroying until its server and data are gone.
func (s *Service) DeleteKV(ctx context.Context, p *Principal, projectID string) (*JobResponse, error) {
	return s.kvAction(p, projectID, JobKVDelete, func(kv *store.KVStore) error {
		if kv.State == KVDestroying {
			return Conflict("the key-value store is already being deleted (job %s)", kv.JobID)
		}
		return nil
	}, func(kv *store.KVStore) { kv.State, kv.LastError = KVDestroying, "" })
}

// RotateKVToken makes a new token the store's only one, synchronously: the running server takes it and
// cuts every connection of the old one, then the record keeps its hash. The token is in this response only.
func (s *Service) RotateKVToken(ctx context.Context, p *Principal, projectID string) (*KVStoreResult, error) {
	if err := requireTokenScope(p); err != nil {
		return nil, err
	}
	dp, err := s.dataPlane()
	if err != nil {
		return nil, &Error{Kind: KindUnavailable, Msg: err.Error()}
	}
	// One rotation of a project's store at a time, and never beside a delete that removes its server.
	unlock := s.kvLocks.lock(projectID)
	defer unlock()
	var prj *store.Project
	var kv *store.KVStore
	if err := s.db.View(func(tx *store.Tx) error {
		var err error
		prj, kv, err = s.visibleKV(tx, p, projectID)
		return err
	}); err != nil {
		return nil, err
	}
	if err := kvMustRun("rotate-token")(kv); err != nil {
		return nil, err
	}
	srv, admin, err := s.kvServer(dp, kv)
	if err != nil {
		return nil, Internal(err, "rotate key-value token")
	}
	token, hash, prefix := newKVToken()
	oldHash := kv.TokenHash
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	if err := srv.RotateToken(rctx, admin, hash); err != nil {
		return nil, &Error{Kind: KindUnavailable, Msg: "the key-value store's server did not take the new token: " + err.Error()}
	}
	var out *store.KVStore
	err = s.db.Update(func(tx *store.Tx) error {
		cur, err := store.KVStores.Get(tx, kv.ID)
		if err != nil {
			return notFoundAs(err, "key-value store %s is gone", kv.ID)
		}
		cur.TokenHash, cur.TokenPrefix, cur.UpdatedAt = hash, prefix, s.now()
		if err := store.KVStores.Put(tx, cur); err != nil {
			return Internal(err, "store key-value store")
		}
		out = cur
		if err := s.audit(tx, p, "kv.rotate_token", prj.OrganizationID, prj.ID,
			map[string]any{"kv_store_id": kv.ID, "token_prefix": prefix}); err != nil {
			return err
		}
		// The replaced token is dead for good, whatever metadata is put back later.
		return s.recordRevocation(revokedKVToken, oldHash)
	})
	if err != nil {
		// The server has the new token and the record the old: put the old one back, so the record says
		// what works (the new token was never shown).
		if rerr := srv.RotateToken(rctx, admin, oldHash); rerr != nil {
			s.log.Error("restore the key-value token after a failed rotation", "kv_store", kv.ID, "err", rerr)
		}
		return nil, err
	}
	return &KVStoreResult{KVStore: s.kvView(out, token)}, nil
}

// ResolveToken maps a presented token to the unix socket of its running store (the kv fronts' resolver).
// The store's server checks the token again: the front connects as the store's tenant user with it.
func (s *Service) ResolveToken(ctx context.Context, token string) (string, error) {
	if !strings.HasPrefix(token, KVTokenPrefix) || len(token) > 200 {
		return "", ErrInvalidKVToken
	}
	var sock string
	err := s.db.View(func(tx *store.Tx) error {
		kv, err := store.KVStores.First(tx, store.KVStoresByToken, ids.Hash(token))
		if err != nil || kv.State != KVRunning {
			return ErrInvalidKVToken
		}
		sock = redis.Config{Dir: kv.Dir}.SocketPath()
		return nil
	})
	return sock, err
}

func (s *Service) registerKVJobs(r *scheduler.Runner) {
	r.Handle(JobKVCreate, s.createKVJob)
	r.Handle(JobKVFlush, s.flushKVJob)
	r.Handle(JobKVDelete, s.deleteKVJob)
}

// kvTarget starts a kv job: the data plane and the job's store.
func (s *Service) kvTarget(run *scheduler.Run) (*DataPlane, *store.KVStore, error) {
	dp, err := s.dataPlane()
	if err != nil {
		return nil, nil, err
	}
	if dp.RedisServer == "" {
		return nil, nil, errors.New("redis-server is not installed (Debian package redis-server)")
	}
	var pl kvPayload
	if err := run.DecodePayload(&pl); err != nil {
		return nil, nil, err
	}
	var kv *store.KVStore
	err = s.db.View(func(tx *store.Tx) error {
		kv, err = store.KVStores.Get(tx, pl.KVStoreID)
		return err
	})
	return dp, kv, err
}

// updateKV applies fn to the stored record.
func (s *Service) updateKV(id string, fn func(*store.KVStore)) error {
	return s.db.Update(func(tx *store.Tx) error {
		kv, err := store.KVStores.Get(tx, id)
		if err != nil {
			return err
		}
		fn(kv)
		kv.UpdatedAt = s.now()
		return store.KVStores.Put(tx, kv)
	})
}

// createKVJob starts the store's server and puts it under supervision. When it fails for good, the store
// is in error with last_error and nothing of it runs.
func (s *Service) createKVJob(ctx context.Context, run *scheduler.Run) (any, error) {
	dp, kv, err := s.kvTarget(run)
	if errors.Is(err, store.ErrNotFound) { // deleted with its project meanwhile
		return map[string]any{"skipped": "the store is gone"}, nil
	}
	if err != nil {
		return nil, err
	}
	if kv.State != KVProvisioning {
		return map[string]any{"skipped": "the store is " + kv.State}, nil
	}
	srv, _, err := s.kvServer(dp, kv)
	if err == nil {
		err = s.startKV(ctx, dp, srv)
	}
	if err != nil {
		if ctx.Err() != nil { // the appliance stops: the retry after its next start starts the server again
			s.kvStopUnsupervised(srv)
			return nil, err
		}
		if srv != nil {
			dp.Supervisor.Unwatch(kvKey(kv.ID))
			if rerr := srv.Remove(context.WithoutCancel(ctx)); rerr != nil {
				s.log.Warn("remove a key-value store that failed to start", "kv_store", kv.ID, "err", rerr)
			}
		}
		if uerr := s.updateKV(kv.ID, func(r *store.KVStore) { r.State, r.LastError = KVError, err.Error() }); uerr != nil {
			s.log.Error("mark key-value store failed", "kv_store", kv.ID, "err", uerr)
		}
		return nil, err
	}
	if err := s.updateKV(kv.ID, func(r *store.KVStore) {
		if r.State == KVProvisioning {
			r.State, r.LastError = KVRunning, ""
		}
	}); err != nil {
		return nil, err
	}
	return map[string]any{"kv_store_id": kv.ID, "maxmemory_mb": kv.MaxMemoryMB}, nil
}

// startKV starts a server and watches it.
func (s *Service) startKV(ctx context.Context, dp *DataPlane, srv *redis.Server) error {
	if err := os.MkdirAll(s.kvDir(), 0o711); err != nil {
		return err
	}
	if err := os.Chmod(s.kvDir(), 0o711); err != nil {
		return err
	}
	if err := srv.Start(ctx, dp.Supervisor.Exec); err != nil {
		return err
	}
	return dp.Supervisor.Watch(kvKey(srv.ID), srv)
}

func (s *Service) kvStopUnsupervised(srv *redis.Server) {
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Stop(ctx, nil, daemon.StopFast); err != nil {
		s.log.Warn("stop the server of an interrupted key-value create", "kv_store", srv.ID, "err", err)
	}
}

// flushKVJob deletes every key (FLUSHALL as the appliance's user) and saves the empty snapshot, so a
// restart cannot bring keys back.
func (s *Service) flushKVJob(ctx context.Context, run *scheduler.Run) (any, error) {
	dp, kv, err := s.kvTarget(run)
	if err != nil {
		return nil, err
	}
	if kv.State != KVRunning {
		return nil, fmt.Errorf("the key-value store is %s, not running", kv.State)
	}
	srv, admin, err := s.kvServer(dp, kv)
	if err != nil {
		return nil, err
	}
	out, err := srv.Admin(ctx, admin, []string{"DBSIZE"}, []string{"FLUSHALL", "SYNC"}, []string{"SAVE"})
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	n, _ := strconv.Atoi(strings.TrimPrefix(out[0], ":"))
	return map[string]any{"kv_store_id": kv.ID, "keys_deleted": n}, nil
}

// deleteKVJob stops the server, removes its directory (socket, snapshot, configuration) and the record.
func (s *Service) deleteKVJob(ctx context.Context, run *scheduler.Run) (any, error) {
	dp, kv, err := s.kvTarget(run)
	if errors.Is(err, store.ErrNotFound) {
		return map[string]any{"skipped": "already deleted"}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := s.removeKV(ctx, dp, kv); err != nil {
		return nil, scheduler.Transient(err)
	}
	return map[string]any{"kv_store_id": kv.ID, "deleted": true}, nil
}

// removeKV ends a store: its server, its directory, then its record (with the project's lock on rotations).
func (s *Service) removeKV(ctx context.Context, dp *DataPlane, kv *store.KVStore) error {
	unlock := s.kvLocks.lock(kv.ProjectID)
	defer unlock()
	dp.Supervisor.Unwatch(kvKey(kv.ID))
	srv, _, err := s.kvServer(dp, kv)
	if err != nil {
		return err
	}
	if err := srv.Remove(ctx); err != nil {
		return err
	}
	return s.db.Update(func(tx *store.Tx) error {
		err := store.KVStores.Delete(tx, kv.ID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return err
	})
}

// removeProjectKV removes a deleted project's store, if it has one.
func (s *Service) removeProjectKV(ctx context.Context, dp *DataPlane, projectID string) error {
	var kv *store.KVStore
	err := s.db.View(func(tx *store.Tx) error {
		var err error
		kv, err = projectKV(tx, projectID)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.removeKV(ctx, dp, kv)
}

// AdoptKV puts every running store's server under supervision at start: a live one is adopted, a dead one
// (the machine rebooted) is started by the supervisor from its snapshot.
func (s *Service) AdoptKV(ctx context.Context) error {
	dp, err := s.dataPlane()
	if err != nil {
		return err
	}
	var live []*store.KVStore
	if err := s.db.View(func(tx *store.Tx) error {
		live, err = store.KVStores.All(tx, func(r *store.KVStore) bool { return r.State == KVRunning })
		return err
	}); err != nil {
		return err
	}
	for _, kv := range live {
		srv, _, err := s.kvServer(dp, kv)
		if err != nil {
			return err
		}
		if err := dp.Supervisor.Watch(kvKey(kv.ID), srv); err != nil {
			return err
		}
	}
	return nil
}

// onKVEvent records what the supervisor saw of a store's server as an audit event of its project.
func (s *Service) onKVEvent(e daemon.Event) {
	id := strings.TrimPrefix(e.Key, "kv/")
	err := s.db.Update(func(tx *store.Tx) error {
		kv, err := store.KVStores.Get(tx, id)
		if err != nil {
			return err
		}
		md := map[string]any{"kv_store_id": id, "pid": e.PID}
		if e.Err != nil {
			md["error"] = e.Err.Error()
		}
		return s.audit(tx, &Principal{AuthSource: ActorSystem}, "kv."+string(e.Kind), kv.OrganizationID, kv.ProjectID, md)
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Error("record a key-value server event", "key", e.Key, "err", err)
	}
}

// KVHealth is the status page's row of the stores: how many run, any whose server is down, and any that
// refuses writes because its last snapshot failed.
func (s *Service) KVHealth(ctx context.Context) (string, string) {
	dp, err := s.dataPlane()
	if err != nil {
		return StatusDown, err.Error()
	}
	if dp.RedisServer == "" {
		return StatusDegraded, FeatureKV + " disabled: redis-server is not installed (Debian package redis-server)"
	}
	var live []*store.KVStore
	if err := s.db.View(func(tx *store.Tx) error {
		live, err = store.KVStores.All(tx, func(r *store.KVStore) bool { return r.State == KVRunning })
		return err
	}); err != nil {
		return StatusDown, err.Error()
	}
	var down, unsaved, unknown []string
	for _, kv := range live {
		srv, admin, err := s.kvServer(dp, kv)
		if err != nil {
			down = append(down, kv.ID)
			continue
		}
		if _, running, _ := srv.Status(); !running {
			down = append(down, kv.ID)
			continue
		}
		// A store whose snapshot cannot be written (its disk full) refuses writes with MISCONF.
		switch failed, err := srv.SaveFailed(ctx, admin); {
		case err != nil:
			unknown = append(unknown, kv.ID)
		case failed:
			unsaved = append(unsaved, kv.ID)
		}
	}
	var bad []string
	if len(down) > 0 {
		bad = append(bad, fmt.Sprintf("%d of %d stores not running: %s", len(down), len(live), strings.Join(down, ", ")))
	}
	if len(unsaved) > 0 {
		bad = append(bad, fmt.Sprintf("%d of %d stores refuse writes (MISCONF): their last snapshot could not be saved (disk full or unwritable): %s",
			len(unsaved), len(live), strings.Join(unsaved, ", ")))
	}
	if len(unknown) > 0 {
		bad = append(bad, fmt.Sprintf("%d of %d stores do not answer the appliance's INFO: %s", len(unknown), len(live), strings.Join(unknown, ", ")))
	}
	if len(bad) > 0 {
		return StatusDegraded, strings.Join(bad, "; ")
	}
	return StatusOperational, fmt.Sprintf("%d stores running (redis-server %s)", len(live), dp.RedisServer)
}
