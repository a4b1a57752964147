// Package apt installs Debian packages with apt-get: the one way the appliance (and its test suite)
// obtains the programs it runs on Debian and Ubuntu.
package apt

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// Usable reports whether this process can install packages: root, on Debian or Ubuntu, with apt-get.
func Usable() bool {
	if os.Geteuid() != 0 {
		return false
	}
	if _, err := os.Stat("/etc/debian_version"); err != nil {
		return false
	}
	_, err := exec.LookPath("apt-get")
	return err == nil
}

// Runner runs one apt-get command line (tests replace the real one).
type Runner func(ctx context.Context, log *slog.Logger, args ...string) error

// mu serialises the installs of this process; a file lock serialises processes (go test runs packages
// in parallel, each of which may find something missing).
var mu sync.Mutex

// Install installs packages with apt-get, logging its output line by line; when the first try fails
// (a fresh machine has no package lists) it runs apt-get update and tries once more. still, when not nil,
// is asked after the lock is taken which of pkgs are still missing (another process may have installed
// them meanwhile). run nil means the real apt-get.
func Install(ctx context.Context, log *slog.Logger, run Runner, still func([]string) []string, pkgs ...string) error {
	if run == nil {
		run = runAptGet
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mu.Lock()
	defer mu.Unlock()
	unlock, err := lockFile(filepath.Join(os.TempDir(), "appliance-apt.lock"))
	if err != nil {
		return err
	}
	defer unlock()
	if still != nil {
		pkgs = still(pkgs)
	}
	if len(pkgs) == 0 {
		return nil
	}
	log.Info("installing missing packages with apt-get", "packages", strings.Join(pkgs, " "))
	install := append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)
	if err := run(ctx, log, install...); err == nil {
		return nil
	}
	if err := run(ctx, log, "update"); err != nil {
		return fmt.Errorf("apt-get update: %w", err)
	}
	if err := run(ctx, log, install...); err != nil {
		return fmt.Errorf("apt-get install %s: %w", strings.Join(pkgs, " "), err)
	}
	return nil
}

func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("apt lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("apt lock: %w", err)
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

func runAptGet(ctx context.Context, log *slog.Logger, args ...string) error {
	cmd := exec.CommandContext(ctx, "apt-get", append([]string{"-o", "DPkg::Lock::Timeout=300"}, args...)...)
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
