package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/daemon"
)

// Pooler is one PgBouncer in transaction mode in front of an instance, run daemonized (pgbouncer -d) as the
// OS user. Clients must use TLS and SCRAM-SHA-256; PgBouncer checks them against the SCRAM verifiers of
// userlist.txt (copied from pg_authid, see ScramVerifiers) and logs in to the instance with the client's
// own SCRAM proof (pass-through: the verifiers must be identical to the instance's), over TLS with the CA
// verified. Its files live in Dir (0700, owned by User; parents searchable, as for Instance):
//
//	pgbouncer.ini  (rewritten from the fields by every Start)  userlist.txt (0600)  pgbouncer.pid  pgbouncer.log
//	lifecycle.lock (serializes Start, Stop and Remove)
//
// PgBouncer 1.18 does not support protocol-level prepared statements in transaction mode: clients must use
// the simple protocol or unnamed statements (pgx: default_query_exec_mode=simple_protocol or exec; JDBC:
// prepareThreshold=0). The admin console is unreachable: no admin_users or stats_users and no unix socket.
type Pooler struct {
	ID         string
	Dir        string // absolute
	ListenHost string // listen_addr; "" means 127.0.0.1
	Port       int
	TargetHost string // the instance's address; "" means 127.0.0.1
	TargetPort int
	// DBName is the one database served ("" serves any database of the instance).
	DBName string
	// PoolSize is default_pool_size: server connections per (user, database); 0 means 10. Keep it, and
	// MaxServerConnections, below the instance's max_connections (see PoolSizeFor).
	PoolSize int
	// MaxServerConnections is max_db_connections (all users of a database together); 0 means PoolSize.
	MaxServerConnections int
	// MaxClientConnections is max_client_conn; 0 means 1000.
	MaxClientConnections int
	// CertFile, KeyFile and CAFile: the instance's (Instance.CertFile...). The CA also verifies the
	// instance's certificate on the server side.
	CertFile, KeyFile, CAFile string
	Program                   string // the pgbouncer program; "" means FindPgBouncer("")
	User                      *daemon.OSUser
}

var _ daemon.Process = (*Pooler)(nil)

// PoolSizeFor is a default pool size for an instance with maxConnections: three quarters of what the
// superuser reserve (3) leaves, so direct connections keep the rest.
func PoolSizeFor(maxConnections int) int {
	return max(1, (maxConnections-3)*3/4)
}

func (p *Pooler) iniPath() string      { return filepath.Join(p.Dir, "pgbouncer.ini") }
func (p *Pooler) userlistPath() string { return filepath.Join(p.Dir, "userlist.txt") }
func (p *Pooler) pidPath() string      { return filepath.Join(p.Dir, "pgbouncer.pid") }

// LogFile is PgBouncer's log.
func (p *Pooler) LogFile() string { return filepath.Join(p.Dir, "pgbouncer.log") }

var dbName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (p *Pooler) check() error {
	switch {
	case checkDir(p.Dir) != nil:
		return fmt.Errorf("pooler %s: %w", p.ID, checkDir(p.Dir))
	case p.Port <= 0 || p.Port > 65535 || p.TargetPort <= 0 || p.TargetPort > 65535:
		return fmt.Errorf("pooler %s: invalid ports %d -> %d", p.ID, p.Port, p.TargetPort)
	case p.ListenHost != "" && !validHost.MatchString(p.ListenHost), p.TargetHost != "" && !validHost.MatchString(p.TargetHost):
		return fmt.Errorf("pooler %s: invalid host", p.ID)
	case p.DBName != "" && !dbName.MatchString(p.DBName):
		return fmt.Errorf("pooler %s: database name %q is not a plain identifier", p.ID, p.DBName)
	case p.CertFile == "" || p.KeyFile == "" || p.CAFile == "":
		return fmt.Errorf("pooler %s: certificate, key and CA files are required", p.ID)
	case p.User == nil:
		return fmt.Errorf("pooler %s: no OS user", p.ID)
	}
	for _, f := range []string{p.CertFile, p.KeyFile, p.CAFile} {
		if strings.ContainsAny(f, "\n\r;") {
			return fmt.Errorf("pooler %s: invalid file name %q", p.ID, f)
		}
	}
	return nil
}

func orHost(h string) string {
	if h == "" {
		return "127.0.0.1"
	}
	return h
}

// ini renders pgbouncer.ini.
func (p *Pooler) ini() []byte {
	pool := p.PoolSize
	if pool <= 0 {
		pool = 10
	}
	maxServer := p.MaxServerConnections
	if maxServer <= 0 {
		maxServer = pool
	}
	maxClient := p.MaxClientConnections
	if maxClient <= 0 {
		maxClient = 1000
	}
	db, target := "*", ""
	if p.DBName != "" {
		db, target = p.DBName, " dbname="+p.DBName
	}
	var b strings.Builder
	b.WriteString("; Written by the appliance from the pooler's fields on every start. Do not edit.\n")
	b.WriteString("[databases]\n")
	fmt.Fprintf(&b, "%s = host=%s port=%d%s\n\n", db, orHost(p.TargetHost), p.TargetPort, target)
	b.WriteString("[pgbouncer]\n")
	fmt.Fprintf(&b, "listen_addr = %s\n", orHost(p.ListenHost))
	fmt.Fprintf(&b, "listen_port = %d\n", p.Port)
	b.WriteString("unix_socket_dir =\n")
	fmt.Fprintf(&b, "pidfile = %s\n", p.pidPath())
	fmt.Fprintf(&b, "logfile = %s\n", p.LogFile())
	b.WriteString("auth_type = scram-sha-256\n")
	fmt.Fprintf(&b, "auth_file = %s\n", p.userlistPath())
	b.WriteString("admin_users =\nstats_users =\n")
	b.WriteString("log_connections = 0\nlog_disconnections = 0\n") // the log is not rotated: errors and stats only
	b.WriteString("pool_mode = transaction\n")
	fmt.Fprintf(&b, "max_client_conn = %d\n", maxClient)
	fmt.Fprintf(&b, "default_pool_size = %d\n", pool)
	fmt.Fprintf(&b, "max_db_connections = %d\n", maxServer)
	b.WriteString("ignore_startup_parameters = extra_float_digits\n")
	// A reload closes the server connections (TLS settings apply at once), and PgBouncer 1.18 counts one
	// closed while logging in as a failed login, after which it waits server_login_retry (default 15 s)
	// before connecting again: the instance is local, retry soon.
	b.WriteString("server_login_retry = 1\n")
	// Server connections idle for a minute close (PgBouncer's default is 10 minutes): the server's sessions
	// are what scale to zero counts as a project's clients, and an idle pooled project should not look busy
	// for 10 minutes after its last transaction.
	b.WriteString("server_idle_timeout = 60\n")
	b.WriteString("client_tls_sslmode = require\n")
	fmt.Fprintf(&b, "client_tls_cert_file = %s\n", p.CertFile)
	fmt.Fprintf(&b, "client_tls_key_file = %s\n", p.KeyFile)
	fmt.Fprintf(&b, "client_tls_ca_file = %s\n", p.CAFile)
	b.WriteString("server_tls_sslmode = verify-ca\n")
	fmt.Fprintf(&b, "server_tls_ca_file = %s\n", p.CAFile)
	return []byte(b.String())
}

// WriteConfig (re)writes pgbouncer.ini from the fields, creating Dir. Start does it; call it yourself
// before a Reload to change pool sizes on a running pooler (addresses need a restart).
func (p *Pooler) WriteConfig() error {
	if err := p.check(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p.Dir), 0o711); err != nil {
		return fmt.Errorf("pooler %s: %w", p.ID, err)
	}
	if err := p.User.CheckReachable(p.Dir); err != nil {
		return fmt.Errorf("pooler %s: %w", p.ID, err)
	}
	if err := p.User.Mkdir(p.Dir, 0o700); err != nil {
		return fmt.Errorf("pooler %s: %w", p.ID, err)
	}
	if err := p.User.WriteFile(p.iniPath(), p.ini(), 0o600); err != nil {
		return fmt.Errorf("pooler %s: write pgbouncer.ini: %w", p.ID, err)
	}
	return nil
}

// WriteUsers replaces userlist.txt with the roles allowed through the pooler and their SCRAM verifiers
// (role → "SCRAM-SHA-256$..."). A running pooler re-reads it on Reload.
func (p *Pooler) WriteUsers(verifiers map[string]string) error {
	if err := p.check(); err != nil {
		return err
	}
	if err := p.User.Mkdir(p.Dir, 0o700); err != nil {
		return fmt.Errorf("pooler %s: %w", p.ID, err)
	}
	roles := make([]string, 0, len(verifiers))
	for r := range verifiers {
		roles = append(roles, r)
	}
	sort.Strings(roles)
	var b strings.Builder
	for _, r := range roles {
		v := verifiers[r]
		if !strings.HasPrefix(v, "SCRAM-SHA-256$") || strings.ContainsAny(v, "\"\n\r ") {
			return fmt.Errorf("pooler %s: role %s: not a SCRAM-SHA-256 verifier", p.ID, r)
		}
		if r == "" || strings.ContainsAny(r, "\n\r\x00") {
			return fmt.Errorf("pooler %s: invalid role name %q", p.ID, r)
		}
		fmt.Fprintf(&b, "\"%s\" \"%s\"\n", strings.ReplaceAll(r, `"`, `""`), v)
	}
	if err := p.User.WriteFile(p.userlistPath(), []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("pooler %s: write userlist.txt: %w", p.ID, err)
	}
	return nil
}

// ScramVerifiers reads the SCRAM verifiers of roles from pg_authid (a superuser connection, e.g.
// Instance.Admin), for Pooler.WriteUsers. A role that is missing or has no SCRAM password is an error.
func ScramVerifiers(ctx context.Context, conn *pgx.Conn, roles ...string) (map[string]string, error) {
	rows, err := conn.Query(ctx, "SELECT rolname, coalesce(rolpassword, '') FROM pg_authid WHERE rolname = ANY($1)", roles)
	if err != nil {
		return nil, fmt.Errorf("read pg_authid: %w", err)
	}
	out := map[string]string{}
	var name, secret string
	_, err = pgx.ForEachRow(rows, []any{&name, &secret}, func() error {
		if !strings.HasPrefix(secret, "SCRAM-SHA-256$") {
			return fmt.Errorf("role %s has no SCRAM-SHA-256 password", name)
		}
		out[name] = secret
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, r := range roles {
		if _, ok := out[r]; !ok {
			return nil, fmt.Errorf("role %s: %w", r, ErrNoRole)
		}
	}
	return out, nil
}

// ErrNoRole means a role does not exist.
var ErrNoRole = errors.New("no such role")

// Status reports PgBouncer's pid and whether it runs: the pid in its pid file must be a live pgbouncer
// process of this pgbouncer.ini.
func (p *Pooler) Status() (pid int, running bool, err error) {
	pid, err = daemon.ReadPidFile(p.pidPath())
	if err != nil || pid == 0 {
		return 0, false, err
	}
	proc := daemon.ReadProcess(pid)
	if proc == nil || proc.Program() != "pgbouncer" {
		return pid, false, nil
	}
	for _, a := range proc.Args[1:] {
		if daemon.SamePath(a, p.iniPath()) {
			return pid, true, nil
		}
	}
	return pid, false, nil
}

var raiseNofile sync.Once

// Start writes pgbouncer.ini and starts PgBouncer daemonized as the OS user (userlist.txt must have been
// written), waiting until it listens (its log says so) or fails. A pooler already running is left alone.
//
// PgBouncer needs a file descriptor per client: the first Start raises the appliance's own soft
// RLIMIT_NOFILE to its hard limit, which (unlike Go's default) its children then inherit.
func (p *Pooler) Start(ctx context.Context, ex daemon.ExecFunc) error {
	if _, running, err := p.Status(); err != nil {
		return fmt.Errorf("start pooler %s: %w", p.ID, err)
	} else if running {
		return nil
	}
	prog, err := FindPgBouncer(p.Program)
	if err != nil {
		return err
	}
	if err := p.WriteConfig(); err != nil {
		return fmt.Errorf("start pooler %s: %w", p.ID, err)
	}
	unlock, err := daemon.LockDir(ctx, p.Dir)
	if err != nil {
		return fmt.Errorf("start pooler %s: %w", p.ID, err)
	}
	defer unlock()
	if _, running, _ := p.Status(); running { // started meanwhile
		return nil
	}
	if !fileExists(p.userlistPath()) {
		return fmt.Errorf("start pooler %s: no userlist.txt: call WriteUsers first", p.ID)
	}
	if pid, _ := daemon.ReadPidFile(p.pidPath()); pid != 0 { // stale: PgBouncer would refuse to start if the pid was recycled
		if err := os.Remove(p.pidPath()); err != nil && fileExists(p.pidPath()) {
			return fmt.Errorf("start pooler %s: remove stale pid file: %w", p.ID, err)
		}
	}
	raiseNofile.Do(func() {
		var lim syscall.Rlimit
		if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
			lim.Cur = lim.Max
			_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
		}
	})
	var logStart int64
	if fi, err := os.Stat(p.LogFile()); err == nil {
		logStart = fi.Size()
	}
	cmd := p.User.Command(prog, "-d", p.iniPath())
	cmd.Dir = p.Dir
	if err := daemon.OrDefault(ex)(ctx, cmd); err != nil {
		return fmt.Errorf("start pooler %s: %w", p.ID, err)
	}
	// -d returns once daemonized, before PgBouncer binds its port: wait for the verdict in its log.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = daemon.WaitFor(wctx, 10*time.Millisecond, func() (bool, error) {
		log := readFrom(p.LogFile(), logStart)
		if i := strings.Index(log, " FATAL "); i >= 0 {
			return false, fmt.Errorf("pgbouncer failed: %s", strings.TrimSpace(log[max(0, i-500):]))
		}
		if strings.Contains(log, "process up:") {
			_, running, _ := p.Status()
			return running, nil
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("start pooler %s: %w", p.ID, err)
	}
	return nil
}

// readFrom reads a file from offset (for logs written by another process).
func readFrom(path string, off int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() <= off {
		return ""
	}
	buf := make([]byte, fi.Size()-off)
	n, _ := f.ReadAt(buf, off)
	return string(buf[:n])
}

// Reload makes PgBouncer re-read pgbouncer.ini and userlist.txt (SIGHUP).
func (p *Pooler) Reload() error {
	pid, running, err := p.Status()
	if err != nil {
		return fmt.Errorf("reload pooler %s: %w", p.ID, err)
	}
	if !running {
		return fmt.Errorf("reload pooler %s: %w", p.ID, ErrNotRunning)
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		return fmt.Errorf("reload pooler %s: %w", p.ID, err)
	}
	return nil
}

// Stop stops PgBouncer and waits until it is gone: daemon.StopSmart waits for clients to finish (SIGINT), the
// other modes close every connection at once (SIGTERM). When ctx ends first it is killed. ex is unused
// (signals only); the parameter makes Pooler a Process.
func (p *Pooler) Stop(ctx context.Context, _ daemon.ExecFunc, mode daemon.StopMode) error {
	if !fileExists(p.Dir) {
		return nil
	}
	unlock, err := daemon.LockDir(ctx, p.Dir)
	if err != nil {
		return fmt.Errorf("stop pooler %s: %w", p.ID, err)
	}
	defer unlock()
	return p.stop(ctx, mode)
}

func (p *Pooler) stop(ctx context.Context, mode daemon.StopMode) error {
	pid, running, err := p.Status()
	if err != nil {
		return fmt.Errorf("stop pooler %s: %w", p.ID, err)
	}
	if !running {
		return nil
	}
	sig := syscall.SIGTERM
	if mode == daemon.StopSmart {
		sig = syscall.SIGINT
	}
	if err := daemon.SignalAndWait(ctx, pid, sig); err != nil {
		return fmt.Errorf("stop pooler %s: %w", p.ID, err)
	}
	return nil
}

// Remove stops PgBouncer (SIGTERM) and deletes Dir.
func (p *Pooler) Remove(ctx context.Context) error {
	if err := checkDir(p.Dir); err != nil {
		return fmt.Errorf("remove pooler %s: %w", p.ID, err)
	}
	if !fileExists(p.Dir) {
		return nil
	}
	unlock, err := daemon.LockDir(ctx, p.Dir)
	if err != nil {
		return fmt.Errorf("remove pooler %s: %w", p.ID, err)
	}
	defer unlock()
	if err := p.stop(ctx, daemon.StopFast); err != nil {
		return fmt.Errorf("remove pooler %s: %w", p.ID, err)
	}
	if err := os.RemoveAll(p.Dir); err != nil {
		return fmt.Errorf("remove pooler %s: %w", p.ID, err)
	}
	return nil
}
