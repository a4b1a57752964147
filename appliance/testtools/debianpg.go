package testtools

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

// The other major with every program (pg_upgrade and the client tools) that the tests run: Debian 13's
// (trixie) PostgreSQL 17, whose packages run on this Debian 12 once their programs are pointed at trixie's
// own C library and libraries (patchelf). Debian 12 has no PostgreSQL 17 of its own, and the npm build
// (PostgresTarball) has only the server.

// DebianPostgresMajor is the major DebianPostgres provides.
const DebianPostgresMajor = 17

// debianSuite is the Debian release whose PostgreSQL DebianPostgres unpacks, and its packages: the server,
// its client tools, and the libraries they link that Debian 12 lacks or has in older versions (trixie's C
// library included: the programs run on it, not on the machine's).
const debianSuite = "trixie"

var debianPostgresPackages = []string{"postgresql-17", "postgresql-client-17", "libc6", "libpq5", "libldap2",
	"libicu76", "libssl3t64", "libzstd1", "liblz4-1", "libxml2", "libreadline8t64", "libsasl2-2",
	"libgnutls30t64", "libxslt1.1", "libstdc++6", "libgcc-s1"}

// debianLayout is the version of the tree DebianPostgres makes: a change of what it unpacks or patches
// bumps it, so that a machine's tree of before is not taken as done.
const debianLayout = 2

// debianKeyring verifies the suite's InRelease (Debian 12's keyring carries trixie's keys).
const debianKeyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

// SharedCacheDir is CacheDir for what unprivileged users must read too (the PostgreSQL the instances' OS
// user runs): as root, /var/cache/appliance-testtools (root's home is not theirs to traverse).
func SharedCacheDir() string {
	if os.Geteuid() == 0 {
		return "/var/cache/appliance-testtools"
	}
	return CacheDir()
}

// DebianPostgres returns the bin directory of Debian 13's PostgreSQL major (17 only): server, pg_upgrade
// and client tools. It is made once per machine, under a file lock (test processes running at once share
// it), into <SharedCacheDir>/debian-trixie-postgresql-<major>/root: the suite's InRelease is checked
// against Debian's keyring with gpgv, Packages.xz against the InRelease's SHA-256, each .deb against
// Packages'; they are unpacked with dpkg-deb (the JIT provider left out: LLVM is not unpacked), the
// programs given trixie's dynamic loader and an RPATH of its libraries with patchelf, and every program
// and module checked to find all its libraries. The mirror is
// the machine's own Debian mirror (its apt sources). The tree is readable by everyone: the instances' OS
// user runs it. Its share directory is found relative to bin, so the tree is kept whole.
func DebianPostgres(ctx context.Context, major int) (string, error) {
	if major != DebianPostgresMajor {
		return "", fmt.Errorf("testtools: Debian %s has PostgreSQL %d, not %d", debianSuite, DebianPostgresMajor, major)
	}
	dir := filepath.Join(SharedCacheDir(), fmt.Sprintf("debian-%s-postgresql-%d-r%d", debianSuite, major, debianLayout))
	root := filepath.Join(dir, "root")
	bin := filepath.Join(root, "usr", "lib", "postgresql", fmt.Sprint(major), "bin")
	done := filepath.Join(dir, "ok")
	if _, err := os.Stat(done); err == nil {
		return bin, nil
	}
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("testtools: PostgreSQL %d of Debian %s: %w", major, debianSuite, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) { // traversable by the instances' OS user
		if d == filepath.Dir(SharedCacheDir()) {
			break
		}
		if err := os.Chmod(d, 0o755); err != nil {
			return fail(err)
		}
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fail(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fail(err)
	}
	if _, err := os.Stat(done); err == nil { // another process made it meanwhile
		return bin, nil
	}
	fmt.Fprintf(os.Stderr, "testtools: unpacking PostgreSQL %d of Debian %s, once for this machine\n", major, debianSuite)
	if err := buildDebianPostgres(ctx, dir, root, bin); err != nil {
		return fail(err)
	}
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "postgres"), "--version").Output()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("(PostgreSQL) %d.", major)) {
		return fail(fmt.Errorf("postgres --version: %q %v", out, err))
	}
	if err := os.WriteFile(done, out, 0o644); err != nil {
		return fail(err)
	}
	return bin, nil
}

// debArch is the machine's Debian architecture, its multiarch directory and its dynamic loader.
func debArch() (arch, triplet, loader string, err error) {
	switch runtime.GOARCH {
	case "amd64":
		return "amd64", "x86_64-linux-gnu", "ld-linux-x86-64.so.2", nil
	case "arm64":
		return "arm64", "aarch64-linux-gnu", "ld-linux-aarch64.so.1", nil
	}
	return "", "", "", fmt.Errorf("no Debian packages are unpacked for %s", runtime.GOARCH)
}

func buildDebianPostgres(ctx context.Context, dir, root, bin string) error {
	arch, triplet, loader, err := debArch()
	if err != nil {
		return err
	}
	mirror, err := debianMirror()
	if err != nil {
		return err
	}
	for _, prog := range []string{"gpgv", "xz", "dpkg-deb", "patchelf"} {
		if _, err := exec.LookPath(prog); err != nil {
			return fmt.Errorf("%s is needed (Ensure installs it as root): %w", prog, err)
		}
	}
	if err := os.RemoveAll(root); err != nil { // an attempt cut short
		return err
	}
	work := filepath.Join(dir, "download")
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(work)

	// The suite's signed index, then the package list it names, then the packages the list names.
	inRelease := filepath.Join(work, "InRelease")
	if err := download(ctx, mirror+"/dists/"+debianSuite+"/InRelease", inRelease, ""); err != nil {
		return err
	}
	release := filepath.Join(work, "Release")
	if out, err := exec.CommandContext(ctx, "gpgv", "--keyring", debianKeyring, "--output", release, inRelease).CombinedOutput(); err != nil {
		return fmt.Errorf("the signature of %s's InRelease (gpgv with %s): %w: %s", debianSuite, debianKeyring, err, out)
	}
	relText, err := os.ReadFile(release)
	if err != nil {
		return err
	}
	listPath := "main/binary-" + arch + "/Packages.xz"
	listSum := releaseSHA256(string(relText), listPath)
	if listSum == "" {
		return fmt.Errorf("%s's Release names no SHA256 of %s", debianSuite, listPath)
	}
	listXZ := filepath.Join(work, "Packages.xz")
	if err := download(ctx, mirror+"/dists/"+debianSuite+"/"+listPath, listXZ, listSum); err != nil {
		return err
	}
	list, err := exec.CommandContext(ctx, "xz", "-dc", listXZ).Output()
	if err != nil {
		return fmt.Errorf("xz -dc %s: %w", listXZ, err)
	}
	pkgs := parsePackages(list)
	for _, name := range debianPostgresPackages {
		p, ok := pkgs[name]
		if !ok || p.filename == "" || p.sha256 == "" {
			return fmt.Errorf("%s's package list has no %s (with Filename and SHA256)", debianSuite, name)
		}
		if !filepath.IsLocal(p.filename) {
			return fmt.Errorf("%s's Filename %q is not a path in the archive", name, p.filename)
		}
		deb := filepath.Join(work, filepath.Base(p.filename))
		if err := download(ctx, mirror+"/"+p.filename, deb, p.sha256); err != nil {
			return err
		}
		if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", deb, root).CombinedOutput(); err != nil {
			return fmt.Errorf("dpkg-deb -x %s: %w: %s", deb, err, out)
		}
		if err := os.Remove(deb); err != nil {
			return err
		}
	}

	// The JIT provider goes: it links LLVM, which is not unpacked, and a server that finds the provider but
	// cannot load it fails every query costly enough for JIT ("could not load library llvmjit.so"), where
	// one without it runs them without JIT.
	pglibDir := filepath.Join(filepath.Dir(bin), "lib")
	jit, _ := filepath.Glob(filepath.Join(pglibDir, "llvmjit*"))
	for _, p := range append(jit, filepath.Join(pglibDir, "bitcode")) {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}

	// The programs run on trixie's loader and libraries: DT_RPATH (not RUNPATH) so that it also serves
	// the libraries they load, and the modules the server loads.
	libs := filepath.Join(root, "usr", "lib", triplet)
	pglib := filepath.Join(filepath.Dir(bin), "lib")
	rpath := strings.Join([]string{libs, pglib, "/usr/lib/" + triplet, "/lib/" + triplet}, ":")
	interp := filepath.Join(libs, loader)
	entries, err := os.ReadDir(bin)
	if err != nil {
		return err
	}
	var programs []string
	for _, e := range entries {
		p := filepath.Join(bin, e.Name())
		if !e.Type().IsRegular() || !isELF(p) {
			continue
		}
		programs = append(programs, p)
		if out, err := exec.CommandContext(ctx, "patchelf", "--set-interpreter", interp, "--force-rpath", "--set-rpath", rpath, p).CombinedOutput(); err != nil {
			return fmt.Errorf("patchelf %s: %w: %s", p, err, out)
		}
	}
	if err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
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
		mode := info.Mode().Perm() | 0o444
		if d.IsDir() || info.Mode().Perm()&0o100 != 0 {
			mode |= 0o111
		}
		return os.Chmod(p, mode)
	}); err != nil {
		return err
	}
	// Every program and module finds all its libraries.
	mods, err := filepath.Glob(filepath.Join(pglib, "*.so"))
	if err != nil {
		return err
	}
	for _, p := range append(programs, mods...) {
		out, err := exec.CommandContext(ctx, interp, "--library-path", libs+":"+pglib, "--list", p).CombinedOutput()
		if err != nil || bytes.Contains(out, []byte("not found")) {
			return fmt.Errorf("the libraries of %s: %v: %s", p, err, out)
		}
	}
	return nil
}

// debianMirror is the machine's Debian mirror: the first URI of its apt sources serving a Debian suite
// (not the security archive).
func debianMirror() (string, error) {
	var uris []string
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "URIs:"); ok {
				uris = append(uris, strings.Fields(v)...)
			}
		}
	}
	lists, _ := filepath.Glob("/etc/apt/sources.list.d/*.list")
	for _, f := range append([]string{"/etc/apt/sources.list"}, lists...) {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			fields := strings.Fields(line)
			for i, f := range fields {
				if i > 0 && fields[0] == "deb" && strings.Contains(f, "://") {
					uris = append(uris, f)
					break
				}
			}
		}
	}
	for _, u := range uris {
		u = strings.TrimSuffix(u, "/")
		if strings.HasSuffix(u, "/debian") {
			return u, nil
		}
	}
	return "", errors.New("no Debian mirror (a URI ending in /debian) in the apt sources of this machine")
}

// download fetches url into path and checks its SHA-256 when sum is given.
func download(ctx context.Context, url, path, sum string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(f, h), resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("GET %s: %w", url, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); sum != "" && got != sum {
		return fmt.Errorf("GET %s: SHA-256 %s, the signed index says %s", url, got, sum)
	}
	return nil
}

// releaseSHA256 is the SHA-256 a Release file gives for path (in its SHA256 section).
func releaseSHA256(release, path string) string {
	in := false
	for _, line := range strings.Split(release, "\n") {
		if !strings.HasPrefix(line, " ") {
			in = strings.HasPrefix(line, "SHA256:")
			continue
		}
		if f := strings.Fields(line); in && len(f) == 3 && f[2] == path {
			return f[0]
		}
	}
	return ""
}

type debPackage struct{ filename, sha256 string }

// parsePackages reads a Packages list: each package's Filename and SHA256 (the first stanza of a name).
func parsePackages(list []byte) map[string]debPackage {
	out := map[string]debPackage{}
	var name string
	var p debPackage
	flush := func() {
		if _, seen := out[name]; name != "" && !seen {
			out[name] = p
		}
		name, p = "", debPackage{}
	}
	sc := bufio.NewScanner(bytes.NewReader(list))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			flush()
			continue
		}
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		switch k {
		case "Package":
			name = v
		case "Filename":
			p.filename = v
		case "SHA256":
			p.sha256 = v
		}
	}
	flush()
	return out
}

// isELF reports whether the file starts with ELF's magic number (not a script).
func isELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err != nil {
		return false
	}
	return bytes.Equal(magic, []byte("\x7fELF"))
}
