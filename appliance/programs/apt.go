package programs

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
)

// aptUsable reports whether this process can install Debian packages: root, on Debian or Ubuntu, with
// apt-get.
func aptUsable() bool {
	if os.Geteuid() != 0 {
		return false
	}
	if _, err := os.Stat("/etc/debian_version"); err != nil {
		return false
	}
	_, err := exec.LookPath("apt-get")
	return err == nil
}

// installMissing installs the packages of the programs s lacks, in one apt-get call (after an apt-get
// update if the first try cannot find a package). withPG includes PostgreSQL's own packages (not when the
// operator named a bin directory).
func (o Options) installMissing(ctx context.Context, s *Set, withPG bool) error {
	var pkgs []string
	for _, f := range s.Missing() {
		if (f.PGBin && !withPG) || slices.Contains(pkgs, f.Package) {
			continue
		}
		pkgs = append(pkgs, f.Package)
	}
	if len(pkgs) == 0 || !aptUsable() {
		return nil
	}
	if err := AptInstall(ctx, o.Log, o.apt, pkgs...); err != nil {
		return err
	}
	s.Install = pkgs
	return nil
}

// aptMu serialises apt-get runs of this process (dpkg takes its own lock across processes).
var aptMu sync.Mutex

// AptInstall installs Debian packages with apt-get, logging its output line by line; when a package is
// not found it runs apt-get update and tries once more. run replaces apt-get in tests (nil: the real one).
func AptInstall(ctx context.Context, log *slog.Logger, run func(ctx context.Context, log *slog.Logger, args ...string) error, pkgs ...string) error {
	if run == nil {
		run = runApt
	}
	aptMu.Lock()
	defer aptMu.Unlock()
	log.Info("installing missing programs with apt-get", "packages", strings.Join(pkgs, " "))
	install := append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)
	if err := run(ctx, log, install...); err == nil {
		return nil
	}
	if err := run(ctx, log, "update"); err != nil {
		return fmt.Errorf("apt-get update: %w", err)
	}
	if err := run(ctx, log, install...); err != nil {
		return fmt.Errorf("apt-get install %s: %w (install them yourself, or run with --no-install and a --pg-bin)", strings.Join(pkgs, " "), err)
	}
	return nil
}

func runApt(ctx context.Context, log *slog.Logger, args ...string) error {
	cmd := exec.CommandContext(ctx, "apt-get", args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			log.Info("apt-get", "line", sc.Text())
		}
		io.Copy(io.Discard, pr)
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	return err
}
