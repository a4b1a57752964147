package node

import (
	"context"
	"errors"
	"fmt"
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

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/certs"
	"github.com/theappliance/appliance/appliance/cgroups"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/programs"
	"github.com/theappliance/appliance/appliance/storageguard"
)

// A Check is one thing `up` needs, as doctor reports it.
type Check struct {
	Name   string
	Level  string // LevelOK, LevelWarn (a feature is off or something is close to a limit) or LevelFail (up refuses)
	Detail string
	Fix    string // the command or setting that fixes it ("" when ok)
}

// The levels of a Check.
const (
	LevelOK   = "ok"
	LevelWarn = "warn"
	LevelFail = "FAIL"
)

// Doctor checks what up needs, as `appliance doctor` reports it and up refuses to start without.
type Doctor struct {
	// Install: missing programs are installed or obtained as up does (doctor only reports them).
	Install bool
	// Log is where the programs' resolution logs (nil: nowhere).
	Log *slog.Logger
	// Status reads the component named name of the /status of the appliance running on dataDir (doctor:
	// through the CLI's client); nil, or with Install: not read.
	Status func(ctx context.Context, cfg Config, dataDir, name string) (*api.Component, error)
}

// checkRun is what the checks look at: up's settings, the data directory (absolute), whether an
// appliance runs on it, and the Doctor (whether up runs them, Install, rather than doctor).
type checkRun struct {
	Doctor
	ctx     context.Context
	cfg     Config
	dataDir string
	running bool
}

// doctorChecks are the checks after the programs', in the order doctor shows them: each fills in its line
// (ok unless it says otherwise).
var doctorChecks = []struct {
	name string
	run  func(r *checkRun, c *Check)
}{
	{"instance OS user", osUserCheck},
	{"data directory", dataDirCheck},
	{"data directory access", traverseCheck},
	{"disk space", diskCheck},
	{"reflinks", reflinkCheck},
	{"metadata", metadataCheck},
	{"API listener", listenerCheck(func(cfg Config) string { return cfg.Listen }, "--listen")},
	{"KV listener", listenerCheck(func(cfg Config) string { return cfg.KVListen }, "--kv-listen")},
	{"KV REST listener", listenerCheck(func(cfg Config) string { return cfg.KVRESTListen }, "--kv-rest-listen")},
	{"instance ports", portRangeCheck},
	{"clock", clockCheck},
	{"certificate authority", caCheck},
	{"backup store", backupStoreCheck},
	{"cgroups", cgroupsCheck},
	{"postgres majors", majorsCheck},
}

// Run checks what up needs. It returns the programs it resolved (nil when resolution itself failed).
func (d Doctor) Run(ctx context.Context, cfg Config) ([]Check, *programs.Set) {
	var out []Check
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return []Check{{Name: "data directory", Level: LevelFail, Detail: err.Error(), Fix: "pass --data-dir"}}, nil
	}
	set, err := programs.Resolve(ctx, programOptions(cfg, dataDir, d.Install, d.Log))
	if err != nil {
		out = append(out, Check{Name: "programs", Level: LevelFail, Detail: err.Error(), Fix: programsFix(cfg)})
	} else {
		out = append(out, programChecks(set)...)
	}
	r := d.checkRun(ctx, cfg, dataDir)
	for _, ch := range doctorChecks {
		c := Check{Name: ch.name, Level: LevelOK}
		ch.run(r, &c)
		out = append(out, c)
	}
	return out, set
}

// One is the check of that name, one of those after the programs' ("backup store", "metadata"...).
func (d Doctor) One(ctx context.Context, cfg Config, name string) (Check, error) {
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return Check{}, err
	}
	for _, ch := range doctorChecks {
		if ch.name == name {
			c := Check{Name: ch.name, Level: LevelOK}
			ch.run(d.checkRun(ctx, cfg, dataDir), &c)
			return c, nil
		}
	}
	return Check{}, fmt.Errorf("no check named %q", name)
}

func (d Doctor) checkRun(ctx context.Context, cfg Config, dataDir string) *checkRun {
	return &checkRun{Doctor: d, ctx: ctx, cfg: cfg, dataDir: dataDir, running: Running(dataDir)}
}

// programOptions are the resolution settings of up's flags.
func programOptions(cfg Config, dataDir string, install bool, log *slog.Logger) programs.Options {
	return programs.Options{PGBin: cfg.PGBin, Install: install && !cfg.NoInstall, Log: log,
		Embedded: &programs.Embedded{Dir: filepath.Join(dataDir, "postgresql"), CacheDir: cfg.PGEmbeddedCache, MirrorURL: cfg.PGEmbeddedMirror}}
}

func programsFix(cfg Config) string {
	if cfg.PGBin != "" {
		return "point --pg-bin (APPLIANCE_PG_BIN) at a PostgreSQL bin directory, or leave it unset"
	}
	return "check --pg-embedded-mirror / --pg-embedded-cache, or install postgresql-15 with apt-get"
}

func programChecks(set *programs.Set) []Check {
	var out []Check
	for _, p := range programs.Catalog {
		f := set.Found[p.Name]
		c := Check{Name: p.Name}
		switch {
		case f.Err == nil:
			c.Level, c.Detail = LevelOK, fmt.Sprintf("%s (%s; %s)", f.Path, f.Source, strings.TrimSpace(f.Version))
		case p.Required:
			c.Level, c.Detail, c.Fix = LevelFail, fmt.Sprintf("missing: every project needs it (%s)", p.Feature), "apt-get install -y "+p.Package
		default:
			c.Level, c.Detail, c.Fix = LevelWarn, fmt.Sprintf("missing: %s are off", p.Feature), "apt-get install -y "+p.Package
		}
		out = append(out, c)
	}
	return out
}

// cgroupsCheck: which cgroups hold the projects' servers to their plans' memory and CPU, as up would open
// them (a warning where none is usable, or with --cgroups off).
func cgroupsCheck(r *checkRun, c *Check) {
	groups, err := openCgroups(r.cfg, r.dataDir, slog.New(slog.DiscardHandler))
	switch {
	case err != nil:
		c.Level, c.Detail = LevelWarn, err.Error()
	case groups == nil:
		c.Level, c.Detail, c.Fix = LevelWarn, "off: projects' memory and CPU are not held", "--cgroups auto"
	case groups.Version() == cgroups.None:
		c.Level, c.Detail, c.Fix = LevelWarn, groups.Status(), "run up as root, in a cgroup of its own with v2 (the unit appliance install writes: Delegate=yes), on a machine whose cgroup v2 or v1 hierarchies have the memory and cpu controllers"
	default:
		c.Detail = "projects' memory and CPU held by " + groups.Status()
	}
	if err := groups.Close(); err != nil {
		c.Level, c.Detail = LevelWarn, c.Detail+"; "+err.Error()
	}
}

// osUserCheck: instances run as an unprivileged user (PostgreSQL refuses root).
func osUserCheck(r *checkRun, c *Check) {
	name, u := instanceUser(r.cfg)
	switch {
	case os.Geteuid() != 0:
		c.Detail = "instances run as the current user " + name
	case u == nil:
		c.Detail = fmt.Sprintf("%s does not exist yet: up creates it (useradd --system)", name)
	default:
		c.Detail = "instances run as " + name
	}
}

// dataDirCheck: the data directory (or the nearest existing parent, where up creates it) is writable.
func dataDirCheck(r *checkRun, c *Check) {
	dir := r.dataDir
	existing := nearestExisting(dir)
	if err := syscall.Access(existing, 2|1); err != nil { // W_OK|X_OK
		c.Level, c.Detail = LevelFail, fmt.Sprintf("%s is not writable by this user: %v", existing, err)
		c.Fix = "choose another --data-dir (APPLIANCE_DATA_DIR), or fix the directory's owner"
		return
	}
	if existing == dir {
		c.Detail = dir
	} else {
		c.Detail = dir + " (created by up)"
	}
}

// instanceUser is the OS user instances will run as (and whether it exists yet), as up chooses it.
func instanceUser(cfg Config) (name string, u *user.User) {
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
func traverseCheck(r *checkRun, c *Check) {
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
				c.Level = LevelFail
				c.Detail = fmt.Sprintf("the instances' OS user %s cannot enter %s (mode %04o), above the data directory %s", name, d, st.Mode().Perm(), dataDir)
				c.Fix = fmt.Sprintf("chmod o+x %s, or choose a --data-dir the user can reach (e.g. /var/lib/appliance)", d)
				return
			}
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	c.Detail = fmt.Sprintf("%s can reach %s", name, dataDir)
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
func diskCheck(r *checkRun, c *Check) {
	dir, reserve := nearestExisting(r.dataDir), mib(r.cfg.DiskReserveMB)
	free, err := storageguard.FreeBytes(dir)
	if err != nil {
		c.Level, c.Detail = LevelWarn, err.Error()
		return
	}
	c.Detail = fmt.Sprintf("%.1f GiB free under %s (reserve %.1f GiB)", float64(free)/(1<<30), dir, float64(reserve)/(1<<30))
	switch {
	case free < reserve:
		c.Level, c.Fix = LevelWarn, "under the reserve (--disk-reserve-mb): up runs degraded (reads served, writes refused, databases read-only); free space or choose a --data-dir on a larger file system (each project needs about 100 MB plus its data and backups)"
	case free < 5<<30:
		c.Level, c.Fix = LevelWarn, "less than 5 GiB free: backups and WAL fill disks fast"
	}
}

// reflinkCheck: whether the data directory's filesystem has reflinks (postgres.ReflinkSupport, probed in
// the data directory, or the nearest existing parent where up creates it): previews, restores and base
// backups then copy files by reflink, in about constant time. Without them they copy bytes, which is fine.
func reflinkCheck(r *checkRun, c *Check) {
	dir := nearestExisting(r.dataDir)
	ok, err := postgres.ReflinkSupport(dir)
	switch {
	case err != nil:
		c.Level, c.Detail = LevelWarn, err.Error()
	case ok:
		c.Detail = "the filesystem of " + dir + " has reflinks: previews, restores and base backups copy files by reflink"
	default:
		c.Detail = "the filesystem of " + dir + " has no reflinks: previews, restores and base backups copy bytes (their time grows with the size; on XFS made with reflink=1, or btrfs, it would not)"
	}
}

// Running reports whether an appliance runs on the data directory now: its metadata store is
// locked (bbolt holds an exclusive flock while open).
func Running(dataDir string) bool {
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
func listenerCheck(addr func(Config) string, flag string) func(r *checkRun, c *Check) {
	return func(r *checkRun, c *Check) {
		a := addr(r.cfg)
		c.Detail = a + " is free"
		if _, port, _ := net.SplitHostPort(a); port == "0" {
			c.Detail = a + " (a free port is picked)"
		} else if ln, err := net.Listen("tcp", a); err != nil && r.running {
			c.Detail = a + " is in use: an appliance runs on this data directory"
		} else if err != nil {
			c.Level, c.Detail, c.Fix = LevelFail, fmt.Sprintf("cannot listen on %s: %v", a, err), "stop what uses it, or choose another address with "+flag
		} else {
			ln.Close()
		}
	}
}

// portRangeCheck: the instance range has free ports.
func portRangeCheck(r *checkRun, c *Check) {
	cfg := r.cfg
	pr, err := appliance.ParsePortRange(cfg.PGPorts)
	if err != nil {
		c.Level, c.Detail, c.Fix = LevelFail, err.Error(), "--pg-ports FIRST-LAST"
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
	c.Detail = fmt.Sprintf("%d of %d ports free in %s on %s (two per project)", free, total, cfg.PGPorts, cfg.PGListen)
	switch {
	case free < 2:
		c.Level, c.Fix = LevelFail, "choose a free range with --pg-ports (APPLIANCE_PG_PORTS) or another --pg-listen"
	case free < total/2 && !r.running:
		c.Level, c.Fix = LevelWarn, "another program (or appliance) uses this range: give each its own --pg-ports"
	}
}

// clockCheck: certificates and backups' restore windows need a clock that is roughly right.
func clockCheck(_ *checkRun, c *Check) {
	now := time.Now().UTC()
	c.Detail = now.Format(time.RFC3339)
	if now.Year() < 2025 {
		c.Level, c.Detail = LevelFail, "the clock says "+c.Detail
		c.Fix = "set the time (timedatectl set-ntp true); certificates and restore times depend on it"
	}
}

// caCheck: the local certificate authority, when it exists, is valid for a while yet.
func caCheck(r *checkRun, c *Check) {
	path := filepath.Join(r.dataDir, "ca", "ca.crt")
	_, cert, err := certs.ReadCA(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		c.Detail = "created at first start"
	case err != nil:
		c.Level, c.Detail, c.Fix = LevelFail, err.Error(), "move the data directory's ca/ away to create a new CA (clients must trust the new one)"
	case time.Until(cert.NotAfter) < 30*24*time.Hour:
		c.Level, c.Detail, c.Fix = LevelWarn, fmt.Sprintf("%s expires %s", path, cert.NotAfter.Format(time.RFC3339)), "replace the CA before it expires"
	default:
		c.Detail = fmt.Sprintf("%s valid until %s", path, cert.NotAfter.Format(time.RFC3339))
	}
}
