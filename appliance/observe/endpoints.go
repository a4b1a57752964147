package observe

import (
	"cmp"
	"context"
	"math"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/pgstat"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// TopQueriesLimit is how many statements the top-queries listing ranks.
const TopQueriesLimit = 50

// Snapshot reads the live snapshot from the project's server (a short admin session).
func (s *Service) Snapshot(ctx context.Context, p *authz.Principal, projectID string) (*api.ObservabilityResponse, error) {
	var prj *store.Project
	var snap *pgstat.Snapshot
	err := s.withQuietAdmin(ctx, p, projectID, func(x *store.Project, conn *pgx.Conn) (err error) {
		prj = x
		if snap, err = pgstat.TakeSnapshot(ctx, conn, postgres.AdminRole); err != nil {
			return apperr.Server(err, "read the server's statistics")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := &api.ObservabilitySnapshot{ActiveQueries: snap.ActiveQueries, Alerts: []string{}, ConnectionCount: snap.ConnectionCount,
		ConnectionLimit: snap.ConnectionLimit, DatabaseSizeBytes: snap.DatabaseSizeBytes, StorageLimitBytes: prj.StorageLimitBytes,
		PGStatStatements: snap.PGStatStatements, SlowQueries: snap.SlowQueries, SampledAt: s.now()}
	if out.ConnectionLimit > 0 {
		out.ConnectionUsagePercent = roundTo(100*float64(out.ConnectionCount)/float64(out.ConnectionLimit), 2)
	}
	if out.StorageLimitBytes > 0 {
		out.StorageUsagePercent = roundTo(100*float64(out.DatabaseSizeBytes)/float64(out.StorageLimitBytes), 2)
	}
	err = s.db.View(func(tx *store.Tx) error {
		open, err := openAlerts(tx, prj.ID)
		for _, a := range open {
			out.Alerts = append(out.Alerts, a.Message)
		}
		slices.Sort(out.Alerts)
		return err
	})
	if err != nil {
		return nil, apperr.Internal(err, "read alerts")
	}
	return &api.ObservabilityResponse{Observability: out}, nil
}

func roundTo(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// History returns the project's samples of the trailing window, oldest first, downsampled to at most
// MaxHistoryPoints.
func (s *Service) History(ctx context.Context, p *authz.Principal, projectID string, hours int) (*api.HistoryResponse, error) {
	if hours < 1 || hours > api.HistoryHoursMax {
		return nil, apperr.Invalid("hours must be between 1 and %d", api.HistoryHoursMax)
	}
	now := s.now()
	var samples []api.ObservabilitySample
	suspended := []api.SuspendedInterval{}
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		ivs, err := store.SuspendedIntervals(tx, prj.ID, now.Add(-time.Duration(hours)*time.Hour), now)
		if err != nil {
			return apperr.Internal(err, "read the suspensions")
		}
		for _, iv := range ivs {
			suspended = append(suspended, api.SuspendedInterval{From: iv[0], To: iv[1], Ongoing: prj.IdleSuspendedAt != nil && iv[1].Equal(now)})
		}
		samples = make([]api.ObservabilitySample, 0, hours*int(time.Hour/SampleInterval)+1) // one allocation: the window's most points
		return store.ObservabilitySamples.Range(tx, prj.ID, now.Add(-time.Duration(hours)*time.Hour), now.Add(time.Nanosecond), func(at time.Time, v []byte) error {
			x, err := decodeSample(at, v)
			if err == nil {
				samples = append(samples, x)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return &api.HistoryResponse{Samples: downsample(samples, MaxHistoryPoints), Suspended: suspended}, nil
}

// queryHashPattern is the shape of a query hash.
var queryHashPattern = regexp.MustCompile(api.QueryHashPattern)

// statementWindow walks the project's statement snapshots of the trailing window (want: one hash, or all)
// with fn, then calls done, in the same read, with a lookup of the statements' texts.
func (s *Service) statementWindow(p *authz.Principal, projectID string, hours int, want string, fn func(statementPoint),
	done func(text func(hash string) (string, bool)) error) error {
	if hours < 1 || hours > api.QueriesHoursMax {
		return apperr.Invalid("hours must be between 1 and %d", api.QueriesHoursMax)
	}
	now := s.now()
	return s.db.View(func(tx *store.Tx) error {
		prj, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		err = store.StatementPoints.Range(tx, prj.ID, now.Add(-time.Duration(hours)*time.Hour), now.Add(time.Nanosecond), func(at time.Time, v []byte) error {
			if pt, err := decodeStatementPoint(at, v, want); err == nil { // a point that does not decode is skipped
				fn(pt)
			}
			return nil
		})
		if err != nil {
			return apperr.Internal(err, "read statement snapshots")
		}
		return done(func(hash string) (string, bool) {
			t, err := store.StatementTexts.Get(tx, prj.ID+"/"+hash)
			if err != nil {
				return "", false
			}
			return t.Query, true
		})
	})
}

// TopQueries ranks the statements by their total execution time within the window (the sum of the
// snapshots' deltas), at most TopQueriesLimit.
func (s *Service) TopQueries(ctx context.Context, p *authz.Principal, projectID string, hours int) (*api.TopQueriesResponse, error) {
	sums := map[string]*api.TopQuery{}
	var out []api.TopQuery
	err := s.statementWindow(p, projectID, hours, "", func(pt statementPoint) {
		for h, d := range pt.Deltas {
			q := sums[h]
			if q == nil {
				q = &api.TopQuery{QueryHash: h}
				sums[h] = q
			}
			q.Calls += d.Calls
			q.Rows += d.Rows
			q.TotalExecMS += d.ExecMS
		}
	}, func(text func(string) (string, bool)) error {
		out = make([]api.TopQuery, 0, len(sums))
		for _, q := range sums {
			out = append(out, *q)
		}
		slices.SortFunc(out, func(a, b api.TopQuery) int {
			return cmp.Or(cmp.Compare(b.TotalExecMS, a.TotalExecMS), cmp.Compare(a.QueryHash, b.QueryHash))
		})
		out = out[:min(len(out), TopQueriesLimit)]
		for i := range out {
			out[i].Query, _ = text(out[i].QueryHash)
			if out[i].Calls > 0 {
				out[i].MeanExecMS = out[i].TotalExecMS / float64(out[i].Calls)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &api.TopQueriesResponse{Queries: out}, nil
}

// QueryDetail returns one statement's totals within the window and a point per snapshot (404 for a hash
// no snapshot of the project has seen).
func (s *Service) QueryDetail(ctx context.Context, p *authz.Principal, projectID, hash string, hours int) (*api.QueryDetailResponse, error) {
	if !queryHashPattern.MatchString(hash) {
		return nil, apperr.Invalid("queryHash must be 32 lowercase hexadecimal characters (a query_hash from the top queries)")
	}
	d := &api.QueryDetail{QueryHash: hash, Points: []api.QueryPoint{}}
	err := s.statementWindow(p, projectID, hours, hash, func(pt statementPoint) {
		if pt.Interval == 0 { // the baseline snapshot measured nothing
			return
		}
		x := pt.Deltas[hash]
		qp := api.QueryPoint{CapturedAt: pt.At, Calls: x.Calls, Rows: x.Rows, TotalExecMS: x.ExecMS, CallsPerSec: float64(x.Calls) / pt.Interval}
		if x.Calls > 0 {
			qp.MeanExecMS = x.ExecMS / float64(x.Calls)
		}
		d.Points = append(d.Points, qp)
		d.WindowCalls += x.Calls
		d.WindowRows += x.Rows
		d.WindowTotalExecMS += x.ExecMS
	}, func(text func(string) (string, bool)) error {
		var ok bool
		if d.Query, ok = text(hash); !ok {
			return apperr.NotFound("query %s not found: no snapshot of this project's statements has it", hash)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if d.WindowCalls > 0 {
		d.WindowMeanExecMS = d.WindowTotalExecMS / float64(d.WindowCalls)
	}
	return &api.QueryDetailResponse{Query: d}, nil
}

// StatementByID resolves a pg_stat_statements queryid (a log line's query_id) to the statement's query
// hash, read live from the project's server: 404 when pg_stat_statements does not have it (not installed,
// reset since, or a statement that never ran).
func (s *Service) StatementByID(ctx context.Context, p *authz.Principal, projectID, queryID string) (*api.StatementRefResponse, error) {
	id, err := strconv.ParseInt(queryID, 10, 64)
	if err != nil || id == 0 {
		return nil, apperr.Invalid("queryID must be a non-zero 64-bit decimal integer (a log line's query_id)")
	}
	var out api.StatementRefResponse
	err = s.withQuietAdmin(ctx, p, projectID, func(prj *store.Project, admin *pgx.Conn) error {
		q, found, err := pgstat.StatementText(ctx, admin, postgres.AdminRole, id)
		if err != nil {
			return apperr.Server(err, "read the statement")
		}
		if !found {
			return apperr.NotFound("statement %d not found: pg_stat_statements has no such statement of this project (not installed, reset since, or it never ran)", id)
		}
		out.Statement = api.StatementRef{QueryID: id, QueryHash: pgstat.QueryHash(prj.DatabaseName, q), Query: q}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}
