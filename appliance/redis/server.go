package redis

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/theappliance/appliance/appliance/daemon"
)

// Server is one store's redis-server, run daemonized as the OS user from Config.Dir (0700, owned by the
// user; its parents searchable). It is a daemon.Process: a Supervisor keeps it running, and a restarted
// appliance adopts it through redis.pid.
type Server struct {
	ID string
	Config
	Program string // the redis-server program; "" looks it up in PATH, then /usr/bin
	User    *daemon.OSUser
	// Seed, when set, is asked for the data of a server whose directory has no RDB snapshot when it
	// starts: it writes a dump.rdb to w and says true, or says false when it has none (the server then
	// starts empty). An error fails the start. An existing dump.rdb is never replaced.
	Seed func(ctx context.Context, w io.Writer) (bool, error)
}

var _ daemon.Process = (*Server)(nil)

func (s *Server) program() (string, error) {
	if s.Program != "" {
		return s.Program, nil
	}
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/bin/redis-server"); err == nil {
		return "/usr/bin/redis-server", nil
	}
	return "", errors.New("redis-server is not installed (Debian package redis-server)")
}

func (s *Server) check() error {
	if s.Dir == "" || !filepath.IsAbs(s.Dir) || filepath.Clean(s.Dir) != s.Dir || strings.Count(s.Dir, "/") < 2 {
		return fmt.Errorf("kv server %s: directory %q must be a clean absolute path at least two levels deep", s.ID, s.Dir)
	}
	if s.User == nil || s.MaxMemoryMB <= 0 || len(s.TokenHash) != 64 || len(s.AdminHash) != 64 {
		return fmt.Errorf("kv server %s: user, maxmemory and both password hashes are required", s.ID)
	}
	return nil
}

// Status reports redis-server's pid and whether it runs: the pid in redis.pid must be a live redis-server
// working in Dir (Redis changes into its dir).
func (s *Server) Status() (pid int, running bool, err error) {
	pid, err = daemon.ReadPidFile(s.PidPath())
	if err != nil || pid == 0 {
		return 0, false, err
	}
	p := daemon.ReadProcess(pid)
	if p == nil || !strings.Contains(p.Args[0], "redis-server") {
		return pid, false, nil
	}
	return pid, p.Cwd != "" && daemon.SamePath(p.Cwd, s.Dir), nil
}

// WriteFiles (re)writes redis.conf and users.acl as the OS user, creating Dir.
func (s *Server) WriteFiles() error {
	if err := s.check(); err != nil {
		return err
	}
	if err := s.User.CheckReachable(s.Dir); err != nil {
		return fmt.Errorf("kv server %s: %w", s.ID, err)
	}
	if err := s.User.Mkdir(s.Dir, 0o700); err != nil {
		return fmt.Errorf("kv server %s: %w", s.ID, err)
	}
	if err := s.User.WriteFile(s.ConfPath(), s.Conf(), 0o600); err != nil {
		return fmt.Errorf("kv server %s: write redis.conf: %w", s.ID, err)
	}
	if err := s.User.WriteFile(s.ACLPath(), s.ACL(), 0o600); err != nil {
		return fmt.Errorf("kv server %s: write users.acl: %w", s.ID, err)
	}
	return nil
}

// Start writes the files and starts redis-server, waiting until it runs and its socket exists. A server
// already running is left alone.
func (s *Server) Start(ctx context.Context, ex daemon.ExecFunc) error {
	if _, running, err := s.Status(); err != nil || running {
		return err
	}
	prog, err := s.program()
	if err != nil {
		return err
	}
	if err := s.WriteFiles(); err != nil {
		return err
	}
	unlock, err := daemon.LockDir(ctx, s.Dir)
	if err != nil {
		return fmt.Errorf("start kv server %s: %w", s.ID, err)
	}
	defer unlock()
	if _, running, _ := s.Status(); running { // started meanwhile
		return nil
	}
	if err := s.seed(ctx); err != nil {
		return fmt.Errorf("start kv server %s: %w", s.ID, err)
	}
	os.Remove(s.PidPath())    // stale: a recycled pid must not be taken for it
	os.Remove(s.SocketPath()) // Redis refuses to bind over a leftover socket file
	// The configuration comes on stdin ("-"), not as redis.conf's path: Redis then names no file in INFO
	// server's config_file, which tenants may read (redis.conf stays on disk for the operator).
	cmd := s.User.Command(prog, "-")
	cmd.Stdin = bytes.NewReader(s.Conf())
	cmd.Dir = s.Dir
	if err := daemon.OrDefault(ex)(ctx, cmd); err != nil {
		return fmt.Errorf("start kv server %s: %w", s.ID, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = daemon.WaitFor(wctx, 10*time.Millisecond, func() (bool, error) {
		_, running, err := s.Status()
		_, serr := os.Stat(s.SocketPath())
		return running && serr == nil, err
	})
	if err != nil {
		return fmt.Errorf("start kv server %s: %w: %s", s.ID, err, daemon.Tail(filepath.Join(s.Dir, "redis.log"), 2000))
	}
	return nil
}

// seed writes dump.rdb from Seed when Dir has none: to a temporary file owned by the user, synced and
// renamed into place only once complete.
func (s *Server) seed(ctx context.Context) (err error) {
	if s.Seed == nil {
		return nil
	}
	if _, err := os.Lstat(s.RDBPath()); !errors.Is(err, os.ErrNotExist) {
		return err
	}
	tmp := s.RDBPath() + ".seed"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	keep := false
	defer func() {
		f.Close()
		if !keep {
			os.Remove(tmp)
		}
	}()
	if err := s.User.ChownFile(f); err != nil {
		return err
	}
	ok, err := s.Seed(ctx, f)
	if err != nil || !ok {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, s.RDBPath()); err != nil {
		return err
	}
	keep = true
	return nil
}

// Stop ends redis-server and waits until it is gone: smart and fast stops send SIGTERM (Redis writes its
// RDB snapshot, then exits), immediate sends SIGKILL; when ctx ends first it is killed. ex is unused.
func (s *Server) Stop(ctx context.Context, _ daemon.ExecFunc, mode daemon.StopMode) error {
	if _, err := os.Stat(s.Dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	unlock, err := daemon.LockDir(ctx, s.Dir)
	if err != nil {
		return fmt.Errorf("stop kv server %s: %w", s.ID, err)
	}
	defer unlock()
	return s.stop(ctx, mode)
}

func (s *Server) stop(ctx context.Context, mode daemon.StopMode) error {
	pid, running, err := s.Status()
	if err != nil || !running {
		return err
	}
	sig := syscall.SIGTERM
	if mode == daemon.StopImmediate {
		sig = syscall.SIGKILL
	}
	if err := daemon.SignalAndWait(ctx, pid, sig); err != nil {
		return fmt.Errorf("stop kv server %s: %w", s.ID, err)
	}
	return nil
}

// Remove stops redis-server at once and deletes Dir with its data.
func (s *Server) Remove(ctx context.Context) error {
	if err := s.check(); err != nil {
		return err
	}
	if _, err := os.Stat(s.Dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	unlock, err := daemon.LockDir(ctx, s.Dir)
	if err != nil {
		return fmt.Errorf("remove kv server %s: %w", s.ID, err)
	}
	defer unlock()
	if err := s.stop(ctx, daemon.StopImmediate); err != nil {
		return fmt.Errorf("remove kv server %s: %w", s.ID, err)
	}
	if err := os.RemoveAll(s.Dir); err != nil {
		return fmt.Errorf("remove kv server %s: %w", s.ID, err)
	}
	return nil
}

// maxAdminBulk bounds a bulk reply Admin reads (INFO's sections are a few KiB).
const maxAdminBulk = 1 << 20

// Admin runs commands on the server as the appliance's user over its socket (password: the secret
// AdminHash is the hash of) and returns each reply: a status or integer reply's line, or a bulk string
// whole (INFO's lines); a Redis error reply is an error.
func (s *Server) Admin(ctx context.Context, password string, cmds ...[]string) ([]string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", s.SocketPath())
	if err != nil {
		return nil, fmt.Errorf("kv server %s: %w", s.ID, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	} else {
		conn.SetDeadline(time.Now().Add(10 * time.Second))
	}
	all := append([][]string{{"AUTH", AdminUser, password}}, cmds...)
	var req strings.Builder
	for _, c := range all { // RESP arrays of bulk strings: arguments are never parsed
		fmt.Fprintf(&req, "*%d\r\n", len(c))
		for _, a := range c {
			fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if _, err := io.WriteString(conn, req.String()); err != nil {
		return nil, fmt.Errorf("kv server %s: %w", s.ID, err)
	}
	r := bufio.NewReader(conn)
	var out []string
	for i, c := range all {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("kv server %s: %s: %w", s.ID, c[0], err)
		}
		line = strings.TrimRight(line, "\r\n")
		if strings.HasPrefix(line, "-") {
			return nil, fmt.Errorf("kv server %s: %s: %s", s.ID, c[0], line[1:])
		}
		if strings.HasPrefix(line, "$") && line != "$-1" { // a bulk reply: its n bytes and CRLF follow
			n, err := strconv.Atoi(line[1:])
			if err != nil || n < 0 || n > maxAdminBulk {
				return nil, fmt.Errorf("kv server %s: %s: a bulk reply of %q bytes", s.ID, c[0], line[1:])
			}
			buf := make([]byte, n+2)
			if _, err := io.ReadFull(r, buf); err != nil {
				return nil, fmt.Errorf("kv server %s: %s: %w", s.ID, c[0], err)
			}
			line = string(buf[:n])
		}
		if i > 0 {
			out = append(out, line)
		}
	}
	return out, nil
}

// RotateToken makes tokenHash the tenant's only password at once: the running server's tenant user gets
// it (ACL SETUSER resetpass), users.acl is saved, and every connection logged in with the old token is
// closed. (ACL LOAD would close every connection, the appliance's own included.) The caller keeps
// tokenHash in the store's record: every Start writes users.acl from the Config.
func (s *Server) RotateToken(ctx context.Context, adminPassword, tokenHash string) error {
	if len(tokenHash) != 64 {
		return fmt.Errorf("kv server %s: a token hash is 64 hex digits", s.ID)
	}
	_, err := s.Admin(ctx, adminPassword,
		[]string{"ACL", "SETUSER", TenantUser, "resetpass", "#" + tokenHash},
		[]string{"ACL", "SAVE"},
		[]string{"CLIENT", "KILL", "USER", TenantUser})
	if err != nil {
		return err
	}
	s.TokenHash = tokenHash
	return nil
}

// SaveFailed tells whether the server's last background save (its RDB snapshot) failed, as it does when
// its directory's disk is full or unwritable: redis-server then refuses every write with MISCONF until a
// save succeeds (stop-writes-on-bgsave-error, on by default). It reads INFO persistence's
// rdb_last_bgsave_status.
func (s *Server) SaveFailed(ctx context.Context, password string) (bool, error) {
	out, err := s.Admin(ctx, password, []string{"INFO", "persistence"})
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(out[0], "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "rdb_last_bgsave_status:"); ok {
			return v != "ok", nil
		}
	}
	return false, fmt.Errorf("kv server %s: INFO persistence has no rdb_last_bgsave_status", s.ID)
}

// SetMaxMemory changes the running server's maxmemory (a plan change); the caller keeps mb in the store's
// record, which every Start writes into redis.conf.
func (s *Server) SetMaxMemory(ctx context.Context, adminPassword string, mb int) error {
	if mb <= 0 {
		return fmt.Errorf("kv server %s: maxmemory must be positive", s.ID)
	}
	if _, err := s.Admin(ctx, adminPassword, []string{"CONFIG", "SET", "maxmemory", fmt.Sprintf("%dmb", mb)}); err != nil {
		return err
	}
	s.MaxMemoryMB = mb
	return nil
}

// KillClients closes every connection of the tenant (an organization's suspension); new ones are refused
// by the fronts, which resolve no token of a suspended organization.
func (s *Server) KillClients(ctx context.Context, adminPassword string) error {
	_, err := s.Admin(ctx, adminPassword, []string{"CLIENT", "KILL", "USER", TenantUser})
	return err
}
