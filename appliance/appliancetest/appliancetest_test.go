package appliancetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that keeps what the guard reports instead of failing the test.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// The leak guard names a process working in the directory, kills it, and leaves alone a process of a
// sibling directory whose name merely starts the same.
func TestLeakGuardNamesAndKillsLeftovers(t *testing.T) {
	dir := t.TempDir()
	sibling := dir + "-sibling"
	leaked := exec.Command("sleep", "600")
	leaked.Dir = dir
	if err := os.Mkdir(sibling, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sibling) })
	// The other works in the sibling and names it in its command line (argv[0] is free).
	other := exec.Command("sleep", "601")
	other.Args[0], other.Dir = filepath.Join(sibling, "sleep"), sibling
	for _, c := range []*exec.Cmd{leaked, other} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })
	t.Cleanup(func() { leaked.Process.Kill() })
	exited := make(chan struct{})
	go func() { leaked.Wait(); close(exited) }()
	if left := ProcessesUnder(dir); len(left) != 1 || left[leaked.Process.Pid] == "" {
		t.Fatalf("processes under %s: %v, want only pid %d", dir, left, leaked.Process.Pid)
	}
	if left := ProcessesUnder(sibling); len(left) != 1 || left[other.Process.Pid] == "" {
		t.Fatalf("processes under %s: %v, want only pid %d", sibling, left, other.Process.Pid)
	}

	saved := LeakGrace
	LeakGrace = 0
	defer func() { LeakGrace = saved }()
	r := &recorder{TB: t}
	CheckNoProcessesUnder(r, dir)
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], fmt.Sprintf("pid %d: sleep 600", leaked.Process.Pid)) {
		t.Fatalf("the guard reported %q", r.errs)
	}
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatal("the guard did not kill the leaked process")
	}

	r = &recorder{TB: t}
	CheckNoProcessesUnder(r, filepath.Join(dir, "nothing-here"))
	if len(r.errs) != 0 {
		t.Fatalf("a directory without processes: %q", r.errs)
	}
}
