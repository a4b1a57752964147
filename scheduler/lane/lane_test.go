package lane

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWidth: no more than the lane's width hold it at once, everyone gets through, and a nil lane admits all.
func TestWidth(t *testing.T) {
	for _, width := range []int{1, 3} {
		l := New(width)
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
			t.Errorf("width %d: at most %d held the lane at once", width, got)
		}
	}
	var l *Lane
	l.Enter()
	l.Enter().Leave()
	if l.Width() != 0 || New(0).Width() != 1 || Background.Width() < 1 {
		t.Errorf("widths: nil %d, New(0) %d, Background %d", l.Width(), New(0).Width(), Background.Width())
	}
}

// TestPacing: while foreground work goes on, the lane's time is owed and the next holder first rests
// restFactor times that (at most maxRest); without foreground work nothing is owed.
func TestPacing(t *testing.T) {
	clock := time.Unix(1000, 0)
	l := New(1)
	l.now = func() time.Time { return clock }
	pass := l.Enter()
	clock = clock.Add(3 * time.Millisecond)
	pass.Leave()
	if d := l.debt.Load(); d != 0 {
		t.Fatalf("owed %v without foreground work", time.Duration(d))
	}
	l.Foreground()
	pass = l.Enter()
	clock = clock.Add(3 * time.Millisecond)
	pass.Leave()
	if d := time.Duration(l.debt.Load()); d != 3*time.Millisecond {
		t.Fatalf("owed %v after a 3 ms hold during foreground work", d)
	}
	t0 := time.Now()
	l.Enter().Leave()
	if rested, want := time.Since(t0), min(restFactor*3*time.Millisecond, maxRest); rested < want {
		t.Fatalf("the next holder rested %v, want at least %v for the 3 ms owed", rested, want)
	}
	clock = clock.Add(ForegroundWindow)
	l.Foreground()
	pass = l.Enter()
	clock = clock.Add(time.Second)
	pass.Leave()
	t0 = time.Now()
	l.Enter().Leave()
	if rested := time.Since(t0); rested > time.Second/2 {
		t.Fatalf("rested %v after a 1 s hold: a rest is at most %v", rested, maxRest)
	}
	clock = clock.Add(ForegroundWindow)
	pass = l.Enter()
	clock = clock.Add(time.Millisecond)
	pass.Leave()
	if d := l.debt.Load(); d != 0 {
		t.Fatalf("owed %v after the foreground window ended", time.Duration(d))
	}
}
