package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The appliance's daemons (instances, poolers, key-value servers) are not its children: whether one runs is read from its
// pid file and checked against /proc (Linux), so that a pid recycled by an unrelated process, or a zombie
// left by a killed daemon, is never taken for it.

// ProcInfo is what /proc says about a live (not zombie) process.
type ProcInfo struct {
	PID  int
	UID  uint32
	Args []string
	Cwd  string // "" when unreadable
}

// ReadProcess returns the live process pid, or nil when there is none (or it is a zombie).
func ReadProcess(pid int) *ProcInfo {
	if pid <= 0 {
		return nil
	}
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return nil
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
		if f := strings.Fields(string(stat[i+1:])); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
			return nil
		}
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(cmdline) == 0 {
		return nil
	}
	p := &ProcInfo{PID: pid, Args: strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")}
	p.Cwd, _ = os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	if fi, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			p.UID = st.Uid
		}
	}
	return p
}

// Program is the base name of the process's argv[0].
func (p *ProcInfo) Program() string { return filepath.Base(p.Args[0]) }

// HasArgPair reports whether flag is followed by value in the arguments.
func (p *ProcInfo) HasArgPair(flag, value string) bool {
	for i := 0; i+1 < len(p.Args); i++ {
		if p.Args[i] == flag && SamePath(p.Args[i+1], value) {
			return true
		}
	}
	return false
}

// SamePath reports whether two paths name the same file.
func SamePath(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	ra, err1 := filepath.EvalSymlinks(a)
	rb, err2 := filepath.EvalSymlinks(b)
	return err1 == nil && err2 == nil && ra == rb
}

// ReadPidFile reads the pid on the first line of a postmaster.pid or pgbouncer pid file (0 if it is absent).
func ReadPidFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	line = strings.TrimSpace(line)
	if line == "" { // being written
		return 0, nil
	}
	pid, err := strconv.Atoi(line)
	if err != nil {
		return 0, fmt.Errorf("pid file %s: %q is not a pid", path, line)
	}
	return pid, nil
}

// LockDir takes an exclusive lock on <dir>/lifecycle.lock (flock), so that lifecycle operations on the
// same directory never overlap, whichever Instance or Pooler value, goroutine or process runs them.
func LockDir(ctx context.Context, dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, "lifecycle.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	err = WaitFor(ctx, 10*time.Millisecond, func() (bool, error) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { f.Close() }, nil // closing the file releases the lock
}

// WaitFor polls cond until it is true, fails, or ctx ends.
func WaitFor(ctx context.Context, every time.Duration, cond func() (bool, error)) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}

// Tail returns the last n bytes of a file (for error messages).
func Tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-n, 0)
	buf := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil {
		return ""
	}
	return strings.TrimSpace(string(buf))
}

// SignalAndWait sends sig to pid and waits until the process is gone; when ctx ends first the process is
// killed (SIGKILL) and the error says so.
func SignalAndWait(ctx context.Context, pid int, sig syscall.Signal) error {
	if err := syscall.Kill(pid, sig); err != nil {
		return err
	}
	gone := func() (bool, error) { return ReadProcess(pid) == nil, nil }
	if err := WaitFor(ctx, 10*time.Millisecond, gone); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		kctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = WaitFor(kctx, 10*time.Millisecond, gone)
		return fmt.Errorf("killed: %w", err)
	}
	return nil
}
