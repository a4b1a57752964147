package lane

import (
	"runtime"
	"syscall"
	"testing"
)

// TestThreadsNiced: work in the lane runs on a thread of nice threadNice; the caller's thread keeps its own.
func TestThreadsNiced(t *testing.T) {
	l := New(1)
	defer l.Close()
	// getpriority(2) as the kernel returns it: 20 - nice.
	nice := func() int {
		v, err := syscall.Getpriority(syscall.PRIO_PROCESS, syscall.Gettid())
		if err != nil {
			t.Fatal(err)
		}
		return 20 - v
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := nice()
	var inLane int
	for range 3 {
		l.Do(func() { inLane = nice() })
		if inLane != max(threadNice, before) {
			t.Fatalf("work in the lane ran at nice %d, want %d", inLane, max(threadNice, before))
		}
	}
	if got := nice(); got != before {
		t.Fatalf("the caller's thread went from nice %d to %d", before, got)
	}
}
