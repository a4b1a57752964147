package heapfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

var sink []byte

// collections allocates total bytes in 4 KiB pieces, none kept, and returns how many collections ran.
func collections(total int) uint32 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.NumGC
	for range total / 4096 {
		sink = make([]byte, 4096)
	}
	runtime.ReadMemStats(&ms)
	return ms.NumGC - before
}

// goal is the runtime's heap goal now.
func goal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// gogc is the GOGC the runtime uses now.
func gogc() uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// waitGOGC collects and waits until the finalizer set GOGC as ok wants it.
func waitGOGC(t *testing.T, ok func(uint64) bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(gogc()); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC stayed %d", gogc())
		}
		runtime.GC()
	}
}

// TestFloor: with a floor of 256 MiB the small heap of a test is collected at most once while 64 MiB are
// allocated, without it (the default GOGC on the same heap) many times; and the floor follows the live
// heap after each collection.
func TestFloor(t *testing.T) {
	// The process's GOGC and memory limit, whatever the environment says (Set reads GOGC first; a
	// GOMEMLIMIT would cap the goals checked here).
	limit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetMemoryLimit(limit) })
	debug.SetGCPercent(100)
	Set(256 << 20)
	waitGOGC(t, func(p uint64) bool { return p > 1000 })
	if g := goal(); g < 240<<20 || g > 272<<20 {
		t.Errorf("with a 256 MiB floor the heap goal is %d MiB", g>>20)
	}
	if n := collections(64 << 20); n > 1 {
		t.Errorf("with a 256 MiB floor: %d collections while allocating 64 MiB, want at most 1", n)
	}
	Set(0)
	waitGOGC(t, func(p uint64) bool { return p == 100 })
	// How many collections finish while 64 MiB are allocated depends on the CPU the collector gets (3 were
	// seen on a machine loaded far beyond its cores, many more on a quiet one): only "more than the floor's one"
	// is asked.
	if n := collections(64 << 20); n < 2 {
		t.Errorf("without a floor: %d collections while allocating 64 MiB, want several", n)
	}
	// The floor follows the live heap, collection after collection: a live heap of half the floor or more
	// leaves GOGC's rule alone; once it is gone, the floor is back.
	Set(96 << 20)
	waitGOGC(t, func(p uint64) bool { return p > 1000 })
	live := make([]byte, 64<<20)
	waitGOGC(t, func(p uint64) bool { return p == 100 })
	runtime.KeepAlive(live)
	live = nil
	waitGOGC(t, func(p uint64) bool { return p > 1000 })
	// A floor beyond any heap still leaves collection on (GOGC is an int32 in the runtime).
	Set(1 << 62)
	if p := gogc(); p > math.MaxInt32 {
		t.Errorf("a huge floor set GOGC to %d", int64(p))
	}
	Set(0)
}
