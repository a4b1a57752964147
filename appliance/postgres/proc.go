package postgres

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

// The instances and poolers are daemons, not children of the appliance: whether one runs is read from its
// pid file and checked against /proc (Linux), so that a pid recycled by an unrelated process, or a zombie
// left by a killed daemon, is never taken for it.

// procInfo is what /proc says about a live (not zombie) process.
type procInfo struct {
	pid  int
	uid  uint32
	args []string
	cwd  string // "" when unreadable
}

// readProcess returns the live process pid, or nil when there is none (or it is a zombie).
func readProcess(pid int) *procInfo {
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
	p := &procInfo{pid: pid, args: strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")}
	p.cwd, _ = os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	if fi, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			p.uid = st.Uid
		}
	}
	return p
}

// program is the base name of the process's argv[0].
func (p *procInfo) program() string { return filepath.Base(p.args[0]) }

// hasArgPair reports whether flag is followed by value in the arguments.
func (p *procInfo) hasArgPair(flag, value string) bool {
	for i := 0; i+1 < len(p.args); i++ {
		if p.args[i] == flag && samePath(p.args[i+1], value) {
			return true
		}
	}
	return false
}

func samePath(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	ra, err1 := filepath.EvalSymlinks(a)
	rb, err2 := filepath.EvalSymlinks(b)
	return err1 == nil && err2 == nil && ra == rb
}

// readPidFile reads the pid on the first line of a postmaster.pid or pgbouncer pid file (0 if it is absent).
func readPidFile(path string) (int, error) {
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

// isPostgres reports whether p is a PostgreSQL server process: a postmaster ("postgres -D ...") or one of
// its children, whose titles read "postgres: ...".
func (p *procInfo) isPostgres() bool {
	return p.program() == "postgres" || strings.HasPrefix(p.args[0], "postgres:")
}

// postgresIn lists the live PostgreSQL processes of uid working in dir or below it (every process of a
// cluster works in its data directory). Other processes (an operator's shell in the directory) are not
// listed.
func postgresIn(dir string, uid uint32) []*procInfo {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		real = filepath.Clean(dir)
	}
	entries, _ := os.ReadDir("/proc")
	var out []*procInfo
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd")
		if err != nil || (cwd != real && !strings.HasPrefix(cwd, real+"/")) {
			continue
		}
		if p := readProcess(pid); p != nil && p.uid == uid && p.isPostgres() {
			out = append(out, p)
		}
	}
	return out
}

// killPostgresIn SIGKILLs the PostgreSQL processes of uid working in dir and waits until they are gone.
func killPostgresIn(ctx context.Context, dir string, uid uint32) error {
	return waitFor(ctx, 20*time.Millisecond, func() (bool, error) {
		procs := postgresIn(dir, uid)
		for _, p := range procs {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		return len(procs) == 0, nil
	})
}

// lockDir takes an exclusive lock on <dir>/lifecycle.lock (flock), so that lifecycle operations on the
// same directory never overlap, whichever Instance or Pooler value, goroutine or process runs them.
func lockDir(ctx context.Context, dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, "lifecycle.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	err = waitFor(ctx, 10*time.Millisecond, func() (bool, error) {
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

// waitFor polls cond until it is true, fails, or ctx ends.
func waitFor(ctx context.Context, every time.Duration, cond func() (bool, error)) error {
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

// tail returns the last n bytes of a file (for error messages).
func tail(path string, n int64) string {
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
