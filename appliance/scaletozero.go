package appliance

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/theappliance/appliance/appliance/previews"
	"github.com/theappliance/appliance/appliance/tenancy"
	"github.com/theappliance/appliance/appliance/wake"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Scale to zero (issue 33): a project idle for its suspend_after_seconds is suspended — its server stopped
// cleanly (a fast shutdown ends no session, since none is open, and writes the shutdown checkpoint: the
// wake needs no recovery) and its pooler with it — and the wake front (appliance/wake) holds its direct
// and pooled ports until a client's first PostgreSQL packet wakes it.
//
// An idle suspension is not an organization's suspension (appliance/tenancy: an operator's decision,
// runtime_status stopped). They combine so: a project of a suspended organization is never suspended for
// idleness nor woken (a connection held by the front is answered with an error naming the organization's
// suspension); the organization's resume starts its projects, the idle-suspended ones included (their
// ports released first), and the idle clock starts again.

// Default idle times (DefaultSuspendAfter).
const (
	DefaultSuspendAfterDev = 300 * time.Second // development projects, previews and ephemeral databases
	minSuspendAfterSeconds = 60
	maxSuspendAfterSeconds = 30 * 24 * 3600
)

// DefaultSuspendAfter is the idle time after which a project that did not choose one is suspended:
// DefaultSuspendAfterDev for previews, ephemeral databases and development projects, never (0) for the
// others (production and staging).
func DefaultSuspendAfter(p *store.Project) time.Duration {
	if p.PreviewOf != "" || p.Ephemeral || p.Environment == "development" {
		return DefaultSuspendAfterDev
	}
	return 0
}

// suspendAfter is the project's idle time before suspension (0: never).
func suspendAfter(p *store.Project) time.Duration {
	if p.SuspendAfterSeconds != nil {
		return time.Duration(*p.SuspendAfterSeconds) * time.Second
	}
	return DefaultSuspendAfter(p)
}

// scaleToZero is the service's part of it: the front, the time each project was last seen busy, and one
// lock per project so a suspend and a wake never overlap.
type scaleToZero struct {
	front *wake.Front
	mu    sync.Mutex
	busy  map[string]time.Time // project ID → when last seen with a connection or a job (or first seen)
	locks sync.Map             // project ID → *sync.Mutex
}

func (z *scaleToZero) lock(projectID string) func() {
	v, _ := z.locks.LoadOrStore(projectID, &sync.Mutex{})
	mu := v.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

func (z *scaleToZero) seenBusy(projectID string, at time.Time) {
	z.mu.Lock()
	z.busy[projectID] = at
	z.mu.Unlock()
}

// idleSince is when the project was last seen busy; a project seen for the first time starts its clock now.
func (z *scaleToZero) idleSince(projectID string, now time.Time) time.Time {
	z.mu.Lock()
	defer z.mu.Unlock()
	t, ok := z.busy[projectID]
	if !ok {
		z.busy[projectID], t = now, now
	}
	return t
}

func (s *Service) newScaleToZero() *scaleToZero {
	z := &scaleToZero{busy: map[string]time.Time{}}
	z.front = wake.New(wake.Config{Waker: wake.WakerFunc(s.wakeFromConnection), Host: s.cfg.ListenHost, Log: s.log})
	return z
}

// SuspendIdle is the periodic pass of scale to zero: each active project with a suspend_after_seconds that
// has had no client connection (direct or pooled, the studio's included: the appliance's own admin
// sessions are not clients) and no job for that long is suspended. It reports how many it suspended.
func (s *Service) SuspendIdle(ctx context.Context) (int, error) {
	if _, err := s.dataPlane(); err != nil {
		return 0, nil // no instances, nothing to suspend
	}
	var prjs []*store.Project
	err := s.db.View(func(tx *store.Tx) error {
		var err error
		prjs, err = store.Projects.All(tx, func(p *store.Project) bool {
			return p.State == ProjectActive && p.RuntimeStatus == RuntimeActive && p.IdleSuspendedAt == nil &&
				p.PrimaryInstanceID != "" && suspendAfter(p) > 0
		})
		return err
	})
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, prj := range prjs {
		if s.organizationSuspended(prj.OrganizationID) {
			continue
		}
		now := s.now()
		busy, err := s.projectBusy(ctx, prj)
		if err != nil {
			errs = append(errs, fmt.Errorf("project %s: %w", prj.ID, err))
			continue
		}
		if busy {
			s.z.seenBusy(prj.ID, now)
			continue
		}
		if now.Sub(s.z.idleSince(prj.ID, now)) < suspendAfter(prj) {
			continue
		}
		switch err := s.suspend(ctx, prj.ID, "idle", true); {
		case err == nil:
			n++
		case errors.Is(err, errBusy):
			s.z.seenBusy(prj.ID, s.now())
		default:
			errs = append(errs, fmt.Errorf("suspend project %s: %w", prj.ID, err))
		}
	}
	return n, errors.Join(errs...)
}

// errBusy: the project got a connection or a job between the idle pass's look and its suspension.
var errBusy = errors.New("the project is in use")

// projectBusy reports whether the project has a job holding it or a client session on its server.
func (s *Service) projectBusy(ctx context.Context, prj *store.Project) (bool, error) {
	var held bool
	if err := s.db.View(func(tx *store.Tx) error {
		j, err := scheduler.Holder(tx, prj.ID, time.Now())
		held = j != nil
		return err
	}); err != nil || held {
		return held, err
	}
	_, conns, err := s.measureProject(ctx, prj)
	return conns > 0, err
}

// SuspendProject suspends the project now, idle or not (POST /v1/projects/{id}/suspend, for operators and
// tests): its sessions end.
func (s *Service) SuspendProject(ctx context.Context, p *Principal, projectID string) (*ProjectResponse, error) {
	if err := p.RequireAdminRole("suspending a project"); err != nil {
		return nil, err
	}
	if _, err := s.checkSuspendable(p, projectID, true); err != nil {
		return nil, err
	}
	if err := s.suspend(ctx, projectID, "request", false); err != nil {
		return nil, err
	}
	return s.projectAnswer(p, projectID)
}

// ResumeProject wakes a suspended project now (POST /v1/projects/{id}/resume); a running one is left as it
// is.
func (s *Service) ResumeProject(ctx context.Context, p *Principal, projectID string) (*ProjectResponse, error) {
	prj, err := s.checkSuspendable(p, projectID, false)
	if err != nil {
		return nil, err
	}
	if err := s.resume(ctx, prj.ID, "request"); err != nil {
		return nil, err
	}
	return s.projectAnswer(p, projectID)
}

// checkSuspendable is the project p may suspend or resume: active, provisioned, its organization not
// suspended, and (noJob) no job holding it.
func (s *Service) checkSuspendable(p *Principal, projectID string, noJob bool) (*store.Project, error) {
	if _, err := s.dataPlane(); err != nil {
		return nil, err
	}
	var prj *store.Project
	err := s.db.View(func(tx *store.Tx) (err error) {
		if prj, err = s.visibleProject(tx, p, projectID); err != nil {
			return err
		}
		if prj.State != ProjectActive || prj.PrimaryInstanceID == "" {
			return Conflict("project %s is %s", prj.ID, prj.State)
		}
		if org, err := store.Organizations.Get(tx, prj.OrganizationID); err == nil && org.SuspendedAt != nil {
			return Conflict("the organization of project %s is suspended", prj.ID)
		}
		if !noJob {
			return nil
		}
		if j, err := scheduler.Holder(tx, prj.ID, time.Now()); err != nil {
			return Internal(err, "read the project's jobs")
		} else if j != nil {
			return Conflict("job %s (%s) holds project %s: try again once it has ended", j.ID, j.Type, prj.ID)
		}
		return nil
	})
	return prj, err
}

func (s *Service) projectAnswer(p *Principal, projectID string) (*ProjectResponse, error) {
	var out *ProjectResponse
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := s.visibleProject(tx, p, projectID)
		if err == nil {
			out = &ProjectResponse{Project: projectView(prj)}
		}
		return err
	})
	return out, err
}

// suspend stops the project's server and pooler and gives its ports to the wake front. idleOnly refuses
// (errBusy) when a client connected or a job took the project since the idle pass looked.
func (s *Service) suspend(ctx context.Context, projectID, reason string, idleOnly bool) error {
	defer s.z.lock(projectID)()
	prj, inst, err := s.suspendedTarget(projectID)
	if err != nil {
		return err
	}
	if inst == nil || prj.IdleSuspendedAt != nil || prj.State != ProjectActive {
		return nil // nothing runs, or already suspended
	}
	if idleOnly {
		if busy, err := s.projectBusy(ctx, prj); err != nil {
			return err
		} else if busy {
			return errBusy
		}
	}
	s.studio.Forget(prj.ID)
	if err := s.eng.Stop(ctx, nil, inst, prj); err != nil {
		return s.restartAfterFailedSuspend(ctx, prj, inst, fmt.Errorf("stop the server: %w", err))
	}
	if err := s.z.front.Hold(prj.ID, s.serverTLS(inst), prj.DirectPort, prj.PooledPort); err != nil {
		return s.restartAfterFailedSuspend(ctx, prj, inst, err)
	}
	at := s.now()
	err = s.db.Update(func(tx *store.Tx) error {
		cur, err := store.Projects.Get(tx, prj.ID)
		if err != nil {
			return err
		}
		cur.IdleSuspendedAt, cur.RuntimeStatus, cur.UpdatedAt = &at, RuntimeSuspended, at
		if err := store.Projects.Put(tx, cur); err != nil {
			return err
		}
		md := map[string]any{"project_id": cur.ID, "reason": reason, "at": at}
		if err := s.audit(tx, &Principal{AuthSource: ActorSystem}, "project.suspend", cur.OrganizationID, cur.ID, md); err != nil {
			return err
		}
		return s.events.Append(tx, "project.suspended", cur.OrganizationID, cur.ID, md)
	})
	if err != nil {
		s.z.front.Release(prj.ID)
		return s.restartAfterFailedSuspend(ctx, prj, inst, fmt.Errorf("record the suspension: %w", err))
	}
	s.log.Info("project suspended", "project", prj.ID, "reason", reason)
	return nil
}

// restartAfterFailedSuspend starts again what a suspension that failed half-way stopped.
func (s *Service) restartAfterFailedSuspend(ctx context.Context, prj *store.Project, inst *store.Instance, cause error) error {
	if err := s.eng.Start(context.WithoutCancel(ctx), nil, inst, prj); err != nil {
		s.setRuntime(prj.ID, RuntimeDown)
		return errors.Join(cause, fmt.Errorf("start it again: %w", err))
	}
	return cause
}

// serverTLS is the certificate of the instance's server, with which the front answers a failed wake inside
// TLS (nil when it cannot be read: the answer goes before TLS).
func (s *Service) serverTLS(inst *store.Instance) *tls.Config {
	pgi := s.eng.Instance(inst)
	cert, err := tls.LoadX509KeyPair(pgi.CertFile(), pgi.KeyFile())
	if err != nil {
		s.log.Warn("scale to zero: the server's certificate for the wake front", "instance", inst.ID, "err", err)
		return nil
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// wakeFromConnection is the front's Waker: a client's first packet reached a suspended project's port.
func (s *Service) wakeFromConnection(ctx context.Context, projectID string) error {
	return s.resume(ctx, projectID, "connection")
}

// resume starts a suspended project's server and pooler (its ports released by the front first) and
// records it active. A start that fails stops what it started and leaves the project suspended, its ports
// held again: the next connection tries again.
func (s *Service) resume(ctx context.Context, projectID, reason string) error {
	defer s.z.lock(projectID)()
	prj, inst, err := s.suspendedTarget(projectID)
	if err != nil {
		return err
	}
	if inst == nil || prj.IdleSuspendedAt == nil {
		return nil // running (woken meanwhile), or nothing to start
	}
	if s.organizationSuspended(prj.OrganizationID) {
		return fmt.Errorf("the organization of project %s is suspended", prj.ID)
	}
	started := time.Now()
	s.z.front.Release(prj.ID)
	if err := s.eng.Start(ctx, nil, inst, prj); err != nil {
		cause := err
		if err := s.eng.Stop(context.WithoutCancel(ctx), nil, inst, prj); err != nil {
			cause = errors.Join(cause, fmt.Errorf("stop what started: %w", err))
		}
		if err := s.z.front.Hold(prj.ID, s.serverTLS(inst), prj.DirectPort, prj.PooledPort); err != nil {
			cause = errors.Join(cause, err)
		}
		return fmt.Errorf("start the server: %w", cause)
	}
	at := s.now()
	s.z.seenBusy(prj.ID, at)
	err = s.db.Update(func(tx *store.Tx) error {
		cur, err := store.Projects.Get(tx, prj.ID)
		if err != nil {
			return err
		}
		cur.IdleSuspendedAt, cur.RuntimeStatus, cur.UpdatedAt = nil, RuntimeActive, at
		if err := store.Projects.Put(tx, cur); err != nil {
			return err
		}
		md := map[string]any{"project_id": cur.ID, "reason": reason, "at": at, "took_ms": time.Since(started).Milliseconds()}
		if err := s.audit(tx, &Principal{AuthSource: ActorSystem}, "project.resume", cur.OrganizationID, cur.ID, md); err != nil {
			return err
		}
		return s.events.Append(tx, "project.resumed", cur.OrganizationID, cur.ID, md)
	})
	if err != nil {
		return fmt.Errorf("record the wake: %w", err)
	}
	s.log.Info("project resumed", "project", prj.ID, "reason", reason, "took", time.Since(started))
	return nil
}

// holdSuspended gives the wake front the ports of the projects suspended for idleness at a start of the
// appliance (AdoptInstances): they stay suspended and wakeable.
func (s *Service) holdSuspended(prj *store.Project, inst *store.Instance) error {
	// A server found running (it outlived a crash of the appliance between its start and the record of
	// the wake) is stopped: the record says suspended.
	if _, running, _ := s.eng.Instance(inst).Status(); running {
		if err := s.eng.Stop(context.Background(), nil, inst, prj); err != nil {
			return err
		}
	}
	s.setRuntime(prj.ID, RuntimeSuspended)
	return s.z.front.Hold(prj.ID, s.serverTLS(inst), prj.DirectPort, prj.PooledPort)
}

// clearIdleSuspension forgets an idle suspension when something else starts the project's server (an
// organization's resume): the front lets go of its ports first.
func (s *Service) clearIdleSuspension(prj *store.Project) {
	s.z.front.Release(prj.ID)
	if prj.IdleSuspendedAt == nil {
		return
	}
	if err := s.updateProject(prj.ID, func(p *store.Project) error { p.IdleSuspendedAt = nil; return nil }); err != nil {
		s.log.Error("clear an idle suspension", "project", prj.ID, "err", err)
	}
	s.z.seenBusy(prj.ID, s.now())
}

// closeWakeFront releases every held port (the shutdown): the suspended projects stay suspended in the
// records, and the next start holds their ports again.
func (s *Service) closeWakeFront() { _ = s.z.front.Close() }

// wakeForJob runs before every job: a job that needs the server of a project suspended for idleness wakes
// it first (the project it names, and its preview database); a delete lets go of the ports the front holds
// for the project it removes. An organization's stop and start, and a provision, need nothing.
func (s *Service) wakeForJob(ctx context.Context, run *scheduler.Run) (any, error) {
	switch run.Job.Type {
	case JobProjectProvision, tenancy.JobStop, tenancy.JobStart:
		return nil, nil
	case JobProjectDelete, previews.JobDelete:
		s.z.front.Release(targetOf(run))
		return nil, nil
	}
	for _, id := range []string{run.Job.ProjectID, run.Job.PreviewDatabaseID} {
		if id == "" || !s.z.front.Holding(id) {
			continue
		}
		if err := s.resume(ctx, id, "job "+run.Job.Type); err != nil {
			return nil, scheduler.Transient(fmt.Errorf("wake suspended project %s: %w", id, err))
		}
	}
	return nil, nil
}
