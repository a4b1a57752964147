package observe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/pgstat"
	"github.com/theappliance/appliance/store"
)

// sampleVersion leads every encoded sample.
const sampleVersion = 1

// sampleInts and sampleFloats list a sample's fields for the encoding and for downsampling, in a fixed order.
func sampleInts(x *api.ObservabilitySample) [12]*int64 {
	return [12]*int64{&x.ActiveQueries, &x.BlockedQueries, &x.ConnectionLimit, &x.Connections, &x.DeadTuples, &x.Deadlocks,
		&x.MemLimitBytes, &x.MemUsageBytes, &x.SlowQueries, &x.StorageBytes, &x.StorageLimitBytes, &x.TempBytes}
}

func sampleFloats(x *api.ObservabilitySample) [8]*float64 {
	return [8]*float64{&x.AvgQueryMS, &x.CacheHitRatio, &x.CPUCoresUsed, &x.CPUQuotaCores, &x.RollbackRatio,
		&x.RowsReadPerSec, &x.RowsWrittenPerSec, &x.TPS}
}

// summed reports whether p (one of sampleInts(x)) counts events between samples: downsampling adds those up
// and averages the rest.
func summed(x *api.ObservabilitySample, p *int64) bool { return p == &x.Deadlocks || p == &x.TempBytes }

// micro is the resolution the numbers are kept at: millionths.
const micro = 1e6

// appendSample appends the sample, encoded compactly (the time is the series key, not encoded): a version byte,
// then the integers and the numbers (in millionths) as varints — about 50 bytes, so a month of minutely
// points of a project is ~2 MB.
func appendSample(b []byte, x *api.ObservabilitySample) []byte {
	b = append(b, sampleVersion)
	for _, p := range sampleInts(x) {
		b = binary.AppendVarint(b, *p)
	}
	for _, p := range sampleFloats(x) {
		b = binary.AppendVarint(b, int64(math.Round(*p*micro)))
	}
	return b
}

var errSampleEncoding = errors.New("malformed observability sample")

// decodeSample decodes what appendSample wrote.
func decodeSample(at time.Time, b []byte) (api.ObservabilitySample, error) {
	x := api.ObservabilitySample{SampledAt: at}
	if len(b) == 0 || b[0] != sampleVersion {
		return x, errSampleEncoding
	}
	b = b[1:]
	for _, p := range sampleInts(&x) {
		v, n := binary.Varint(b)
		if n <= 0 {
			return x, errSampleEncoding
		}
		*p, b = v, b[n:]
	}
	for _, p := range sampleFloats(&x) {
		v, n := binary.Varint(b)
		if n <= 0 {
			return x, errSampleEncoding
		}
		*p, b = float64(v)/micro, b[n:]
	}
	if len(b) != 0 {
		return x, errSampleEncoding
	}
	return x, nil
}

// MaxHistoryPoints bounds a history answer: a window holding more samples is downsampled evenly into this
// many buckets of consecutive samples (docs/api-decisions.md "Observability").
const MaxHistoryPoints = 720

// downsample merges samples (oldest first) into at most max points: each bucket of consecutive samples
// becomes one point at its newest sample's time, with the counts of events (deadlocks, temp bytes) summed
// and every other field averaged.
func downsample(in []api.ObservabilitySample, max int) []api.ObservabilitySample {
	if len(in) <= max {
		return in
	}
	out := make([]api.ObservabilitySample, 0, max)
	for i := range max {
		lo, hi := i*len(in)/max, (i+1)*len(in)/max
		var acc api.ObservabilitySample
		var ints [12]float64
		for _, x := range in[lo:hi] {
			for j, p := range sampleInts(&x) {
				ints[j] += float64(*p)
			}
			af := sampleFloats(&acc)
			for j, p := range sampleFloats(&x) {
				*af[j] += *p
			}
		}
		n := float64(hi - lo)
		for j, p := range sampleInts(&acc) {
			if summed(&acc, p) {
				*p = int64(ints[j])
			} else {
				*p = int64(math.Round(ints[j] / n))
			}
		}
		for _, p := range sampleFloats(&acc) {
			*p = math.Round(*p/n*micro) / micro
		}
		acc.SampledAt = in[hi-1].SampledAt
		out = append(out, acc)
	}
	return out
}

// reading is the sampler's last look at a project's server: the counters and the CPU time of its
// processes (kept in the store between sweeps as ObservabilityState).
type reading struct {
	Counters   *pgstat.Counters
	CPUSeconds float64
	At         time.Time // the appliance's clock (the sample's time)
}

// counterDelta is cur-prev, or cur when the counter went back (the server's statistics were reset, or a
// crash lost them): the activity since the reset is what is known for sure.
func counterDelta(cur, prev int64, reset bool) int64 {
	if reset || cur < prev {
		return cur
	}
	return cur - prev
}

// computeSample builds a history point from two readings of the same server; every rate is over the
// server's clock between them (the CPU time too). A statistics reset between
// them (stats_reset moved, or a counter went back) makes each delta the counter's value since the reset;
// a server restart that kept its statistics (a clean shutdown saves them) changes nothing.
func computeSample(prev, cur reading, plan Plan, storageLimit int64) (api.ObservabilitySample, error) {
	c, p := cur.Counters, prev.Counters
	secs := c.At.Sub(p.At).Seconds()
	if secs <= 0 {
		return api.ObservabilitySample{}, fmt.Errorf("readings %v and %v are not in order", p.At, c.At)
	}
	reset := !sameTime(c.StatsReset, p.StatsReset)
	d := func(cur, prev int64) float64 { return float64(counterDelta(cur, prev, reset)) }
	commits, rollbacks := d(c.XactCommit, p.XactCommit), d(c.XactRollback, p.XactRollback)
	hits, reads := d(c.BlksHit, p.BlksHit), d(c.BlksRead, p.BlksRead)
	x := api.ObservabilitySample{
		SampledAt:         cur.At,
		ActiveQueries:     c.ActiveQueries,
		BlockedQueries:    c.BlockedQueries,
		ConnectionLimit:   c.ConnectionLimit,
		Connections:       c.Connections,
		DeadTuples:        c.DeadTuples,
		Deadlocks:         counterDelta(c.Deadlocks, p.Deadlocks, reset),
		MemLimitBytes:     plan.MemoryBytes,
		SlowQueries:       c.SlowQueries,
		StorageBytes:      c.DatabaseSizeBytes,
		StorageLimitBytes: storageLimit,
		TempBytes:         counterDelta(c.TempBytes, p.TempBytes, reset),
		CPUQuotaCores:     plan.CPUCores,
		CacheHitRatio:     1,
		TPS:               (commits + rollbacks) / secs,
		RowsReadPerSec:    (d(c.TupReturned, p.TupReturned) + d(c.TupFetched, p.TupFetched)) / secs,
		RowsWrittenPerSec: (d(c.TupInserted, p.TupInserted) + d(c.TupUpdated, p.TupUpdated) + d(c.TupDeleted, p.TupDeleted)) / secs,
	}
	if hits+reads > 0 {
		x.CacheHitRatio = hits / (hits + reads)
	}
	if commits+rollbacks > 0 {
		x.RollbackRatio = rollbacks / (commits + rollbacks)
	}
	// pg_stat_statements has its own reset (pg_stat_statements_reset); a count that went back is one.
	calls := counterDelta(c.Calls, p.Calls, reset)
	execMS := c.ExecTimeMS - p.ExecTimeMS
	if reset || c.Calls < p.Calls || execMS < 0 {
		execMS = c.ExecTimeMS
	}
	if calls > 0 {
		x.AvgQueryMS = execMS / float64(calls)
	}
	cpu := cur.CPUSeconds - prev.CPUSeconds
	if cpu < 0 || !c.PostmasterStart.Equal(p.PostmasterStart) { // a new postmaster: its processes' CPU from zero
		cpu = cur.CPUSeconds
	}
	x.CPUCoresUsed = cpu / secs
	return x, nil
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

// PutSample writes a project's history point (the sampler's; tests of what /metrics shows give theirs).
func PutSample(tx *store.Tx, projectID string, x *api.ObservabilitySample) error {
	return store.ObservabilitySamples.Put(tx, projectID, x.SampledAt, appendSample(nil, x))
}

// LastSample is the project's newest history point (nil: none, or one that does not decode): the
// /metrics gauges.
func LastSample(tx *store.Tx, projectID string) *api.ObservabilitySample {
	at, v, err := store.ObservabilitySamples.Last(tx, projectID)
	if err != nil {
		return nil
	}
	x, err := decodeSample(at, v)
	if err != nil {
		return nil
	}
	return &x
}
