package postgres

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The configuration of an instance is PostgreSQL's own postgresql.conf (from initdb, untouched except for
// two include lines appended at its end) plus two files the appliance owns entirely, in the data directory
// (so that a base backup carries them):
//
//	appliance.conf  addresses, TLS, authentication, logging, WAL archiving: derived from the Instance's
//	                fields, rewritten by every Start (so Port and ListenHost are authoritative)
//	settings.conf   the tunable Settings, rewritten by WriteSettings
//
// postgresql.auto.conf is left to ALTER SYSTEM (PostgreSQL rewrites that file itself and it is read last).

const (
	applianceConf = "appliance.conf"
	settingsConf  = "settings.conf"
	includeMarker = "# appliance: configuration managed by the appliance"
	settingsTag   = "# settings: "
)

// Settings are the tunable parameters of an instance. WriteSettings writes exactly them, so callers keep the
// whole value (from the project's plan) and pass it every time.
type Settings struct {
	MaxConnections int `json:"max_connections"` // 0: 100; changing it needs a restart
	// StatementTimeout and IdleInTransactionSessionTimeout are the defaults for every session (0: none);
	// changes apply on reload.
	StatementTimeout                time.Duration `json:"statement_timeout"`
	IdleInTransactionSessionTimeout time.Duration `json:"idle_in_transaction_session_timeout"`
	// SharedPreloadLibraries (nil: DefaultPreloadLibraries) must exist in the installation's pkglibdir;
	// changing them needs a restart.
	SharedPreloadLibraries []string `json:"shared_preload_libraries"`
	// ArchiveCommand is run by PostgreSQL through sh for every WAL segment (%p path, %f file name);
	// "": copy into <Dir>/wal-archive (see CopyArchiveCommand). Changes apply on reload.
	ArchiveCommand string `json:"archive_command"`
	// ArchiveTimeout is archive_timeout (0: off, PostgreSQL's default): how long a WAL segment that holds
	// writes may stay unfinished before the server switches to the next so the archive gets it. Reload.
	ArchiveTimeout time.Duration `json:"archive_timeout,omitempty"`

	// Bounds of a throwaway instance (an ephemeral database), none when zero. ProcessDataBytes is the
	// RLIMIT_DATA (private memory: heap and anonymous maps; not the shared buffers) of the postmaster and of
	// every process it forks: no session can raise it, whatever work_mem it sets (an allocation past it is
	// PostgreSQL's "out of memory" error). TempFileLimitBytes is temp_file_limit (superuser-only: sessions
	// cannot raise it); MaxWorkerProcesses is max_worker_processes and max_parallel_workers (background
	// and parallel workers each take up to ProcessDataBytes). Changing the first or the last needs a
	// restart, the second a reload.
	ProcessDataBytes   int64 `json:"process_data_bytes,omitempty"`
	TempFileLimitBytes int64 `json:"temp_file_limit_bytes,omitempty"`
	MaxWorkerProcesses int   `json:"max_worker_processes,omitempty"`
}

// Action is what makes a configuration change take effect.
type Action int

const (
	ActionNone    Action = iota // nothing changed
	ActionReload                // pg_ctl reload (SIGHUP)
	ActionRestart               // a restart: the parameter is read only when the postmaster starts
)

func (a Action) String() string {
	switch a {
	case ActionNone:
		return "none"
	case ActionReload:
		return "reload"
	case ActionRestart:
		return "restart"
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}

// Change says what makes s take effect on an instance running with old (both as ReadSettings returns them).
func (s Settings) Change(old Settings) Action {
	switch {
	case s.MaxConnections != old.MaxConnections || !slices.Equal(s.SharedPreloadLibraries, old.SharedPreloadLibraries) ||
		s.ProcessDataBytes != old.ProcessDataBytes || s.MaxWorkerProcesses != old.MaxWorkerProcesses:
		return ActionRestart
	case s.StatementTimeout != old.StatementTimeout ||
		s.IdleInTransactionSessionTimeout != old.IdleInTransactionSessionTimeout ||
		s.ArchiveCommand != old.ArchiveCommand || s.TempFileLimitBytes != old.TempFileLimitBytes:
		return ActionReload
	}
	return ActionNone
}

// MinProcessDataBytes is the least ProcessDataBytes: a backend of PostgreSQL 15 with the preloaded
// libraries and TLS maps about 20 MiB of private memory before its first query.
const MinProcessDataBytes = 48 << 20

// MaxTimeoutMillis is the largest statement_timeout or idle_in_transaction_session_timeout PostgreSQL
// accepts (an int of milliseconds, about 24.8 days): a larger value makes the server refuse the file.
const MaxTimeoutMillis = 2147483647

// DefaultPreloadLibraries is pg_stat_statements, plus pg_qualstats when the installation has it.
func DefaultPreloadLibraries(b Binaries) []string {
	libs := []string{"pg_stat_statements"}
	if b.HasLibrary("pg_qualstats") {
		libs = append(libs, "pg_qualstats")
	}
	return libs
}

// DiscardArchiveCommand is the archive_command of a server whose WAL nobody keeps (a preview): each
// segment counts as archived and is recycled. archive_mode stays on, so a later archive_command takes
// effect on a reload, without a restart.
const DiscardArchiveCommand = "true"

// CopyArchiveCommand is the archive_command copying each WAL segment into dir: copied to a hidden
// temporary name and renamed into place (a copy cut off leaves no partial segment under the segment's
// name), never overwriting a segment already archived. A segment archived already with the same bytes
// answers success, as PostgreSQL's documentation advises: a server archives again what it archived
// before its status was recorded (a crash, a rollback to an older copy of its directory), and refusing
// would stop its archiving for good. Different bytes under the name still fail. dir must not contain a
// single quote (it is quoted for sh).
func CopyArchiveCommand(dir string) (string, error) {
	if strings.ContainsAny(dir, "'\n\r\x00") {
		return "", fmt.Errorf("archive directory %q contains a quote or a control character", dir)
	}
	d := strings.ReplaceAll(dir, "%", "%%") // % is PostgreSQL's escape in archive_command
	q, tmp := "'"+d+"/%f'", "'"+d+"/.%f.tmp'"
	return "if test -f " + q + "; then cmp -s %p " + q + "; else cp %p " + tmp + " && mv " + tmp + " " + q + "; fi", nil
}

var libraryName = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

// normalize fills in the defaults and checks s against the installation.
func (s Settings) normalize(i *Instance) (Settings, error) {
	if s.MaxConnections == 0 {
		s.MaxConnections = 100
	}
	if s.MaxConnections < 5 || s.MaxConnections > 10000 {
		return s, fmt.Errorf("max_connections %d is out of range 5..10000", s.MaxConnections)
	}
	if s.StatementTimeout < 0 || s.IdleInTransactionSessionTimeout < 0 {
		return s, errors.New("timeouts must not be negative")
	}
	if millis(s.StatementTimeout) > MaxTimeoutMillis || millis(s.IdleInTransactionSessionTimeout) > MaxTimeoutMillis {
		return s, fmt.Errorf("timeouts must be at most %d ms (PostgreSQL's limit)", MaxTimeoutMillis)
	}
	if s.SharedPreloadLibraries == nil {
		s.SharedPreloadLibraries = DefaultPreloadLibraries(i.Bin)
	}
	s.SharedPreloadLibraries = slices.Clone(s.SharedPreloadLibraries)
	if len(s.SharedPreloadLibraries) > 0 {
		dir, err := i.Bin.PkgLibDir()
		if err != nil {
			return s, err
		}
		for _, lib := range s.SharedPreloadLibraries {
			if !libraryName.MatchString(lib) {
				return s, fmt.Errorf("invalid library name %q", lib)
			}
			if _, err := os.Stat(filepath.Join(dir, lib+".so")); err != nil {
				return s, fmt.Errorf("library %s is not installed in %s", lib, dir)
			}
		}
	}
	if s.ArchiveCommand == "" {
		cmd, err := CopyArchiveCommand(i.ArchiveDir())
		if err != nil {
			return s, err
		}
		s.ArchiveCommand = cmd
	}
	if s.ProcessDataBytes < 0 || s.ProcessDataBytes > 0 && s.ProcessDataBytes < MinProcessDataBytes {
		return s, fmt.Errorf("process_data_bytes %d is under %d (a server process needs about that much to start)", s.ProcessDataBytes, MinProcessDataBytes)
	}
	if s.TempFileLimitBytes < 0 || s.MaxWorkerProcesses < 0 {
		return s, errors.New("temp_file_limit_bytes and max_worker_processes must not be negative")
	}
	if strings.ContainsAny(s.ArchiveCommand, "\n\r\x00") {
		return s, errors.New("archive_command must be one line")
	}
	return s, nil
}

// settingsFile renders settings.conf; its first line carries s as JSON for ReadSettings.
func settingsFile(s Settings) ([]byte, error) {
	js, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	b.WriteString(settingsTag + string(js) + "\n")
	b.WriteString("# Written by the appliance (WriteSettings). Do not edit: it is rewritten.\n")
	fmt.Fprintf(&b, "max_connections = %d\n", s.MaxConnections)
	fmt.Fprintf(&b, "statement_timeout = %d\n", millis(s.StatementTimeout))
	fmt.Fprintf(&b, "idle_in_transaction_session_timeout = %d\n", millis(s.IdleInTransactionSessionTimeout))
	fmt.Fprintf(&b, "shared_preload_libraries = %s\n", confQuote(strings.Join(s.SharedPreloadLibraries, ",")))
	fmt.Fprintf(&b, "archive_command = %s\n", confQuote(s.ArchiveCommand))
	if s.ArchiveTimeout > 0 {
		fmt.Fprintf(&b, "archive_timeout = %d\n", max(1, int64(s.ArchiveTimeout/time.Second)))
	}
	if s.ProcessDataBytes > 0 {
		// The defaults fit the bound (64 MB of maintenance_work_mem would not fit in 64 MB with the
		// process's own ~20 MB): a quarter of it for index builds and vacuum's dead tuples.
		fmt.Fprintf(&b, "maintenance_work_mem = %d\nautovacuum_work_mem = %d\n", max(1024, s.ProcessDataBytes>>12), max(1024, s.ProcessDataBytes>>12)) // kB
	}
	if s.TempFileLimitBytes > 0 {
		fmt.Fprintf(&b, "temp_file_limit = %d\n", max(1, s.TempFileLimitBytes>>10)) // kB
	}
	if s.MaxWorkerProcesses > 0 {
		fmt.Fprintf(&b, "max_worker_processes = %d\nmax_parallel_workers = %d\n", s.MaxWorkerProcesses, s.MaxWorkerProcesses)
	}
	if slices.Contains(s.SharedPreloadLibraries, "pg_qualstats") {
		// pg_qualstats samples 1/max_connections of the statements by default (1% at 100): a predicate is
		// seen after ~300 executions (95%), so the index advisor stays empty for the queries a developer
		// looks at. A tenth sees it after ~30; measured cost: ~0.4 µs per statement on average (3.7 µs per
		// sampled one), and a tenth of the exclusive locks on its shared table. Sessions may set it to 1.
		b.WriteString("pg_qualstats.sample_rate = 0.1\n")
	}
	return []byte(b.String()), nil
}

func millis(d time.Duration) int64 {
	ms := d.Milliseconds()
	if d > 0 && ms == 0 {
		ms = 1
	}
	return ms
}

// readSettingsFile parses the JSON on the first line of settings.conf.
func readSettingsFile(path string) (Settings, error) {
	var s Settings
	f, err := os.Open(path)
	if err != nil {
		return s, err
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, settingsTag) {
		return s, fmt.Errorf("%s was not written by the appliance", path)
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, settingsTag)), &s); err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// confQuote quotes a string value for postgresql.conf.
func confQuote(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// applianceFile renders appliance.conf from the instance's fields.
func applianceFile(i *Instance) []byte {
	var b strings.Builder
	b.WriteString("# Written by the appliance from the instance's fields on every start. Do not edit.\n")
	if i.ID != "" {
		fmt.Fprintf(&b, "cluster_name = %s\n", confQuote(i.ID))
	}
	fmt.Fprintf(&b, "listen_addresses = %s\n", confQuote(listenAddresses(i.ListenHost)))
	fmt.Fprintf(&b, "port = %d\n", i.Port)
	b.WriteString("unix_socket_directories = ''\n") // TCP only: no socket path length limit, no peer auth
	b.WriteString("ssl = on\n")
	if i.NoSync {
		b.WriteString("fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n") // throwaway: see Instance.NoSync
	}
	if i.SyncFS && i.Bin.Major >= 14 {
		b.WriteString("recovery_init_sync_method = syncfs\n")
	}
	fmt.Fprintf(&b, "ssl_cert_file = %s\n", confQuote(i.CertFile()))
	fmt.Fprintf(&b, "ssl_key_file = %s\n", confQuote(i.KeyFile()))
	fmt.Fprintf(&b, "ssl_ca_file = %s\n", confQuote(i.CAFile()))
	b.WriteString("ssl_min_protocol_version = 'TLSv1.2'\n")
	b.WriteString("password_encryption = 'scram-sha-256'\n")
	b.WriteString("logging_collector = on\n")
	b.WriteString("log_destination = 'jsonlog'\n")
	b.WriteString("log_directory = 'log'\n")                    // <pgdata>/log
	b.WriteString("log_filename = 'postgresql-%Y-%m-%d.log'\n") // jsonlog writes postgresql-<date>.json
	b.WriteString("log_rotation_age = '1d'\n")
	b.WriteString("log_rotation_size = 0\n")
	b.WriteString("log_file_mode = 0600\n")
	b.WriteString("log_timezone = 'UTC'\n")
	// logical: a major upgrade follows the instance by logical replication (upgrades), and so may a
	// subscriber the project sets up; it takes effect at the next start.
	b.WriteString("wal_level = logical\n")
	b.WriteString("archive_mode = on\n")
	return []byte(b.String())
}

// listenAddresses always includes loopback: the appliance administers instances over 127.0.0.1.
func listenAddresses(host string) string {
	switch host {
	case "", "localhost", "127.0.0.1":
		return "127.0.0.1"
	case "*", "0.0.0.0":
		return host
	}
	return host + ",127.0.0.1"
}

// hbaFile is the whole pg_hba.conf: the admin over loopback only; everyone else over TLS with SCRAM.
const hbaFile = `# Written by the appliance. First matching line wins.
# TYPE  DATABASE     USER             ADDRESS        METHOD
host    all          ` + AdminRole + `  127.0.0.1/32   scram-sha-256
host    replication  ` + AdminRole + `  127.0.0.1/32   scram-sha-256
host    all          ` + AdminRole + `  0.0.0.0/0      reject
host    all          ` + AdminRole + `  ::/0           reject
hostssl all          all              0.0.0.0/0      scram-sha-256
hostssl all          all              ::/0           scram-sha-256
`

// includeLines makes postgresql.conf read the appliance's files last (after initdb's values).
func includeLines() string {
	return "\n" + includeMarker + "\ninclude '" + applianceConf + "'\ninclude '" + settingsConf + "'\n"
}

// appendIncludes adds the include lines to postgresql.conf once.
func (i *Instance) appendIncludes() error {
	path := filepath.Join(i.DataDir(), "postgresql.conf")
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if strings.Contains(string(b), includeMarker) {
		return nil
	}
	return i.User.WriteFile(path, append(b, includeLines()...), 0o600)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil || !errors.Is(err, fs.ErrNotExist)
}
