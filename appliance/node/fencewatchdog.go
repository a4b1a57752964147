package node

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// fenceWatchdog is a cluster node's self-fence watchdog process (`appliance fence-watchdog --data-dir`,
// nodeloss.RunWatchdog): up writes it, on a pipe, how long the node may still take itself for alive after
// each renewal of its lease; it fences the node's instances when that time passes, by its own clock, even
// while up is frozen. A nil *fenceWatchdog (no program: an appliance run in a test binary) does nothing.
type fenceWatchdog struct {
	cmd    *exec.Cmd
	log    *slog.Logger
	mu     sync.Mutex
	in     io.WriteCloser
	failed bool
	done   chan struct{}
	latest chan string // the line to write next (renewed)
}

// startFenceWatchdog starts program's watchdog over the instances of dataDir (nil, nil when program is "").
// Its command line names the data directory, not instances/: nothing of it looks like an instance's.
func startFenceWatchdog(program, dataDir string, log *slog.Logger) (*fenceWatchdog, error) {
	if program == "" {
		return nil, nil
	}
	cmd := exec.Command(program, "fence-watchdog", "--data-dir", dataDir)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// Its own process group: a terminal's Ctrl-C to up's group is not for it (up tells it to stop).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("self-fence watchdog: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("self-fence watchdog: start %s: %w", program, err)
	}
	w := &fenceWatchdog{cmd: cmd, log: log, in: in, done: make(chan struct{}), latest: make(chan string, 1)}
	go func() { _ = cmd.Wait(); close(w.done) }()
	go w.feed()
	return w, nil
}

// feed writes the latest line to the watchdog: the lease's renewals never wait on the pipe (a watchdog
// that stopped reading would fill it), and a line not written yet is replaced by a newer one.
func (w *fenceWatchdog) feed() {
	for {
		select {
		case line := <-w.latest:
			w.write(line)
		case <-w.done:
			return
		}
	}
}

// renewed is lease.Config.Renewed: the time left until until, in milliseconds ("0" when until is zero:
// the lease is lost).
func (w *fenceWatchdog) renewed(until time.Time) {
	if w == nil {
		return
	}
	ms := int64(0)
	if !until.IsZero() {
		ms = max(time.Until(until).Milliseconds(), 1)
	}
	line := strconv.FormatInt(ms, 10)
	for {
		select {
		case w.latest <- line:
			return
		default:
			select { // replace the line not written yet
			case <-w.latest:
			default:
			}
		}
	}
}

func (w *fenceWatchdog) write(line string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.in == nil {
		return
	}
	if _, err := io.WriteString(w.in, line+"\n"); err != nil && !w.failed {
		w.failed = true
		w.log.Error("self-fence watchdog: it is gone (this node fences itself on its lease's loss only while it runs)", "err", err)
	}
}

// stop ends the watchdog with nothing fenced (up stopping cleanly: its instances are stopped).
func (w *fenceWatchdog) stop() {
	if w == nil {
		return
	}
	// The line not written yet first (a deadline: the stop that follows supersedes it).
	select {
	case <-w.latest:
	default:
	}
	w.write("stop")
	w.mu.Lock()
	w.in.Close()
	w.in = nil
	w.mu.Unlock()
	select {
	case <-w.done:
	case <-time.After(5 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.done
	}
}
