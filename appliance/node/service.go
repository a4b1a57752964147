package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/theappliance/appliance/appliance/daemon"
)

// The appliance as a systemd service (`appliance install`): the unit runs `up` as root (it starts the
// instances as their unprivileged OS user itself) under ProtectSystem=strict, where the whole file system
// is read-only but the paths the unit lists in ReadWritePaths= and a private /tmp. ServicePaths says which
// paths those are, from the settings: every path setting of Config is either one up writes (in
// writtenPaths) or one it only reads (in readPaths), and a setting in neither list fails the tests.

// writtenPaths are the settings naming a path up writes under (the directory itself, or a file's
// directory): the data directory (metadata, CA, certificates, instances, backups, the embedded
// PostgreSQL), and embedded-postgres' archive cache.
var writtenPaths = []string{"DataDir", "PGEmbeddedCache"}

// readPaths are the settings naming a path up only reads, or one a service does not have (EnvFile: only
// with Ephemeral, which a service is not).
var readPaths = []string{"ConfigFile", "PlansFile", "ACMECARoot", "PGBin", "BackupStoreCredentialsFile",
	"BackupStoreKeyFile", "StripeSecretKeyFile", "StripeWebhookSecretFile", "EnvFile", "IntegrationsOAuthFile"}

// ServicePaths are the directories a service running up with cfg must be able to write, absolute, each
// once: the data directory and embedded-postgres' archive cache (its default, ~/.embedded-postgres-go of
// root's home, when cfg names none). The temporary directory is not among them: the unit gives the service
// a private /tmp.
func ServicePaths(cfg Config) ([]string, error) {
	if cfg.Ephemeral {
		return nil, fmt.Errorf("a service is not ephemeral: --ephemeral removes its data at the exit")
	}
	v := reflect.ValueOf(cfg)
	var out []string
	for _, name := range writtenPaths {
		p := v.FieldByName(name).String()
		if name == "PGEmbeddedCache" && p == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return nil, fmt.Errorf("embedded-postgres' cache: %w (give --pg-embedded-cache)", err)
			}
			p = filepath.Join(home, ".embedded-postgres-go")
		}
		if p == "" {
			return nil, fmt.Errorf("node: %s is empty", name)
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		if strings.ContainsAny(abs, " \t\n\"'\\%") {
			// A unit's ReadWritePaths= splits on white space and expands %: keep paths plain.
			return nil, fmt.Errorf("%s: a service's writable path may not hold white space, quotes, backslashes or %%", abs)
		}
		out = append(out, abs)
	}
	return uniq(out...), nil
}

// ServiceFileLimit is the open-files limit (LimitNOFILE=) of a service running up with cfg: what its
// connection caps take (fdBudget's sum: the API's connections, two descriptors per key-value connection
// on each of the two fronts, and the reserve), at least 65536.
func ServiceFileLimit(cfg Config) uint64 {
	need := uint64(fdReserve + max(cfg.MaxConnections, 0) + 4*max(cfg.KVMaxConnections, 0))
	return max(need, 65536)
}

// PrepareService makes ready, while unconfined, what a service under ProtectSystem=strict could not:
// the instances' OS user (useradd writes /etc), the programs up needs (apt-get writes /usr and /var; the
// embedded PostgreSQL is unpacked into the data directory), and the writable paths themselves (a
// ReadWritePaths= entry must exist when the service starts). It returns doctor's failed checks as an
// error.
func PrepareService(ctx context.Context, cfg Config, log *slog.Logger) error {
	paths, err := ServicePaths(cfg)
	if err != nil {
		return err
	}
	for _, p := range paths {
		if err := os.MkdirAll(p, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", p, err)
		}
	}
	if _, err := daemon.EnsureOSUser(firstNonEmpty(cfg.PGUser, daemon.DefaultOSUserName())); err != nil {
		return err
	}
	checks, _ := Doctor{Install: true, Log: log}.Run(ctx, cfg)
	var failed []string
	for _, c := range checks {
		if c.Level == LevelFail {
			failed = append(failed, fmt.Sprintf("%s: %s (fix: %s)", c.Name, c.Detail, c.Fix))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("the service could not start (appliance doctor shows every check):\n  %s", strings.Join(failed, "\n  "))
	}
	return nil
}
