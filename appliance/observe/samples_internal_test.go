package observe

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/pgstat"
	"github.com/theappliance/appliance/store"
)

func TestSampleEncodingRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	x := api.ObservabilitySample{SampledAt: at, ActiveQueries: 3, BlockedQueries: 1, ConnectionLimit: 97, Connections: 12, DeadTuples: 1 << 40,
		Deadlocks: 2, MemLimitBytes: 512 << 20, MemUsageBytes: 123456789, SlowQueries: 1, StorageBytes: 9 << 30, StorageLimitBytes: 10 << 30,
		TempBytes: 4096, AvgQueryMS: 1.25, CacheHitRatio: 0.995, CPUCoresUsed: 0.5, CPUQuotaCores: 2, RollbackRatio: 0.01,
		RowsReadPerSec: 1000.5, RowsWrittenPerSec: 20.25, TPS: 150.5}
	got, err := decodeSample(at, appendSample(nil, &x))
	if err != nil {
		t.Fatal(err)
	}
	if got != x {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, x)
	}
	for _, bad := range [][]byte{nil, {9}, appendSample(nil, &x)[:10]} {
		if _, err := decodeSample(at, bad); err == nil {
			t.Fatalf("%x decoded", bad)
		}
	}
}

func TestDownsample(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var in []api.ObservabilitySample
	for i := range 30 * 24 * 60 {
		in = append(in, api.ObservabilitySample{SampledAt: t0.Add(time.Duration(i) * time.Minute), Connections: int64(i % 2 * 10), Deadlocks: 1, TPS: float64(i % 2 * 100)})
	}
	out := downsample(in, MaxHistoryPoints)
	if len(out) != MaxHistoryPoints {
		t.Fatalf("%d points", len(out))
	}
	per := len(in) / MaxHistoryPoints
	for i, x := range out {
		if x.Connections != 5 || x.TPS != 50 || x.Deadlocks != int64(per) {
			t.Fatalf("point %d: %+v", i, x)
		}
		if want := in[(i+1)*per-1].SampledAt; !x.SampledAt.Equal(want) {
			t.Fatalf("point %d at %v, want %v", i, x.SampledAt, want)
		}
	}
	if short := downsample(in[:10], MaxHistoryPoints); len(short) != 10 {
		t.Fatalf("a short window was downsampled to %d", len(short))
	}
}

func TestComputeSample(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	start := t0.Add(-time.Hour)
	prev := reading{At: t0, CPUSeconds: 10, Counters: &pgstat.Counters{At: t0, PostmasterStart: start, XactCommit: 1000, XactRollback: 10,
		BlksHit: 900, BlksRead: 100, TupReturned: 5000, TupFetched: 1000, TupInserted: 100, TupUpdated: 10, TupDeleted: 1, Deadlocks: 1,
		TempBytes: 0, Calls: 100, ExecTimeMS: 50}}
	cur := reading{At: t0.Add(time.Minute), CPUSeconds: 40, Counters: &pgstat.Counters{At: t0.Add(time.Minute), PostmasterStart: start,
		XactCommit: 1570, XactRollback: 40, BlksHit: 1890, BlksRead: 110, TupReturned: 11000, TupFetched: 1000, TupInserted: 700, TupUpdated: 10,
		TupDeleted: 1, Deadlocks: 2, TempBytes: 8192, Calls: 300, ExecTimeMS: 250, Connections: 5, ConnectionLimit: 97, DatabaseSizeBytes: 1 << 20}}
	plan, storage := Plan{MemoryBytes: 512 << 20, CPUCores: 0.5}, int64(1)<<30 // the free plan's
	x, err := computeSample(prev, cur, plan, storage)
	if err != nil {
		t.Fatal(err)
	}
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("tps", x.TPS, 600.0/60)
	near("rollback ratio", x.RollbackRatio, 30.0/600)
	near("cache hit", x.CacheHitRatio, 990.0/1000)
	near("rows read", x.RowsReadPerSec, 6000.0/60)
	near("rows written", x.RowsWrittenPerSec, 600.0/60)
	near("avg query", x.AvgQueryMS, 200.0/200)
	near("cpu", x.CPUCoresUsed, 30.0/60)
	if x.Deadlocks != 1 || x.TempBytes != 8192 || x.Connections != 5 || x.StorageBytes != 1<<20 || x.MemLimitBytes != plan.MemoryBytes || x.CPUQuotaCores != plan.CPUCores {
		t.Errorf("sample: %+v", x)
	}

	// A crash between the readings: the counters and the processes' CPU start again from zero. Every
	// delta is the value since then, never negative.
	crash := *cur.Counters
	crash.At, crash.PostmasterStart = t0.Add(2*time.Minute), t0.Add(90*time.Second)
	crash.XactCommit, crash.XactRollback, crash.BlksHit, crash.BlksRead, crash.TupReturned = 60, 0, 50, 50, 300
	crash.Calls, crash.ExecTimeMS, crash.Deadlocks, crash.TempBytes = 10, 5, 0, 0
	after := reading{At: t0.Add(2 * time.Minute), CPUSeconds: 3, Counters: &crash}
	x, err = computeSample(cur, after, plan, storage)
	if err != nil {
		t.Fatal(err)
	}
	near("tps after a crash", x.TPS, 1)
	near("cache hit after a crash", x.CacheHitRatio, 0.5)
	near("avg query after a crash", x.AvgQueryMS, 0.5)
	near("cpu after a crash", x.CPUCoresUsed, 3.0/60)
	if x.Deadlocks != 0 || x.TempBytes != 0 || x.RowsReadPerSec < 0 || x.RowsWrittenPerSec < 0 {
		t.Errorf("sample after a crash: %+v", x)
	}

	// A statistics reset (stats_reset moves) with counters that happen to be higher: still from zero.
	reset := crash
	reset.At = t0.Add(3 * time.Minute)
	reset.StatsReset = &reset.At
	reset.XactCommit = 120
	x, err = computeSample(after, reading{At: reset.At, CPUSeconds: 4, Counters: &reset}, plan, storage)
	if err != nil {
		t.Fatal(err)
	}
	near("tps after a reset", x.TPS, 2)
	if _, err := computeSample(after, after, plan, 0); err == nil {
		t.Error("two readings at the same instant gave a sample")
	}
}

func TestStatementDeltas(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	h1, h2 := "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	st := &store.ObservabilityState{}
	r0 := t0.Add(-time.Hour) // pg_stat_statements' stats_reset
	read := func(reset time.Time, totals ...pgstat.StatementTotals) *pgstat.Statements {
		return &pgstat.Statements{Available: true, Reset: reset, Totals: totals}
	}
	totals, point := statementDeltas(st, read(r0, pgstat.StatementTotals{Hash: h1, Query: "select 1", Calls: 10, Rows: 10, TotalExecMS: 5}), t0)
	if p, err := decodeStatementPoint(t0, point, ""); err != nil || p.Interval != 0 || len(p.Deltas) != 0 {
		t.Fatalf("the baseline point: %+v %v", p, err)
	}
	st.Statements, _ = json.Marshal(totals)
	st.StatementsAt = t0
	// h1 ran 5 more times; h2 is new; the same text under a second query id adds up.
	now := t0.Add(5 * time.Minute)
	_, point = statementDeltas(st, read(r0,
		pgstat.StatementTotals{Hash: h1, Calls: 12, Rows: 12, TotalExecMS: 8}, pgstat.StatementTotals{Hash: h1, Calls: 3, Rows: 3, TotalExecMS: 1},
		pgstat.StatementTotals{Hash: h2, Calls: 7, Rows: 70, TotalExecMS: 700}), now)
	p, err := decodeStatementPoint(now, point, "")
	if err != nil {
		t.Fatal(err)
	}
	if p.Interval != 300 || p.Deltas[h1] != (stmtTotals{Calls: 5, Rows: 5, ExecMS: 4}) || p.Deltas[h2] != (stmtTotals{Calls: 7, Rows: 70, ExecMS: 700}) {
		t.Fatalf("point: %+v", p)
	}
	if p, _ := decodeStatementPoint(now, point, h2); len(p.Deltas) != 1 {
		t.Fatalf("one hash: %+v", p)
	}
	// Counts that went back: the new counts are the delta.
	_, point = statementDeltas(st, read(r0, pgstat.StatementTotals{Hash: h1, Calls: 2, Rows: 2, TotalExecMS: 1}), now)
	if p, _ := decodeStatementPoint(now, point, ""); p.Deltas[h1].Calls != 2 {
		t.Fatalf("after counts went back: %+v", p)
	}
	// After a crash (stats_reset moved) the counts may be as high as before: still the delta is all of them,
	// over the time since the reset.
	_, point = statementDeltas(st, read(now.Add(-time.Minute), pgstat.StatementTotals{Hash: h1, Calls: 10, Rows: 10, TotalExecMS: 5}), now)
	if p, _ := decodeStatementPoint(now, point, ""); p.Deltas[h1].Calls != 10 || p.Interval != 60 {
		t.Fatalf("after a crash: %+v", p)
	}
	// A new server's first snapshot: its counts since the start are the first point's.
	fresh := &store.ObservabilityState{}
	_, point = statementDeltas(fresh, read(now.Add(-2*time.Minute), pgstat.StatementTotals{Hash: h2, Calls: 3, Rows: 3, TotalExecMS: 3}), now)
	if p, _ := decodeStatementPoint(now, point, ""); p.Interval != 120 || p.Deltas[h2].Calls != 3 {
		t.Fatalf("a new server's first snapshot: %+v", p)
	}
}

func TestAlertConditions(t *testing.T) {
	prj := &store.Project{StorageLimitBytes: 1000}
	cond := func(c pgstat.Counters) map[string]alertCondition {
		out := map[string]alertCondition{}
		for _, a := range (&sampleTarget{prj: prj, cur: &reading{Counters: &c}}).alertInput() {
			out[a.kind] = a
		}
		return out
	}
	cases := []struct {
		c         pgstat.Counters
		kind, sev string // "" severity: not raised
	}{
		{pgstat.Counters{DatabaseSizeBytes: 799}, AlertStorage, ""},
		{pgstat.Counters{DatabaseSizeBytes: 800}, AlertStorage, SeverityWarning},
		{pgstat.Counters{DatabaseSizeBytes: 950}, AlertStorage, SeverityCritical},
		{pgstat.Counters{Connections: 79, ConnectionLimit: 100}, AlertConnections, ""},
		{pgstat.Counters{Connections: 80, ConnectionLimit: 100}, AlertConnections, SeverityWarning},
		{pgstat.Counters{Connections: 100, ConnectionLimit: 100}, AlertConnections, SeverityCritical},
		{pgstat.Counters{OldestXactSeconds: 299}, AlertLongTransaction, ""},
		{pgstat.Counters{OldestXactSeconds: 300}, AlertLongTransaction, SeverityWarning},
		{pgstat.Counters{OldestXactSeconds: 3600}, AlertLongTransaction, SeverityCritical},
	}
	for _, c := range cases {
		a := cond(c.c)[c.kind]
		if a.raised != (c.sev != "") || a.severity != c.sev || (a.raised && a.message == "") {
			t.Errorf("%+v: %s = %+v, want severity %q", c.c, c.kind, a, c.sev)
		}
	}
}

// TestLogWindowBounds: the logs window is 1–168 hours, 1–720 with the log archive; the tail's stays 1–168.
func TestLogWindowBounds(t *testing.T) {
	for _, c := range []struct {
		archive int
		q       LogsQuery
		ok      bool
	}{
		{0, LogsQuery{Hours: 168, Limit: 500}, true},
		{0, LogsQuery{Hours: 169, Limit: 1}, false},
		{30, LogsQuery{Hours: 720, Limit: 1}, true},
		{30, LogsQuery{Hours: 721, Limit: 1}, false},
		{30, LogsQuery{Hours: 169, Limit: 1, Stream: true}, false},
		{0, LogsQuery{Hours: 0, Limit: 1}, false},
		{0, LogsQuery{Hours: 1, Limit: 0}, false},
		{0, LogsQuery{Hours: 1, Limit: 1, Severity: "Error, FATAL"}, true},
		{0, LogsQuery{Hours: 1, Limit: 1, Severity: "error,loud"}, false},
	} {
		s := &Service{cfg: Config{LogArchiveDays: c.archive}, now: time.Now}
		q, err := s.logQuery(c.q)
		if (err == nil) != c.ok || (err != nil && apperr.KindOf(err) != apperr.KindInvalid) {
			t.Errorf("archive %d, %+v: %v", c.archive, c.q, err)
		}
		if err == nil && (q.Since.IsZero() || len(q.ExcludeUsers) != 1) {
			t.Errorf("%+v: query %+v", c.q, q)
		}
	}
}

// TestStatementsDue: a project's first snapshot is taken at once, the next ones every
// StatementSnapshotInterval in the sweeps of its phase, spread over the sweeps for projects made together;
// one whose phase sweep was missed takes it at the next sweep once late.
func TestStatementsDue(t *testing.T) {
	const projects, sweeps = 200, 60
	t0 := time.Date(2026, 11, 25, 10, 0, 30, 0, time.UTC)
	slots := int(StatementSnapshotInterval / SampleInterval)
	last, taken := make([]time.Time, projects), make([]int, projects)
	perSweep := make([]int, sweeps)
	for i := range sweeps {
		now := t0.Add(time.Duration(i) * SampleInterval)
		for p := range projects {
			id := fmt.Sprintf("prj_%08d", p*7919)
			if !statementsDue(id, last[p], now) {
				continue
			}
			// The second comes at the first sweep of its phase half an interval after the first; the next
			// ones an interval apart.
			if gap := now.Sub(last[p]); (taken[p] == 1 && (gap < StatementSnapshotInterval/2 || gap >= StatementSnapshotLate)) ||
				(taken[p] > 1 && gap != StatementSnapshotInterval) {
				t.Errorf("project %s: snapshot %d %v after the one before", id, taken[p]+1, gap)
			}
			last[p] = now
			taken[p]++
			perSweep[i]++
		}
	}
	if perSweep[0] != projects {
		t.Errorf("the first sweep took %d first snapshots of %d", perSweep[0], projects)
	}
	for i := slots + 1; i < sweeps; i++ {
		if n := perSweep[i]; n < projects/slots/2 || n > projects/slots*2 {
			t.Errorf("sweep %d took %d snapshots of %d projects (want about %d)", i, n, projects, projects/slots)
		}
	}
	// A sweep of its phase missed: the next sweep once the snapshot is late takes it, then the phase again.
	id := "prj_missed"
	at := t0
	for !statementsDue(id, at.Add(-StatementSnapshotInterval), at) {
		at = at.Add(SampleInterval)
	}
	lastSnap := at.Add(-StatementSnapshotInterval) // and the sweep at `at` missed
	late := at.Add(SampleInterval)
	for ; late.Sub(lastSnap) < StatementSnapshotLate; late = late.Add(SampleInterval) {
		if statementsDue(id, lastSnap, late) {
			t.Fatalf("due %v after its missed phase sweep, before it is late", late.Sub(at))
		}
	}
	if !statementsDue(id, lastSnap, late) {
		t.Fatal("a late snapshot is not due")
	}
	next := late.Add(SampleInterval)
	for !statementsDue(id, late, next) {
		next = next.Add(SampleInterval)
	}
	if d := next.Sub(late); d < StatementSnapshotInterval/2 || d >= StatementSnapshotLate || next.Sub(at)%StatementSnapshotInterval != 0 {
		t.Errorf("after the late snapshot, the next came %v later, %v after the missed phase sweep", d, next.Sub(at))
	}
}
