package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/store"
)

// OutputTail is how much of a command's stdout and of its stderr Exec keeps (the end of each).
const OutputTail = 64 << 10

// errorTail bounds the stderr quoted in Exec's error (which becomes the job's error).
const errorTail = 2 << 10

// Run is what a handler gets: a copy of its job and helpers that record external commands on the job.
type Run struct {
	Job store.Job

	runner *Runner
	claim  *store.Job // the claim as stored: recording applies only while the job is still this claim
	mu     sync.Mutex
}

// DecodePayload decodes the job's JSON payload into v (a null or empty payload leaves v unchanged).
func (r *Run) DecodePayload(v any) error {
	if len(r.Job.Payload) == 0 || string(r.Job.Payload) == "null" {
		return nil
	}
	if err := json.Unmarshal(r.Job.Payload, v); err != nil {
		return fmt.Errorf("decode %s job payload: %w", r.Job.Type, err)
	}
	return nil
}

// Exec runs an external command (no shell is involved: cmd carries its program and arguments), recording
// its stdout, stderr (the last OutputTail bytes of each) and exit code (-1 when it could not start or was
// killed by a signal) on the job as soon as it ends, so they show while the job goes on. Writers already set
// on cmd.Stdout/cmd.Stderr still receive the output. ctx ending kills the command.
//
// A failure returns an error naming the program (not its arguments, which may hold secrets), its exit code
// and the end of its stderr. Exec does not mark errors Transient: the handler decides.
func (r *Run) Exec(ctx context.Context, cmd *exec.Cmd) error {
	name := commandName(cmd)
	stdout, stderr := &tailBuffer{max: OutputTail}, &tailBuffer{max: OutputTail}
	cmd.Stdout = teeWriter(cmd.Stdout, stdout)
	cmd.Stderr = teeWriter(cmd.Stderr, stderr)
	if cmd.WaitDelay == 0 {
		// Children that inherited the output pipes must not keep Wait blocked after a kill.
		cmd.WaitDelay = 5 * time.Second
	}

	code := -1
	var runErr error
	if err := cmd.Start(); err != nil {
		runErr = fmt.Errorf("start %s: %w", name, err)
	} else {
		stop := context.AfterFunc(ctx, func() { _ = daemon.Kill(cmd) })
		werr := cmd.Wait()
		stop()
		code = cmd.ProcessState.ExitCode()
		var exitErr *exec.ExitError
		switch {
		case werr == nil:
		case ctx.Err() != nil:
			runErr = fmt.Errorf("%s was stopped: %w", name, context.Cause(ctx))
		case errors.As(werr, &exitErr) && code >= 0:
			runErr = fmt.Errorf("%s exited with code %d%s", name, code, quote(stderr.Tail(errorTail)))
		case errors.As(werr, &exitErr):
			runErr = fmt.Errorf("%s was killed (%v)%s", name, exitErr, quote(stderr.Tail(errorTail)))
		default:
			runErr = fmt.Errorf("%s: %w%s", name, werr, quote(stderr.Tail(errorTail)))
		}
	}
	r.record(stdout.Tail(OutputTail), stderr.Tail(OutputTail), code)
	return runErr
}

// record stores a command's output and exit code on the job and on r.Job.
func (r *Run) record(stdout, stderr string, code int) {
	r.mu.Lock()
	r.Job.LastStdout, r.Job.LastStderr, r.Job.LastExitCode = stdout, stderr, &code
	r.mu.Unlock()
	if r.runner == nil { // a Run made by a test of a handler, outside a runner
		return
	}
	_, err := r.runner.settle(r.claim, func(cur *store.Job, _ time.Time) {
		c := code
		cur.LastStdout, cur.LastStderr, cur.LastExitCode = stdout, stderr, &c
	})
	if err != nil {
		r.runner.log.Error("record command output", "job", r.claim.ID, "err", err)
	}
}

func commandName(cmd *exec.Cmd) string {
	switch {
	case cmd.Path != "":
		return filepath.Base(cmd.Path)
	case len(cmd.Args) > 0:
		return filepath.Base(cmd.Args[0])
	}
	return "command"
}

func quote(tail string) string {
	tail = strings.TrimSpace(tail)
	if tail == "" {
		return ""
	}
	return ": " + tail
}

func teeWriter(existing io.Writer, tail *tailBuffer) io.Writer {
	if existing == nil {
		return tail
	}
	return io.MultiWriter(existing, tail)
}

// tailBuffer keeps the last bytes written to it (at least max; trimmed in amortised steps).
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return len(p), nil
	}
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		n := copy(t.buf, t.buf[len(t.buf)-t.max:])
		t.buf = t.buf[:n]
	}
	return len(p), nil
}

// Tail returns at most the last n bytes, starting at a UTF-8 character boundary.
func (t *tailBuffer) Tail(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if len(b) > n {
		b = b[len(b)-n:]
		for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
		}
	}
	return string(b)
}

// Progress stores v (JSON) as the running job's result, for those who read the job while it runs (a long
// job's steps and counts); the handler's own result replaces it when the job ends.
func (r *Run) Progress(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.Job.Result = b
	r.mu.Unlock()
	if r.runner == nil {
		return nil
	}
	_, err = r.runner.settle(r.claim, func(cur *store.Job, _ time.Time) { cur.Result = b })
	return err
}
