package studio

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// countingConn counts the cancel requests sent to it.
type countingConn struct{ n atomic.Int32 }

func (c *countingConn) CancelRequest(context.Context) error {
	c.n.Add(1)
	return nil
}

// TestRunRegistry: a cancel that comes before its run cancels the run when it is listed (within
// earlyCancelTTL, and at most maxEarlyPerProject per project); a run that ended answers false; a running
// run's cancel is sent, then sent again until its statements answer, and never after.
func TestRunRegistry(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	r := &runRegistry{now: func() time.Time { return now }}
	ctx := t.Context()

	// Before its run: held, and the run starts cancelled.
	if ok, err := r.cancel(ctx, "p", "early"); !ok || err != nil {
		t.Fatalf("early cancel: %v %v", ok, err)
	}
	run, done, err := r.add("p", "early", &countingConn{})
	if err != nil || !r.wasCancelled(run) {
		t.Fatalf("the run after its cancel: cancelled %v, %v", run != nil && r.wasCancelled(run), err)
	}
	done()
	// Once: a later run of the same ID is not cancelled by it.
	run, done, _ = r.add("p", "early", &countingConn{})
	if r.wasCancelled(run) {
		t.Fatal("an early cancel cancelled two runs")
	}
	done()

	// An early cancel expires.
	r.cancel(ctx, "p", "late")
	now = now.Add(earlyCancelTTL)
	run, done, _ = r.add("p", "late", &countingConn{})
	if r.wasCancelled(run) {
		t.Fatal("an early cancel past its time cancelled the run")
	}
	done()

	// A run that ended: false, while its end is remembered; afterwards a cancel waits for a new run.
	if ok, _ := r.cancel(ctx, "p", "late"); ok {
		t.Fatal("the cancel of an ended run answered true")
	}
	now = now.Add(endedTTL)
	if ok, _ := r.cancel(ctx, "p", "late"); !ok {
		t.Fatal("the cancel of a run forgotten did not wait for a new one")
	}

	// At most maxEarlyPerProject wait per project; another project is not held back.
	for i := range maxEarlyPerProject - 1 { // and q's "late" below makes maxEarlyPerProject
		if ok, _ := r.cancel(ctx, "q", fmt.Sprint("x", i)); !ok {
			t.Fatalf("early cancel %d of q refused", i)
		}
	}
	r.cancel(ctx, "q", "late")
	if ok, _ := r.cancel(ctx, "q", "one-too-many"); ok {
		t.Fatal("more than maxEarlyPerProject early cancels were held")
	}
	if ok, _ := r.cancel(ctx, "p", "other"); !ok {
		t.Fatal("project p's early cancel refused for q's")
	}

	// A second run of a running ID: 409.
	conn := &countingConn{}
	run, done, _ = r.add("p", "busy", conn)
	if _, _, err := r.add("p", "busy", &countingConn{}); err == nil {
		t.Fatal("a second run of a running ID was listed")
	}
	// A running run's cancel is sent, and sent again until its statements answer.
	if ok, err := r.cancel(ctx, "p", "busy"); !ok || err != nil || conn.n.Load() != 1 || !r.wasCancelled(run) {
		t.Fatalf("cancel of a running run: %v %v, %d sent", ok, err, conn.n.Load())
	}
	for deadline := time.Now().Add(10 * time.Second); conn.n.Load() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the cancel was not sent again")
		}
	}
	run.finish()
	sent := conn.n.Load()
	time.Sleep(3 * resendEvery)
	if conn.n.Load() != sent {
		t.Fatalf("cancels sent after the statements answered: %d, then %d", sent, conn.n.Load())
	}
	if ok, _ := r.cancel(ctx, "p", "busy"); ok || conn.n.Load() != sent {
		t.Fatalf("a cancel after the statements answered: %v, %d sent", ok, conn.n.Load())
	}
	done()
}
