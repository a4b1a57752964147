// Package heapfloor gives the Go garbage collector a floor under its heap goal. With GOGC's proportional
// rule alone, a process whose live heap is small (the appliance's is a few MB) collects after every few
// MB it allocates: during a burst of background work (a webhook fan-out) that is a collection every few
// milliseconds, and each one takes a processor from the API for its marking and stops the world twice.
// With a floor, the heap may grow to the floor before a collection; above it, GOGC's rule applies as
// before. The cost is memory: at most the floor, which a server running PostgreSQL instances can spare.
package heapfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Default is the floor the appliance runs with.
const Default = 64 << 20

// maxFloor bounds a floor (1 PiB: no heap gets there, and × 100 it still fits the arithmetic).
const maxFloor = 1 << 50

var (
	mu      sync.Mutex
	floor   uint64
	percent int // the GOGC the process started with (GOGC's environment variable, or 100)
	started bool
)

// Set makes floor bytes the least heap goal from the next collection on (0 turns the floor off). It
// does nothing when collection is off (GOGC=off). The goal is recomputed after every collection from the
// live heap: GOGC is set so that the goal is the larger of floor and what the process's GOGC gives.
func Set(bytes uint64) {
	mu.Lock()
	defer mu.Unlock()
	if !started {
		percent = debug.SetGCPercent(100)
		debug.SetGCPercent(percent)
		if percent < 0 {
			return
		}
		started = true
		arm()
	}
	floor = min(bytes, maxFloor)
	adjust()
}

// arm runs adjust after a coming collection: a finalizer runs once the collector found its object
// unreachable and swept it, and arms the next one (when that happens during the following cycle's
// marking, the next object survives that cycle and one collection goes by without an adjustment).
func arm() {
	s := new([16]byte) // not tiny-allocated (a finalizer on a tiny object may never run)
	runtime.SetFinalizer(s, func(*[16]byte) {
		mu.Lock()
		adjust()
		mu.Unlock()
		arm()
	})
}

var (
	sample     = []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}}
	goalSample = []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
)

// runtimeMinimum is the Go runtime's least heap goal at GOGC=100 (its defaultHeapMinimum), scaled by
// GOGC/100 like the rest of the goal.
const runtimeMinimum = 4 << 20

// adjust sets GOGC for the live heap now; mu is held. The runtime's goal at GOGC=p is the larger of
// runtimeMinimum × p/100 and live + (live + stacks + globals) × p/100; the least p (not below the
// process's GOGC) whose goal reaches the floor is the smaller of the two that reach it. A runtime built
// with a smaller minimum (GOEXPERIMENT=heapminimum512kib) falls short with the first: the goal is read
// back, and the second, which reaches the floor whatever the minimum, is taken then.
func adjust() {
	metrics.Read(sample)
	live := sample[0].Value.Uint64()
	scanned := max(live+sample[1].Value.Uint64()+sample[2].Value.Uint64(), 1)
	p := percent
	if floor > live {
		byMinimum := floor * 100 / runtimeMinimum
		byLive := (floor - live) * 100 / scanned
		p = max(p, clamp(min(byMinimum, byLive)))
		debug.SetGCPercent(p)
		if metrics.Read(goalSample); goalSample[0].Value.Uint64() >= floor || byLive <= byMinimum {
			return
		}
		p = max(percent, clamp(byLive))
	}
	debug.SetGCPercent(p)
}

// clamp keeps a GOGC within what the runtime takes (it stores an int32; a larger value would wrap and
// turn collection off).
func clamp(p uint64) int { return int(min(p, math.MaxInt32)) }
