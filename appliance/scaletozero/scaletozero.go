// Package scaletozero is scale to zero (issue 33): a project idle for its suspend_after_seconds is
// suspended — its server stopped cleanly (a fast shutdown ends no session, since none is open, and writes
// the shutdown checkpoint: the wake needs no recovery) and its pooler with it — and the wake front
// (appliance/wake) holds its direct and pooled ports until a client's first PostgreSQL packet wakes it.
//
// An idle suspension is not an organization's suspension (appliance/tenancy: an operator's decision,
// runtime_status stopped). They combine so: a project of a suspended organization is never suspended for
// idleness nor woken (a connection held by the front is answered with an error naming the organization's
// suspension); the organization's resume starts its projects, the idle-suspended ones included (their
// ports released first), and the idle clock starts again.
//
// It reaches the rest of the domain only through Host (declared here, given by the root's areaHost), the
// kernel packages (apperr, authz), the wire types (api), the records (store), the job runner (scheduler)
// and the wake front. It never imports `appliance`.
package scaletozero

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/wake"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// The bounds of a project's setting.
const (
	MinSuspendAfterSeconds = 60
	MaxSuspendAfterSeconds = 30 * 24 * 3600
)

// DefaultSuspendAfter is the idle time after which a project that did not choose one is suspended, its
// plan's (an operator's configuration, appliance/tenancy): suspend_after_seconds for previews, ephemeral
// databases and development projects (built in: 300 s), production_suspend_after_seconds for the others,
// production and staging (built in: 0, never).
func DefaultSuspendAfter(p *store.Project, plan api.Plan) time.Duration {
	if p.PreviewOf != "" || p.Ephemeral || p.Environment == "development" {
		return time.Duration(plan.SuspendAfterSeconds) * time.Second
	}
	return time.Duration(plan.ProductionSuspendAfterSeconds) * time.Second
}

// SuspendAfter is the project's idle time before suspension (0: never), on its plan.
func SuspendAfter(p *store.Project, plan api.Plan) time.Duration {
	if p.SuspendAfterSeconds != nil {
		return time.Duration(*p.SuspendAfterSeconds) * time.Second
	}
	return DefaultSuspendAfter(p, plan)
}

// Host is what scale to zero takes from the rest of the domain (appliance/areas.go gives it).
type Host interface {
	// DataPlaneReady fails when the appliance runs no instances.
	DataPlaneReady() error
	// SuspendTarget is the project and its primary instance (nil: the project has none, or is being
	// deleted, and nothing runs).
	SuspendTarget(projectID string) (*store.Project, *store.Instance, error)
	// VisibleProject is the project when the caller may see it.
	VisibleProject(tx *store.Tx, p *authz.Principal, projectID string) (*store.Project, error)
	// OrganizationSuspended reports whether the organization is suspended by an operator.
	OrganizationSuspended(orgID string) bool
	// ClientConnections is the number of client sessions on the project's server (the appliance's own
	// admin sessions are not clients).
	ClientConnections(ctx context.Context, prj *store.Project) (int, error)
	// StopServer and StartServer stop the project's server and pooler (data kept) and start them again;
	// StartServer returns once both accept connections.
	StopServer(ctx context.Context, inst *store.Instance, prj *store.Project) error
	StartServer(ctx context.Context, inst *store.Instance, prj *store.Project) error
	// ServerRunning reports whether the instance's server runs.
	ServerRunning(inst *store.Instance) bool
	// ServerCertFiles are the files of the instance's server certificate and key.
	ServerCertFiles(inst *store.Instance) (certFile, keyFile string)
	// SetRuntime records the project's runtime status.
	SetRuntime(projectID, status string)
	// UpdateProject changes the project's record in a transaction of its own.
	UpdateProject(id string, fn func(*store.Project) error) error
	// ForgetStudio drops the studio's pooled sessions of the project.
	ForgetStudio(projectID string)
	// Audit writes an audit event of the caller in tx.
	Audit(tx *store.Tx, p *authz.Principal, action, orgID, projectID string, metadata any) error
	// AppendEvent appends an event to the project's log in tx.
	AppendEvent(tx *store.Tx, typ, orgID, projectID string, data any) error
	// JobTarget is the project a job acts on (its preview database, when it names one).
	JobTarget(run *scheduler.Run) string
	// PlanOf is the plan in force of the project (the default plan when its own is gone).
	PlanOf(prj *store.Project) api.Plan
}

// Deps are scale to zero's collaborators; New takes them all.
type Deps struct {
	DB    *store.DB
	Clock func() time.Time // UTC
	Host  Host
	Log   *slog.Logger
	// ListenHost is the address the front holds the ports on (the instances' listen host).
	ListenHost string
	// NoWakeJobs are the job types that need no running server (a provision, an organization's stop and
	// start); ReleaseJobs the ones that remove the project they target (the front lets go of its ports).
	NoWakeJobs, ReleaseJobs []string
}

// Service is scale to zero: the front, the time each project was last seen busy, and one lock per project
// so a suspend and a wake never overlap.
type Service struct {
	d     Deps
	front *wake.Front
	mu    sync.Mutex
	busy  map[string]time.Time // project ID → when last seen with a connection or a job (or first seen)
	locks sync.Map             // project ID → *sync.Mutex
}

// New returns scale to zero with its wake front (holding nothing yet).
func New(d Deps) *Service {
	z := &Service{d: d, busy: map[string]time.Time{}}
	z.front = wake.New(wake.Config{Waker: wake.WakerFunc(z.wakeFromConnection), Host: d.ListenHost, Log: d.Log})
	return z
}

func (z *Service) lock(projectID string) func() {
	v, _ := z.locks.LoadOrStore(projectID, &sync.Mutex{})
	mu := v.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

func (z *Service) seenBusy(projectID string, at time.Time) {
	z.mu.Lock()
	z.busy[projectID] = at
	z.mu.Unlock()
}

// idleSince is when the project was last seen busy; a project seen for the first time starts its clock now.
func (z *Service) idleSince(projectID string, now time.Time) time.Time {
	z.mu.Lock()
	defer z.mu.Unlock()
	t, ok := z.busy[projectID]
	if !ok {
		z.busy[projectID], t = now, now
	}
	return t
}

// system is the actor of what the appliance does by itself (an idle suspension, a wake by a connection or
// a job).
var system = &authz.Principal{AuthSource: authz.ActorSystem}

// SuspendIdle is the periodic pass: each active project with a suspend_after_seconds that has had no client
// connection (direct or pooled, the studio's included) and no job for that long is suspended. It reports
// how many it suspended.
func (z *Service) SuspendIdle(ctx context.Context) (int, error) {
	if err := z.d.Host.DataPlaneReady(); err != nil {
		return 0, nil // no instances, nothing to suspend
	}
	var prjs []*store.Project
	err := z.d.DB.View(func(tx *store.Tx) error {
		var err error
		prjs, err = store.Projects.All(tx, func(p *store.Project) bool {
			return p.State == api.ProjectActive && p.RuntimeStatus == api.RuntimeActive && p.IdleSuspendedAt == nil &&
				p.PrimaryInstanceID != "" && SuspendAfter(p, z.d.Host.PlanOf(p)) > 0 && store.Local(tx, p) // this node's
		})
		return err
	})
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, prj := range prjs {
		if z.d.Host.OrganizationSuspended(prj.OrganizationID) {
			continue
		}
		now := z.d.Clock()
		busy, err := z.projectBusy(ctx, prj)
		if err != nil {
			errs = append(errs, fmt.Errorf("project %s: %w", prj.ID, err))
			continue
		}
		if busy {
			z.seenBusy(prj.ID, now)
			continue
		}
		if now.Sub(z.idleSince(prj.ID, now)) < SuspendAfter(prj, z.d.Host.PlanOf(prj)) {
			continue
		}
		switch err := z.suspend(ctx, system, prj.ID, "idle", true); {
		case err == nil:
			n++
		case errors.Is(err, errBusy):
			z.seenBusy(prj.ID, z.d.Clock())
		default:
			errs = append(errs, fmt.Errorf("suspend project %s: %w", prj.ID, err))
		}
	}
	return n, errors.Join(errs...)
}

// errBusy: the project got a connection or a job between the idle pass's look and its suspension.
var errBusy = errors.New("the project is in use")

// projectBusy reports whether the project has a job holding it or a client session on its server.
func (z *Service) projectBusy(ctx context.Context, prj *store.Project) (bool, error) {
	var held bool
	if err := z.d.DB.View(func(tx *store.Tx) error {
		j, err := scheduler.Holder(tx, prj.ID, time.Now())
		held = j != nil
		return err
	}); err != nil || held {
		return held, err
	}
	conns, err := z.d.Host.ClientConnections(ctx, prj)
	return conns > 0, err
}

// Suspend suspends the project now, idle or not (POST /v1/projects/{id}/suspend): its sessions end. The
// caller is the audit event's actor.
func (z *Service) Suspend(ctx context.Context, p *authz.Principal, projectID string) error {
	if err := p.RequireAdminRole("suspending a project"); err != nil {
		return err
	}
	if _, err := z.checkSuspendable(p, projectID, true); err != nil {
		return err
	}
	return z.suspend(ctx, p, projectID, "request", false)
}

// Resume wakes a suspended project now (POST /v1/projects/{id}/resume); a running one is left as it is.
// The caller is the audit event's actor.
func (z *Service) Resume(ctx context.Context, p *authz.Principal, projectID string) error {
	prj, err := z.checkSuspendable(p, projectID, false)
	if err != nil {
		return err
	}
	return z.resume(ctx, p, prj.ID, "request")
}

// checkSuspendable is the project p may suspend or resume: active, provisioned, its organization not
// suspended, and (noJob) no job holding it.
func (z *Service) checkSuspendable(p *authz.Principal, projectID string, noJob bool) (*store.Project, error) {
	if err := z.d.Host.DataPlaneReady(); err != nil {
		return nil, err
	}
	var prj *store.Project
	err := z.d.DB.View(func(tx *store.Tx) (err error) {
		if prj, err = z.d.Host.VisibleProject(tx, p, projectID); err != nil {
			return err
		}
		if prj.State != api.ProjectActive || prj.PrimaryInstanceID == "" {
			return apperr.Conflict("project %s is %s", prj.ID, prj.State)
		}
		if org, err := store.Organizations.Get(tx, prj.OrganizationID); err == nil && org.SuspendedAt != nil {
			return apperr.Conflict("the organization of project %s is suspended", prj.ID)
		}
		if !noJob {
			return nil
		}
		if j, err := scheduler.Holder(tx, prj.ID, time.Now()); err != nil {
			return apperr.Internal(err, "read the project's jobs")
		} else if j != nil {
			return apperr.Conflict("job %s (%s) holds project %s: try again once it has ended", j.ID, j.Type, prj.ID)
		}
		return nil
	})
	return prj, err
}

// suspend stops the project's server and pooler and gives its ports to the wake front, audited with actor
// as the one who did it. idleOnly refuses (errBusy) when a client connected or a job took the project
// since the idle pass looked.
func (z *Service) suspend(ctx context.Context, actor *authz.Principal, projectID, reason string, idleOnly bool) error {
	defer z.lock(projectID)()
	h := z.d.Host
	prj, inst, err := h.SuspendTarget(projectID)
	if err != nil {
		return err
	}
	if inst == nil || prj.IdleSuspendedAt != nil || prj.State != api.ProjectActive {
		return nil // nothing runs, or already suspended
	}
	if idleOnly {
		if busy, err := z.projectBusy(ctx, prj); err != nil {
			return err
		} else if busy {
			return errBusy
		}
	}
	h.ForgetStudio(prj.ID)
	if err := h.StopServer(ctx, inst, prj); err != nil {
		return z.restartAfterFailedSuspend(ctx, prj, inst, fmt.Errorf("stop the server: %w", err))
	}
	if err := z.front.Hold(prj.ID, z.serverTLS(inst), prj.DirectPort, prj.PooledPort); err != nil {
		return z.restartAfterFailedSuspend(ctx, prj, inst, err)
	}
	at := z.d.Clock()
	err = z.d.DB.Update(func(tx *store.Tx) error {
		cur, err := store.Projects.Get(tx, prj.ID)
		if err != nil {
			return err
		}
		cur.IdleSuspendedAt, cur.RuntimeStatus, cur.UpdatedAt = &at, api.RuntimeSuspended, at
		if err := store.Projects.Put(tx, cur); err != nil {
			return err
		}
		if err := openSuspension(tx, cur, at); err != nil {
			return err
		}
		md := map[string]any{"project_id": cur.ID, "reason": reason, "at": at}
		if err := h.Audit(tx, actor, "project.suspend", cur.OrganizationID, cur.ID, md); err != nil {
			return err
		}
		return h.AppendEvent(tx, "project.suspended", cur.OrganizationID, cur.ID, md)
	})
	if err != nil {
		z.front.Release(prj.ID)
		return z.restartAfterFailedSuspend(ctx, prj, inst, fmt.Errorf("record the suspension: %w", err))
	}
	z.d.Log.Info("project suspended", "project", prj.ID, "reason", reason)
	return nil
}

// restartAfterFailedSuspend starts again what a suspension that failed half-way stopped.
func (z *Service) restartAfterFailedSuspend(ctx context.Context, prj *store.Project, inst *store.Instance, cause error) error {
	if err := z.d.Host.StartServer(context.WithoutCancel(ctx), inst, prj); err != nil {
		z.d.Host.SetRuntime(prj.ID, api.RuntimeDown)
		return errors.Join(cause, fmt.Errorf("start it again: %w", err))
	}
	return cause
}

// serverTLS is the certificate of the instance's server, with which the front answers a failed wake inside
// TLS (nil when it cannot be read: the answer goes before TLS).
func (z *Service) serverTLS(inst *store.Instance) *tls.Config {
	certFile, keyFile := z.d.Host.ServerCertFiles(inst)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		z.d.Log.Warn("scale to zero: the server's certificate for the wake front", "instance", inst.ID, "err", err)
		return nil
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// wakeFromConnection is the front's Waker: a client's first packet reached a suspended project's port.
func (z *Service) wakeFromConnection(ctx context.Context, projectID string) error {
	return z.resume(ctx, system, projectID, "connection")
}

// resume starts a suspended project's server and pooler (its ports released by the front first) and
// records it active, audited with actor as the one who did it. A start that fails stops what it started
// and leaves the project suspended, its ports held again: the next connection tries again.
func (z *Service) resume(ctx context.Context, actor *authz.Principal, projectID, reason string) error {
	defer z.lock(projectID)()
	h := z.d.Host
	prj, inst, err := h.SuspendTarget(projectID)
	if err != nil {
		return err
	}
	if inst == nil || prj.IdleSuspendedAt == nil {
		return nil // running (woken meanwhile), or nothing to start
	}
	if h.OrganizationSuspended(prj.OrganizationID) {
		return fmt.Errorf("the organization of project %s is suspended", prj.ID)
	}
	started := time.Now()
	z.front.Release(prj.ID)
	if err := h.StartServer(ctx, inst, prj); err != nil {
		cause := err
		if err := h.StopServer(context.WithoutCancel(ctx), inst, prj); err != nil {
			cause = errors.Join(cause, fmt.Errorf("stop what started: %w", err))
		}
		if err := z.front.Hold(prj.ID, z.serverTLS(inst), prj.DirectPort, prj.PooledPort); err != nil {
			cause = errors.Join(cause, err)
		}
		return fmt.Errorf("start the server: %w", cause)
	}
	at := z.d.Clock()
	z.seenBusy(prj.ID, at)
	err = z.d.DB.Update(func(tx *store.Tx) error {
		cur, err := store.Projects.Get(tx, prj.ID)
		if err != nil {
			return err
		}
		cur.IdleSuspendedAt, cur.RuntimeStatus, cur.UpdatedAt = nil, api.RuntimeActive, at
		if err := store.Projects.Put(tx, cur); err != nil {
			return err
		}
		if err := closeSuspension(tx, cur.ID, at); err != nil {
			return err
		}
		md := map[string]any{"project_id": cur.ID, "reason": reason, "at": at, "took_ms": time.Since(started).Milliseconds()}
		if err := h.Audit(tx, actor, "project.resume", cur.OrganizationID, cur.ID, md); err != nil {
			return err
		}
		return h.AppendEvent(tx, "project.resumed", cur.OrganizationID, cur.ID, md)
	})
	if err != nil {
		return fmt.Errorf("record the wake: %w", err)
	}
	z.d.Log.Info("project resumed", "project", prj.ID, "reason", reason, "took", time.Since(started))
	return nil
}

// HoldSuspended gives the wake front the ports of a project suspended for idleness at a start of the
// appliance: it stays suspended and wakeable.
func (z *Service) HoldSuspended(prj *store.Project, inst *store.Instance) error {
	// A server found running (it outlived a crash of the appliance between its start and the record of
	// the wake) is stopped: the record says suspended.
	if z.d.Host.ServerRunning(inst) {
		if err := z.d.Host.StopServer(context.Background(), inst, prj); err != nil {
			return err
		}
	}
	z.d.Host.SetRuntime(prj.ID, api.RuntimeSuspended)
	return z.front.Hold(prj.ID, z.serverTLS(inst), prj.DirectPort, prj.PooledPort)
}

// ClearIdleSuspension forgets an idle suspension when something else starts the project's server (an
// organization's resume): the front lets go of its ports first.
func (z *Service) ClearIdleSuspension(prj *store.Project) {
	z.front.Release(prj.ID)
	if prj.IdleSuspendedAt == nil {
		return
	}
	if err := z.d.Host.UpdateProject(prj.ID, func(p *store.Project) error { p.IdleSuspendedAt = nil; return nil }); err != nil {
		z.d.Log.Error("clear an idle suspension", "project", prj.ID, "err", err)
	}
	if err := z.d.DB.Update(func(tx *store.Tx) error { return closeSuspension(tx, prj.ID, z.d.Clock()) }); err != nil {
		z.d.Log.Error("end the record of an idle suspension", "project", prj.ID, "err", err)
	}
	z.seenBusy(prj.ID, z.d.Clock())
}

// Release lets go of the ports the front holds for the project (nothing when it holds none).
func (z *Service) Release(projectID string) { z.front.Release(projectID) }

// Close releases every held port (the shutdown): the suspended projects stay suspended in the records, and
// the next start holds their ports again.
func (z *Service) Close() { _ = z.front.Close() }

// WakeForJob runs before every job (scheduler.Runner.Before): a job that needs the server of a project
// suspended for idleness wakes it first (the project it names, and its preview database); a job of
// ReleaseJobs lets go of the ports the front holds for the project it removes; one of NoWakeJobs needs
// nothing.
func (z *Service) WakeForJob(ctx context.Context, run *scheduler.Run) (any, error) {
	switch {
	case slices.Contains(z.d.NoWakeJobs, run.Job.Type):
		return nil, nil
	case slices.Contains(z.d.ReleaseJobs, run.Job.Type):
		z.front.Release(z.d.Host.JobTarget(run))
		return nil, nil
	}
	for _, id := range []string{run.Job.ProjectID, run.Job.PreviewDatabaseID} {
		if id == "" || !z.front.Holding(id) {
			continue
		}
		if err := z.resume(ctx, system, id, "job "+run.Job.Type); err != nil {
			return nil, scheduler.Transient(fmt.Errorf("wake suspended project %s: %w", id, err))
		}
	}
	return nil, nil
}

// openSuspension records the start of the project's suspension (store.Suspension: the history's shading,
// the usage's compute seconds) and deletes its suspensions that ended before store.SuspensionRetention.
func openSuspension(tx *store.Tx, prj *store.Project, at time.Time) error {
	old, err := store.Suspensions.Lookup(tx, store.SuspensionsByProject, prj.ID, store.Query{})
	if err != nil {
		return err
	}
	for _, r := range old {
		if r.To != nil && at.Sub(*r.To) > store.SuspensionRetention {
			if err := store.Suspensions.Delete(tx, r.ID); err != nil {
				return err
			}
		}
	}
	return store.Suspensions.Put(tx, &store.Suspension{ID: prj.ID + "/" + at.UTC().Format(time.RFC3339Nano), ProjectID: prj.ID,
		OrganizationID: prj.OrganizationID, From: at})
}

// closeSuspension records the end of the project's suspension (of every one still open).
func closeSuspension(tx *store.Tx, projectID string, at time.Time) error {
	recs, err := store.Suspensions.Lookup(tx, store.SuspensionsByProject, projectID, store.Query{})
	if err != nil {
		return err
	}
	for _, r := range recs {
		if r.To == nil {
			end := at
			r.To = &end
			if err := store.Suspensions.Put(tx, r); err != nil {
				return err
			}
		}
	}
	return nil
}
