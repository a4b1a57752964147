package observe

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/pglog"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// LogRetention is how long a server's own log files are kept (a day more than the longest window
// without the archive); with the archive, rotated files are compressed and kept LogArchiveDays.
const LogRetention = 8 * 24 * time.Hour

// LogsQuery is what GET .../logs and .../logs/stream ask for.
type LogsQuery struct {
	Hours    int    // 1..api.LogsHoursMax (api.LogsHoursArchiveMax with the archive); ignored with Cursor
	Cursor   string // resume strictly after this entry
	Severity string // comma-separated severities ("": all)
	Limit    int    // 1..LogsLimitMax
	Stream   bool   // the live tail: hours at most api.LogsHoursMax whatever the archive
}

// logDirs are where an instance's logs are: the server's log directory and the archive beside its data
// directory (outside it: a restore replaces the data directory, the archive stays).
func (s *Service) logDirs(inst *store.Instance) pglog.Dirs {
	d := pglog.Dirs{Live: (&postgres.Instance{Dir: inst.Dir}).LogDir()}
	if s.cfg.LogArchiveDays > 0 {
		d.Archive = filepath.Join(inst.Dir, "log-archive")
	}
	return d
}

// logQuery checks a logs query against the bounds and turns it into the reader's.
func (s *Service) logQuery(q LogsQuery) (pglog.Query, error) {
	maxHours := api.LogsHoursMax
	if s.cfg.LogArchiveDays > 0 && !q.Stream {
		maxHours = api.LogsHoursArchiveMax
	}
	if q.Hours < 1 || q.Hours > maxHours {
		if !q.Stream && s.cfg.LogArchiveDays == 0 && q.Hours > api.LogsHoursMax && q.Hours <= api.LogsHoursArchiveMax {
			return pglog.Query{}, apperr.Invalid("hours must be between 1 and %d (up to %d needs the log archive: up --log-archive-days)", api.LogsHoursMax, api.LogsHoursArchiveMax)
		}
		return pglog.Query{}, apperr.Invalid("hours must be between 1 and %d", maxHours)
	}
	if q.Limit < 1 || q.Limit > api.LogsLimitMax {
		return pglog.Query{}, apperr.Invalid("limit must be between 1 and %d", api.LogsLimitMax)
	}
	sev, err := pglog.ParseSeverities(q.Severity)
	if err != nil {
		return pglog.Query{}, apperr.Invalid("severity: %v", err)
	}
	return pglog.Query{Since: s.now().Add(-time.Duration(q.Hours) * time.Hour), After: q.Cursor, Severities: sev,
		Limit: q.Limit, ExcludeUsers: []string{postgres.AdminRole}}, nil
}

// ReadLogs returns the project's server log entries: without a cursor the newest Limit of the window,
// with one the oldest Limit after it (a reader paging forward misses nothing). The appliance's own
// sessions' lines are left out; passwords in statements are masked.
func (s *Service) ReadLogs(ctx context.Context, p *authz.Principal, projectID string, q LogsQuery) (*api.LogsResponse, error) {
	rq, err := s.logQuery(q)
	if err != nil {
		return nil, err
	}
	inst, err := s.projectInstance(p, projectID)
	if err != nil {
		return nil, err
	}
	entries, next, err := pglog.Read(s.logDirs(inst), rq)
	if errors.Is(err, pglog.ErrBadCursor) {
		return nil, apperr.Invalid("cursor is not a cursor this API returned")
	}
	if err != nil {
		return nil, apperr.Internal(err, "read the server's logs")
	}
	if entries == nil {
		entries = []pglog.Entry{}
	}
	return &api.LogsResponse{Logs: api.Logs{Entries: entries, NextCursor: next}}, nil
}

// projectInstance is the visible project's current instance (404 for a project without one yet).
func (s *Service) projectInstance(p *authz.Principal, projectID string) (*store.Instance, error) {
	var inst *store.Instance
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		if prj.PrimaryInstanceID == "" {
			return apperr.Conflict("project %s has no server yet (it is %s)", prj.ID, prj.State)
		}
		if inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID); err != nil {
			return apperr.Internal(err, "read the project's instance")
		}
		return nil
	})
	return inst, err
}

// MaintainLogs is the periodic housekeeping of every instance's logs: with the archive on, rotated files
// are compressed into it and kept LogArchiveDays; the servers' own files are kept LogRetention.
func (s *Service) MaintainLogs(ctx context.Context) (compressed, deleted int, err error) {
	var insts []*store.Instance
	if err := s.db.View(func(tx *store.Tx) (err error) {
		insts, err = store.Instances.All(tx, func(i *store.Instance) bool { return i.State != "removed" && i.Dir != "" })
		return err
	}); err != nil {
		return 0, 0, err
	}
	keepArchive := time.Duration(s.cfg.LogArchiveDays) * 24 * time.Hour
	var errs []error
	for _, inst := range insts {
		if ctx.Err() != nil {
			break
		}
		c, d, err := pglog.Maintain(s.logDirs(inst), s.now(), LogRetention, keepArchive)
		compressed, deleted = compressed+c, deleted+d
		if err != nil {
			errs = append(errs, err)
		}
	}
	return compressed, deleted, errors.Join(errs...)
}
