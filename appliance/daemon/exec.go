package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ExecFunc runs a prepared command to its end and returns an error naming it when it fails. Jobs pass
// scheduler.Run.Exec so that the stdout, stderr and exit code of every tool are recorded on the job;
// DefaultExec is the plain version.
type ExecFunc func(ctx context.Context, cmd *exec.Cmd) error

// DefaultExec runs cmd (killing it when ctx ends) and puts the end of its stderr into the error.
func DefaultExec(ctx context.Context, cmd *exec.Cmd) error {
	var stderr bytes.Buffer
	if cmd.Stderr == nil {
		cmd.Stderr = &stderr
	}
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = 5 * time.Second // a daemon that inherited the pipes must not keep Wait blocked
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", filepath.Base(cmd.Path), err)
	}
	stop := context.AfterFunc(ctx, func() { _ = Kill(cmd) })
	err := cmd.Wait()
	stop()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s was stopped: %w", filepath.Base(cmd.Path), context.Cause(ctx))
	}
	msg := strings.TrimSpace(stderr.String())
	if len(msg) > 2000 {
		msg = msg[len(msg)-2000:]
	}
	if msg != "" {
		msg = ": " + msg
	}
	return fmt.Errorf("%s: %w%s", filepath.Base(cmd.Path), err, msg)
}

// OrDefault is ex, or DefaultExec when ex is nil.
func OrDefault(ex ExecFunc) ExecFunc {
	if ex == nil {
		return DefaultExec
	}
	return ex
}
