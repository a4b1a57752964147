package migrate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/exports"
	"github.com/theappliance/appliance/appliance/extensions"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Cutover request statuses (see docs/api-decisions.md "Cutover requests"):
//
//	open → approved → promoting → completed
//	open → rejected;  approved or promoting → failed (the project as it was)
const (
	CutoverOpen      = api.CutoverOpen
	CutoverApproved  = api.CutoverApproved
	CutoverPromoting = api.CutoverPromoting
	CutoverCompleted = api.CutoverCompleted
	CutoverRejected  = api.CutoverRejected
	CutoverFailed    = api.CutoverFailed
)

// JobCutoverPromote makes a preview's data its project's database.
const JobCutoverPromote = "cutover.promote"

func cutoverView(r *store.CutoverRequest) *api.CutoverRequest {
	v := &api.CutoverRequest{ID: r.ID, OrganizationID: r.OrganizationID, ProjectID: r.ProjectID, PreviewDatabaseID: r.PreviewID,
		PreviewName: r.PreviewName, PreCutoverBackupID: r.PreCutoverBackupID, PromoteJobID: r.PromoteJobID, RequestedByActorID: r.RequestedByActorID,
		RequestedByActorKind: r.RequestedByActorKind, AckByUserID: r.AckByUserID, CustomerNote: r.CustomerNote,
		OperatorNote: r.OperatorNote, ExternalTicketRef: r.ExternalTicketRef, RejectedReason: r.RejectedReason,
		LastError: r.LastError, Status: r.Status, AckAt: r.AckAt, CompletedAt: r.CompletedAt, CreatedAt: r.CreatedAt,
		UpdatedAt: r.UpdatedAt}
	if liveCutover(r) {
		v.SchemaDiffURL = "/v1/preview-databases/" + r.PreviewID + "/schema-diff"
	}
	return v
}

type cutoverPayload struct {
	RequestID string `json:"cutover_request_id"`
}

// liveCutover reports whether a request may still act (open, approved, promoting).
func liveCutover(r *store.CutoverRequest) bool {
	return r.Status == CutoverOpen || r.Status == CutoverApproved || r.Status == CutoverPromoting
}

// CheckNotPromoting refuses to change a preview that an approved or promoting cutover request holds: its
// reset and deletion wait until the request ends.
func CheckNotPromoting(tx *store.Tx, prv *store.Project) error {
	reqs, err := store.CutoverRequests.Lookup(tx, store.CutoverRequestsByPreview, prv.ID, store.Query{})
	if err != nil {
		return apperr.Internal(err, "list cutover requests")
	}
	for _, r := range reqs {
		if r.Status == CutoverApproved || r.Status == CutoverPromoting {
			return apperr.Conflict("preview database %s is being cut over into its project (cutover request %s, %s)", prv.ID, r.ID, r.Status)
		}
	}
	return nil
}

// ListCutoverRequests lists a project's cutover requests, newest first.
func (s *Service) ListCutoverRequests(ctx context.Context, p *authz.Principal, projectID string) (*api.CutoverRequestList, error) {
	out := &api.CutoverRequestList{CutoverRequests: []*api.CutoverRequest{}}
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		reqs, err := store.CutoverRequests.Lookup(tx, store.CutoverRequestsByProject, prj.ID, store.Query{Newest: true})
		if err != nil {
			return apperr.Internal(err, "list cutover requests")
		}
		for _, r := range reqs {
			out.CutoverRequests = append(out.CutoverRequests, cutoverView(r))
		}
		return nil
	})
	return out, err
}

// GetCutoverRequest reads one request of the project.
func (s *Service) GetCutoverRequest(ctx context.Context, p *authz.Principal, projectID, requestID string) (*api.CutoverRequestResponse, error) {
	var out *api.CutoverRequestResponse
	err := s.db.View(func(tx *store.Tx) error {
		r, err := s.visibleCutover(tx, p, projectID, requestID)
		if err == nil {
			out = &api.CutoverRequestResponse{CutoverRequest: cutoverView(r)}
		}
		return err
	})
	return out, err
}

func (s *Service) visibleCutover(tx *store.Tx, p *authz.Principal, projectID, requestID string) (*store.CutoverRequest, error) {
	prj, err := s.host.VisibleProject(tx, p, projectID)
	if err != nil {
		return nil, err
	}
	r, err := store.CutoverRequests.Get(tx, requestID)
	if err != nil || r.ProjectID != prj.ID {
		if err == nil {
			err = store.ErrNotFound // a request of another project
		}
		return nil, apperr.NotFoundAs(err, "cutover request %s not found in project %s", requestID, prj.ID)
	}
	return r, nil
}

// RequestCutover opens a request to make the preview's data the project's. A preview has one request
// open or under way at a time; a project may have several open, and one under way.
func (s *Service) RequestCutover(ctx context.Context, p *authz.Principal, projectID string, req *api.CreateCutoverRequest) (*api.CutoverRequestResponse, error) {
	if strings.TrimSpace(req.PreviewID) == "" {
		return nil, apperr.Invalid("preview_id is required")
	}
	if err := s.host.CheckDisplayText("customer_note", req.CustomerNote, 0, 1000); err != nil {
		return nil, err
	}
	if err := s.host.CheckDisplayText("external_ticket_ref", req.ExternalTicketRef, 0, 200); err != nil {
		return nil, err
	}
	var out *api.CutoverRequestResponse
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := s.host.ActiveProject(tx, p, projectID)
		if err != nil {
			return err
		}
		prv, err := store.Projects.Get(tx, req.PreviewID)
		if err != nil || prv.PreviewOf != prj.ID || prv.DeletedAt != nil {
			if err == nil {
				err = store.ErrNotFound // not a live preview of the project
			}
			return apperr.NotFoundAs(err, "preview database %s not found in project %s", req.PreviewID, prj.ID)
		}
		if prv.State != api.ProjectActive {
			return apperr.Conflict("preview database %s is %s: only an active preview can be cut over", prv.ID, prv.State)
		}
		reqs, err := store.CutoverRequests.Lookup(tx, store.CutoverRequestsByPreview, prv.ID, store.Query{})
		if err != nil {
			return apperr.Internal(err, "list cutover requests")
		}
		for _, r := range reqs {
			if liveCutover(r) {
				return apperr.Conflict("preview database %s already has cutover request %s (%s): it must end first", prv.ID, r.ID, r.Status)
			}
		}
		kind, actor := p.Actor()
		now := s.now()
		r := &store.CutoverRequest{ID: ids.New("cut"), OrganizationID: prj.OrganizationID, ProjectID: prj.ID, PreviewID: prv.ID, PreviewName: prv.Name,
			Status: CutoverOpen, RequestedByActorID: actor, RequestedByActorKind: kind, CustomerNote: req.CustomerNote,
			ExternalTicketRef: req.ExternalTicketRef, CreatedAt: now, UpdatedAt: now}
		if err := store.CutoverRequests.Put(tx, r); err != nil {
			return apperr.Internal(err, "store cutover request")
		}
		out = &api.CutoverRequestResponse{CutoverRequest: cutoverView(r)}
		if err := s.host.AppendEvent(tx, "cutover.requested", r.OrganizationID, r.ProjectID, out); err != nil {
			return apperr.Internal(err, "event")
		}
		return s.host.Audit(tx, p, "cutover.request", prj.OrganizationID, prj.ID, map[string]any{"cutover_request_id": r.ID, "preview_id": prv.ID})
	})
	return out, err
}

// ApproveCutover acknowledges an open request (organization admins and platform admins): it records the
// pre-cutover backup and enqueues its backup.create job, then the cutover.promote job behind it.
func (s *Service) ApproveCutover(ctx context.Context, p *authz.Principal, projectID, requestID string, req *api.ApproveCutoverRequest) (*api.CutoverJobResponse, error) {
	if err := p.RequireAdminRole("approving a cutover"); err != nil {
		return nil, err
	}
	if err := s.host.CheckDisplayText("operator_note", req.OperatorNote, 0, 1000); err != nil {
		return nil, err
	}
	if err := s.host.CheckDisplayText("external_ticket_ref", req.ExternalTicketRef, 0, 200); err != nil {
		return nil, err
	}
	var out *api.CutoverJobResponse
	var job *store.Job
	err := s.db.Update(func(tx *store.Tx) error {
		r, err := s.visibleCutover(tx, p, projectID, requestID)
		if err != nil {
			return err
		}
		if r.Status != CutoverOpen {
			return apperr.Conflict("cutover request %s is %s: only an open request can be approved", r.ID, r.Status)
		}
		prj, err := s.host.ActiveProject(tx, p, projectID)
		if err != nil {
			return err
		}
		if err := s.host.RequireBackups(); err != nil { // the pre-cutover backup
			return err
		}
		reqs, err := store.CutoverRequests.Lookup(tx, store.CutoverRequestsByProject, prj.ID, store.Query{})
		if err != nil {
			return apperr.Internal(err, "list cutover requests")
		}
		for _, o := range reqs {
			if o.Status == CutoverApproved || o.Status == CutoverPromoting {
				return apperr.Conflict("cutover request %s of project %s is under way (%s): approve another once it ended", o.ID, prj.ID, o.Status)
			}
		}
		prv, err := store.Projects.Get(tx, r.PreviewID)
		if err != nil || prv.State != api.ProjectActive {
			state := "gone"
			if err == nil {
				state = prv.State
			}
			return apperr.Conflict("preview database %s is %s: only an active preview can be cut over", r.PreviewID, state)
		}
		b, _, err := s.host.NewBackup(tx, prj, "before cutover "+r.ID)
		if err != nil {
			return err
		}
		j, err := s.host.Enqueue(tx, prj, JobCutoverPromote, prj.ID, cutoverPayload{RequestID: r.ID})
		if err != nil {
			return err
		}
		now := s.now()
		r.Status, r.PreCutoverBackupID, r.PromoteJobID, r.AckByUserID, r.AckAt, r.UpdatedAt = CutoverApproved, b.ID, j.ID, p.UserID, &now, now
		r.OperatorNote = req.OperatorNote
		if req.ExternalTicketRef != "" {
			r.ExternalTicketRef = req.ExternalTicketRef
		}
		if err := store.CutoverRequests.Put(tx, r); err != nil {
			return apperr.Internal(err, "store cutover request")
		}
		if err := s.host.Audit(tx, p, "cutover.approve", prj.OrganizationID, prj.ID,
			map[string]any{"cutover_request_id": r.ID, "preview_id": r.PreviewID, "backup_id": b.ID, "job_id": j.ID}); err != nil {
			return apperr.Internal(err, "audit")
		}
		out, job = &api.CutoverJobResponse{CutoverRequest: cutoverView(r)}, j
		return nil
	})
	jr, err := s.host.AnswerJob(job, err) // the job's view, and the runner poked once committed
	if err != nil {
		return nil, err
	}
	out.Job = jr.Job
	return out, nil
}

// RejectCutover refuses an open request (organization admins and platform admins).
func (s *Service) RejectCutover(ctx context.Context, p *authz.Principal, projectID, requestID string, req *api.RejectCutoverRequest) (*api.CutoverRequestResponse, error) {
	if err := p.RequireAdminRole("rejecting a cutover"); err != nil {
		return nil, err
	}
	if err := s.host.CheckDisplayText("rejected_reason", req.RejectedReason, 1, 1000); err != nil {
		return nil, err
	}
	if err := s.host.CheckDisplayText("operator_note", req.OperatorNote, 0, 1000); err != nil {
		return nil, err
	}
	var out *api.CutoverRequestResponse
	err := s.db.Update(func(tx *store.Tx) error {
		r, err := s.visibleCutover(tx, p, projectID, requestID)
		if err != nil {
			return err
		}
		if r.Status != CutoverOpen {
			return apperr.Conflict("cutover request %s is %s: only an open request can be rejected", r.ID, r.Status)
		}
		now := s.now()
		r.Status, r.RejectedReason, r.AckByUserID, r.AckAt, r.UpdatedAt = CutoverRejected, req.RejectedReason, p.UserID, &now, now
		if req.OperatorNote != "" {
			r.OperatorNote = req.OperatorNote
		}
		if err := store.CutoverRequests.Put(tx, r); err != nil {
			return apperr.Internal(err, "store cutover request")
		}
		out = &api.CutoverRequestResponse{CutoverRequest: cutoverView(r)}
		return s.host.Audit(tx, p, "cutover.reject", r.OrganizationID, r.ProjectID,
			map[string]any{"cutover_request_id": r.ID, "preview_id": r.PreviewID, "rejected_reason": req.RejectedReason})
	})
	return out, err
}

// updateCutover applies fn to the stored request in one transaction.
func (s *Service) updateCutover(id string, fn func(*store.CutoverRequest)) error {
	return s.db.Update(func(tx *store.Tx) error {
		r, err := store.CutoverRequests.Get(tx, id)
		if err != nil {
			return err
		}
		fn(r)
		r.UpdatedAt = s.now()
		return store.CutoverRequests.Put(tx, r)
	})
}

// failCutoverOnFinalError marks the request failed (last_error) when its promotion fails for good. The
// handler undid what it had done before returning the error.
func (s *Service) failCutoverOnFinalError(h scheduler.Handler) scheduler.Handler {
	return func(ctx context.Context, run *scheduler.Run) (any, error) {
		res, err := h(ctx, run)
		if err == nil || ctx.Err() != nil || (scheduler.IsTransient(err) && run.Job.Attempts < run.Job.MaxAttempts) {
			return res, err
		}
		var in cutoverPayload
		if derr := run.DecodePayload(&in); derr == nil && in.RequestID != "" {
			uerr := s.updateCutover(in.RequestID, func(r *store.CutoverRequest) {
				if r.Status == CutoverApproved || r.Status == CutoverPromoting {
					r.Status, r.LastError = CutoverFailed, err.Error()
				}
			})
			if uerr != nil {
				s.log.Error("mark cutover request failed", "cutover_request", in.RequestID, "err", uerr)
			}
		}
		return res, err
	}
}

// cutoverDatabases are the names a promotion uses in the project's server: the staging database the
// preview's data is restored into, and the name the project's database has between the swap and its drop.
func cutoverDatabases(requestID string) (staging, old string) {
	suffix := strings.ToLower(requestID[strings.LastIndexByte(requestID, '_')+1:])
	return "appliance_cutover_" + suffix, "appliance_precutover_" + suffix
}

// promoteCutoverJob makes the preview's data the project's database, behind the project's host, ports
// and credentials: the preview's database is dumped and restored (as the project's role) into a staging
// database of the project's server, which then takes the project database's name in one transaction.
// The project's server, its roles, WAL archive and backups stay (point-in-time restores reach back past
// the cutover). Until that transaction commits the project is untouched, and a failure drops the staging
// database; a retry after a crash finds which side of the swap it is on by the databases' names.
func (s *Service) promoteCutoverJob(ctx context.Context, run *scheduler.Run) (any, error) {
	var in cutoverPayload
	prj, inst, err := s.host.ActiveTarget(run, &in)
	if err != nil {
		return nil, err
	}
	var r *store.CutoverRequest
	var b *store.Backup
	err = s.db.View(func(tx *store.Tx) error {
		if r, err = store.CutoverRequests.Get(tx, in.RequestID); err != nil {
			return err
		}
		b, err = store.Backups.Get(tx, r.PreCutoverBackupID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cutover request %s: %w", in.RequestID, err)
	}
	if r.Status != CutoverApproved && r.Status != CutoverPromoting && r.Status != CutoverCompleted {
		return map[string]any{"skipped": "cutover request is " + r.Status}, nil
	}
	steps := instances.NewTimer()
	staging, old := cutoverDatabases(r.ID)
	conn, err := s.host.AdminConn(ctx, inst, "postgres")
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := instances.Untracked(ctx, conn); err != nil {
		return nil, err
	}
	swapped := r.Swapped
	if !swapped {
		if swapped, err = databaseExists(ctx, conn, old); err != nil {
			return nil, scheduler.Transient(err)
		}
	}
	if !swapped {
		// The backup job ran first: it holds the same lock and was enqueued just before.
		switch b.State {
		case api.BackupCompleted:
		case api.BackupFailed:
			return nil, fmt.Errorf("the pre-cutover backup %s failed, so nothing was changed: %s", b.ID, b.Error)
		default:
			return nil, scheduler.Transient(fmt.Errorf("the pre-cutover backup %s is %s", b.ID, b.State))
		}
		if err := s.updateCutover(r.ID, func(r *store.CutoverRequest) { r.Status = CutoverPromoting }); err != nil {
			return nil, err
		}
		// What an interrupted attempt left (a staging database, the project's database closed) goes first.
		if err := s.undoCutover(ctx, conn, prj, r.ID); err != nil {
			return nil, scheduler.Transient(err)
		}
		steps.Done("prepare")
		err := s.stageCutover(ctx, run, conn, prj, inst, r, staging, steps)
		if err == nil {
			s.jobStep(ctx, run.Job.ID, "cutover-staged")
			err = s.swapDatabases(ctx, conn, prj, r.ID, staging, old)
		}
		if err != nil {
			if ctx.Err() == nil {
				if uerr := s.undoCutover(context.WithoutCancel(ctx), conn, prj, r.ID); uerr != nil {
					s.log.Error("undo a failed cutover", "cutover_request", r.ID, "err", uerr)
				}
			}
			return nil, err
		}
		steps.Done("swap")
	}
	if err := s.completeCutover(r.ID); err != nil {
		return nil, err
	}
	s.jobStep(ctx, run.Job.ID, "cutover-swapped")
	// The rest tidies up: the project's data is the preview's from the swap on.
	if err := instances.PrepareDatabase(ctx, conn, prj, prj.DatabaseName); err != nil {
		return nil, scheduler.Transient(err)
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{old}.Sanitize()+" WITH (FORCE)"); err != nil {
		return nil, scheduler.Transient(fmt.Errorf("drop the project's previous database: %w", err))
	}
	if err := os.Remove(cutoverDump(s, prj.ID, r.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("remove a cutover's dump", "cutover_request", r.ID, "err", err)
	}
	steps.Done("finish")
	return map[string]any{"cutover_request_id": r.ID, "preview_id": r.PreviewID, "pre_cutover_backup_id": b.ID,
		"timings_ms": steps.MS}, nil
}

func cutoverDump(s *Service, projectID, requestID string) string {
	return filepath.Join(exports.Dir(s.dataDir, projectID), "cutover-"+requestID+".dump")
}

func databaseExists(ctx context.Context, conn *pgx.Conn, name string) (bool, error) {
	var ok bool
	err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&ok)
	return ok, err
}

// stageCutover fills the staging database: made and prepared like the project's, the preview's extensions
// created in it (as the admin, those the appliance offers), then the preview's dump restored by the
// project's role.
func (s *Service) stageCutover(ctx context.Context, run *scheduler.Run, conn *pgx.Conn, prj *store.Project,
	inst *store.Instance, r *store.CutoverRequest, staging string, steps *instances.Timer) error {
	prv, prvInst, err := s.host.LoadProject(r.PreviewID)
	if err != nil {
		return fmt.Errorf("preview database %s: %w", r.PreviewID, err)
	}
	if prv.State != api.ProjectActive || prvInst == nil {
		return fmt.Errorf("preview database %s is %s: only an active preview can be cut over", prv.ID, prv.State)
	}
	if _, err := s.host.PrepareDumpDir(ctx, prj.ID); err != nil {
		return err
	}
	dump := cutoverDump(s, prj.ID, r.ID)
	if err := s.host.DumpDatabase(ctx, run, prvInst, prv.DatabaseName, dump); err != nil {
		return fmt.Errorf("dump the preview: %w", err)
	}
	steps.Done("dump")
	exts, err := s.previewExtensions(ctx, prvInst, prv.DatabaseName)
	if err != nil {
		return err
	}
	var preload string
	if err := conn.QueryRow(ctx, "SHOW shared_preload_libraries").Scan(&preload); err != nil {
		return err
	}
	role := pgx.Identifier{prj.RoleName}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{staging}.Sanitize()+" OWNER "+role); err != nil {
		return fmt.Errorf("create the staging database: %w", err)
	}
	if err := instances.PrepareDatabase(ctx, conn, prj, staging); err != nil {
		return err
	}
	db, err := extensions.Conn(ctx, s.box, inst, staging)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", staging, err)
	}
	defer db.Close(context.WithoutCancel(ctx))
	var schemas []string // made here, so the restore skips them
	for _, e := range exts {
		if !s.host.OffersExtension(e.name) {
			return fmt.Errorf("the preview has extension %s, which the appliance does not offer", e.name)
		}
		if lib, ok := extensions.PreloadLibraries[e.name]; ok && !slices.Contains(strings.Split(strings.ReplaceAll(preload, " ", ""), ","), lib) {
			return fmt.Errorf("the preview has extension %s, which the project's server does not load: enable %s on the project first", e.name, e.name)
		}
		if e.schema != "pg_catalog" && e.schema != "public" && !slices.Contains(schemas, e.schema) {
			if _, err := db.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{e.schema}.Sanitize()+" AUTHORIZATION "+role); err != nil {
				return fmt.Errorf("create schema %s: %w", e.schema, err)
			}
			schemas = append(schemas, e.schema)
		}
		// In the preview's schema, named: the session's search_path is the catalog's.
		create := "CREATE EXTENSION IF NOT EXISTS " + pgx.Identifier{e.name}.Sanitize() + " SCHEMA " + pgx.Identifier{e.schema}.Sanitize() +
			" VERSION " + instances.QuoteLiteral(e.version)
		if err := extensions.DDL(ctx, db, create); err != nil {
			return fmt.Errorf("create extension %s: %w", e.name, err)
		}
	}
	steps.Done("extensions")
	if err := s.restoreDump(ctx, run, prj, inst, staging, dump, schemas); err != nil {
		return fmt.Errorf("restore the preview's data: %w", err)
	}
	steps.Done("restore")
	return nil
}

type extension struct{ name, schema, version string }

// previewExtensions lists the extensions of the preview's database in creation order (dependencies first).
func (s *Service) previewExtensions(ctx context.Context, inst *store.Instance, database string) ([]extension, error) {
	conn, err := s.host.AdminConn(ctx, inst, database)
	if err != nil {
		return nil, scheduler.Transient(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT e.extname, n.nspname, e.extversion FROM pg_extension e
		JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname <> 'plpgsql' ORDER BY e.oid`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (extension, error) {
		var e extension
		err := row.Scan(&e.name, &e.schema, &e.version)
		return e, err
	})
}

// swapDatabases gives the staging database the project database's name in one transaction. The project's
// database is closed to new sessions (CONNECTION LIMIT 0, its previous limit kept on the request and given
// to the new database) and its sessions ended; a session of the appliance's admin can still slip in
// between, so the rename is tried again a few times.
func (s *Service) swapDatabases(ctx context.Context, conn *pgx.Conn, prj *store.Project, requestID, staging, old string) error {
	db, stg, prev := pgx.Identifier{prj.DatabaseName}.Sanitize(), pgx.Identifier{staging}.Sanitize(), pgx.Identifier{old}.Sanitize()
	var limit int
	if err := conn.QueryRow(ctx, "SELECT datconnlimit FROM pg_database WHERE datname = $1", prj.DatabaseName).Scan(&limit); err != nil {
		return scheduler.Transient(err)
	}
	if err := s.updateCutover(requestID, func(r *store.CutoverRequest) {
		if r.ConnLimit == nil { // an earlier attempt's value is the real one: this one may read its 0
			r.ConnLimit = &limit
		} else {
			limit = *r.ConnLimit
		}
	}); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+db+" CONNECTION LIMIT 0"); err != nil {
		return scheduler.Transient(err)
	}
	s.host.ForgetStudio(prj.ID) // its sessions are about to end
	var err error
	for try := 0; try < 50; try++ {
		if _, err = conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname IN ($1, $2) AND pid <> pg_backend_pid()",
			prj.DatabaseName, staging); err != nil {
			return scheduler.Transient(err)
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			for _, q := range []string{
				"ALTER DATABASE " + db + " RENAME TO " + prev,
				"ALTER DATABASE " + stg + " RENAME TO " + db,
				fmt.Sprintf("ALTER DATABASE %s CONNECTION LIMIT %d", db, limit),
			} {
				if _, err := tx.Exec(ctx, q); err != nil {
					return err
				}
			}
			return nil
		})
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" { // object_in_use: a session came back
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("swap the databases: %w", err)
	}
	return nil
}

// undoCutover puts back what an unfinished promotion changed: the staging database goes and the project's
// database gets its connection limit back. It leaves a swapped project alone.
func (s *Service) undoCutover(ctx context.Context, conn *pgx.Conn, prj *store.Project, requestID string) error {
	staging, _ := cutoverDatabases(requestID)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{staging}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop the staging database: %w", err)
	}
	var limit *int
	if err := s.db.View(func(tx *store.Tx) error {
		r, err := store.CutoverRequests.Get(tx, requestID)
		if err == nil {
			limit = r.ConnLimit
		}
		return err
	}); err != nil {
		return err
	}
	if limit != nil {
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s CONNECTION LIMIT %d", pgx.Identifier{prj.DatabaseName}.Sanitize(), *limit)); err != nil {
			return fmt.Errorf("open the project's database again: %w", err)
		}
	}
	return nil
}

// completeCutover records a swapped promotion, in one transaction: the request completed, the preview's
// deletion enqueued, cutover.completed appended. A second call finds it done.
func (s *Service) completeCutover(requestID string) error {
	err := s.db.Update(func(tx *store.Tx) error {
		r, err := store.CutoverRequests.Get(tx, requestID)
		if err != nil {
			return err
		}
		if r.Status == CutoverCompleted {
			return nil
		}
		now := s.now()
		r.Status, r.Swapped, r.CompletedAt, r.LastError, r.UpdatedAt = CutoverCompleted, true, &now, "", now
		if err := store.CutoverRequests.Put(tx, r); err != nil {
			return err
		}
		system := &authz.Principal{AuthSource: authz.ActorSystem}
		if prv, err := store.Projects.Get(tx, r.PreviewID); err == nil && prv.DeletedAt == nil && prv.State != api.ProjectDeleting {
			if _, err := s.host.DeletePreview(tx, system, prv, "preview.delete"); err != nil {
				return err
			}
		}
		if err := s.host.AppendEvent(tx, "cutover.completed", r.OrganizationID, r.ProjectID, api.CutoverRequestResponse{CutoverRequest: cutoverView(r)}); err != nil {
			return err
		}
		return s.host.Audit(tx, system, "cutover.completed", r.OrganizationID, r.ProjectID,
			map[string]any{"cutover_request_id": r.ID, "preview_id": r.PreviewID, "pre_cutover_backup_id": r.PreCutoverBackupID})
	})
	if err == nil {
		s.notify()
	}
	return err
}
