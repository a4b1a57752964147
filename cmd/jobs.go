package cmd

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/api"
)

// Client commands that start a job (create a project, take a backup, restore ...) answer at once with the
// job; with --wait they follow it here until it ends.

// jobPollInterval is how often --wait asks for the job's state.
const jobPollInterval = 250 * time.Millisecond

// stderrTailLines is how much of a failed job's last stderr is shown.
const stderrTailLines = 20

// Job states that end a job.
const (
	jobCompleted = "completed"
	jobFailed    = "failed"
)

func jobPath(id string) string { return "/v1/jobs/" + seg(id) }

// waitJob polls GET /v1/jobs/{id} every jobPollInterval until the job completes or fails, and prints
// only its end. A failed job is an error carrying the job's error; the tail of its last stderr goes to
// standard error. Ctrl-C (or the command's context ending) stops the waiting, not the job.
func waitJob(c *cobra.Command, cl *apiClient, job *api.Job) (*api.Job, error) {
	ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt)
	defer stop()
	stopped := func(err error) error {
		return fmt.Errorf("stopped waiting for job %s (%s), which keeps running on the server (GET %s): %w", job.ID, job.Type, jobPath(job.ID), err)
	}
	j, transient := job, 0
	for j.State != jobCompleted && j.State != jobFailed {
		if err := sleepCtx(ctx, jobPollInterval); err != nil {
			return nil, stopped(err)
		}
		var res api.JobResponse
		err := cl.do(ctx, http.MethodGet, jobPath(job.ID), nil, &res)
		switch {
		case err == nil && res.Job != nil:
			j, transient = res.Job, 0
		case err == nil:
			return nil, fmt.Errorf("GET %s: unexpected response: no job", jobPath(job.ID))
		case ctx.Err() != nil:
			return nil, stopped(ctx.Err())
		default:
			after, retry := retryPoll(err, &transient)
			if !retry {
				return nil, fmt.Errorf("wait for job %s (%s): %w", job.ID, job.Type, err)
			}
			if err := sleepCtx(ctx, after); err != nil {
				return nil, stopped(err)
			}
		}
	}
	if j.State == jobFailed {
		errw := c.ErrOrStderr()
		fmt.Fprintf(errw, "Job %s (%s) failed after %d attempt(s).\n", j.ID, j.Type, j.Attempts)
		if tail := lastLines(j.LastStderr, stderrTailLines); tail != "" {
			fmt.Fprintf(errw, "Last stderr:\n%s\n", "  "+strings.ReplaceAll(tail, "\n", "\n  "))
		}
		return j, fmt.Errorf("job %s (%s) failed: %s", j.ID, j.Type, firstNonEmpty(j.Error, "(no error message)"))
	}
	fmt.Fprintf(c.OutOrStdout(), "Job %s (%s) completed.\n", j.ID, j.Type)
	return j, nil
}

// retryPoll says whether a poll that failed with err is tried again, and after how long (besides the
// polling interval): a 429 after its Retry-After; a network or server error (5xx) at once, up to three
// times in a row (transient counts them; a poll that succeeds resets it). Anything else ends the polling.
func retryPoll(err error, transient *int) (after time.Duration, retry bool) {
	var ae *APIError
	switch {
	case errors.As(err, &ae) && ae.Status == http.StatusTooManyRequests:
		return ae.RetryAfter, true
	case (ae == nil || ae.Status >= 500) && *transient < 3:
		*transient++
		return 0, true
	}
	return 0, false
}

// lastLines returns the last n lines of s, without trailing blank lines.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, " \t\r\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// jobStarted prints the job a command started, and what to do to follow it.
func jobStarted(c *cobra.Command, what string, j *api.Job, wait bool) {
	fmt.Fprintf(c.OutOrStdout(), "%s: job %s (%s).\n", what, j.ID, j.Type)
	if !wait {
		fmt.Fprintf(c.ErrOrStderr(), "The job runs on the server; pass --wait to wait for it, or follow GET %s.\n", jobPath(j.ID))
	}
}
