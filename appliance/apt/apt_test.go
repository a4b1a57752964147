package apt_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance/apt"
)

// TestInstallUpdatesOnce: a failed install is retried once after apt-get update, and only what is still
// missing once the lock is held is installed.
func TestInstallUpdatesOnce(t *testing.T) {
	var calls []string
	fails := 1
	run := func(_ context.Context, _ *slog.Logger, args ...string) error {
		calls = append(calls, strings.Join(args, " "))
		if args[0] == "install" && fails > 0 {
			fails--
			return errors.New("E: Unable to locate package pgbouncer")
		}
		return nil
	}
	still := func(pkgs []string) []string { return pkgs[1:] } // another process installed the first
	if err := apt.Install(t.Context(), nil, run, still, "nodejs", "pgbouncer", "redis-server"); err != nil {
		t.Fatal(err)
	}
	want := []string{"install -y --no-install-recommends pgbouncer redis-server", "update", "install -y --no-install-recommends pgbouncer redis-server"}
	if strings.Join(calls, "|") != strings.Join(want, "|") {
		t.Errorf("calls %q, want %q", calls, want)
	}
	calls = nil
	if err := apt.Install(t.Context(), nil, run, func([]string) []string { return nil }, "pgbouncer"); err != nil || len(calls) != 0 {
		t.Errorf("nothing missing still ran apt-get: %q %v", calls, err)
	}
}
