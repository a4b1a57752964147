// Package testtools gets a machine ready for the test suite: on a fresh Debian or Ubuntu machine, as root,
// it installs with apt-get (the appliance's own way of obtaining programs) what the tests run — PostgreSQL
// 15 with the extensions the tests enable, PgBouncer, Redis and its CLI, Node for the OpenAPI linter and
// the dashboard's tests, and Debian's Chromium for the dashboard's browser test.
// Each test package that runs external programs calls Main from its TestMain, so `go test ./...` alone
// sets the machine up.
package testtools

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/apt"
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
	{"xz-utils", "xz"}, // the embedded-postgres test packs a distribution
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

// Main is a test package's TestMain: it readies the machine, then runs the tests. Under CI a machine that
// cannot be readied fails at once; elsewhere the tests run and those needing what is missing fail (or
// skip) with their own message.
func Main(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	err := Ensure(ctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtools:", err)
		if os.Getenv("CI") != "" {
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}
