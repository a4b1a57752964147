package kv

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/redis"
	"github.com/theappliance/appliance/store"
)

// require refuses key-value work on an appliance without redis-server (503 naming the package).
func (s *Service) require() error {
	if s.plane != nil && s.plane.RedisServer == "" {
		return apperr.Unavailable(Feature + " are not available on this appliance: redis-server is not installed (Debian package redis-server)")
	}
	return nil
}

// visible loads the store of a project the caller may see (404 when there is none).
func (s *Service) visible(tx *store.Tx, p *authz.Principal, projectID string) (*store.Project, *store.KVStore, error) {
	prj, err := s.host.VisibleProject(tx, p, projectID)
	if err != nil {
		return nil, nil, err
	}
	kv, err := projectStore(tx, prj.ID)
	if err != nil {
		return nil, nil, apperr.NotFoundAs(err, "project %s has no key-value store", prj.ID)
	}
	return prj, kv, nil
}

type payload struct {
	KVStoreID string `json:"kv_store_id"`
}

// Create records the project's store and enqueues the job that starts its server; the token is in this
// response only (its route row needs credentials:read too).
func (s *Service) Create(ctx context.Context, p *authz.Principal, projectID string) (*api.KVCreateResponse, error) {
	if err := s.require(); err != nil {
		return nil, err
	}
	token, hash, prefix := NewToken()
	var rec *store.KVStore
	var job *store.Job
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := s.host.ActiveProject(tx, p, projectID)
		if err != nil {
			return err
		}
		if old, err := projectStore(tx, prj.ID); err == nil {
			if old.State == StateDestroying {
				return apperr.Conflict("project %s's key-value store is being deleted: create a new one once job %s has ended", prj.ID, old.JobID)
			}
			return apperr.Conflict("project %s already has a key-value store (%s); a project holds one at a time", prj.ID, old.ID)
		} else if !errors.Is(err, store.ErrNotFound) {
			return apperr.Internal(err, "read key-value store")
		}
		memMB := s.host.PlanKVMemoryMB(prj.Plan)
		now := s.now()
		host, _ := os.Hostname()
		id := ids.New("kv")
		rec = &store.KVStore{ID: id, ProjectID: prj.ID, OrganizationID: prj.OrganizationID, HostID: host,
			State: StateProvisioning, MaxMemoryMB: memMB, Dir: filepath.Join(s.cfg.Dir, id), TokenHash: hash,
			TokenPrefix: prefix, SealedAdmin: s.box.Seal([]byte(ids.Secret(32))), CreatedAt: now, UpdatedAt: now}
		if job, err = s.host.Enqueue(tx, prj, JobCreate, "kv:"+prj.ID, payload{KVStoreID: id}); err != nil {
			return err
		}
		rec.JobID = job.ID
		if err := store.KVStores.Put(tx, rec); err != nil {
			return apperr.Internal(err, "store key-value store")
		}
		return s.host.Audit(tx, p, JobCreate, prj.OrganizationID, prj.ID,
			map[string]any{"kv_store_id": id, "token_prefix": prefix, "maxmemory_mb": rec.MaxMemoryMB, "job_id": job.ID})
	})
	jr, err := s.host.AnswerJob(job, err)
	if err != nil {
		return nil, err
	}
	return &api.KVCreateResponse{Job: jr.Job, KVStore: s.view(nil, rec, token)}, nil
}

// Get is the project's store.
func (s *Service) Get(ctx context.Context, p *authz.Principal, projectID string) (*api.KVStore, error) {
	var out *api.KVStore
	err := s.db.View(func(tx *store.Tx) error {
		_, kv, err := s.visible(tx, p, projectID)
		if err == nil {
			out = s.view(tx, kv, "")
		}
		return err
	})
	return out, err
}

// Credentials is the project's store's credentials (the token is not shown: only its hash is kept).
func (s *Service) Credentials(ctx context.Context, p *authz.Principal, projectID string) (*api.KVCredentials, error) {
	kv, err := s.Get(ctx, p, projectID)
	if err != nil {
		return nil, err
	}
	return &kv.Credentials, nil
}

// List lists the stores of the caller's organization (platform admins name one), oldest first; a
// project-scoped key sees its project's store only.
func (s *Service) List(ctx context.Context, p *authz.Principal, orgID string) (*api.KVStoreList, error) {
	org, err := p.OrganizationFilter(orgID)
	if err != nil {
		return nil, err
	}
	out := &api.KVStoreList{KVStores: []*api.KVStore{}}
	err = s.db.View(func(tx *store.Tx) error {
		recs, err := store.KVStores.Lookup(tx, store.KVStoresByOrg, org, store.Query{})
		if err != nil {
			return apperr.Internal(err, "list key-value stores")
		}
		for _, r := range recs {
			if p.ProjectID != "" && r.ProjectID != p.ProjectID {
				continue
			}
			out.KVStores = append(out.KVStores, s.view(tx, r, ""))
		}
		return nil
	})
	return out, err
}

// action enqueues a flush or delete job on the project's store; check refuses states it cannot act in,
// change updates the record in the same transaction.
func (s *Service) action(p *authz.Principal, projectID, jobType string, check func(*store.KVStore) error, change func(*store.KVStore)) (*api.JobResponse, error) {
	if err := s.require(); err != nil {
		return nil, err
	}
	var job *store.Job
	err := s.db.Update(func(tx *store.Tx) error {
		prj, kv, err := s.visible(tx, p, projectID)
		if err != nil {
			return err
		}
		if err := check(kv); err != nil {
			return err
		}
		if job, err = s.host.Enqueue(tx, prj, jobType, "kv:"+prj.ID, payload{KVStoreID: kv.ID}); err != nil {
			return err
		}
		change(kv)
		kv.JobID, kv.UpdatedAt = job.ID, s.now()
		if err := store.KVStores.Put(tx, kv); err != nil {
			return apperr.Internal(err, "store key-value store")
		}
		return s.host.Audit(tx, p, jobType, prj.OrganizationID, prj.ID, map[string]any{"kv_store_id": kv.ID, "job_id": job.ID})
	})
	return s.host.AnswerJob(job, err)
}

func mustRun(what string) func(*store.KVStore) error {
	return func(kv *store.KVStore) error {
		if kv.State != StateRunning {
			return apperr.Conflict("the key-value store is %s: %s needs it running", kv.State, what)
		}
		return nil
	}
}

// Flush enqueues kv.flush: every key is deleted; the endpoint and token stay.
func (s *Service) Flush(ctx context.Context, p *authz.Principal, projectID string) (*api.JobResponse, error) {
	return s.action(p, projectID, JobFlush, mustRun("flush"), func(*store.KVStore) {})
}

// Delete enqueues kv.delete: the store is destroying until its server and data are gone.
func (s *Service) Delete(ctx context.Context, p *authz.Principal, projectID string) (*api.JobResponse, error) {
	return s.action(p, projectID, JobDelete, func(kv *store.KVStore) error {
		if kv.State == StateDestroying {
			return apperr.Conflict("the key-value store is already being deleted (job %s)", kv.JobID)
		}
		return nil
	}, func(kv *store.KVStore) { kv.State, kv.LastError = StateDestroying, "" })
}

// RotateToken makes a new token the store's only one, synchronously: the running server takes it and
// cuts every connection of the old one, then the record keeps its hash. The token is in this response only
// (its route row needs credentials:read too).
func (s *Service) RotateToken(ctx context.Context, p *authz.Principal, projectID string) (*api.KVStoreResult, error) {
	if _, err := s.dataPlane(); err != nil {
		return nil, apperr.Unavailable(err.Error())
	}
	// One rotation of a project's store at a time, and never beside a delete that removes its server.
	unlock := s.locks.lock(projectID)
	defer unlock()
	var prj *store.Project
	var kv *store.KVStore
	if err := s.db.View(func(tx *store.Tx) error {
		var err error
		prj, kv, err = s.visible(tx, p, projectID)
		return err
	}); err != nil {
		return nil, err
	}
	if err := mustRun("rotate-token")(kv); err != nil {
		return nil, err
	}
	srv, admin, err := s.Server(kv)
	if err != nil {
		return nil, apperr.Internal(err, "rotate key-value token")
	}
	token, hash, prefix := NewToken()
	oldHash := kv.TokenHash
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	if err := srv.RotateToken(rctx, admin, hash); err != nil {
		return nil, apperr.Unavailable("the key-value store's server did not take the new token: " + err.Error())
	}
	var out *store.KVStore
	err = s.db.Update(func(tx *store.Tx) error {
		cur, err := store.KVStores.Get(tx, kv.ID)
		if err != nil {
			return apperr.NotFoundAs(err, "key-value store %s is gone", kv.ID)
		}
		cur.TokenHash, cur.TokenPrefix, cur.UpdatedAt = hash, prefix, s.now()
		if err := store.KVStores.Put(tx, cur); err != nil {
			return apperr.Internal(err, "store key-value store")
		}
		out = cur
		if err := s.host.Audit(tx, p, "kv.rotate_token", prj.OrganizationID, prj.ID,
			map[string]any{"kv_store_id": kv.ID, "token_prefix": prefix}); err != nil {
			return err
		}
		// The replaced token is dead for good, whatever metadata is put back later.
		return s.host.RevokeKVToken(oldHash)
	})
	if err != nil {
		// The server has the new token and the record the old: put the old one back, so the record says
		// what works (the new token was never shown).
		if rerr := srv.RotateToken(rctx, admin, oldHash); rerr != nil {
			s.log.Error("restore the key-value token after a failed rotation", "kv_store", kv.ID, "err", rerr)
		}
		return nil, err
	}
	return &api.KVStoreResult{KVStore: s.view(nil, out, token)}, nil
}

// SuspendedError is ResolveToken's refusal of a suspended organization's store: the fronts tell the client
// (kvproxy's refusal: a RESP error reply, a REST 403) instead of the wrong-password answer.
type SuspendedError struct{ Reason string }

func (e *SuspendedError) Error() string { return "organization suspended: " + e.Reason }

// KVRefusal is the message the fronts send the client.
func (e *SuspendedError) KVRefusal() string {
	return "ERR organization suspended: " + e.Reason + " (its key-value store answers again when an operator resumes it)"
}

// ResolveToken maps a presented token to the unix socket of its running store (the kv fronts' resolver,
// kvproxy.Resolver). The store's server checks the token again: the front connects as the store's tenant
// user with it. A suspended organization's stores are refused (SuspendedError).
func (s *Service) ResolveToken(ctx context.Context, token string) (string, error) {
	if !strings.HasPrefix(token, TokenPrefix) || len(token) > 200 {
		return "", ErrInvalidToken
	}
	// Cached while the tables it is read from do not change (store.Cache): the REST front resolves the
	// token of every request, and the read was half its handler's CPU (bench/ BenchmarkKVRESTvsBareHTTPS).
	hash := ids.Hash(token)
	version := store.KVStores.Version(s.db) + store.Organizations.Version(s.db)
	if r, ok := s.tokens.Get(hash, version); ok {
		return r.sock, r.err
	}
	var sock string
	err := s.db.View(func(tx *store.Tx) error {
		kv, err := store.KVStores.First(tx, store.KVStoresByToken, hash)
		if err != nil || kv.State != StateRunning {
			return ErrInvalidToken
		}
		if org, err := store.Organizations.Get(tx, kv.OrganizationID); err == nil && org.SuspendedAt != nil {
			return &SuspendedError{Reason: org.SuspendedReason}
		}
		sock = redis.Config{Dir: kv.Dir}.SocketPath()
		return nil
	})
	var suspended *SuspendedError
	if err == nil || errors.Is(err, ErrInvalidToken) || errors.As(err, &suspended) {
		s.tokens.Put(hash, version, resolved{sock, err})
	}
	return sock, err
}

// resolved is ResolveToken's answer for a token (a socket, or its refusal).
type resolved struct {
	sock string
	err  error
}
