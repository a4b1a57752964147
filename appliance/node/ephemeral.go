package node

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/theappliance/appliance/appliance/daemon"
)

// A throwaway appliance (Config.Ephemeral: up --ephemeral, apptest) lives in a new directory
// <parent>/appliance-ephemeral-*, whose file "owner" names the process that runs it (pid and start time).
// Stop stops every component and removes the directory. A SIGKILLed appliance cannot do that, and its
// PostgreSQL servers are not its children (pg_ctl forks the postmaster and exits, so a PR_SET_PDEATHSIG
// given to pg_ctl — cleared across fork anyway — never reaches it): a guard process does. The appliance
// starts it (its own executable again, with ephemeralGuardEnv naming the directory, in a session of its
// own) with the read end of a pipe whose write end only the appliance holds. However the appliance ends,
// the kernel closes that end; the guard reads end-of-file, and if the directory is still there it ends every
// process of the directory (by command line and working directory, as daemon.ProcessesUnder finds them) and
// removes it. A pipe, not PR_SET_PDEATHSIG on the guard: that signal fires when the thread that started the
// child exits, which for a Go program is any thread of the runtime's, not the process. What escapes both
// (the machine stopped at the wrong moment) the next ephemeral start in the same parent removes: a
// directory whose owner is not alive is an orphan (cleanLeftovers).

const (
	ephemeralPrefix   = "appliance-ephemeral-"
	ephemeralGuardEnv = "APPLIANCE_EPHEMERAL_GUARD"
	ownerFile         = "owner"
)

// The guard runs in any program that links this package (the appliance, a test binary using apptest),
// before anything else of the program.
func init() {
	if dir := os.Getenv(ephemeralGuardEnv); dir != "" {
		os.Exit(runGuard(dir))
	}
}

// ephemeral is a throwaway appliance's directory and guard.
type ephemeral struct {
	dir   string
	pipe  *os.File      // the write end of the guard's pipe
	guard chan struct{} // closed when the guard has exited
	once  sync.Once
	log   *slog.Logger
}

// startEphemeral cleans what earlier throwaway appliances left in the parent directory (cfg.DataDir, or
// ephemeralParent's), makes this one's directory and guard, and returns cfg on it: every
// listener on a free port of its host, the instances' ports in a random window.
func startEphemeral(cfg Config, log *slog.Logger) (*ephemeral, Config, error) {
	parent := cfg.DataDir
	if parent == "" {
		parent = ephemeralParent(log)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, cfg, fmt.Errorf("ephemeral: %w", err)
	}
	cleanLeftovers(parent, log)
	dir, err := os.MkdirTemp(parent, ephemeralPrefix+"*")
	if err != nil {
		return nil, cfg, fmt.Errorf("ephemeral: %w", err)
	}
	e := &ephemeral{dir: dir, guard: make(chan struct{}), log: log}
	if err := e.startGuard(); err != nil {
		os.RemoveAll(dir)
		return nil, cfg, err
	}
	start, err := procStart(os.Getpid())
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, ownerFile), fmt.Appendf(nil, "%d %s\n", os.Getpid(), start), 0o644)
	}
	if err == nil {
		err = os.Chmod(dir, 0o711) // the instances' user traverses it
	}
	if err != nil {
		e.finish()
		return nil, cfg, fmt.Errorf("ephemeral: %w", err)
	}
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.Listen, cfg.KVListen, cfg.KVRESTListen = anyPort(cfg.Listen), anyPort(cfg.KVListen), anyPort(cfg.KVRESTListen)
	if cfg.MetricsListen != "" {
		cfg.MetricsListen = anyPort(cfg.MetricsListen)
	}
	// The instances' ports: a window below the kernel's ephemeral range; the allocator skips a port another
	// program holds.
	first := 20000 + 200*rand.IntN(60)
	cfg.PGPorts = fmt.Sprintf("%d-%d", first, first+199)
	return e, cfg, nil
}

// shmDir is the tmpfs a throwaway appliance prefers, and shmLeast the free space it must have.
const (
	shmDir   = "/dev/shm"
	shmLeast = 1 << 30
)

// ephemeralParent is where a throwaway appliance's directory is made when no --data-dir says: the system's
// temporary directory when $TMPDIR names one, else /dev/shm when it is a tmpfs with at least 1 GiB free
// (its servers do not need the disk: they run without durability and are removed at the exit; on a disk,
// copying a new cluster and creating its database wait for the disk), else the temporary directory.
func ephemeralParent(log *slog.Logger) string {
	if os.Getenv("TMPDIR") != "" {
		return os.TempDir()
	}
	var fs syscall.Statfs_t
	const tmpfsMagic = 0x01021994
	if err := syscall.Statfs(shmDir, &fs); err == nil && fs.Type == tmpfsMagic && syscall.Access(shmDir, 2|1) == nil {
		if free := uint64(fs.Bavail) * uint64(fs.Bsize); free >= shmLeast {
			return shmDir
		}
		log.Info("ephemeral: /dev/shm has less than 1 GiB free: using the temporary directory")
	}
	return os.TempDir()
}

// anyPort is addr's host with port 0 (a free one).
func anyPort(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, "0")
}

func (e *ephemeral) startGuard() error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("ephemeral guard: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("ephemeral guard: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), ephemeralGuardEnv+"="+e.dir)
	cmd.ExtraFiles = []*os.File{r}                       // fd 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // a Ctrl-C in the terminal is the appliance's
	cmd.Dir = "/"
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return fmt.Errorf("ephemeral guard: start %s: %w", exe, err)
	}
	e.pipe = w
	go func() {
		_ = cmd.Wait()
		close(e.guard)
	}()
	return nil
}

// finish removes the directory (after ending any process of it still there) and lets the guard go. A
// second call does nothing.
func (e *ephemeral) finish() {
	e.once.Do(func() {
		endProcessesUnder(e.dir)
		if err := os.RemoveAll(e.dir); err != nil {
			e.log.Warn("ephemeral: remove the data directory", "dir", e.dir, "err", err)
		}
		e.pipe.Close() // the guard reads end-of-file, finds no directory and exits
		select {
		case <-e.guard:
		case <-time.After(10 * time.Second):
			e.log.Warn("ephemeral: the guard process did not exit")
		}
	})
}

// runGuard is the guard's life: wait for the appliance to end (end-of-file on fd 3), then end what is left
// of its directory and remove it.
func runGuard(dir string) int {
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM)
	_, _ = io.Copy(io.Discard, os.NewFile(3, "appliance"))
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return 0 // the appliance stopped and cleaned up
	}
	endProcessesUnder(dir)
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintf(os.Stderr, "appliance ephemeral guard: %v\n", err)
		return 1
	}
	return 0
}

// endProcessesUnder ends every process of dir: an immediate shutdown for PostgreSQL (SIGQUIT), SIGTERM for
// the others, and SIGKILL for what is still there after 5 seconds.
func endProcessesUnder(dir string) {
	procs := daemon.ProcessesUnder(dir)
	for pid, cmd := range procs {
		sig := syscall.SIGTERM
		if strings.Contains(cmd, "postgres") {
			sig = syscall.SIGQUIT
		}
		_ = syscall.Kill(pid, sig)
	}
	for deadline := time.Now().Add(5 * time.Second); len(procs) > 0; procs = daemon.ProcessesUnder(dir) {
		if time.Now().After(deadline) {
			for pid := range procs {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			deadline = time.Now().Add(time.Hour)
		}
		time.Sleep(20 * time.Millisecond) // polling other processes' exit: there is nothing to wait on
	}
}

// cleanLeftovers removes the directories of throwaway appliances in parent whose owner is not alive: it
// ends their processes first. A directory without an owner yet (an appliance starting) is left alone for
// a minute. Only real directories of this process's user are considered (in a shared /tmp another user's
// name-alike is none of its business).
func cleanLeftovers(parent string, log *slog.Logger) {
	dirs, _ := filepath.Glob(filepath.Join(parent, ephemeralPrefix+"*"))
	for _, d := range dirs {
		fi, err := os.Lstat(d)
		if err != nil || !fi.IsDir() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
			continue
		}
		if ephemeralOwnerAlive(d) {
			continue
		}
		log.Info("ephemeral: removing what a throwaway appliance that is gone left", "dir", d)
		endProcessesUnder(d)
		if err := os.RemoveAll(d); err != nil {
			log.Warn("ephemeral: remove a leftover directory", "dir", d, "err", err)
		}
	}
}

// ephemeralOwnerAlive says whether the process that made dir still runs (the same pid and start time);
// true when that cannot be told yet (no owner file, a directory less than a minute old).
func ephemeralOwnerAlive(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil {
		fi, serr := os.Stat(dir)
		return serr == nil && time.Since(fi.ModTime()) < time.Minute
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil {
		return false
	}
	start, err := procStart(pid)
	return err == nil && start == f[1]
}

// procStart is a process's start time (field 22 of /proc/PID/stat, in clock ticks since boot): with the
// pid, it names a process (a pid alone may be reused).
func procStart(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:])) // field 3 onwards
	if len(f) < 20 {
		return "", fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	if f[0] == "Z" || f[0] == "X" {
		return "", fmt.Errorf("process %d is a zombie", pid)
	}
	return f[19], nil
}
