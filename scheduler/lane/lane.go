// Package lane keeps background work in a lane of its own, so that the API stays responsive while the
// appliance works in the background (the job runner's bookkeeping, webhook deliveries):
//
//   - At most Width goroutines hold the lane at once (GOMAXPROCS-1, at least 1), which leaves a processor
//     to the API. It matters because of how Go schedules network wake-ups: a processor polls the network
//     only when it has nothing else to run (or when the runtime's monitor finds it unpolled for 10 ms), so
//     background goroutines keeping every processor busy make an API request that arrived wait.
//   - While foreground work goes on (Foreground was called within ForegroundWindow), the lane is paced:
//     whoever enters next first rests restFactor times as long as the lane was held since the last rest
//     (at most maxRest), so background work takes at most about a third of one CPU. On a small machine
//     the API's own threads then find a core free when they wake, instead of waiting for the operating
//     system to preempt background work (bench/README.md, events and webhooks: a rest as long as the hold
//     left the API's p99 during a webhook fan-out 1.6–2.0 times its quiet one, twice as long 1.4–1.6,
//     three times no better).
//
// A holder does CPU work and never waits for the network, a timer or another holder inside the lane; the
// lane is entered outside store transactions and never twice by one goroutine.
package lane

import (
	"runtime"
	"sync/atomic"
	"time"
)

// ForegroundWindow is how long after foreground work the lane stays paced.
const ForegroundWindow = 50 * time.Millisecond

// restFactor is how much longer than the lane was held the next holder rests while the lane is paced.
const restFactor = 2

// maxRest bounds one rest (a long hold, such as a commit that waited for the disk, is not paid back whole).
const maxRest = 5 * time.Millisecond

// Lane admits at most its width of holders at once. A nil *Lane admits everyone at once, unpaced.
type Lane struct {
	slots      chan struct{}
	foreground atomic.Int64 // when foreground work last happened (ns since epoch)
	debt       atomic.Int64 // ns the lane was held while paced, not yet rested
	now        func() time.Time
}

// New returns a lane of width holders (at least 1).
func New(width int) *Lane {
	return &Lane{slots: make(chan struct{}, max(1, width)), now: time.Now}
}

// Background is the lane of the process's background work: GOMAXPROCS-1 wide (1 on one or two CPUs).
var Background = New(runtime.GOMAXPROCS(0) - 1)

// Pass is a place in the lane; Leave gives it back.
type Pass struct {
	l     *Lane
	since time.Time
}

// Enter waits for a place in the lane (and, while paced, rests first).
func (l *Lane) Enter() Pass {
	if l == nil {
		return Pass{}
	}
	l.slots <- struct{}{}
	if l.paced() {
		if d := time.Duration(l.debt.Swap(0)); d > 0 {
			time.Sleep(min(restFactor*d, maxRest))
		}
	}
	return Pass{l, l.now()}
}

// Leave gives the place back.
func (p Pass) Leave() {
	if p.l == nil {
		return
	}
	if p.l.paced() {
		p.l.debt.Add(int64(p.l.now().Sub(p.since)))
	}
	<-p.l.slots
}

// Do runs fn in the lane.
func (l *Lane) Do(fn func()) {
	defer l.Enter().Leave()
	fn()
}

// Foreground records foreground work (an API request) now: the lane is paced for ForegroundWindow.
func (l *Lane) Foreground() {
	if l != nil {
		l.foreground.Store(l.now().UnixNano())
	}
}

func (l *Lane) paced() bool {
	return l.now().UnixNano()-l.foreground.Load() < int64(ForegroundWindow)
}

// Width is how many may hold the lane at once (0 for a nil lane: any number).
func (l *Lane) Width() int {
	if l == nil {
		return 0
	}
	return cap(l.slots)
}
