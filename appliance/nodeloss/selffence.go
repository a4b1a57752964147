package nodeloss

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// Self-fencing: a node that cannot take itself for alive any more (no renewal of its lease answered in
// four fifths of its TTL, by its own monotonic clock: lease.Config.Renewed) fences every instance of its
// data directory before etcd can expire its lease, so before any other node may restore its projects:
// pg_hba.conf refuses every login but the appliance's admin over loopback (reloaded: SIGHUP to the
// postmaster), the client sessions are ended (SIGTERM to each client backend, as pg_terminate_backend
// does) and the pooler is stopped (SIGTERM). The instance's directory gets a marker (FenceMarker) that
// says so and what pg_hba.conf was before (an upgrade fences instances too). The node unfences an
// instance only when it holds a lease again and the instance's project is still placed on it
// (unfenceOwn); a project placed elsewhere meanwhile has its copy stopped and kept aside (Fence).
//
// Who fences: the appliance itself on its lease's Lost event (a partition: the process runs), and a
// watchdog process (RunWatchdog, `appliance fence-watchdog`, started by up on a cluster node) fed the
// lease's deadline on a pipe: it fences when the deadline passes without a newer one, so a frozen
// appliance (SIGSTOP, a stalled VM thread) is fenced too. A watchdog frozen with it (the whole machine
// paused) fences nothing until it runs again: then its timer has passed and it fences first thing, but a
// paused machine's instances are frozen as well and serve nobody meanwhile.

// FenceMarker is the file, in an instance's directory, of an instance self-fenced: its content is
// "fenced" when pg_hba.conf was fenced already before (kept so after the unfence), else "open".
const FenceMarker = "lease-fenced"

// clientBackend matches a PostgreSQL client backend's process title ("postgres: user db host(port) state"):
// background processes (checkpointer, walwriter, ...) have no remote host(port).
var clientBackend = regexp.MustCompile(`^postgres: .*\S\(\d+\) `)

// FenceLocal fences every instance of instancesDir (each directory with a pgdata/PG_VERSION, not one kept
// aside): what a node that may no longer take itself for alive does. It returns the fenced directories.
func FenceLocal(instancesDir string, log *slog.Logger) []string {
	entries, err := os.ReadDir(instancesDir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			log.Error("self-fence: list the instances", "dir", instancesDir, "err", err)
		}
		return nil
	}
	var done []string
	for _, e := range entries {
		dir := filepath.Join(instancesDir, e.Name())
		if !e.IsDir() || strings.Contains(e.Name(), ".fenced-") {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "pgdata", "PG_VERSION")); err != nil {
			continue
		}
		if err := fenceDir(dir); err != nil {
			log.Error("self-fence: fence an instance", "dir", dir, "err", err)
			continue
		}
		done = append(done, dir)
	}
	if len(done) > 0 {
		log.Warn("self-fence: this node may no longer take itself for alive in its cluster: its instances refuse client logins, their sessions are ended and their poolers stopped",
			"instances", done)
	}
	return done
}

// fenceDir fences the instance of dir (idempotent).
func fenceDir(dir string) error {
	hba := filepath.Join(dir, "pgdata", "pg_hba.conf")
	marker := filepath.Join(dir, FenceMarker)
	if _, err := os.Stat(marker); errors.Is(err, os.ErrNotExist) {
		before := "open"
		if b, err := os.ReadFile(hba); err == nil && string(b) == string(postgres.HBA(true)) {
			before = "fenced"
		}
		if err := os.WriteFile(marker, []byte(before+"\n"), 0o600); err != nil {
			return err
		}
	}
	if err := rewrite(hba, postgres.HBA(true)); err != nil {
		return err
	}
	pm := postmasterPID(dir)
	if pm > 0 {
		_ = syscall.Kill(pm, syscall.SIGHUP) // pg_hba.conf is read again before the next login
	}
	if pid := pidFile(filepath.Join(dir, "pooler", "pgbouncer.pid")); pid > 0 && procHas(pid, "pgbouncer") {
		_ = syscall.Kill(pid, syscall.SIGTERM) // PgBouncer's immediate shutdown
	}
	if pm > 0 {
		// The sessions opened before the reload; a second pass catches a login the postmaster accepted
		// before it read the signal.
		terminateClients(pm)
		time.Sleep(100 * time.Millisecond)
		terminateClients(pm)
	}
	return nil
}

// Unfence undoes fenceDir on the instance of dir: pg_hba.conf as it was before (reloaded if the server
// runs), the marker removed. false when dir was not self-fenced.
func Unfence(dir string) (bool, error) {
	marker := filepath.Join(dir, FenceMarker)
	b, err := os.ReadFile(marker)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := rewrite(filepath.Join(dir, "pgdata", "pg_hba.conf"), postgres.HBA(strings.TrimSpace(string(b)) == "fenced")); err != nil {
		return false, err
	}
	if pm := postmasterPID(dir); pm > 0 {
		_ = syscall.Kill(pm, syscall.SIGHUP)
	}
	return true, os.Remove(marker)
}

// SelfFenced reports whether the instance of dir is self-fenced.
func SelfFenced(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, FenceMarker))
	return err == nil
}

// rewrite replaces the content of an existing file in place (its owner, PostgreSQL's user, kept).
func rewrite(path string, content []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(content); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// postmasterPID is the pid of the postmaster running on dir's pgdata (0: none).
func postmasterPID(dir string) int {
	pid := pidFile(filepath.Join(dir, "pgdata", "postmaster.pid"))
	if pid <= 0 || !procHas(pid, "postgres") {
		return 0
	}
	return pid
}

// pidFile is the pid on the first line of path (0: none).
func pidFile(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0
	}
	return pid
}

// procHas reports whether the process pid runs and its command line holds s.
func procHas(pid int, s string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), s)
}

// terminateClients sends SIGTERM to the client backends of the postmaster pm (what pg_terminate_backend
// does): their sessions end, their transactions roll back.
func terminateClients(pm int) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces; the fields after its closing parenthesis do not.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(pm) {
			continue
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !clientBackend.Match([]byte(strings.ReplaceAll(string(cmd), "\x00", " ")+" ")) {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
}

// RunWatchdog is `appliance fence-watchdog`: it reads from in (up's pipe) lines of how many milliseconds
// longer the node may take itself for alive ("0": no longer), and fences every instance of instancesDir
// (FenceLocal) when that time passes with no newer line, by its own monotonic clock: so even with up
// frozen. "stop" (up stopping cleanly) ends it with nothing fenced. At the end of in without "stop" (up
// killed) it still fences when the last time passes (up's lease lives on until etcd expires it), then
// returns.
func RunWatchdog(ctx context.Context, in io.Reader, instancesDir string, log *slog.Logger) error {
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			select {
			case lines <- strings.TrimSpace(sc.Text()):
			case <-ctx.Done():
				return
			}
		}
	}()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed, fenced := false, false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case line, ok := <-lines:
			if !ok {
				lines = nil
				if !armed {
					return nil
				}
				log.Warn("fence watchdog: up's pipe closed without a stop: the instances are fenced when the lease's last deadline passes")
				continue
			}
			if line == "stop" {
				return nil
			}
			ms, err := strconv.ParseInt(line, 10, 64)
			if err != nil {
				log.Error("fence watchdog: a line that is no number of milliseconds", "line", line)
				continue
			}
			timer.Stop()
			if ms <= 0 {
				armed = false
				if !fenced {
					FenceLocal(instancesDir, log)
				}
				fenced = true
				continue
			}
			timer.Reset(time.Duration(ms) * time.Millisecond)
			armed, fenced = true, false
		case <-timer.C:
			armed = false
			if !fenced {
				log.Warn("fence watchdog: no lease renewal answered in time: fencing this node's instances")
				FenceLocal(instancesDir, log)
			}
			fenced = true
			if lines == nil {
				return nil
			}
		}
	}
}

// selfFence is the appliance's own fence on its lease's loss (the watchdog does the same).
func (s *Service) selfFence() {
	if s.cfg.NodeID == "" {
		return
	}
	FenceLocal(s.host.InstancesDir(), s.log)
}

// unfenceOwn unfences the self-fenced instances of this node whose project is still placed on it (and
// its spares); the others stay fenced (fenceForeign stops them and keeps them aside). Only while this
// node holds a lease.
func (s *Service) unfenceOwn(ctx context.Context) {
	if s.cfg.NodeID == "" || s.members == nil {
		return
	}
	if _, ok := s.members.Current(); !ok {
		return
	}
	dir := s.host.InstancesDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		d := filepath.Join(dir, e.Name())
		if !e.IsDir() || strings.Contains(e.Name(), ".fenced-") || !SelfFenced(d) {
			continue
		}
		own := false
		var owner string
		var stale *store.Project
		var staleInst *store.Instance
		err := s.db.View(func(tx *store.Tx) error {
			in, err := store.Instances.Get(tx, e.Name())
			if errors.Is(err, store.ErrNotFound) {
				own = true // no instance's (a scratch directory of this node's own work): no project's copy
				return nil
			}
			if err != nil {
				return err
			}
			if in.ProjectID == "" {
				own = true // a spare
				return nil
			}
			prj, err := store.Projects.Get(tx, in.ProjectID)
			if err != nil {
				return err
			}
			owner = store.ProjectNode(tx, prj)
			own = owner == s.cfg.NodeID && prj.State != projectDeleted
			if own && CheckEpoch(d, prj) != nil {
				own, stale, staleInst = false, prj, in
			}
			return nil
		})
		if err != nil {
			s.log.Warn("self-fence: read the instance of a fenced directory (kept fenced)", "dir", d, "err", err)
			continue
		}
		if stale != nil {
			// Placed here again, but this copy is older than the placement: kept fenced and aside.
			s.log.Warn("self-fence: a copy older than its project's placement epoch is not unfenced", "instance", e.Name(), "project", stale.ID)
			s.Fence(ctx, staleInst, stale, owner)
			continue
		}
		if !own {
			continue // another node's now: fenceForeign keeps it aside
		}
		if _, err := Unfence(d); err != nil {
			s.log.Error("self-fence: unfence an instance of this node", "dir", d, "err", err)
			continue
		}
		s.log.Warn("self-fence: this node holds a lease again and still hosts the project: its instance takes logins again", "instance", e.Name())
	}
}

// EpochFile is the file, in an instance's directory, of the placement epoch (store.Project.PlacementEpoch)
// its copy was made or taken over at (none: 0, a copy from before any move).
const EpochFile = "placement-epoch"

// RecordEpoch records in the instance's directory dir the placement epoch its copy is of.
func RecordEpoch(dir string, epoch int64) error {
	return os.WriteFile(filepath.Join(dir, EpochFile), []byte(strconv.FormatInt(epoch, 10)+"\n"), 0o600)
}

// CopyEpoch is the placement epoch the copy in dir records (0 when none).
func CopyEpoch(dir string) int64 {
	b, err := os.ReadFile(filepath.Join(dir, EpochFile))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// ErrStaleCopy is CheckEpoch's refusal.
var ErrStaleCopy = errors.New("this copy is older than the project's placement")

// CheckEpoch refuses (ErrStaleCopy) the copy in dir of prj when its epoch is older than the store's: the
// project was moved to another node after it was made, and perhaps written there.
func CheckEpoch(dir string, prj *store.Project) error {
	if got := CopyEpoch(dir); got < prj.PlacementEpoch {
		return fmt.Errorf("%w: project %s's copy in %s is of placement epoch %d, the project's is %d (it moved to another node since): not started",
			ErrStaleCopy, prj.ID, dir, got, prj.PlacementEpoch)
	}
	return nil
}
