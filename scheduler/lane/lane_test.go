package lane

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWidth: no more than the lane's width of pieces of work run at once, all run, a panic reaches the
// caller, and a nil lane runs work in the caller.
func TestWidth(t *testing.T) {
	for _, width := range []int{1, 3} {
		l := New(width)
		defer l.Close()
		var in, most atomic.Int32
		var wg sync.WaitGroup
		for range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l.Do(func() {
					n := in.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(100 * time.Microsecond)
					in.Add(-1)
				})
			}()
		}
		wg.Wait()
		if got := most.Load(); got != int32(width) {
			t.Errorf("width %d: at most %d ran at once", width, got)
		}
		func() {
			defer func() {
				if p := recover(); p != "boom" {
					t.Errorf("the caller recovered %v, want the panic of the work", p)
				}
			}()
			l.Do(func() { panic("boom") })
		}()
		ran := false
		l.Do(func() { ran = true }) // the lane still runs work after a panic
		if !ran {
			t.Error("the lane stopped after a panic")
		}
	}
	var l *Lane
	ran := false
	l.Do(func() { ran = true })
	zero, bg := New(0), NewBackground()
	defer zero.Close()
	defer bg.Close()
	if !ran || l.Width() != 0 || zero.Width() != 1 || bg.Width() < 1 {
		t.Errorf("nil lane ran %v; widths: nil %d, New(0) %d, NewBackground %d", ran, l.Width(), zero.Width(), bg.Width())
	}
}

// TestPacing: while foreground work goes on, the lane's working time is owed and it first rests
// restFactor times that (at most maxRest) before the next piece; without foreground work nothing is owed.
func TestPacing(t *testing.T) {
	var mu sync.Mutex
	clock := time.Unix(1000, 0)
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	l := New(1)
	defer l.Close()
	l.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	l.Do(func() { advance(3 * time.Millisecond) })
	if d := l.debt.Load(); d != 0 {
		t.Fatalf("owed %v without foreground work", time.Duration(d))
	}
	l.Foreground()
	l.Do(func() { advance(3 * time.Millisecond) })
	if d := time.Duration(l.debt.Load()); d != 3*time.Millisecond {
		t.Fatalf("owed %v after 3 ms of work during foreground work", d)
	}
	t0 := time.Now()
	l.Do(func() {})
	if rested, want := time.Since(t0), min(restFactor*3*time.Millisecond, maxRest); rested < want {
		t.Fatalf("the lane rested %v before the next piece, want at least %v for the 3 ms owed", rested, want)
	}
	advance(ForegroundWindow)
	l.Foreground()
	l.Do(func() { advance(time.Second) })
	t0 = time.Now()
	l.Do(func() {})
	if rested := time.Since(t0); rested > time.Second/2 {
		t.Fatalf("rested %v after 1 s of work: a rest is at most %v", rested, maxRest)
	}
	advance(ForegroundWindow)
	l.debt.Store(0)
	l.Do(func() { advance(time.Millisecond) })
	if d := l.debt.Load(); d != 0 {
		t.Fatalf("owed %v after the foreground window ended", time.Duration(d))
	}
}
