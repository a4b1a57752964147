package integrations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/appliance/integrations/usersync"
	"github.com/theappliance/appliance/appliance/outbound"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

type syncPayload struct {
	IntegrationID string `json:"integration_id"`
}

type deployPayload struct {
	IntegrationID string               `json:"integration_id"`
	Event         provider.DeployEvent `json:"event"`
}

type userEventPayload struct {
	IntegrationID string             `json:"integration_id"`
	Event         provider.UserEvent `json:"event"`
	// Body is the verified delivery, kept when the provider reads its events in the job (a
	// MultiEvent's, which reads the users it names from the provider's API).
	Body []byte `json:"body,omitempty"`
}

// MultiEvent is a directory whose one delivery carries many user events, read with calls to its API
// (auth_b's log stream: authb.MultiEvent). The area finds it by a type assertion and reads the events
// in the job, not while the webhook waits for its answer.
type MultiEvent interface {
	UserEvents(ctx context.Context, env provider.Env, body []byte) ([]provider.UserEvent, error)
}

// common are the config keys the area itself reads (every provider's config has them, with these
// defaults: docs/api-decisions.md "Integrations").
type common struct {
	Variables struct {
		Pooled string `json:"pooled"`
		Direct string `json:"direct"`
		CA     string `json:"ca"`
	} `json:"variables"`
	PreviewDatabases      *bool  `json:"preview_databases"`
	DeletePreviewsOnClose *bool  `json:"delete_previews_on_close"`
	PreviewMode           string `json:"preview_mode"`
}

func commonOf(raw json.RawMessage) common {
	var c common
	_ = json.Unmarshal(raw, &c) // the provider validated it; absent keys take the defaults
	if c.Variables.Pooled == "" {
		c.Variables.Pooled = "DATABASE_URL"
	}
	if c.Variables.Direct == "" {
		c.Variables.Direct = "DIRECT_URL"
	}
	if c.PreviewMode == "" {
		c.PreviewMode = api.PreviewModeClone
	}
	return c
}

func (c common) previews() bool { return c.PreviewDatabases == nil || *c.PreviewDatabases }
func (c common) deleteOnClose() bool {
	return c.DeletePreviewsOnClose == nil || *c.DeletePreviewsOnClose
}

// errGone: the integration was deleted since the job was enqueued (the job has nothing to do).
var errGone = errors.New("the integration no longer exists")

// load reads the integration, its provider and its opened credentials.
func (s *Service) load(id string) (*store.Integration, provider.Provider, sealed, error) {
	var rec *store.Integration
	err := s.db.View(func(tx *store.Tx) (err error) { rec, err = store.Integrations.Get(tx, id); return err })
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, sealed{}, errGone
	}
	if err != nil {
		return nil, nil, sealed{}, scheduler.Transient(err)
	}
	prov, ok := s.providers[rec.Provider]
	if !ok {
		return nil, nil, sealed{}, fmt.Errorf("the %s integration is not available on this appliance", rec.Provider)
	}
	c, err := s.open(rec)
	return rec, prov, c, err
}

// settle applies change to the stored integration and appends event (none when "").
func (s *Service) settle(id, event string, extra map[string]any, change func(*store.Integration)) error {
	return s.db.Update(func(tx *store.Tx) error {
		rec, err := store.Integrations.Get(tx, id)
		if err != nil {
			return err
		}
		change(rec)
		rec.UpdatedAt = s.now()
		if err := store.Integrations.Put(tx, rec); err != nil {
			return err
		}
		if event == "" {
			return nil
		}
		return s.host.AppendEvent(tx, event, rec.OrganizationID, rec.ProjectID, eventData(rec, extra))
	})
}

// public is what a tenant may read of a provider call's failure: the provider's refusal of the
// credentials, the outbound policy's refusal, or only that it could not be reached (never what answered).
func public(name string, err error) string {
	var ae *apperr.Error
	switch {
	case errors.Is(err, provider.ErrCredentials):
		return name + ": " + provider.ErrCredentials.Error()
	case errors.Is(err, provider.ErrUnusable):
		return err.Error() // the provider's own words, which name the provider
	case errors.As(err, &ae) && ae.Kind != apperr.KindInternal:
		return name + ": " + ae.Msg
	case errors.Is(err, errNotActive):
		return name + ": " + err.Error()
	}
	return name + ": " + outbound.Public(err)
}

// permanent errors are not retried: the credentials, the settings or the destination were refused.
func permanent(err error) bool {
	var ae *apperr.Error
	return errors.Is(err, provider.ErrCredentials) || errors.Is(err, provider.ErrUnusable) || errors.Is(err, outbound.ErrRefused) ||
		(errors.As(err, &ae) && ae.Kind != apperr.KindInternal && ae.Kind != apperr.KindUnavailable)
}

var errNotActive = errors.New("the project is not active yet")

// failed ends an attempt: a transient failure is retried while attempts remain; the last (or a
// permanent one) sets state error with last_error and tells integration.failed.
func (s *Service) failed(run *scheduler.Run, rec *store.Integration, err error) (any, error) {
	msg := public(rec.Provider, err)
	s.log.Warn("integration job failed", "job", run.Job.ID, "type", run.Job.Type, "integration", rec.ID, "provider", rec.Provider,
		"attempt", run.Job.Attempts, "err", err)
	if !permanent(err) && run.Job.Attempts < run.Job.MaxAttempts {
		return nil, scheduler.Transient(errors.New(msg))
	}
	if serr := s.settle(rec.ID, EventFailed, map[string]any{"job_id": run.Job.ID, "error": msg}, func(r *store.Integration) {
		if r.State != api.IntegrationDisconnecting {
			r.State = api.IntegrationError
		}
		r.LastError = msg
	}); serr != nil {
		return nil, scheduler.Transient(serr)
	}
	return nil, errors.New(msg)
}

// branchFailed ends a deployment event's job whose branch got no preview database (the plan's previews
// limit, a failed clone): retried while the failure may pass, then recorded on the branch with the event
// integration.failed (branch named). The integration keeps its state: production's settings are not
// what failed.
func (s *Service) branchFailed(run *scheduler.Run, rec *store.Integration, branch string, err error) (any, error) {
	msg := public(rec.Provider, err)
	s.log.Warn("integration branch preview failed", "job", run.Job.ID, "integration", rec.ID, "branch", branch,
		"attempt", run.Job.Attempts, "err", err)
	if !permanent(err) && run.Job.Attempts < run.Job.MaxAttempts {
		return nil, scheduler.Transient(errors.New(msg))
	}
	if serr := s.settle(rec.ID, EventFailed, map[string]any{"job_id": run.Job.ID, "branch": branch, "error": msg}, func(r *store.Integration) {
		if r.BranchErrors == nil {
			r.BranchErrors = map[string]string{}
		}
		r.BranchErrors[branch] = msg
	}); serr != nil {
		return nil, scheduler.Transient(serr)
	}
	return nil, errors.New(msg)
}

// settings are a project's (or preview's) connection settings as the platform receives them: the pooled
// and direct URLs with sslmode=verify-full (the appliance's sslrootcert path, meaningless elsewhere,
// dropped), the CA's PEM under the config's CA variable, and the CA's PEM for a platform that verifies
// the server itself (Settings.CACert).
func (s *Service) settings(prj *store.Project, c common) (provider.Settings, error) {
	if prj.State != api.ProjectActive {
		return provider.Settings{}, errNotActive
	}
	conns, err := s.host.Connections(prj)
	if err != nil {
		return provider.Settings{}, err
	}
	pooled, direct := portable(conns.PooledURL), portable(conns.DirectURL)
	vars := map[string]string{c.Variables.Pooled: pooled, c.Variables.Direct: direct}
	pem, err := s.host.CACertPEM()
	if err != nil {
		return provider.Settings{}, err
	}
	if c.Variables.CA != "" {
		vars[c.Variables.CA] = pem
	}
	return provider.Settings{Vars: vars, Direct: direct, CACert: pem}, nil
}

// portable is a connection URL without the appliance's local sslrootcert path.
func portable(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	q.Del("sslrootcert")
	q.Set("sslmode", "verify-full")
	u.RawQuery = q.Encode()
	return u.String()
}

// syncJob checks the credentials and pushes the project's settings (a platform) or backfills the users
// (a directory).
func (s *Service) syncJob(ctx context.Context, run *scheduler.Run) (any, error) {
	var pl syncPayload
	if err := run.DecodePayload(&pl); err != nil {
		return nil, err
	}
	rec, prov, creds, err := s.load(pl.IntegrationID)
	if errors.Is(err, errGone) {
		return map[string]any{"skipped": errGone.Error()}, nil
	} else if err != nil {
		return nil, err
	}
	if rec.State == api.IntegrationDisconnecting {
		return map[string]any{"skipped": "the integration is being disconnected"}, nil
	}
	creds, err = s.fresh(ctx, rec, creds)
	if err != nil {
		return s.failed(run, rec, err)
	}
	env := s.env(prov, rec, creds)
	if err := prov.Check(ctx, env); err != nil {
		return s.failed(run, rec, err)
	}
	first := rec.LastSyncAt == nil
	event := EventSynced
	if first {
		event = EventConnected
	}
	c := commonOf(rec.Config)
	var result map[string]any
	var pushed []string
	switch pv := prov.(type) {
	case provider.Platform:
		prj, _, err := s.host.LoadProject(rec.ProjectID)
		if err != nil {
			return nil, scheduler.Transient(err)
		}
		st, err := s.settings(prj, c)
		if err != nil {
			return s.failed(run, rec, err)
		}
		if pushed, err = pv.Push(ctx, env, provider.Target{}, st); err != nil {
			return s.failed(run, rec, err)
		}
		result = map[string]any{"pushed": pushed}
	case provider.Directory:
		tbl, err := usersync.TableOf(rec.Config)
		if err != nil {
			return s.failed(run, rec, apperr.Invalid("%v", err))
		}
		n, err := s.backfill(ctx, rec, pv, env, tbl)
		if err != nil {
			return s.failed(run, rec, err)
		}
		result = map[string]any{"users": n, "table": tbl.Schema + "." + tbl.Name}
	default:
		return nil, fmt.Errorf("provider %s is neither a platform nor a directory", rec.Provider)
	}
	now := s.now()
	if err := s.settle(rec.ID, event, map[string]any{"job_id": run.Job.ID}, func(r *store.Integration) {
		if r.State == api.IntegrationDisconnecting {
			return
		}
		r.State, r.LastError, r.LastSyncAt = api.IntegrationActive, "", &now
		if pushed != nil {
			r.Pushed = pushed
		}
	}); err != nil {
		return nil, scheduler.Transient(err)
	}
	return result, nil
}

// backfill writes every user of the provider's list into the project's table, page by page.
func (s *Service) backfill(ctx context.Context, rec *store.Integration, d provider.Directory, env provider.Env, tbl usersync.Table) (int, error) {
	prj, inst, err := s.host.LoadProject(rec.ProjectID)
	if err != nil {
		return 0, err
	}
	if prj.State != api.ProjectActive || inst == nil {
		return 0, errNotActive
	}
	conn, err := s.host.AdminConn(ctx, inst, prj.DatabaseName)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := tbl.Ensure(ctx, conn, prj.RoleName); err != nil {
		return 0, err
	}
	at := s.now() // orders a listed user the provider gives no update time

	n, cursor := 0, ""
	for {
		users, next, err := d.ListUsers(ctx, env, cursor)
		if err != nil {
			return n, err
		}
		if err := tbl.Backfill(ctx, conn, users, at); err != nil {
			return n, err
		}
		n += len(users)
		if next == "" || next == cursor {
			return n, nil
		}
		cursor = next
	}
}

// removeJob removes what the integration pushed (production's and each preview branch's), best effort:
// what could not be removed is reported in the result; then the record and its credentials are gone.
func (s *Service) removeJob(ctx context.Context, run *scheduler.Run) (any, error) {
	var pl syncPayload
	if err := run.DecodePayload(&pl); err != nil {
		return nil, err
	}
	rec, prov, creds, err := s.load(pl.IntegrationID)
	if errors.Is(err, errGone) {
		return map[string]any{"skipped": errGone.Error()}, nil
	} else if err != nil {
		return nil, err
	}
	removed, failures := []string{}, []string{}
	if pv, ok := prov.(provider.Platform); ok {
		creds, err := s.fresh(ctx, rec, creds)
		env := s.env(prov, rec, creds)
		targets := []provider.Target{{}}
		for b := range rec.Previews {
			targets = append(targets, provider.Target{Branch: b})
		}
		for _, t := range targets {
			what := "production"
			if t.Branch != "" {
				what = "branch " + t.Branch
			}
			if err == nil {
				err = pv.Remove(ctx, env, t)
			}
			if err != nil {
				if !permanent(err) && run.Job.Attempts < run.Job.MaxAttempts {
					return nil, scheduler.Transient(errors.New(public(rec.Provider, err)))
				}
				failures = append(failures, what+": "+public(rec.Provider, err))
				continue
			}
			removed = append(removed, what)
		}
	}
	if err := s.db.Update(func(tx *store.Tx) error {
		cur, err := store.Integrations.Get(tx, rec.ID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		return s.forget(tx, cur)
	}); err != nil {
		return nil, scheduler.Transient(err)
	}
	return map[string]any{"removed": removed, "not_removed": failures}, nil
}

// system acts for an integration's inbound events (audited as the appliance).
func system(orgID string) *authz.Principal {
	return &authz.Principal{AuthSource: authz.ActorSystem, OrganizationID: orgID, Scopes: []string{}}
}

// previewName is a branch's preview's name (the display rule's 63 characters).
func previewName(branch string) string {
	r := []rune(branch)
	if len(r) > 63 {
		r = r[:63]
	}
	return string(r)
}

// deployJob handles a platform's deployment event: a non-production branch gets its preview database
// (made, or the one it has), waited for, and its variables for that branch; a closed branch's preview is
// deleted (config delete_previews_on_close). Idempotent: the branch's preview is recorded before it is
// waited for, so a retry (or the platform's redelivery of another event) reuses it.
func (s *Service) deployJob(ctx context.Context, run *scheduler.Run) (any, error) {
	var pl deployPayload
	if err := run.DecodePayload(&pl); err != nil {
		return nil, err
	}
	rec, prov, creds, err := s.load(pl.IntegrationID)
	if errors.Is(err, errGone) {
		return map[string]any{"skipped": errGone.Error()}, nil
	} else if err != nil {
		return nil, err
	}
	pv, ok := prov.(provider.Platform)
	ev, c := pl.Event, commonOf(rec.Config)
	switch {
	case !ok:
		return nil, fmt.Errorf("provider %s is not a platform", rec.Provider)
	case rec.State == api.IntegrationDisconnecting:
		return map[string]any{"skipped": "the integration is being disconnected"}, nil
	case ev.Production || ev.Branch == "":
		return map[string]any{"skipped": "a production deployment: its variables are the integration's"}, nil
	case ev.Closed:
		return s.closeBranch(ctx, run, rec, pv, creds, ev.Branch, c)
	case !c.previews():
		return map[string]any{"skipped": "preview databases are off (config preview_databases)"}, nil
	}
	prvID, err := s.branchPreview(ctx, rec, ev.Branch, c)
	if err != nil {
		return s.branchFailed(run, rec, ev.Branch, err)
	}
	prv, err := s.waitActive(ctx, prvID)
	if err != nil {
		return s.branchFailed(run, rec, ev.Branch, err)
	}
	st, err := s.settings(prv, c)
	if err != nil {
		return s.failed(run, rec, err)
	}
	if creds, err = s.fresh(ctx, rec, creds); err != nil {
		return s.failed(run, rec, err)
	}
	pushed, err := pv.Push(ctx, s.env(prov, rec, creds), provider.Target{Branch: ev.Branch}, st)
	if err != nil {
		return s.failed(run, rec, err)
	}
	now := s.now()
	if err := s.settle(rec.ID, EventSynced, map[string]any{"job_id": run.Job.ID, "branch": ev.Branch, "preview_id": prvID},
		func(r *store.Integration) { r.LastSyncAt = &now; delete(r.BranchErrors, ev.Branch) }); err != nil {
		return nil, scheduler.Transient(err)
	}
	return map[string]any{"branch": ev.Branch, "preview_id": prvID, "pushed": pushed}, nil
}

// branchPreview is the branch's preview: the one recorded when it still exists, else a new one made
// through the previews area (recorded at once).
func (s *Service) branchPreview(ctx context.Context, rec *store.Integration, branch string, c common) (string, error) {
	if id := rec.Previews[branch]; id != "" {
		prv, _, err := s.host.LoadProject(id)
		if err == nil && prv.State != api.ProjectDeleting && prv.State != api.ProjectDeleted && prv.State != api.ProjectFailed {
			// A new deployment of the branch: its preview lives on (BranchPreviewTTLHours from now).
			if _, err := s.previews.Extend(ctx, system(rec.OrganizationID), id, &api.ExtendPreviewRequest{TTLHours: BranchPreviewTTLHours}); err != nil {
				return "", err
			}
			return id, nil
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) && apperr.KindOf(err) != apperr.KindNotFound {
			return "", err
		}
	}
	ttl := BranchPreviewTTLHours
	res, err := s.previews.Create(ctx, system(rec.OrganizationID), rec.ProjectID, &api.CreatePreviewRequest{Name: previewName(branch), Mode: c.PreviewMode, TTLHours: &ttl})
	if err != nil {
		return "", err
	}
	id := res.Preview.ID
	if err := s.settle(rec.ID, "", nil, func(r *store.Integration) {
		if r.Previews == nil {
			r.Previews = map[string]string{}
		}
		r.Previews[branch] = id
	}); err != nil {
		return "", err
	}
	return id, nil
}

// waitActive waits until the preview accepts connections (or its creation failed).
func (s *Service) waitActive(ctx context.Context, id string) (*store.Project, error) {
	t := time.NewTicker(s.wait)
	defer t.Stop()
	deadline := time.Now().Add(15 * time.Minute)
	for {
		prv, _, err := s.host.LoadProject(id)
		if err != nil {
			return nil, err
		}
		switch prv.State {
		case api.ProjectActive:
			return prv, nil
		case api.ProjectFailed, api.ProjectDeleting, api.ProjectDeleted:
			return nil, apperr.Conflict("the preview database %s is %s", id, prv.State)
		}
		if time.Now().After(deadline) {
			return nil, apperr.Unavailable(fmt.Sprintf("the preview database %s is not ready after 15 minutes", id))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// closeBranch deletes a closed branch's preview and its variables (config delete_previews_on_close).
func (s *Service) closeBranch(ctx context.Context, run *scheduler.Run, rec *store.Integration, pv provider.Platform, creds sealed, branch string, c common) (any, error) {
	id := rec.Previews[branch]
	if id == "" {
		return map[string]any{"skipped": "the branch has no preview database"}, nil
	}
	if !c.deleteOnClose() {
		return map[string]any{"skipped": "previews are kept when their branch closes (config delete_previews_on_close)"}, nil
	}
	if _, err := s.previews.Delete(ctx, system(rec.OrganizationID), id); err != nil && apperr.KindOf(err) != apperr.KindNotFound &&
		!(apperr.KindOf(err) == apperr.KindConflict && alreadyDeleting(id, s)) {
		return s.failed(run, rec, err)
	}
	creds, err := s.fresh(ctx, rec, creds)
	if err == nil {
		err = pv.Remove(ctx, s.env(pv, rec, creds), provider.Target{Branch: branch})
	}
	note := ""
	if err != nil {
		note = public(rec.Provider, err) // best effort: the preview is gone, its variables point nowhere
	}
	if err := s.settle(rec.ID, EventSynced, map[string]any{"job_id": run.Job.ID, "branch": branch, "preview_deleted": id},
		func(r *store.Integration) { delete(r.Previews, branch) }); err != nil {
		return nil, scheduler.Transient(err)
	}
	return map[string]any{"branch": branch, "preview_deleted": id, "variables_not_removed": note}, nil
}

func alreadyDeleting(id string, s *Service) bool {
	prv, _, err := s.host.LoadProject(id)
	return err == nil && (prv.State == api.ProjectDeleting || prv.State == api.ProjectDeleted)
}

// userEventJob applies an identity provider's delivery to the project's table: its one user event, or a
// MultiEvent's every event, in the delivery's order, in one transaction.
func (s *Service) userEventJob(ctx context.Context, run *scheduler.Run) (any, error) {
	var pl userEventPayload
	if err := run.DecodePayload(&pl); err != nil {
		return nil, err
	}
	rec, prov, creds, err := s.load(pl.IntegrationID)
	if errors.Is(err, errGone) {
		return map[string]any{"skipped": errGone.Error()}, nil
	} else if err != nil {
		return nil, err
	}
	if rec.State == api.IntegrationDisconnecting {
		return map[string]any{"skipped": "the integration is being disconnected"}, nil
	}
	tbl, err := usersync.TableOf(rec.Config)
	if err != nil {
		return s.failed(run, rec, apperr.Invalid("%v", err))
	}
	evs := []provider.UserEvent{pl.Event}
	if me, ok := prov.(MultiEvent); ok && pl.Body != nil {
		if creds, err = s.fresh(ctx, rec, creds); err != nil {
			return s.failed(run, rec, err)
		}
		evs, err = me.UserEvents(ctx, s.env(prov, rec, creds), pl.Body)
		if errors.Is(err, provider.ErrIgnored) {
			return map[string]any{"skipped": "the delivery has no user event"}, nil
		} else if err != nil {
			return s.failed(run, rec, err)
		}
	}
	prj, inst, err := s.host.LoadProject(rec.ProjectID)
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	if prj.State != api.ProjectActive || inst == nil {
		return s.failed(run, rec, errNotActive)
	}
	conn, err := s.host.AdminConn(ctx, inst, prj.DatabaseName)
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := tbl.Ensure(ctx, conn, prj.RoleName); err != nil {
		return nil, scheduler.Transient(err)
	}
	if err := tbl.Apply(ctx, conn, evs...); err != nil {
		return nil, scheduler.Transient(err)
	}
	now := s.now()
	if err := s.settle(rec.ID, "", nil, func(r *store.Integration) { r.LastSyncAt = &now }); err != nil {
		return nil, scheduler.Transient(err)
	}
	applied := make([]map[string]any, len(evs))
	for i, ev := range evs {
		applied[i] = map[string]any{"user_id": ev.User.ID, "deleted": ev.Deleted}
	}
	return map[string]any{"applied": applied}, nil
}
