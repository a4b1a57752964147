package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/daemon"
)

// AdminRole is the superuser initdb creates; it logs in over 127.0.0.1 only (see pg_hba.conf).
const AdminRole = "appliance_admin"

// Errors.
var (
	ErrNotRunning  = errors.New("not running")
	ErrInitialized = errors.New("instance directory is already initialized")
)

// Instance is one PostgreSQL cluster run by pg_ctl as an unprivileged OS user. Its files live in Dir:
//
//	<Dir>/                  0700, owned by User
//	      pgdata/           the data directory (postgresql.conf, appliance.conf, settings.conf, pg_hba.conf, log/)
//	      server.crt  server.key (0600)  ca.crt
//	      wal-archive/      the default archive_command's destination
//	      startup.log       the postmaster's output until its logging collector takes over
//	      initialized       written when Init has completed
//	      lifecycle.lock    serializes Init, Start, Stop, Restart and Remove across Instance values and processes
//
// Dir's parents must be searchable by User: when the appliance runs as root they may be root-owned, with
// mode 0711 (0700 is not enough). An Instance holds no process state: a new value with the same Dir finds
// (adopts) a running postmaster, so supervision survives a restart of the appliance.
type Instance struct {
	ID         string   // names the cluster (cluster_name, process titles, errors)
	Dir        string   // absolute
	ListenHost string   // listen_addresses; "" means 127.0.0.1; loopback is always added
	Port       int      // the direct port
	Bin        Binaries // initdb, pg_ctl, pg_config
	User       *daemon.OSUser
	// NoSync runs the server with fsync, synchronous_commit and full_page_writes off: a crash of the
	// machine may lose or corrupt its data. For throwaway appliances only (up --ephemeral, tests).
	NoSync bool
	// TemplateDir, when set, keeps initdb templates (template.go): Init copies one instead of running
	// initdb. It is made (mode 0700) if missing, and refused unless the appliance's user owns it and no
	// one else may write it.
	TemplateDir string
	// SyncFS: the server syncs its data directory before a crash recovery (a copy's first start, from its
	// backup_label) with syncfs(2) of its filesystem rather than an fsync of every file
	// (recovery_init_sync_method = syncfs, PostgreSQL 14 and later). For instances on a filesystem with
	// reflinks, whose copies are synced by SyncTree the same way: the per-file fsyncs force the journal
	// once per file. As durable; the sync also writes other dirty data of the filesystem.
	SyncFS bool
}

var _ daemon.Process = (*Instance)(nil)

// DataDir is <Dir>/pgdata.
func (i *Instance) DataDir() string { return filepath.Join(i.Dir, "pgdata") }

// CertFile, KeyFile and CAFile are the TLS files the instance (and its pooler) serve.
func (i *Instance) CertFile() string { return filepath.Join(i.Dir, "server.crt") }
func (i *Instance) KeyFile() string  { return filepath.Join(i.Dir, "server.key") }
func (i *Instance) CAFile() string   { return filepath.Join(i.Dir, "ca.crt") }

// ArchiveDir is where the default archive_command copies WAL segments.
func (i *Instance) ArchiveDir() string { return filepath.Join(i.Dir, "wal-archive") }

// LogDir holds the JSON logs (log_destination = jsonlog), one postgresql-<date>.json a day.
func (i *Instance) LogDir() string { return filepath.Join(i.DataDir(), "log") }

// StartupLog is pg_ctl's -l file: the postmaster's output before its logging collector starts.
func (i *Instance) StartupLog() string { return filepath.Join(i.Dir, "startup.log") }

func (i *Instance) marker() string { return filepath.Join(i.Dir, "initialized") }

// MarkInitialized writes the marker Init writes last, for a directory assembled another way (a restore
// candidate built from a base backup): Start refuses directories without it.
func (i *Instance) MarkInitialized() error {
	if err := checkDir(i.Dir); err != nil {
		return fmt.Errorf("instance %s: %w", i.ID, err)
	}
	if i.User == nil {
		return fmt.Errorf("instance %s: no OS user", i.ID)
	}
	return i.User.WriteFile(i.marker(), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o600)
}

// Initialized reports whether Init (or MarkInitialized) completed in Dir.
func (i *Instance) Initialized() bool { return fileExists(i.marker()) }

// InitOptions are what initdb and the first configuration need.
type InitOptions struct {
	AdminPassword string // the password of AdminRole
	// CertPEM (the server certificate, chain allowed), KeyPEM and CAPEM (the CA clients verify it with,
	// also used to verify client certificates if any are ever required).
	CertPEM, KeyPEM, CAPEM []byte
	Settings               Settings
	// Fill makes the data directory (it must not exist yet) instead of initdb: a clone copies another
	// instance's (pg_basebackup). The TLS files and the configuration are written after it as after initdb.
	Fill func(ctx context.Context, dataDir string) error
}

var validHost = regexp.MustCompile(`^[A-Za-z0-9.:*_,-]+$`)

// checkDir refuses directories that are not clean absolute paths at least two levels deep (Remove deletes
// them).
func checkDir(dir string) error {
	if dir == "" || !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || strings.Count(dir, "/") < 2 {
		return fmt.Errorf("directory %q must be a clean absolute path at least two levels deep", dir)
	}
	return nil
}

func (i *Instance) check() error {
	switch {
	case checkDir(i.Dir) != nil:
		return fmt.Errorf("instance %s: %w", i.ID, checkDir(i.Dir))
	case i.Port <= 0 || i.Port > 65535:
		return fmt.Errorf("instance %s: invalid port %d", i.ID, i.Port)
	case i.ListenHost != "" && !validHost.MatchString(i.ListenHost):
		return fmt.Errorf("instance %s: invalid listen host %q", i.ID, i.ListenHost)
	case i.User == nil:
		return fmt.Errorf("instance %s: no OS user", i.ID)
	case i.Bin.Dir == "":
		return fmt.Errorf("instance %s: no PostgreSQL binaries", i.ID)
	case strings.ContainsAny(i.ID, "'\\\n\r\x00"):
		return fmt.Errorf("instance %s: invalid id", i.ID)
	}
	return nil
}

// Init creates Dir and the cluster in it (initdb with scram-sha-256 authentication, AdminRole as
// superuser, UTF8, locale C.UTF-8, data checksums) and writes the TLS files and the configuration. It can be
// retried after a failure or crash: a data directory left by an incomplete Init is removed first. When Init
// has completed before, it returns ErrInitialized and changes nothing.
func (i *Instance) Init(ctx context.Context, ex daemon.ExecFunc, opts InitOptions) error {
	if err := i.check(); err != nil {
		return err
	}
	if fileExists(i.marker()) {
		return fmt.Errorf("init instance %s: %w", i.ID, ErrInitialized)
	}
	switch {
	case opts.AdminPassword == "" || strings.ContainsAny(opts.AdminPassword, "\n\r\x00"):
		return fmt.Errorf("init instance %s: the admin password must be one non-empty line", i.ID)
	case len(opts.CertPEM) == 0 || len(opts.KeyPEM) == 0 || len(opts.CAPEM) == 0:
		return fmt.Errorf("init instance %s: certificate, key and CA are required", i.ID)
	}
	settings, err := opts.Settings.normalize(i)
	if err != nil {
		return fmt.Errorf("init instance %s: %w", i.ID, err)
	}
	if _, err := i.Bin.Path("initdb"); err != nil { // before anything is made
		return err
	}
	if err := os.MkdirAll(filepath.Dir(i.Dir), 0o711); err != nil {
		return fmt.Errorf("init instance %s: %w", i.ID, err)
	}
	if err := i.User.CheckReachable(i.Dir); err != nil {
		return fmt.Errorf("init instance %s: %w", i.ID, err)
	}
	if err := i.User.Mkdir(i.Dir, 0o700); err != nil {
		return fmt.Errorf("init instance %s: %w", i.ID, err)
	}
	unlock, err := daemon.LockDir(ctx, i.Dir)
	if err != nil {
		return fmt.Errorf("init instance %s: %w", i.ID, err)
	}
	defer unlock()
	if fileExists(i.marker()) { // completed meanwhile
		return fmt.Errorf("init instance %s: %w", i.ID, ErrInitialized)
	}
	if fileExists(i.DataDir()) { // an earlier Init did not complete
		if err := killPostgresIn(ctx, i.DataDir(), i.User.UID); err != nil {
			return fmt.Errorf("init instance %s: stop leftover processes: %w", i.ID, err)
		}
		if err := os.RemoveAll(i.DataDir()); err != nil {
			return fmt.Errorf("init instance %s: remove incomplete data directory: %w", i.ID, err)
		}
	}

	if opts.Fill != nil {
		if err := opts.Fill(ctx, i.DataDir()); err != nil {
			return fmt.Errorf("init instance %s: %w", i.ID, err)
		}
	} else {
		// initdb gives AdminRole what the file holds; a verifier is kept as it is (PostgreSQL stores a
		// password that is already one unchanged), with AdminSCRAMIterations.
		verifier, err := AdminVerifier(opts.AdminPassword)
		if err != nil {
			return fmt.Errorf("init instance %s: %w", i.ID, err)
		}
		if i.TemplateDir != "" {
			err = i.initFromTemplate(ctx, ex, verifier)
		} else {
			err = i.runInitdb(ctx, ex, i.Dir, i.DataDir(), verifier, i.NoSync)
		}
		if err != nil {
			return fmt.Errorf("init instance %s: %w", i.ID, err)
		}
	}

	if err := i.WriteTLS(opts.CertPEM, opts.KeyPEM, opts.CAPEM); err != nil {
		return fmt.Errorf("init instance %s: %w", i.ID, err)
	}
	if err := i.User.Mkdir(i.ArchiveDir(), 0o700); err != nil {
		return fmt.Errorf("init instance %s: %w", i.ID, err)
	}
	if err := i.User.WriteFile(filepath.Join(i.DataDir(), "pg_hba.conf"), []byte(hbaFile), 0o600); err != nil {
		return fmt.Errorf("init instance %s: %w", i.ID, err)
	}
	if err := i.writeApplianceConf(); err != nil {
		return fmt.Errorf("init instance %s: %w", i.ID, err)
	}
	if err := i.writeSettings(settings); err != nil {
		return fmt.Errorf("init instance %s: %w", i.ID, err)
	}
	if err := i.appendIncludes(); err != nil {
		return fmt.Errorf("init instance %s: %w", i.ID, err)
	}
	if err := i.MarkInitialized(); err != nil {
		return fmt.Errorf("init instance %s: %w", i.ID, err)
	}
	return nil
}

// WriteTLS replaces the certificate, key (mode 0600: PostgreSQL refuses a key others can read) and CA
// files. A running instance picks them up on Reload.
func (i *Instance) WriteTLS(certPEM, keyPEM, caPEM []byte) error {
	if err := i.User.WriteFile(i.KeyFile(), keyPEM, 0o600); err != nil {
		return err
	}
	if err := i.User.WriteFile(i.CertFile(), certPEM, 0o644); err != nil {
		return err
	}
	return i.User.WriteFile(i.CAFile(), caPEM, 0o644)
}

func (i *Instance) writeApplianceConf() error {
	return i.User.WriteFile(filepath.Join(i.DataDir(), applianceConf), applianceFile(i), 0o600)
}

func (i *Instance) writeSettings(s Settings) error {
	b, err := settingsFile(s)
	if err != nil {
		return err
	}
	return i.User.WriteFile(filepath.Join(i.DataDir(), settingsConf), b, 0o600)
}

// ReadSettings returns the settings last written (defaults filled in).
func (i *Instance) ReadSettings() (Settings, error) {
	s, err := readSettingsFile(filepath.Join(i.DataDir(), settingsConf))
	if err != nil {
		return s, fmt.Errorf("instance %s: read settings: %w", i.ID, err)
	}
	return s, nil
}

// WriteSettings replaces the settings and returns what makes them take effect on a running instance
// (Apply does it): ActionRestart for max_connections or shared_preload_libraries, ActionReload for the
// timeouts and archive_command.
func (i *Instance) WriteSettings(s Settings) (Action, error) {
	if err := i.check(); err != nil {
		return ActionNone, err
	}
	s, err := s.normalize(i)
	if err != nil {
		return ActionNone, fmt.Errorf("instance %s: %w", i.ID, err)
	}
	action := ActionRestart // unknown previous settings: be safe
	if old, err := i.ReadSettings(); err == nil {
		action = s.Change(old)
	}
	if action == ActionNone {
		return ActionNone, nil
	}
	if err := i.writeSettings(s); err != nil {
		return ActionNone, fmt.Errorf("instance %s: write settings: %w", i.ID, err)
	}
	return action, nil
}

// Apply makes written settings take effect: nothing, a reload or a restart. A stopped instance needs
// nothing: it reads them when it starts.
func (i *Instance) Apply(ctx context.Context, ex daemon.ExecFunc, a Action) error {
	if _, running, _ := i.Status(); !running {
		return nil
	}
	switch a {
	case ActionReload:
		return i.Reload(ctx, ex)
	case ActionRestart:
		return i.Restart(ctx, ex)
	}
	return nil
}

// PendingRestart lists the parameters changed in the files that the running server will apply only after a
// restart (pg_settings.pending_restart, after a reload): the server's own view, to check Change's.
func PendingRestart(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	rows, err := conn.Query(ctx, "SELECT name FROM pg_settings WHERE pending_restart ORDER BY name")
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read pg_settings: %w", err)
	}
	if names == nil {
		names = []string{}
	}
	return names, nil
}

// Status reports the postmaster's pid and whether it runs: the pid in postmaster.pid must be a live
// postgres process working in this data directory (a recycled pid or a zombie does not count).
func (i *Instance) Status() (pid int, running bool, err error) {
	pid, err = daemon.ReadPidFile(filepath.Join(i.DataDir(), "postmaster.pid"))
	if err != nil || pid == 0 {
		return 0, false, err
	}
	p := daemon.ReadProcess(pid)
	if p == nil || p.Program() != "postgres" {
		return pid, false, nil
	}
	if p.Cwd != "" && daemon.SamePath(p.Cwd, i.DataDir()) || p.HasArgPair("-D", i.DataDir()) {
		return pid, true, nil
	}
	return pid, false, nil
}

// lock serializes the lifecycle operations on Dir (see lockDir).
func (i *Instance) lock(ctx context.Context) (func(), error) {
	if err := i.check(); err != nil {
		return nil, err
	}
	return daemon.LockDir(ctx, i.Dir)
}

// Start starts the postmaster with pg_ctl, as the OS user, and waits until it accepts connections (60 s at
// most). It rewrites appliance.conf from the fields first. The postmaster daemonizes: it is no child of
// the appliance. An instance already running is left as it is (adopted): Restart applies changed fields.
func (i *Instance) Start(ctx context.Context, ex daemon.ExecFunc) error {
	unlock, err := i.lock(ctx)
	if err != nil {
		return fmt.Errorf("start instance %s: %w", i.ID, err)
	}
	defer unlock()
	return i.start(ctx, ex)
}

func (i *Instance) start(ctx context.Context, ex daemon.ExecFunc) error {
	if _, running, err := i.Status(); err != nil {
		return fmt.Errorf("start instance %s: %w", i.ID, err)
	} else if running {
		return nil
	}
	pgctl, err := i.Bin.Path("pg_ctl")
	if err != nil {
		return err
	}
	if !fileExists(i.marker()) {
		return fmt.Errorf("start instance %s: %s is not initialized", i.ID, i.Dir)
	}
	if err := i.writeApplianceConf(); err != nil {
		return fmt.Errorf("start instance %s: %w", i.ID, err)
	}
	if err := i.clearStaleLock(ctx); err != nil {
		return fmt.Errorf("start instance %s: %w", i.ID, err)
	}
	err = i.pgctlStart(ctx, ex, pgctl)
	if err == nil {
		i.keepGoodSettings()
		return nil
	}
	// A settings file the server refuses must not keep the project down: start again with the settings
	// it last started with, and say so.
	good, gerr := os.ReadFile(i.goodSettingsPath())
	cur, _ := os.ReadFile(filepath.Join(i.DataDir(), settingsConf))
	if gerr != nil || bytes.Equal(good, cur) || !configRefused(err) {
		return err
	}
	if werr := i.User.WriteFile(filepath.Join(i.DataDir(), settingsConf), good, 0o600); werr != nil {
		return errors.Join(err, werr)
	}
	if rerr := i.pgctlStart(ctx, ex, pgctl); rerr != nil {
		return errors.Join(err, rerr)
	}
	return fmt.Errorf("%w: %w", ErrSettingsRefused, err)
}

// boundedCommand is the command running program with args as the OS user, under the settings' bound of
// private memory (RLIMIT_DATA) when they have one: through prlimit(1), which lowers its own limit and
// executes program (lowering one's own limit needs no privilege; the postmaster pg_ctl starts, and every
// process it forks, inherit it).
func (i *Instance) boundedCommand(program string, args ...string) (*exec.Cmd, error) {
	s, err := i.ReadSettings()
	if err != nil || s.ProcessDataBytes <= 0 {
		return i.User.Command(program, args...), nil // no settings yet (an instance being assembled) or no bound
	}
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		return nil, fmt.Errorf("instance %s is bounded to %d bytes of memory per process and needs prlimit (util-linux): %w", i.ID, s.ProcessDataBytes, err)
	}
	n := strconv.FormatInt(s.ProcessDataBytes, 10)
	return i.User.Command(prlimit, append([]string{"--data=" + n + ":" + n, "--", program}, args...)...), nil
}

// configRefused reports whether a failed start was the server refusing its configuration.
func configRefused(err error) bool {
	msg := err.Error()
	for _, s := range []string{"configuration file", "invalid value for parameter", "is outside the valid range", "unrecognized configuration parameter"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// ErrSettingsRefused is returned, wrapped with the server's reason, by a start that succeeded only with the
// last settings the server had started with, because it refused the new ones: the instance runs.
var ErrSettingsRefused = errors.New("the server refused the new settings and was started with the last settings it ran with")

func (i *Instance) goodSettingsPath() string { return filepath.Join(i.Dir, "settings.conf.last-good") }

// keepGoodSettings records the settings the server just started or reloaded with.
func (i *Instance) keepGoodSettings() {
	if b, err := os.ReadFile(filepath.Join(i.DataDir(), settingsConf)); err == nil {
		_ = os.WriteFile(i.goodSettingsPath(), b, 0o600)
	}
}

func (i *Instance) pgctlStart(ctx context.Context, ex daemon.ExecFunc, pgctl string) error {
	cmd, err := i.boundedCommand(pgctl, "start", "-w", "-t", "60", "-D", i.DataDir(), "-l", i.StartupLog())
	if err != nil {
		return err
	}
	cmd.Dir = i.Dir
	since := time.Now()
	var logStart int64
	if fi, err := os.Stat(i.StartupLog()); err == nil {
		logStart = fi.Size()
	}
	if err := i.runStart(ctx, ex, cmd); err != nil {
		// Configuration errors come before the server's own log starts: they are in what this start
		// appended to startup.log.
		if fi, serr := os.Stat(i.StartupLog()); serr == nil && fi.Size() > logStart {
			if log := daemon.Tail(i.StartupLog(), min(1000, fi.Size()-logStart)); strings.Contains(log, "FATAL") {
				return fmt.Errorf("start instance %s: %w; startup.log ends with: %s", i.ID, err, log)
			}
		}
		// The server's own log is written by its logger process, which may not have written the reason yet
		// when pg_ctl gives up: wait a little for it.
		for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if msgs := i.LogMessages(since, 4); len(msgs) > 0 {
				return fmt.Errorf("start instance %s: %w; the server logged: %s", i.ID, err, strings.Join(msgs, "; "))
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
		}
		if log := daemon.Tail(i.StartupLog(), 1000); log != "" {
			return fmt.Errorf("start instance %s: %w; startup.log ends with: %s", i.ID, err, log)
		}
		return fmt.Errorf("start instance %s: %w", i.ID, err)
	}
	return nil
}

// startPoll is how often a start looks at postmaster.pid for the postmaster's "ready" (pg_ctl -w looks every
// 100 ms: a wake from scale to zero would wait for it, see bench/README.md "Wake → first SELECT 1").
const startPoll = 5 * time.Millisecond

// runStart runs pg_ctl start -w. Without ex (the appliance's own starts: a wake, an organization's resume)
// it returns as soon as postmaster.pid's status line says the server accepts connections (what pg_ctl
// waits for, at a finer step), leaving pg_ctl to end by itself; pg_ctl failing first is the answer. A
// job's ex, which records the command's whole output on the job, waits for pg_ctl.
func (i *Instance) runStart(ctx context.Context, ex daemon.ExecFunc, cmd *exec.Cmd) error {
	if ex != nil {
		return ex(ctx, cmd)
	}
	done := make(chan error, 1)
	// pg_ctl's own -t bounds it; the postmaster it forked leaves its session, so stopping pg_ctl early
	// would not stop the start anyway.
	go func() { done <- daemon.DefaultExec(context.WithoutCancel(ctx), cmd) }()
	t := time.NewTicker(startPoll)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-t.C:
			if i.pidFileReady() {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("pg_ctl start: %w", context.Cause(ctx))
		}
	}
}

// pidFileReady reports whether postmaster.pid's status line (its 8th) is "ready" or "standby" (pg_ctl's
// test: the server accepts connections) and names a live postmaster of this data directory.
func (i *Instance) pidFileReady() bool {
	b, err := os.ReadFile(filepath.Join(i.DataDir(), "postmaster.pid"))
	if err != nil {
		return false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 8 {
		return false
	}
	if st := strings.TrimSpace(lines[7]); st != "ready" && st != "standby" {
		return false
	}
	_, running, _ := i.Status()
	return running
}

// CheckReloaded reads pg_file_settings after a reload: any line the server could not apply is an error
// (the server keeps running with the old value, so the files and the server disagree). Callers restore
// the previous settings and reload again. On success the settings become the last good ones.
func (i *Instance) CheckReloaded(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, "SELECT coalesce(name, ''), coalesce(error, '') FROM pg_file_settings WHERE error IS NOT NULL")
	if err != nil {
		return fmt.Errorf("read pg_file_settings: %w", err)
	}
	type bad struct{ Name, Error string }
	errs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[bad])
	if err != nil {
		return fmt.Errorf("read pg_file_settings: %w", err)
	}
	if len(errs) > 0 {
		var msgs []string
		for _, e := range errs {
			msgs = append(msgs, strings.TrimSpace(e.Name+": "+e.Error))
		}
		return fmt.Errorf("the server refused the settings: %s", strings.Join(msgs, "; "))
	}
	i.keepGoodSettings()
	return nil
}

// LogMessages returns the last n messages the server logged since a time (from the newest JSON log file),
// as "SEVERITY: message".
func (i *Instance) LogMessages(since time.Time, n int) []string {
	files, _ := filepath.Glob(filepath.Join(i.LogDir(), "*.json"))
	var newest string
	var newestMod time.Time
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil && fi.ModTime().After(newestMod) {
			newest, newestMod = f, fi.ModTime()
		}
	}
	if newest == "" {
		return nil
	}
	var out []string
	for _, line := range strings.Split(daemon.Tail(newest, 64<<10), "\n") {
		var e struct {
			Timestamp string `json:"timestamp"`
			Severity  string `json:"error_severity"`
			Message   string `json:"message"`
		}
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		// The log's times are in milliseconds: a message of since's millisecond counts. (A slack of a second
		// took in the messages of a stop just before a start, and a failed start reported those instead of
		// its own reason.)
		ts, err := time.Parse("2006-01-02 15:04:05.000 MST", e.Timestamp)
		if err == nil && ts.Before(since.Truncate(time.Millisecond)) {
			continue
		}
		if e.Message != "" {
			out = append(out, e.Severity+": "+e.Message)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

// clearStaleLock removes a postmaster.pid left by a postmaster that is gone (killed, or its machine
// restarted). PostgreSQL would refuse to start if the pid in it was recycled by another process of the
// user; and its shared memory interlock relies on the file, so the processes the old postmaster left
// (backends exit soon after it dies) are killed first.
func (i *Instance) clearStaleLock(ctx context.Context) error {
	lock := filepath.Join(i.DataDir(), "postmaster.pid")
	if !fileExists(lock) {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := killPostgresIn(wctx, i.DataDir(), i.User.UID); err != nil {
		return fmt.Errorf("stop processes left by a dead postmaster: %w", err)
	}
	if err := os.Remove(lock); err != nil && fileExists(lock) {
		return fmt.Errorf("remove stale postmaster.pid: %w", err)
	}
	return nil
}

// Stop stops the postmaster with pg_ctl in mode ("" is fast) and waits for it (60 s at most). Stopping a
// stopped instance does nothing.
func (i *Instance) Stop(ctx context.Context, ex daemon.ExecFunc, mode daemon.StopMode) error {
	unlock, err := i.lock(ctx)
	if err != nil {
		return fmt.Errorf("stop instance %s: %w", i.ID, err)
	}
	defer unlock()
	return i.stop(ctx, ex, mode)
}

func (i *Instance) stop(ctx context.Context, ex daemon.ExecFunc, mode daemon.StopMode) error {
	switch mode {
	case daemon.StopSmart, daemon.StopFast, daemon.StopImmediate:
	case "":
		mode = daemon.StopFast
	default:
		return fmt.Errorf("stop instance %s: invalid mode %q", i.ID, mode)
	}
	if _, running, err := i.Status(); err != nil {
		return fmt.Errorf("stop instance %s: %w", i.ID, err)
	} else if !running {
		return nil
	}
	pgctl, err := i.Bin.Path("pg_ctl")
	if err != nil {
		return err
	}
	cmd := i.User.Command(pgctl, "stop", "-w", "-t", "60", "-D", i.DataDir(), "-m", string(mode))
	cmd.Dir = i.Dir
	if err := daemon.OrDefault(ex)(ctx, cmd); err != nil {
		if _, running, _ := i.Status(); !running {
			return nil // it ended on its own meanwhile
		}
		return fmt.Errorf("stop instance %s: %w", i.ID, err)
	}
	return nil
}

// LockedOps start and stop an instance whose lifecycle lock the caller holds (see Locked).
type LockedOps struct{ i *Instance }

// Start is Instance.Start without taking the lock.
func (o LockedOps) Start(ctx context.Context, ex daemon.ExecFunc) error { return o.i.start(ctx, ex) }

// Stop is Instance.Stop without taking the lock.
func (o LockedOps) Stop(ctx context.Context, ex daemon.ExecFunc, mode daemon.StopMode) error {
	return o.i.stop(ctx, ex, mode)
}

// Of is ops on another value of the same instance (i.Dir must be the locked one's) under the lock already
// held: its binaries may differ (a restore to another major puts the original data back with its own).
func (o LockedOps) Of(i *Instance) LockedOps { return LockedOps{i} }

// Locked runs fn while holding the instance's lifecycle lock: no Init, Start, Stop, Restart or Remove of
// the same Dir (by any Instance value or process, a daemon.Supervisor's restarts included) runs until fn returns.
// It is for changes that must not be interleaved with a start, such as replacing the data directory
// between a stop and a start; fn starts and stops the instance through ops.
func (i *Instance) Locked(ctx context.Context, fn func(ops LockedOps) error) error {
	unlock, err := i.lock(ctx)
	if err != nil {
		return fmt.Errorf("lock instance %s: %w", i.ID, err)
	}
	defer unlock()
	return fn(LockedOps{i})
}

// Reload makes the postmaster re-read its configuration files, pg_hba.conf and TLS files (pg_ctl reload).
func (i *Instance) Reload(ctx context.Context, ex daemon.ExecFunc) error {
	if err := i.check(); err != nil {
		return err
	}
	pid, running, err := i.Status()
	if err != nil {
		return fmt.Errorf("reload instance %s: %w", i.ID, err)
	} else if !running {
		return fmt.Errorf("reload instance %s: %w", i.ID, ErrNotRunning)
	}
	// What pg_ctl reload does (SIGHUP to the postmaster), without starting a process for it; pg_ctl when
	// this process may not signal the instances' user.
	if err := syscall.Kill(pid, syscall.SIGHUP); err == nil {
		return nil
	}
	pgctl, err := i.Bin.Path("pg_ctl")
	if err != nil {
		return err
	}
	cmd := i.User.Command(pgctl, "reload", "-D", i.DataDir())
	cmd.Dir = i.Dir
	if err := daemon.OrDefault(ex)(ctx, cmd); err != nil {
		return fmt.Errorf("reload instance %s: %w", i.ID, err)
	}
	return nil
}

// Restart stops the instance (fast) and starts it, as one operation.
func (i *Instance) Restart(ctx context.Context, ex daemon.ExecFunc) error {
	unlock, err := i.lock(ctx)
	if err != nil {
		return fmt.Errorf("restart instance %s: %w", i.ID, err)
	}
	defer unlock()
	if err := i.stop(ctx, ex, daemon.StopFast); err != nil {
		return err
	}
	return i.start(ctx, ex)
}

// Remove stops the instance at once (SIGQUIT: immediate shutdown), kills whatever PostgreSQL process of
// the user still works in Dir, and deletes Dir. Removing a removed instance does nothing. Unwatch it from
// the daemon.Supervisor and stop its pooler first. Only Dir and User are needed.
func (i *Instance) Remove(ctx context.Context) error {
	if err := checkDir(i.Dir); err != nil {
		return fmt.Errorf("remove instance %s: %w", i.ID, err)
	}
	if i.User == nil {
		return fmt.Errorf("remove instance %s: no OS user", i.ID)
	}
	if !fileExists(i.Dir) {
		return nil
	}
	unlock, err := daemon.LockDir(ctx, i.Dir)
	if err != nil {
		return fmt.Errorf("remove instance %s: %w", i.ID, err)
	}
	defer unlock()
	if pid, running, _ := i.Status(); running {
		_ = syscall.Kill(pid, syscall.SIGQUIT)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = daemon.WaitFor(wctx, 20*time.Millisecond, func() (bool, error) { return daemon.ReadProcess(pid) == nil, nil })
		cancel()
	}
	if err := killPostgresIn(ctx, i.Dir, i.User.UID); err != nil {
		return fmt.Errorf("remove instance %s: stop its processes: %w", i.ID, err)
	}
	if err := os.RemoveAll(i.Dir); err != nil {
		return fmt.Errorf("remove instance %s: %w", i.ID, err)
	}
	return nil
}

// AdminSearchPath is the search_path of every AdminRole session: Connect sends it as a startup parameter.
//
// A project's role owns its database and the public schema in it, and may create schemas there (one named
// like AdminRole is the "$user" of PostgreSQL's default search_path) and set the database's defaults
// (ALTER DATABASE … SET search_path). Name resolution prefers a function or operator whose argument types
// match exactly over a built-in that needs a coercion or is polymorphic, wherever in the search_path it is,
// and a relation or an equal match earlier in the path over a later one: a superuser session resolving names
// through such schemas runs the tenant's code as a superuser (CVE-2018-1058). So admin sessions see the
// catalog and their own temporary schema only (pg_temp last: no temporary relation hides a catalog one).
// Statements that name objects elsewhere qualify them (public.…, an extension's schema read from
// pg_extension); statements that create objects name their schema (CREATE EXTENSION … SCHEMA public): an
// unqualified one would go to pg_catalog (functions) or fail (relations). A startup parameter outranks the
// database's and the role's defaults, and RESET and DISCARD ALL return to it.
const AdminSearchPath = "pg_catalog, pg_temp"

// Admin connects to the postgres database as AdminRole over 127.0.0.1 (no TLS on loopback), with
// AdminSearchPath.
func (i *Instance) Admin(ctx context.Context, password string) (*pgx.Conn, error) {
	return i.Connect(ctx, password, "postgres")
}

// Connect connects to database as AdminRole over 127.0.0.1, with search_path = AdminSearchPath and role =
// none (AdminRole itself) from the start. A connection made with its configuration (Conn.Config, another database set) has it too.
func (i *Instance) Connect(ctx context.Context, password, database string) (*pgx.Conn, error) {
	return i.connect(ctx, password, database, true, nil)
}

// ConnectWith is Connect with more startup parameters: settings the session has from its start, without a
// statement (and a round trip) each. Those a superuser may set in a session (PGC_SUSET) are allowed.
func (i *Instance) ConnectWith(ctx context.Context, password, database string, params map[string]string) (*pgx.Conn, error) {
	return i.connect(ctx, password, database, true, params)
}

// ConnectForExtensions is Connect for CREATE EXTENSION and ALTER EXTENSION … UPDATE: the session's
// search_path is AdminSearchPath too, but set after the start (SET), so that its reset value is the
// database's default, what the project's own sessions get. Extension scripts run with the search_path
// PostgreSQL gives them; some read the reset value: postgis_topology's appends its schema to it and writes
// that as the database's default search_path (ALTER DATABASE … SET), then sets it for its last statements
// (which name the types of its dependencies unqualified). With AdminSearchPath as the reset value the
// project's sessions would lose public, and the script would fail. A script's SET outlives it: set
// AdminSearchPath again after each such statement, and run nothing else before.
func (i *Instance) ConnectForExtensions(ctx context.Context, password, database string) (*pgx.Conn, error) {
	conn, err := i.connect(ctx, password, database, false, nil)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "SET search_path = "+AdminSearchPath); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("instance %s: pin search_path: %w", i.ID, err)
	}
	return conn, nil
}

// adminConfig is what every admin connection's configuration starts from, parsed once (parsing looks at the
// environment and the files libpq would read: a tenth of a connection's cost).
var adminConfig = sync.OnceValues(func() (*pgx.ConnConfig, error) {
	return pgx.ParseConfig("sslmode=disable connect_timeout=10")
})

func (i *Instance) connect(ctx context.Context, password, database string, pinned bool, params map[string]string) (*pgx.Conn, error) {
	base, err := adminConfig()
	if err != nil {
		return nil, err
	}
	cfg := base.Copy()
	cfg.Host, cfg.Port, cfg.User, cfg.Password, cfg.Database = "127.0.0.1", uint16(i.Port), AdminRole, password, database
	for k, v := range params {
		cfg.RuntimeParams[k] = v
	}
	// The project's role may set its database's default role (ALTER DATABASE … SET role), which PostgreSQL
	// applies to a superuser's session too: the session's own role, from the start and whatever the
	// database says.
	cfg.RuntimeParams["role"] = "none"
	if pinned {
		cfg.RuntimeParams["search_path"] = AdminSearchPath
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to instance %s as %s on 127.0.0.1:%s: %w", i.ID, AdminRole, strconv.Itoa(i.Port), err)
	}
	return conn, nil
}
