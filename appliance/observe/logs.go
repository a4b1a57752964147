package observe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

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

	// The explorer's search (docs/api-decisions.md "Logs explorer"):
	Q        string // case-insensitive substring of the message, detail, hint or statement
	From, To string // RFC 3339: the range (From replaces Hours; To defaults to now); not with Stream
	User     string // the role
	Database string
	SQLState string // 5 characters
}

// The search's bounds.
const (
	LogsSearchMax   = 200    // characters of q
	LogsDownloadMax = 100000 // entries of a download
	maxNameLen      = 63     // bytes of a PostgreSQL name (NAMEDATALEN - 1)
)

// sqlstatePattern is a SQLSTATE: five digits or upper-case letters.
var sqlstatePattern = regexp.MustCompile(`^[0-9A-Z]{5}$`)

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
	now := s.now()
	rq := pglog.Query{Since: now.Add(-time.Duration(q.Hours) * time.Hour), After: q.Cursor, Severities: sev,
		Limit: q.Limit, ExcludeUsers: []string{postgres.AdminRole}}
	if err := s.logSearch(q, now, maxHours, &rq); err != nil {
		return pglog.Query{}, err
	}
	return rq, nil
}

// logSearch checks the explorer's search parameters and sets them on rq.
func (s *Service) logSearch(q LogsQuery, now time.Time, maxHours int, rq *pglog.Query) error {
	if utf8.RuneCountInString(q.Q) > LogsSearchMax {
		return apperr.Invalid("q must be at most %d characters", LogsSearchMax)
	}
	rq.Text = strings.TrimSpace(q.Q)
	for _, n := range []struct{ name, v string }{{"user", q.User}, {"database", q.Database}} {
		if len(n.v) > maxNameLen {
			return apperr.Invalid("%s must be at most %d bytes (a PostgreSQL name)", n.name, maxNameLen)
		}
	}
	rq.User, rq.Database = q.User, q.Database
	if q.SQLState != "" {
		rq.SQLState = strings.ToUpper(q.SQLState)
		if !sqlstatePattern.MatchString(rq.SQLState) {
			return apperr.Invalid("sqlstate must be 5 digits or letters (e.g. 42P01)")
		}
	}
	if q.From == "" && q.To == "" {
		return nil
	}
	if q.Stream {
		return apperr.Invalid("from and to are not for the live tail: use hours")
	}
	if q.Cursor != "" {
		return apperr.Invalid("from and to cannot be combined with cursor (a cursor resumes after its entry)")
	}
	parse := func(name, v string, def time.Time) (time.Time, error) {
		if v == "" {
			return def, nil
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return time.Time{}, apperr.Invalid("%s must be an RFC 3339 time such as 2026-11-25T13:00:00Z", name)
		}
		return t.UTC(), nil
	}
	oldest := now.Add(-time.Duration(maxHours) * time.Hour)
	from, err := parse("from", q.From, rq.Since)
	if err != nil {
		return err
	}
	to, err := parse("to", q.To, time.Time{})
	if err != nil {
		return err
	}
	if !to.IsZero() && !to.After(from) {
		return apperr.Invalid("to must be after from")
	}
	if from.Before(oldest) {
		return apperr.Invalid("from must be within the last %d hours (the logs kept)", maxHours)
	}
	if from.After(now) {
		return apperr.Invalid("from must not be in the future")
	}
	rq.Since, rq.Until = from, to
	return nil
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

// DownloadLogs streams every entry the query selects (its range: From and To, or the trailing Hours),
// oldest first and at most LogsDownloadMax, to write as newline-delimited JSON. The query is checked,
// and the project's server found, before start is called (so that a bad request is answered with an
// error, not a download); start returns the writer. Cursor and Limit are ignored.
func (s *Service) DownloadLogs(ctx context.Context, p *authz.Principal, projectID string, q LogsQuery, start func() io.Writer) error {
	q.Limit, q.Cursor = 1, ""
	rq, err := s.logQuery(q)
	if err != nil {
		return err
	}
	inst, err := s.projectInstance(p, projectID)
	if err != nil {
		return err
	}
	w := start()
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_, err = pglog.Scan(s.logDirs(inst), rq, LogsDownloadMax, func(e pglog.Entry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return enc.Encode(e)
	})
	if err != nil {
		return fmt.Errorf("download the server's logs: %w", err)
	}
	return nil
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
		insts, err = store.Instances.All(tx, func(i *store.Instance) bool { return i.State != "removed" && i.Dir != "" && store.LocalInstance(tx, i) })
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
