// Package lane keeps background work in a lane of its own, so that the API stays responsive while the
// appliance works in the background (the job runner's bookkeeping, webhook deliveries):
//
//   - Lane work runs on the lane's own goroutines, Width of them (GOMAXPROCS-1, at least 1), each locked to
//     an OS thread of its own whose priority is lowered (nice 10, on Linux). At most Width processors do
//     background work at once, which leaves one to the API: it matters because Go polls the network only
//     from a processor that has nothing else to run (or from its monitor after 10 ms). And when the API's
//     threads wake on a machine whose cores are busy, the operating system runs them before the lane's.
//   - While foreground work goes on (Foreground was called within ForegroundWindow), the lane is paced:
//     before each piece of work the lane rests restFactor times as long as it worked since its last rest
//     (at most maxRest), so background work takes at most about a third of one CPU.
//
// Work given to the lane does CPU work and short waits for the disk (a store commit); it never waits for
// the network, a timer or other lane work (the lane would stall), and it does not give work to the lane
// itself.
package lane

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// ForegroundWindow is how long after foreground work the lane stays paced.
const ForegroundWindow = 50 * time.Millisecond

// restFactor is how much longer than it worked the lane rests while it is paced.
const restFactor = 2

// maxRest bounds one rest (a long piece of work, such as a commit that waited for the disk, is not paid
// back whole).
const maxRest = 5 * time.Millisecond

// Lane runs work on its own threads, at most its width of pieces at once. A nil *Lane runs work in the
// caller, unpaced.
type Lane struct {
	work       chan func()
	width      int
	foreground atomic.Int64 // when foreground work last happened (ns since epoch)
	debt       atomic.Int64 // ns the lane worked while paced, not yet rested
	now        func() time.Time
	closeOnce  sync.Once
}

// New returns a lane of width threads (at least 1).
func New(width int) *Lane {
	l := &Lane{work: make(chan func()), width: max(1, width), now: time.Now}
	for range l.width {
		go l.run()
	}
	return l
}

// NewBackground returns a lane for the process's background work: GOMAXPROCS-1 wide (1 on one or two
// CPUs). up makes one and gives it to all that share it (the job runner, the webhook worker, and the
// fronts whose requests pace it); there is no package-level lane, so importing the package starts nothing.
func NewBackground() *Lane { return New(runtime.GOMAXPROCS(0) - 1) }

// run is one of the lane's goroutines: on a thread of its own (never unlocked: a thread whose priority was
// lowered is not handed to other goroutines; it ends with the goroutine).
func (l *Lane) run() {
	runtime.LockOSThread()
	lowerThreadPriority()
	for fn := range l.work {
		if l.paced() {
			if d := time.Duration(l.debt.Swap(0)); d > 0 {
				time.Sleep(min(restFactor*d, maxRest))
			}
		}
		start := l.now()
		fn()
		if l.paced() {
			l.debt.Add(int64(l.now().Sub(start)))
		}
	}
}

// Do runs fn in the lane and returns when it has; a panic in fn is raised again in the caller.
func (l *Lane) Do(fn func()) {
	if l == nil {
		fn()
		return
	}
	done := make(chan any, 1)
	l.work <- func() {
		defer func() { done <- recover() }()
		fn()
	}
	if p := <-done; p != nil {
		panic(p)
	}
}

// Close ends the lane's goroutines and threads (a lane made by a test); Do must not be called after.
func (l *Lane) Close() {
	if l != nil {
		l.closeOnce.Do(func() { close(l.work) })
	}
}

// Foreground records foreground work (an API request, a key-value command) now: the lane is paced for
// ForegroundWindow.
func (l *Lane) Foreground() {
	if l != nil {
		l.foreground.Store(l.now().UnixNano())
	}
}

func (l *Lane) paced() bool {
	return l.now().UnixNano()-l.foreground.Load() < int64(ForegroundWindow)
}

// Width is how many pieces of work the lane runs at once (0 for a nil lane: any number).
func (l *Lane) Width() int {
	if l == nil {
		return 0
	}
	return l.width
}
