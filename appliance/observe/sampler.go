package observe

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/pgstat"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// The sampler's cadence and retention (docs/api-decisions.md "Observability").
const (
	// SampleInterval is how often the scheduler samples every active project (one history point each).
	SampleInterval = time.Minute
	// StatementSnapshotInterval is how often a project's pg_stat_statements is snapshotted for the top
	// queries (in the sweeps of the project's phase: statementsDue).
	StatementSnapshotInterval = 5 * time.Minute
	// StatementSnapshotLate is how old a project's last snapshot is when the next sweep takes one whatever
	// the project's phase (statementsDue).
	StatementSnapshotLate = StatementSnapshotInterval + StatementSnapshotInterval/2
	// SampleRetention is how long history points are kept; StatementRetention the top queries' snapshots
	// (a day more than their longest window).
	SampleRetention    = 30 * 24 * time.Hour
	StatementRetention = 8 * 24 * time.Hour
	// SampleTimeout bounds one project's reading: a server that does not answer is skipped this sweep (the
	// storage guard's reading of a database's directory too).
	SampleTimeout = 5 * time.Second
	// sampleWorkers read this many projects' servers at once.
	sampleWorkers = 4
	// MemoryInterval is how often each process of a project's server has its PSS read (the costly
	// reading): every sweep reads the share of them whose turn it is, and the processes it saw the first
	// time, and carries the other processes' last readings (pgstat.Memory).
	MemoryInterval = 5 * time.Minute
	// statementTextRefresh is how often a statement still seen gets its last_seen written again.
	statementTextRefresh = 24 * time.Hour
)

// samplerState serializes the sweeps and keeps the last one's figures for /metrics.
type samplerState struct {
	sweep sync.Mutex // one sweep at a time
	mu    sync.Mutex
	last  SampleSweepResult
	total int64 // sweeps run
	// memory carries each sampled project's processes' readings from sweep to sweep (by project ID; only
	// the sweep, under its lock, touches it).
	memory map[string]*pgstat.Memory
	// archive is each project's WAL archiving at the last sweep that read it (by project ID; under mu).
	archive map[string]ProjectArchive
}

// SampleSweepResult says what a sampling sweep did.
type SampleSweepResult struct {
	Projects   int           // projects sampled (a point stored, or the first reading kept)
	Failed     int           // projects whose server did not answer
	Statements int           // projects whose pg_stat_statements was snapshotted
	Alerts     int           // alerts raised or resolved
	Duration   time.Duration // wall time of the sweep
	CPU        time.Duration // the appliance process's CPU time during the sweep (user+system)
	At         time.Time
}

// stmtTotals is a statement's cumulative pg_stat_statements counts (what ObservabilityState keeps).
type stmtTotals struct {
	Calls   int64   `json:"c"`
	Rows    int64   `json:"r"`
	ExecMS  float64 `json:"t"`
	Query   string  `json:"-"`
	hashRaw [16]byte
}

// sampleTarget is one project the sweep reads, and what it read.
type sampleTarget struct {
	prj   *store.Project
	inst  *store.Instance
	state *store.ObservabilityState
	plan  Plan
	mem   *pgstat.Memory
	// results
	cur       *reading
	sample    *api.ObservabilitySample
	stmts     map[string]stmtTotals // the new totals (nil: not snapshotted this sweep)
	stmtPoint []byte                // the snapshot's encoded deltas
	stmtsRead bool
	arch      *pgstat.Archiver // nil when it could not be read
	err       error
}

// Sample is the sampler's sweep: for every active project it reads the server's counters
// (one statement) and its processes' CPU time and memory (their stat files, found through the
// postmaster's children; each process's PSS every MemoryInterval), stores a history point computed from
// the previous reading, snapshots pg_stat_statements every StatementSnapshotInterval (statementsDue), and
// raises or resolves alerts — the writes of all projects in one transaction.
func (s *Service) Sample(ctx context.Context) (SampleSweepResult, error) {
	s.sampler.sweep.Lock()
	defer s.sampler.sweep.Unlock()
	start, cpu0 := time.Now(), processCPU()
	now := s.now()
	res := SampleSweepResult{At: now}
	var targets []*sampleTarget
	err := s.db.View(func(tx *store.Tx) error {
		prjs, err := store.Projects.All(tx, func(p *store.Project) bool {
			// A project suspended for idleness (scale to zero) is not sampled: a connection would wake it.
			return p.State == api.ProjectActive && p.PrimaryInstanceID != "" && p.PreviewOf == "" && p.IdleSuspendedAt == nil && store.Local(tx, p)
		})
		if err != nil {
			return err
		}
		for _, prj := range prjs {
			if suspended, err := store.Suspended(tx, prj.OrganizationID); err != nil {
				return err
			} else if suspended { // its server is stopped until the organization resumes: nothing to sample
				continue
			}
			inst, err := store.Instances.Get(tx, prj.PrimaryInstanceID)
			if err != nil {
				continue
			}
			st, err := store.ObservabilityStates.Get(tx, prj.ID)
			if errors.Is(err, store.ErrNotFound) {
				st = &store.ObservabilityState{ProjectID: prj.ID}
			} else if err != nil {
				return err
			}
			plan := s.host.Plan(prj.Plan)
			targets = append(targets, &sampleTarget{prj: prj, inst: inst, state: st, plan: plan})
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("read projects to sample: %w", err)
	}
	memory := make(map[string]*pgstat.Memory, len(targets)) // projects no longer sampled are dropped
	for _, t := range targets {
		if t.mem = s.sampler.memory[t.prj.ID]; t.mem == nil {
			t.mem = &pgstat.Memory{Every: int(MemoryInterval / SampleInterval)}
		}
		memory[t.prj.ID] = t.mem
	}
	s.sampler.memory = memory
	work := make(chan *sampleTarget)
	var wg sync.WaitGroup
	for range min(sampleWorkers, len(targets)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range work {
				t.err = s.readTarget(ctx, t, now)
			}
		}()
	}
	for _, t := range targets {
		work <- t
	}
	close(work)
	wg.Wait()

	err = s.db.Update(func(tx *store.Tx) error {
		res.Failed, res.Projects, res.Alerts, res.Statements = 0, 0, 0, 0 // a run again starts over
		for _, t := range targets {
			if t.err != nil {
				res.Failed++
				continue
			}
			n, err := s.storeTarget(tx, t, now)
			if err != nil {
				return err
			}
			res.Projects++
			res.Alerts += n
			if t.stmtsRead {
				res.Statements++
			}
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("store samples: %w", err)
	}
	archive := make(map[string]ProjectArchive, len(targets))
	for _, t := range targets {
		if t.err != nil && ctx.Err() == nil {
			s.log.Warn("observability: sample", "project", t.prj.ID, "err", t.err)
		}
		if t.err == nil && t.arch != nil {
			archive[t.prj.ID] = ProjectArchive{Archiver: *t.arch, ReadAt: now}
		}
	}
	res.Duration, res.CPU = time.Since(start), processCPU()-cpu0
	s.sampler.mu.Lock()
	s.sampler.archive = archive
	s.sampler.last = res
	s.sampler.total++
	s.sampler.mu.Unlock()
	return res, nil
}

// readTarget reads one project's server (no store writes: storeTarget does those), on a session opened
// for this sweep and closed after it: a session kept between sweeps would hold ~12 MiB of catalog caches
// on every server for the sake of a connection setup a minute (bench/README.md "Observability").
func (s *Service) readTarget(ctx context.Context, t *sampleTarget, now time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, SampleTimeout)
	defer cancel()
	// The processes are measured before the session opens: its backend is the appliance's, not the
	// project's (~3.5 MiB), and one exiting after it closed would still hold its share of the shared pages.
	var usage pgstat.Usage
	if pid, err := pgstat.PostmasterPID((&postgres.Instance{Dir: t.inst.Dir}).DataDir()); err == nil {
		if usage, err = pgstat.Measure(pid, t.mem); err != nil {
			s.log.Warn("observability: read the server's processes", "project", t.prj.ID, "err", err)
		}
	}
	if err := s.readServer(ctx, t, now); err != nil {
		return err
	}
	t.cur.CPUSeconds = usage.CPUSeconds
	if len(t.state.Counters) > 0 {
		prev := reading{CPUSeconds: t.state.CPUSeconds, At: t.state.ReadAt}
		if err := json.Unmarshal(t.state.Counters, &prev.Counters); err == nil && prev.Counters != nil && now.After(prev.At) {
			if x, err := computeSample(prev, *t.cur, t.plan, t.prj.StorageLimitBytes); err == nil {
				x.MemUsageBytes = usage.MemBytes
				t.sample = &x
			}
		}
	}
	return nil
}

// readServer reads the counters and, when due, pg_stat_statements, on a session it closes before
// returning.
func (s *Service) readServer(ctx context.Context, t *sampleTarget, now time.Time) error {
	conn, err := s.host.QuietAdminConn(ctx, t.inst, t.prj.DatabaseName)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	c, err := pgstat.ReadCounters(ctx, conn, postgres.AdminRole)
	if err != nil {
		return fmt.Errorf("read counters: %w", err)
	}
	t.cur = &reading{Counters: c, At: now}
	// The archiver is read apart from the counters: a server whose view cannot be read still gets its
	// history point (and keeps no archive_failing verdict this sweep).
	if t.arch, err = pgstat.ReadArchiver(ctx, conn); err != nil {
		s.log.Warn("observability: read the archiver", "project", t.prj.ID, "err", err)
		t.arch = nil
	}
	if statementsDue(t.prj.ID, t.state.StatementsAt, now) {
		read, err := pgstat.ReadStatements(ctx, conn, t.prj.DatabaseName, postgres.AdminRole)
		if err != nil {
			return fmt.Errorf("read pg_stat_statements: %w", err)
		}
		if read.Available {
			t.stmtsRead = true
			t.stmts, t.stmtPoint = statementDeltas(t.state, read, now)
		}
	}
	return nil
}

// statementsDue says whether the sweep at now snapshots a project's pg_stat_statements, last snapshotted
// at last: the first snapshot at once; then in the sweeps of the project's phase (the minutes whose number,
// modulo the snapshots' interval in minutes, is a hash of its ID modulo the same), so that projects made
// together, or an appliance's projects after its upgrade, do not all take their snapshots in one sweep;
// a project whose sweep of its phase was missed (its server did not answer) takes it at the next sweep once
// it is StatementSnapshotLate.
func statementsDue(projectID string, last, now time.Time) bool {
	if last.IsZero() {
		return true
	}
	elapsed := now.Sub(last)
	if elapsed >= StatementSnapshotLate {
		return true
	}
	slots := uint32(StatementSnapshotInterval / SampleInterval)
	minute := uint32(now.Unix() / int64(SampleInterval/time.Second))
	h := fnv.New32a()
	h.Write([]byte(projectID))
	return elapsed >= StatementSnapshotInterval/2 && minute%slots == h.Sum32()%slots
}

// statementDeltas turns a pg_stat_statements reading into the new totals by hash and the snapshot point:
// each statement's calls, rows and execution time since the previous snapshot (a statement new since
// then, or after a reset of pg_stat_statements or a crash — its stats_reset moved — or whose counts went
// back, counts from zero). The point is encoded as the seconds
// since the previous snapshot (0: none) and, per statement that ran, its hash (16 bytes), calls and rows
// (varints) and execution milliseconds (float64).
func statementDeltas(st *store.ObservabilityState, read *pgstat.Statements, now time.Time) (map[string]stmtTotals, []byte) {
	var prev map[string]stmtTotals
	if len(st.Statements) > 0 {
		_ = json.Unmarshal(st.Statements, &prev) // a state that does not decode starts over
	}
	reset := !st.StatementsReset.Equal(read.Reset) // reset, or back from a crash: every count is since then
	st.StatementsReset = read.Reset
	since := st.StatementsAt
	if reset && read.Reset.After(since) {
		since = read.Reset
	}
	if prev == nil && !read.Reset.IsZero() && now.Sub(read.Reset) <= 2*StatementSnapshotInterval {
		// The first snapshot of a new server (or of statistics just reset): its counts are all recent,
		// so they are the first point's, not only a baseline.
		prev, since = map[string]stmtTotals{}, read.Reset
	}
	stmts := read.Totals
	totals := make(map[string]stmtTotals, len(stmts))
	var interval uint64
	if prev != nil && !since.IsZero() {
		interval = uint64(max(1, now.Sub(since).Seconds()))
	}
	point := binary.AppendUvarint(nil, interval)
	for _, x := range stmts {
		var raw [16]byte
		if _, err := hex.Decode(raw[:], []byte(x.Hash)); err != nil {
			continue
		}
		cur := stmtTotals{Calls: x.Calls, Rows: x.Rows, ExecMS: x.TotalExecMS, Query: x.Query, hashRaw: raw}
		if old, ok := totals[x.Hash]; ok { // the same text under two query ids (e.g. two roles): one statement
			cur.Calls += old.Calls
			cur.Rows += old.Rows
			cur.ExecMS += old.ExecMS
		}
		totals[x.Hash] = cur
	}
	if prev == nil { // the first snapshot of a server running for a while only sets the baseline
		return totals, point
	}
	for h, cur := range totals {
		d := cur
		if p, ok := prev[h]; ok && !reset && cur.Calls >= p.Calls && cur.ExecMS >= p.ExecMS {
			d.Calls, d.Rows, d.ExecMS = cur.Calls-p.Calls, max(0, cur.Rows-p.Rows), cur.ExecMS-p.ExecMS
		}
		if d.Calls == 0 {
			continue
		}
		point = append(point, cur.hashRaw[:]...)
		point = binary.AppendUvarint(point, uint64(d.Calls))
		point = binary.AppendUvarint(point, uint64(d.Rows))
		point = binary.BigEndian.AppendUint64(point, math.Float64bits(d.ExecMS))
	}
	return totals, point
}

// statementPoint is one decoded snapshot point.
type statementPoint struct {
	At       time.Time
	Interval float64 // seconds since the previous snapshot (0: the baseline)
	Deltas   map[string]stmtTotals
}

// decodeStatementPoint decodes what statementDeltas encoded; want (when not empty) keeps only that hash.
func decodeStatementPoint(at time.Time, b []byte, want string) (statementPoint, error) {
	p := statementPoint{At: at, Deltas: map[string]stmtTotals{}}
	iv, n := binary.Uvarint(b)
	if n <= 0 {
		return p, errSampleEncoding
	}
	p.Interval, b = float64(iv), b[n:]
	for len(b) > 0 {
		if len(b) < 16 {
			return p, errSampleEncoding
		}
		h := hex.EncodeToString(b[:16])
		b = b[16:]
		calls, n1 := binary.Uvarint(b)
		if n1 <= 0 {
			return p, errSampleEncoding
		}
		rows, n2 := binary.Uvarint(b[n1:])
		if n2 <= 0 || len(b) < n1+n2+8 {
			return p, errSampleEncoding
		}
		ms := math.Float64frombits(binary.BigEndian.Uint64(b[n1+n2:]))
		b = b[n1+n2+8:]
		if want == "" || h == want {
			p.Deltas[h] = stmtTotals{Calls: int64(calls), Rows: int64(rows), ExecMS: ms}
		}
	}
	return p, nil
}

// storeTarget writes what readTarget read: the history point, the new state, the statement snapshot
// and texts, and the alerts. It returns how many alerts it raised or resolved.
func (s *Service) storeTarget(tx *store.Tx, t *sampleTarget, now time.Time) (int, error) {
	prj := t.prj
	if t.sample != nil {
		if err := PutSample(tx, prj.ID, t.sample); err != nil {
			return 0, err
		}
	}
	counters, err := json.Marshal(t.cur.Counters)
	if err != nil {
		return 0, err
	}
	st := t.state
	st.Counters, st.CPUSeconds, st.ReadAt = counters, t.cur.CPUSeconds, t.cur.At
	if t.stmtsRead {
		if st.Statements, err = json.Marshal(t.stmts); err != nil {
			return 0, err
		}
		st.StatementsAt = now
		if err := store.StatementPoints.Put(tx, prj.ID, now, t.stmtPoint); err != nil {
			return 0, err
		}
		for h, x := range t.stmts {
			id := prj.ID + "/" + h
			old, err := store.StatementTexts.Get(tx, id)
			if err == nil && now.Sub(old.LastSeen) < statementTextRefresh {
				continue
			}
			if err := store.StatementTexts.Put(tx, &store.StatementText{ID: id, ProjectID: prj.ID, Hash: h, Query: x.Query, LastSeen: now}); err != nil {
				return 0, err
			}
		}
	}
	if err := store.ObservabilityStates.Put(tx, st); err != nil {
		return 0, err
	}
	return s.evaluateAlerts(tx, prj, t.alertInput(), now)
}

// ProjectArchive is a project's WAL archiving as the last sweep read it.
type ProjectArchive struct {
	pgstat.Archiver
	ReadAt time.Time
}

// ArchiveSummary is the WAL archiving of every project the last sweep read (/status's backup store).
type ArchiveSummary struct {
	Projects        int        // projects read
	Failing         []string   // the projects whose last archiving attempt failed, sorted
	MaxPendingBytes int64      // the most WAL waiting on the local disk for one project
	OldestArchived  *time.Time // the oldest "archive last advanced" among the projects with WAL waiting (nil: none)
	ReadAt          time.Time  // when the sweep read them (zero: no sweep yet)
}

// Archive summarizes the projects' WAL archiving at the last sweep.
func (s *Service) Archive() ArchiveSummary {
	s.sampler.mu.Lock()
	defer s.sampler.mu.Unlock()
	var sum ArchiveSummary
	for id, a := range s.sampler.archive {
		sum.Projects++
		sum.ReadAt = a.ReadAt
		if a.Failing() {
			sum.Failing = append(sum.Failing, id)
		}
		sum.MaxPendingBytes = max(sum.MaxPendingBytes, a.PendingBytes)
		if a.PendingBytes > 0 && a.ArchivedAt != nil && (sum.OldestArchived == nil || a.ArchivedAt.Before(*sum.OldestArchived)) {
			sum.OldestArchived = a.ArchivedAt
		}
	}
	slices.Sort(sum.Failing)
	return sum
}

// ArchiveOf is the project's WAL archiving as the last sweep read it; ok is false when that sweep did not
// read it (no sweep since the start, the project was not active, or its server could not be read).
func (s *Service) ArchiveOf(projectID string) (a ProjectArchive, ok bool) {
	s.sampler.mu.Lock()
	defer s.sampler.mu.Unlock()
	a, ok = s.sampler.archive[projectID]
	return a, ok
}

// SamplerStats is the last sweep and the number of sweeps (for /metrics).
func (s *Service) SamplerStats() (SampleSweepResult, int64) {
	s.sampler.mu.Lock()
	defer s.sampler.mu.Unlock()
	return s.sampler.last, s.sampler.total
}

// Prune deletes history points older than SampleRetention, statement snapshots and texts
// older than StatementRetention, resolved alerts older than SampleRetention, and everything of projects
// that no longer exist. It returns how many records it deleted.
func (s *Service) Prune(ctx context.Context) (int, error) {
	now := s.now()
	n := 0
	err := s.db.Update(func(tx *store.Tx) error {
		n = 0 // a run again starts over
		for _, series := range []struct {
			s    *store.Series
			keep time.Duration
		}{{store.ObservabilitySamples, SampleRetention}, {store.StatementPoints, StatementRetention}} {
			keys, err := series.s.Keys(tx)
			if err != nil {
				return err
			}
			for _, key := range keys {
				var d int
				if projectGone(tx, key) {
					d, err = series.s.DeleteKey(tx, key)
				} else {
					d, err = series.s.DeleteBefore(tx, key, now.Add(-series.keep))
				}
				if err != nil {
					return err
				}
				n += d
			}
		}
		texts, err := store.StatementTexts.All(tx, func(x *store.StatementText) bool { return now.Sub(x.LastSeen) > StatementRetention })
		if err != nil {
			return err
		}
		for _, x := range texts {
			if err := store.StatementTexts.Delete(tx, x.ID); err != nil {
				return err
			}
			n++
		}
		alerts, err := store.ProjectAlerts.All(tx, func(a *store.ProjectAlert) bool {
			return a.ResolvedAt != nil && now.Sub(*a.ResolvedAt) > SampleRetention
		})
		if err != nil {
			return err
		}
		for _, a := range alerts {
			if err := store.ProjectAlerts.Delete(tx, a.ID); err != nil {
				return err
			}
			n++
		}
		states, err := store.ObservabilityStates.All(tx, nil)
		if err != nil {
			return err
		}
		for _, st := range states {
			if projectGone(tx, st.ProjectID) {
				if err := store.ObservabilityStates.Delete(tx, st.ProjectID); err != nil {
					return err
				}
				n++
			}
		}
		return nil
	})
	return n, err
}

// projectGone reports whether the project was deleted (its record gone, or in state deleted).
func projectGone(tx *store.Tx, id string) bool {
	prj, err := store.Projects.Get(tx, id)
	return errors.Is(err, store.ErrNotFound) || err == nil && prj.State == api.ProjectDeleted
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
