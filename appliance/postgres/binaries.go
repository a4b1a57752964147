// Package postgres runs the PostgreSQL instances of projects: binaries, initdb, configuration, start, stop
// and adoption, as an unprivileged OS user.
package postgres

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Binaries locates one PostgreSQL installation's programs.
type Binaries struct {
	Dir   string // the bin directory
	Major int
}

// Path returns the path of a program, or an error naming what is missing.
func (b Binaries) Path(program string) (string, error) {
	p := filepath.Join(b.Dir, program)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("PostgreSQL program %s is not installed in %s: install it with `apt-get install -y %s` (as root, `appliance up` installs it unless --no-install is set)",
			program, b.Dir, PackageOf(program, b.Major))
	}
	return p, nil
}

// clientPrograms are the programs Debian ships in postgresql-client-<major> rather than the server package.
var clientPrograms = []string{"pg_dump", "pg_dumpall", "pg_restore", "pg_basebackup", "pg_verifybackup",
	"pg_receivewal", "pg_recvlogical", "pg_isready", "pg_config", "psql"}

// PackageOf is the Debian package that installs a program of PostgreSQL's bin directory.
func PackageOf(program string, major int) string {
	if slices.Contains(clientPrograms, program) {
		return fmt.Sprintf("postgresql-client-%d", major)
	}
	return fmt.Sprintf("postgresql-%d", major)
}

// ErrNoBinaries means no PostgreSQL installation was found.
var ErrNoBinaries = errors.New("no PostgreSQL binaries found: install postgresql-15 (Debian) or pass --pg-bin")

// FindBinaries resolves the binaries: an explicit bin dir first, then the newest Debian install under
// /usr/lib/postgresql/<major>/bin, then pg_config on PATH.
func FindBinaries(explicit string) (Binaries, error) {
	if explicit != "" {
		return binariesIn(explicit)
	}
	if all := Installed("/usr/lib/postgresql"); len(all) > 0 {
		return all[len(all)-1], nil
	}
	if pgc, err := exec.LookPath("pg_config"); err == nil {
		out, err := exec.Command(pgc, "--bindir").Output()
		if err == nil {
			return binariesIn(strings.TrimSpace(string(out)))
		}
	}
	return Binaries{}, ErrNoBinaries
}

// Installed lists the majors installed under root (Debian layout), oldest first.
func Installed(root string) []Binaries {
	entries, _ := os.ReadDir(root)
	var out []Binaries
	for _, e := range entries {
		major, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := binariesIn(filepath.Join(root, e.Name(), "bin")); err == nil && b.Major == major {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Major < out[j].Major })
	return out
}

func binariesIn(dir string) (Binaries, error) {
	pgctl := filepath.Join(dir, "pg_ctl")
	out, err := exec.Command(pgctl, "--version").Output()
	if err != nil {
		return Binaries{}, fmt.Errorf("%s: %w", pgctl, ErrNoBinaries)
	}
	// "pg_ctl (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)"
	fields := strings.Fields(string(out))
	if len(fields) < 3 {
		return Binaries{}, fmt.Errorf("unexpected %s --version output %q", pgctl, out)
	}
	major, err := strconv.Atoi(strings.SplitN(fields[2], ".", 2)[0])
	if err != nil {
		return Binaries{}, fmt.Errorf("unexpected %s --version output %q", pgctl, out)
	}
	return Binaries{Dir: dir, Major: major}, nil
}

// PkgLibDir is the installation's directory of loadable modules (pg_config --pkglibdir; <bin>/../lib when
// pg_config is missing, as in embedded-postgres downloads).
func (b Binaries) PkgLibDir() (string, error) {
	if pgc, err := b.Path("pg_config"); err == nil {
		out, err := exec.Command(pgc, "--pkglibdir").Output()
		if err != nil {
			return "", fmt.Errorf("%s --pkglibdir: %w", pgc, err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	lib := filepath.Join(filepath.Dir(b.Dir), "lib")
	for _, dir := range []string{filepath.Join(lib, "postgresql"), lib} { // npm's builds: lib/postgresql
		if _, err := os.Stat(filepath.Join(dir, "plpgsql.so")); err == nil {
			return dir, nil
		}
	}
	if _, err := os.Stat(lib); err != nil {
		return "", fmt.Errorf("no pg_config in %s and no library directory %s", b.Dir, lib)
	}
	return lib, nil
}

// ShareDir is the installation's directory of shared files (pg_config --sharedir; <bin>/../share/postgresql
// or <bin>/../share when pg_config is missing).
func (b Binaries) ShareDir() (string, error) {
	if pgc, err := b.Path("pg_config"); err == nil {
		out, err := exec.Command(pgc, "--sharedir").Output()
		if err != nil {
			return "", fmt.Errorf("%s --sharedir: %w", pgc, err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	share := filepath.Join(filepath.Dir(b.Dir), "share")
	for _, dir := range []string{filepath.Join(share, "postgresql"), share} {
		if _, err := os.Stat(filepath.Join(dir, "extension", "plpgsql.control")); err == nil {
			return dir, nil
		}
	}
	return "", fmt.Errorf("no pg_config in %s and no extension directory under %s", b.Dir, share)
}

// HasExtension reports whether the installation can CREATE EXTENSION name (its control file is there).
func (b Binaries) HasExtension(name string) bool {
	dir, err := b.ShareDir()
	if err != nil || !filepath.IsLocal(name) {
		return false
	}
	_, err = os.Stat(filepath.Join(dir, "extension", name+".control"))
	return err == nil
}

// clientTools are the client programs the appliance runs on a project's server of the installation's
// major: dumps (exports, the logical upgrade's schema), restores (imports), base backups and their checks.
var clientTools = []string{"pg_dump", "pg_dumpall", "pg_restore", "pg_basebackup", "pg_verifybackup", "psql"}

// Tools lists the programs beside the server the installation has, of those the appliance runs across
// majors: pg_upgrade (a major upgrade in place) and the client tools.
func (b Binaries) Tools() []string {
	out := []string{}
	for _, p := range append([]string{"pg_upgrade"}, clientTools...) {
		if _, err := os.Stat(filepath.Join(b.Dir, p)); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// HasClientTools reports whether the installation has every client tool the appliance runs on a server
// of its major (dumps, restores, base backups and their checks).
func (b Binaries) HasClientTools() bool {
	tools := b.Tools()
	for _, p := range clientTools {
		if !slices.Contains(tools, p) {
			return false
		}
	}
	return true
}

// Abilities says what the installation can do for the appliance, as doctor and /status show it: run
// servers only (an upgrade to it runs by logical replication; no dumps or base backups by its tools), or
// also pg_upgrade (upgrades to it run by pg_upgrade) and the client tools (the project's dumps, restores
// and base backups on that major).
func (b Binaries) Abilities() string {
	tools := b.Tools()
	if len(tools) == 0 {
		return "server only: upgrades to it by logical replication; no client tools: exports and imports of its projects refused, their base backups online copies"
	}
	out := "server, no pg_upgrade: upgrades to it by logical replication"
	if slices.Contains(tools, "pg_upgrade") {
		out = "server, pg_upgrade: upgrades to it by pg_upgrade"
	}
	var have, missing []string
	for _, p := range clientTools {
		if slices.Contains(tools, p) {
			have = append(have, p)
		} else {
			missing = append(missing, p)
		}
	}
	switch {
	case len(missing) == 0:
		out += "; client tools: " + strings.Join(have, ", ")
	case len(have) == 0:
		out += "; no client tools: exports and imports of its projects refused, their base backups online copies"
	default:
		out += "; client tools: " + strings.Join(have, ", ") + " (missing " + strings.Join(missing, ", ") + ")"
	}
	return out
}

// Majors lists the installations under each root (<root>/<major>/bin, as Installed), one per major, the
// first root's winning, oldest first.
func Majors(roots ...string) []Binaries {
	var out []Binaries
	for _, root := range roots {
		if root == "" {
			continue
		}
		for _, b := range Installed(root) {
			if !slices.ContainsFunc(out, func(o Binaries) bool { return o.Major == b.Major }) {
				out = append(out, b)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Major < out[j].Major })
	return out
}

// HasLibrary reports whether the installation has the loadable module name (e.g. "pg_qualstats").
func (b Binaries) HasLibrary(name string) bool {
	dir, err := b.PkgLibDir()
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join(dir, name+".so"))
	return err == nil
}

// ErrNoPgBouncer means the pgbouncer program was not found.
var ErrNoPgBouncer = errors.New("pgbouncer is not installed: install the pgbouncer Debian package")

// FindPgBouncer resolves the pgbouncer program: an explicit path, then PATH, then /usr/sbin/pgbouncer
// (Debian's location, often missing from a non-root PATH).
func FindPgBouncer(explicit string) (string, error) {
	if explicit != "" {
		if _, err := os.Stat(explicit); err != nil {
			return "", fmt.Errorf("%s: %w", explicit, ErrNoPgBouncer)
		}
		return explicit, nil
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", ErrNoPgBouncer
}

// FreePort asks the kernel for a port free now on loopback, for short-lived helpers (pg_upgrade, a
// restore candidate, embedded-postgres' unpacking).
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
