package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/certs"
	"github.com/theappliance/appliance/appliance/cgroups"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/programs"
	"github.com/theappliance/appliance/appliance/storageguard"
)

// A check is one thing `up` needs, as doctor reports it.
type check struct {
	name   string
	level  string // ok, warn (a feature is off or something is close to a limit) or fail (up refuses)
	detail string
	fix    string // the command or setting that fixes it ("" when ok)
}

const (
	levelOK   = "ok"
	levelWarn = "warn"
	levelFail = "FAIL"
)

func init() {
	var cfg UpConfig
	doctor := &cobra.Command{
		Use:   "doctor",
		Short: "Check everything `appliance up` needs and say how to fix what is missing",
		Long: `Check the programs the appliance runs (and where each comes from), the OS user instances run as, the
data directory, the listeners' ports and the instance port range, disk space, the clock, the certificate
authority, the metadata store (readable, undamaged, not older than the data directory, and matching
what the data directory holds) and the backup store (a bucket: it exists and the credentials work; while an appliance runs on the data
directory, what its /status says of the store: the last upload, the WAL lag in bytes and seconds). It installs nothing: each problem comes with the command that fixes it. Exits 1 when up would
refuse to start. Takes the same flags and environment variables as up.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			checks, _ := runChecks(c.Context(), cfg, false, nil)
			if printChecks(c.OutOrStdout(), checks) {
				return errDoctorFailed
			}
			return nil
		},
	}
	upFlags(doctor, &cfg)
	root.AddCommand(doctor)
}

var errDoctorFailed = fmt.Errorf("some checks failed: see the fixes above")

// printChecks writes the report and says whether anything failed.
func printChecks(w io.Writer, checks []check) (failed bool) {
	var rows [][]string
	for _, c := range checks {
		rows = append(rows, []string{c.level, c.name, c.detail})
		if c.fix != "" {
			rows = append(rows, []string{"", "", "  fix: " + c.fix})
		}
		failed = failed || c.level == levelFail
	}
	writeTable(w, nil, rows)
	return failed
}

// checkRun is what the checks look at: up's settings, the data directory (absolute), whether an
// appliance runs on it, and whether up runs them (install) rather than doctor.
type checkRun struct {
	ctx              context.Context
	cfg              UpConfig
	dataDir          string
	running, install bool
}

// doctorChecks are the checks after the programs', in the order doctor shows them: each fills in its line
// (ok unless it says otherwise).
var doctorChecks = []struct {
	name string
	run  func(r *checkRun, c *check)
}{
	{"instance OS user", osUserCheck},
	{"data directory", dataDirCheck},
	{"data directory access", traverseCheck},
	{"disk space", diskCheck},
	{"metadata", metadataCheck},
	{"API listener", listenerCheck(func(cfg UpConfig) string { return cfg.Listen }, "--listen")},
	{"KV listener", listenerCheck(func(cfg UpConfig) string { return cfg.KVListen }, "--kv-listen")},
	{"KV REST listener", listenerCheck(func(cfg UpConfig) string { return cfg.KVRESTListen }, "--kv-rest-listen")},
	{"instance ports", portRangeCheck},
	{"clock", clockCheck},
	{"certificate authority", caCheck},
	{"backup store", backupStoreCheck},
	{"cgroups", cgroupsCheck},
}

// runChecks checks what up needs. With install, missing programs are installed or obtained as up does
// (doctor only reports). It returns the programs it resolved (nil when resolution itself failed).
func runChecks(ctx context.Context, cfg UpConfig, install bool, log *slog.Logger) ([]check, *programs.Set) {
	var out []check
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return []check{{name: "data directory", level: levelFail, detail: err.Error(), fix: "pass --data-dir"}}, nil
	}
	set, err := programs.Resolve(ctx, programOptions(cfg, dataDir, install, log))
	if err != nil {
		out = append(out, check{name: "programs", level: levelFail, detail: err.Error(), fix: programsFix(cfg)})
	} else {
		out = append(out, programChecks(set)...)
	}
	r := &checkRun{ctx: ctx, cfg: cfg, dataDir: dataDir, running: applianceRunning(dataDir), install: install}
	for _, ch := range doctorChecks {
		c := check{name: ch.name, level: levelOK}
		ch.run(r, &c)
		out = append(out, c)
	}
	return out, set
}

// programOptions are the resolution settings of up's flags.
func programOptions(cfg UpConfig, dataDir string, install bool, log *slog.Logger) programs.Options {
	return programs.Options{PGBin: cfg.PGBin, Install: install && !cfg.NoInstall, Log: log,
		Embedded: &programs.Embedded{Dir: filepath.Join(dataDir, "postgresql"), CacheDir: cfg.PGEmbeddedCache, MirrorURL: cfg.PGEmbeddedMirror}}
}

func programsFix(cfg UpConfig) string {
	if cfg.PGBin != "" {
		return "point --pg-bin (APPLIANCE_PG_BIN) at a PostgreSQL bin directory, or leave it unset"
	}
	return "check --pg-embedded-mirror / --pg-embedded-cache, or install postgresql-15 with apt-get"
}

func programChecks(set *programs.Set) []check {
	var out []check
	for _, p := range programs.Catalog {
		f := set.Found[p.Name]
		c := check{name: p.Name}
		switch {
		case f.Err == nil:
			c.level, c.detail = levelOK, fmt.Sprintf("%s (%s; %s)", f.Path, f.Source, strings.TrimSpace(f.Version))
		case p.Required:
			c.level, c.detail, c.fix = levelFail, fmt.Sprintf("missing: every project needs it (%s)", p.Feature), "apt-get install -y "+p.Package
		default:
			c.level, c.detail, c.fix = levelWarn, fmt.Sprintf("missing: %s are off", p.Feature), "apt-get install -y "+p.Package
		}
		out = append(out, c)
	}
	return out
}

// cgroupsCheck: which cgroups hold the projects' servers to their plans' memory and CPU, as up would open
// them (a warning where none is usable, or with --cgroups off).
func cgroupsCheck(r *checkRun, c *check) {
	groups, err := openCgroups(r.cfg, r.dataDir, slog.New(slog.DiscardHandler))
	switch {
	case err != nil:
		c.level, c.detail = levelWarn, err.Error()
	case groups == nil:
		c.level, c.detail, c.fix = levelWarn, "off: projects' memory and CPU are not held", "--cgroups auto"
	case groups.Version() == cgroups.None:
		c.level, c.detail, c.fix = levelWarn, groups.Status(), "run up as root on a machine with cgroup v2 (memory and cpu delegated) or v1's memory and cpu hierarchies"
	default:
		c.detail = "projects' memory and CPU held by " + groups.Status()
	}
	if err := groups.Close(); err != nil {
		c.level, c.detail = levelWarn, c.detail+"; "+err.Error()
	}
}

// osUserCheck: instances run as an unprivileged user (PostgreSQL refuses root).
func osUserCheck(r *checkRun, c *check) {
	name, u := instanceUser(r.cfg)
	switch {
	case os.Geteuid() != 0:
		c.detail = "instances run as the current user " + name
	case u == nil:
		c.detail = fmt.Sprintf("%s does not exist yet: up creates it (useradd --system)", name)
	default:
		c.detail = "instances run as " + name
	}
}

// dataDirCheck: the data directory (or the nearest existing parent, where up creates it) is writable.
func dataDirCheck(r *checkRun, c *check) {
	dir := r.dataDir
	existing := nearestExisting(dir)
	if err := syscall.Access(existing, 2|1); err != nil { // W_OK|X_OK
		c.level, c.detail = levelFail, fmt.Sprintf("%s is not writable by this user: %v", existing, err)
		c.fix = "choose another --data-dir (APPLIANCE_DATA_DIR), or fix the directory's owner"
		return
	}
	if existing == dir {
		c.detail = dir
	} else {
		c.detail = dir + " (created by up)"
	}
}

// instanceUser is the OS user instances will run as (and whether it exists yet), as up chooses it.
func instanceUser(cfg UpConfig) (name string, u *user.User) {
	if os.Geteuid() != 0 {
		u, _ = user.Current()
		if u != nil {
			name = u.Username
		}
		return name, u
	}
	name = firstNonEmpty(cfg.PGUser, daemon.DefaultOSUserName())
	u, _ = user.Lookup(name)
	return name, u
}

// traverseCheck: the instances' OS user must pass through every directory above the data directory to
// reach its instances (up makes the data directory itself traversable). Without it the first provision
// fails; up refuses to start instead, naming the directory and the fix.
func traverseCheck(r *checkRun, c *check) {
	dataDir := r.dataDir
	name, u := instanceUser(r.cfg)
	uid, gids := -1, []string{}
	if u != nil {
		uid, _ = strconv.Atoi(u.Uid)
		gids, _ = u.GroupIds()
	}
	for d := filepath.Dir(dataDir); ; d = filepath.Dir(d) {
		if st, err := os.Stat(d); err == nil {
			if !canTraverse(st, uid, gids) {
				c.level = levelFail
				c.detail = fmt.Sprintf("the instances' OS user %s cannot enter %s (mode %04o), above the data directory %s", name, d, st.Mode().Perm(), dataDir)
				c.fix = fmt.Sprintf("chmod o+x %s, or choose a --data-dir the user can reach (e.g. /var/lib/appliance)", d)
				return
			}
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	c.detail = fmt.Sprintf("%s can reach %s", name, dataDir)
}

// canTraverse reports whether a user (uid, its groups; uid -1 for one not created yet) may search a directory.
func canTraverse(st os.FileInfo, uid int, gids []string) bool {
	if uid == 0 {
		return true
	}
	mode := st.Mode().Perm()
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return mode&0o001 != 0
	}
	if uid >= 0 && int(sys.Uid) == uid {
		return mode&0o100 != 0
	}
	if slices.Contains(gids, strconv.Itoa(int(sys.Gid))) {
		return mode&0o010 != 0
	}
	return mode&0o001 != 0
}

func nearestExisting(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || d == filepath.Dir(d) {
			return d
		}
	}
}

// diskCheck: free space where the data directory lives, against the reserve under which up runs degraded
// (it starts all the same: it supervises the instances and serves reads, and refuses writes until space
// is freed).
func diskCheck(r *checkRun, c *check) {
	dir, reserve := nearestExisting(r.dataDir), mib(r.cfg.DiskReserveMB)
	free, err := storageguard.FreeBytes(dir)
	if err != nil {
		c.level, c.detail = levelWarn, err.Error()
		return
	}
	c.detail = fmt.Sprintf("%.1f GiB free under %s (reserve %.1f GiB)", float64(free)/(1<<30), dir, float64(reserve)/(1<<30))
	switch {
	case free < reserve:
		c.level, c.fix = levelWarn, "under the reserve (--disk-reserve-mb): up runs degraded (reads served, writes refused, databases read-only); free space or choose a --data-dir on a larger file system (each project needs about 100 MB plus its data and backups)"
	case free < 5<<30:
		c.level, c.fix = levelWarn, "less than 5 GiB free: backups and WAL fill disks fast"
	}
}

// applianceRunning reports whether an appliance runs on the data directory now: its metadata store is
// locked (bbolt holds an exclusive flock while open).
func applianceRunning(dataDir string) bool {
	f, err := os.Open(filepath.Join(dataDir, "meta.db"))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return true
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// listenerCheck: the address of a listener (addr of up's settings, set by flag) is free. While an
// appliance runs on the data directory, its own listeners are in use, as they should be.
func listenerCheck(addr func(UpConfig) string, flag string) func(r *checkRun, c *check) {
	return func(r *checkRun, c *check) {
		a := addr(r.cfg)
		c.detail = a + " is free"
		if _, port, _ := net.SplitHostPort(a); port == "0" {
			c.detail = a + " (a free port is picked)"
		} else if ln, err := net.Listen("tcp", a); err != nil && r.running {
			c.detail = a + " is in use: an appliance runs on this data directory"
		} else if err != nil {
			c.level, c.detail, c.fix = levelFail, fmt.Sprintf("cannot listen on %s: %v", a, err), "stop what uses it, or choose another address with "+flag
		} else {
			ln.Close()
		}
	}
}

// portRangeCheck: the instance range has free ports.
func portRangeCheck(r *checkRun, c *check) {
	cfg := r.cfg
	pr, err := appliance.ParsePortRange(cfg.PGPorts)
	if err != nil {
		c.level, c.detail, c.fix = levelFail, err.Error(), "--pg-ports FIRST-LAST"
		return
	}
	free := 0
	for p := pr.First; p <= pr.Last; p++ {
		if ln, err := net.Listen("tcp", net.JoinHostPort(cfg.PGListen, fmt.Sprint(p))); err == nil {
			ln.Close()
			free++
		}
	}
	total := pr.Last - pr.First + 1
	c.detail = fmt.Sprintf("%d of %d ports free in %s on %s (two per project)", free, total, cfg.PGPorts, cfg.PGListen)
	switch {
	case free < 2:
		c.level, c.fix = levelFail, "choose a free range with --pg-ports (APPLIANCE_PG_PORTS) or another --pg-listen"
	case free < total/2 && !r.running:
		c.level, c.fix = levelWarn, "another program (or appliance) uses this range: give each its own --pg-ports"
	}
}

// clockCheck: certificates and backups' restore windows need a clock that is roughly right.
func clockCheck(_ *checkRun, c *check) {
	now := time.Now().UTC()
	c.detail = now.Format(time.RFC3339)
	if now.Year() < 2025 {
		c.level, c.detail = levelFail, "the clock says "+c.detail
		c.fix = "set the time (timedatectl set-ntp true); certificates and restore times depend on it"
	}
}

// caCheck: the local certificate authority, when it exists, is valid for a while yet.
func caCheck(r *checkRun, c *check) {
	path := filepath.Join(r.dataDir, "ca", "ca.crt")
	_, cert, err := certs.ReadCA(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		c.detail = "created at first start"
	case err != nil:
		c.level, c.detail, c.fix = levelFail, err.Error(), "move the data directory's ca/ away to create a new CA (clients must trust the new one)"
	case time.Until(cert.NotAfter) < 30*24*time.Hour:
		c.level, c.detail, c.fix = levelWarn, fmt.Sprintf("%s expires %s", path, cert.NotAfter.Format(time.RFC3339)), "replace the CA before it expires"
	default:
		c.detail = fmt.Sprintf("%s valid until %s", path, cert.NotAfter.Format(time.RFC3339))
	}
}
