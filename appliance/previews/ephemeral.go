package previews

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/keyrate"
	"github.com/theappliance/appliance/store"
)

// Ephemeral databases: throwaway projects made without an account (see docs/api-decisions.md).
const (
	// EphemeralLifetime is how long an unclaimed ephemeral database lives.
	EphemeralLifetime = 72 * time.Hour
	// EphemeralStorageLimit is an ephemeral database's storage limit until it is claimed.
	EphemeralStorageLimit = 256 << 20
	// EphemeralTokenPrefix starts every claim token.
	EphemeralTokenPrefix = "eph_"
)

// EphemeralLimits bound what anonymous callers may make (operators' flags: cmd/up.go).
type EphemeralLimits struct {
	PerIPPerHour int   // creations per client IP per hour (a burst of as many)
	Live         int   // unclaimed ephemeral databases alive at once on the appliance
	StorageBytes int64 // each one's storage limit (held by the storage guard: appliance/storageguard)
	// TotalStorageBytes caps the sum of the live ones' storage limits (0: Live × StorageBytes).
	TotalStorageBytes int64
	// MaxConnections is each one's max_connections (3 of them are the appliance's).
	MaxConnections int
	// ProcessMemoryBytes is the private memory (RLIMIT_DATA) of each of its server's processes, and
	// TempFileBytes each process's temporary files (temp_file_limit): a session cannot raise either.
	// One database's memory is then at most its shared buffers (128 MB) plus (MaxConnections +
	// EphemeralWorkers + 8 auxiliary and autovacuum processes) × ProcessMemoryBytes.
	ProcessMemoryBytes int64
	TempFileBytes      int64
}

// EphemeralWorkers is an ephemeral server's max_worker_processes (and parallel workers).
const EphemeralWorkers = 2

// DefaultEphemeralLimits are the appliance's: 20 databases of 256 MB (5 GB in all); each server's
// memory at most 128 MB + (10 + 2 + 8) × 64 MB = 1.4 GB.
var DefaultEphemeralLimits = EphemeralLimits{PerIPPerHour: 10, Live: 20, StorageBytes: EphemeralStorageLimit,
	TotalStorageBytes: 20 * EphemeralStorageLimit, MaxConnections: 10, ProcessMemoryBytes: 64 << 20, TempFileBytes: EphemeralStorageLimit}

// setEphemeralLimits sets the limits (New: Config.Ephemeral); zero sizes take the defaults'.
func (s *Service) setEphemeralLimits(l EphemeralLimits) {
	d := DefaultEphemeralLimits
	for _, f := range []struct{ v, def *int64 }{{&l.StorageBytes, &d.StorageBytes}, {&l.ProcessMemoryBytes, &d.ProcessMemoryBytes}, {&l.TempFileBytes, &d.TempFileBytes}} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	if l.MaxConnections <= 0 {
		l.MaxConnections = d.MaxConnections
	}
	if l.TotalStorageBytes <= 0 {
		l.TotalStorageBytes = int64(max(1, l.Live)) * l.StorageBytes
	}
	s.ephemeral = l
	s.ephemeralRate = keyrate.New(time.Hour/time.Duration(max(1, l.PerIPPerHour)), max(1, l.PerIPPerHour))
}

// EphemeralLimits are the limits in force (the root's settings of an ephemeral database's server read them).
func (s *Service) EphemeralLimits() EphemeralLimits { return s.ephemeral }

func ephemeralView(p *store.Project) *api.EphemeralDatabase {
	v := &api.EphemeralDatabase{ProjectID: p.ID, Name: p.Name, PostgresVersion: p.PostgresVersion, Region: p.Region,
		State: p.State, CreatedAt: p.CreatedAt}
	if p.EphemeralExpiresAt != nil {
		v.ExpiresAt = *p.EphemeralExpiresAt
	}
	return v
}

// errNoEphemeral is the one answer for an unknown database and a wrong token alike.
func errNoEphemeral() error {
	return apperr.NotFound("no ephemeral database with this id and claim token")
}

// CreateEphemeral makes a database for an anonymous caller at clientIP: a project without an organization,
// provisioned like any (from a spare cluster when one is ready), destroyed after 72 hours unless claimed.
func (s *Service) CreateEphemeral(ctx context.Context, clientIP string, req *api.CreateEphemeralRequest) (*api.EphemeralCreated, error) {
	if req.Region != "" && req.Region != s.cfg.Region {
		return nil, apperr.Invalid("region must be %s, the only region of this appliance", s.cfg.Region)
	}
	name := strings.TrimSpace(req.Name)
	if name == "" {
		name = "ephemeral-" + ids.Secret(4)[:6]
	}
	if err := s.host.CheckDisplayText("name", name, 1, 63); err != nil {
		return nil, err
	}
	ident, err := s.host.InstanceIdent(name)
	if err != nil {
		return nil, err
	}
	if wait := s.ephemeralRate.Wait(keyrate.AddressKey(clientIP)); wait > 0 {
		return nil, &apperr.Error{Kind: apperr.KindTooMany, RetryAfter: wait, Msg: fmt.Sprintf("too many ephemeral databases from this address (an IPv6 one: its /64): %d per hour", s.ephemeral.PerIPPerHour)}
	}
	token := EphemeralTokenPrefix + ids.Secret(32)
	var out *api.EphemeralCreated
	err = s.db.Update(func(tx *store.Tx) error {
		live, err := store.Projects.Lookup(tx, store.ProjectsEphemeral, "live", store.Query{})
		if err != nil {
			return apperr.Internal(err, "count ephemeral databases")
		}
		var reserved int64
		for _, e := range live {
			reserved += e.StorageLimitBytes
		}
		if len(live) >= s.ephemeral.Live || reserved+s.ephemeral.StorageBytes > s.ephemeral.TotalStorageBytes {
			return apperr.Unavailable("this appliance holds as many ephemeral databases as it allows: try again later, or create a project with an account")
		}
		now := s.now()
		expires := now.Add(EphemeralLifetime)
		prj := &store.Project{ID: ids.New("prj"), Name: name, Slug: s.host.Slug(name), DatabaseName: ident, RoleName: ident,
			PublicHost: s.cfg.PublicHost, Region: s.cfg.Region, Plan: s.host.DefaultPlan(), SSLMode: "verify-full",
			StatementTimeout: "0", IdleTransactionTimeout: "0", MaxConnections: s.ephemeral.MaxConnections,
			StorageLimitBytes: s.ephemeral.StorageBytes, Environment: "development", State: api.ProjectProvisioning,
			RuntimeStatus: api.RuntimeProvisioning, CreatedAt: now, UpdatedAt: now, PreloadLibraries: []string{},
			Ephemeral: true, ClaimTokenHash: ids.Hash(token), EphemeralExpiresAt: &expires, CreatedFromIP: clientIP}
		if _, err := s.host.EnqueueProvision(tx, prj); err != nil {
			return err
		}
		if err := s.host.Audit(tx, &authz.Principal{}, "ephemeral.create", "", prj.ID, map[string]any{"name": name, "client_ip": clientIP}); err != nil {
			return apperr.Internal(err, "audit")
		}
		out = &api.EphemeralCreated{ClaimToken: token, EphemeralDatabase: ephemeralView(prj),
			ClaimURL: strings.TrimRight(s.cfg.APIURL, "/") + "/claim/" + url.PathEscape(prj.ID) + "#token=" + token}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.host.Notify()
	return out, nil
}

// ephemeralByToken loads an unclaimed ephemeral database whose claim token is token (the same 404 for an
// unknown id, another id's token, a claimed or a deleted database).
func ephemeralByToken(tx *store.Tx, projectID, token string) (*store.Project, error) {
	if token == "" {
		return nil, apperr.Unauthenticated("the X-Service-Claim-Token header is required: the eph_ token returned at creation")
	}
	prj, err := store.Projects.Get(tx, projectID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errNoEphemeral()
	}
	if err != nil {
		return nil, apperr.Internal(err, "read project")
	}
	if !prj.Ephemeral || prj.DeletedAt != nil || subtle.ConstantTimeCompare([]byte(prj.ClaimTokenHash), []byte(ids.Hash(token))) != 1 {
		return nil, errNoEphemeral()
	}
	return prj, nil
}

// GetEphemeral is the database and, once it is active, its connection URLs.
func (s *Service) GetEphemeral(ctx context.Context, projectID, token string) (*api.EphemeralResponse, error) {
	var out *api.EphemeralResponse
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := ephemeralByToken(tx, projectID, token)
		if err != nil {
			return err
		}
		out = &api.EphemeralResponse{EphemeralDatabase: ephemeralView(prj)}
		if prj.State == api.ProjectActive {
			c, err := s.host.Connections(prj)
			if err != nil {
				return err
			}
			out.Connections = c
		}
		return nil
	})
	return out, err
}

// DeleteEphemeral destroys the database now (the project.delete job).
func (s *Service) DeleteEphemeral(ctx context.Context, projectID, token string) (*api.JobResponse, error) {
	var job *store.Job
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := ephemeralByToken(tx, projectID, token)
		if err != nil {
			return err
		}
		job, err = s.deleteEphemeral(tx, prj, &authz.Principal{}, "ephemeral.delete")
		return err
	})
	return s.host.AnswerJob(job, err)
}

// deleteEphemeral enqueues the deletion of an ephemeral database (once: a second call is a conflict).
func (s *Service) deleteEphemeral(tx *store.Tx, prj *store.Project, p *authz.Principal, action string) (*store.Job, error) {
	if prj.State == api.ProjectDeleting {
		return nil, apperr.Conflict("ephemeral database %s is already being deleted", prj.ID)
	}
	j, err := s.host.EnqueueDelete(tx, prj)
	if err != nil {
		return nil, err
	}
	prj.State = api.ProjectDeleting
	if err := store.Projects.Put(tx, prj); err != nil {
		return nil, apperr.Internal(err, "store project")
	}
	if err := s.host.Audit(tx, p, action, "", prj.ID, map[string]any{"job_id": j.ID}); err != nil {
		return nil, apperr.Internal(err, "audit")
	}
	return j, nil
}

// ClaimEphemeral moves an unclaimed ephemeral database into the caller's organization as a normal
// project: its data and connection details stay, its expiry goes, its storage limit becomes its plan's.
func (s *Service) ClaimEphemeral(ctx context.Context, p *authz.Principal, projectID string, req *api.ClaimRequest) (*api.ClaimResponse, error) {
	if err := p.RequireAdminRole("claiming a database into the organization"); err != nil {
		return nil, err
	}
	if p.ProjectID != "" {
		return nil, apperr.Forbidden("a project-scoped key cannot claim databases")
	}
	if p.IsAdmin && p.OrganizationID == "" {
		return nil, apperr.Invalid("platform administrators have no organization to claim into: claim as a member of one")
	}
	var out *api.ClaimResponse
	unlock := ""
	err := s.db.Update(func(tx *store.Tx) error {
		out, unlock = nil, "" // a run again starts over
		prj, err := store.Projects.Get(tx, projectID)
		if errors.Is(err, store.ErrNotFound) {
			return errNoEphemeral()
		}
		if err != nil {
			return apperr.Internal(err, "read project")
		}
		if req.ClaimToken == "" || subtle.ConstantTimeCompare([]byte(prj.ClaimTokenHash), []byte(ids.Hash(req.ClaimToken))) != 1 {
			return errNoEphemeral()
		}
		switch {
		case prj.ClaimedAt != nil:
			return apperr.Conflict("this database was already claimed")
		case prj.DeletedAt != nil || prj.State == api.ProjectDeleting || prj.State == api.ProjectDeleted:
			return apperr.Conflict("this database expired or was deleted: it cannot be claimed")
		case prj.State == api.ProjectFailed:
			return apperr.Conflict("this database failed to provision: it cannot be claimed")
		}
		existing, err := store.Projects.Lookup(tx, store.ProjectsByOrg, p.OrganizationID, store.Query{})
		if err != nil {
			return apperr.Internal(err, "list projects")
		}
		live := 0
		for _, e := range existing {
			if e.DeletedAt == nil && e.PreviewOf == "" {
				live++
			}
		}
		if q, _, err := s.host.OrganizationQuota(tx, p.OrganizationID); err != nil {
			return apperr.Internal(err, "read the organization's quota")
		} else if live >= q {
			return apperr.Forbidden("project quota reached: the organization has %d of %d projects", live, q)
		}
		if prj.StorageLock != "" {
			// Lifted after this transaction commits (see below): a claimed project has its plan's limit.
			unlock = prj.ID
		}
		now := s.now()
		prj.OrganizationID, prj.Ephemeral, prj.EphemeralExpiresAt, prj.ClaimedAt = p.OrganizationID, false, nil, &now
		prj.StorageLock = ""
		prj.StorageLimitBytes, prj.UpdatedAt = s.host.PlanStorageLimitBytes(prj.Plan), now
		if err := store.Projects.Put(tx, prj); err != nil {
			return apperr.Internal(err, "store project")
		}
		if err := s.host.Audit(tx, p, "ephemeral.claim", prj.OrganizationID, prj.ID, map[string]any{"name": prj.Name}); err != nil {
			return apperr.Internal(err, "audit")
		}
		view := s.host.ProjectView(prj)
		if err := s.host.AppendEvent(tx, "ephemeral.claimed", prj.OrganizationID, prj.ID, api.ProjectResponse{Project: view}); err != nil {
			return apperr.Internal(err, "append event")
		}
		out = &api.ClaimResponse{Project: api.ClaimedProjectView{Project: *view, AlwaysOn: true}}
		return nil
	})
	if err == nil && unlock != "" {
		if lerr := s.host.LiftStorageLock(ctx, unlock); lerr != nil {
			s.log.Error("lift the storage lock of a claimed database", "project", unlock, "err", lerr)
		}
	}
	return out, err
}

// SweepEphemeral deletes the unclaimed ephemeral databases whose 72 hours are over.
func (s *Service) SweepEphemeral(ctx context.Context) (int, error) {
	return s.sweepExpired(func(tx *store.Tx) ([]*store.Project, error) {
		return store.Projects.Lookup(tx, store.ProjectsEphemeral, "live", store.Query{})
	}, func(p *store.Project) *time.Time { return p.EphemeralExpiresAt },
		func(tx *store.Tx, p *store.Project) error {
			_, err := s.deleteEphemeral(tx, p, &authz.Principal{AuthSource: authz.ActorSystem}, "ephemeral.expire")
			return err
		})
}

// sweepExpired deletes (del, in one transaction) the records of candidates whose expiry has passed and
// that are neither being provisioned (the job holds their lock: the next sweep takes them) nor deleted;
// it returns how many.
func (s *Service) sweepExpired(candidates func(*store.Tx) ([]*store.Project, error), expiry func(*store.Project) *time.Time,
	del func(*store.Tx, *store.Project) error) (int, error) {
	n := 0
	now := s.now()
	err := s.db.Update(func(tx *store.Tx) error {
		n = 0 // a run again starts over
		all, err := candidates(tx)
		if err != nil {
			return err
		}
		for _, p := range all {
			at := expiry(p)
			if at == nil || now.Before(*at) || p.DeletedAt != nil {
				continue
			}
			if p.State == api.ProjectProvisioning || p.State == api.ProjectDeleting || p.State == api.ProjectDeleted {
				continue
			}
			if err := del(tx, p); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err == nil && n > 0 {
		s.host.Notify()
	}
	return n, err
}
