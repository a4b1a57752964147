//go:build testhooks

package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/httpapi"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Test builds (-tags testhooks) carry a diagnostic job type and a route to enqueue it, so end-to-end tests
// can crash the binary in the middle of a job. Release builds have neither (testhooks_off.go).

// testSleepJob is the payload of a "test.sleep" job.
type testSleepJob struct {
	Seconds float64 `json:"seconds" api:"required" doc:"how long the handler sleeps (honouring cancellation)"`
	Marker  string  `json:"marker" doc:"file the handler appends a line to when it starts"`
}

// testSleepResult is the result of a "test.sleep" job.
type testSleepResult struct {
	Slept float64 `json:"slept"`
}

// TestJobPauseEnv names a job step (see appliance.JobStepHook; several: a comma-separated list) at which
// every restore or cutover job of a test build stops: it appends "<job id> <step>" to the file TestJobPauseMarkerEnv names, then blocks
// until the process stops, so that a test can SIGKILL the appliance at exactly that moment.
//
// TestJobPauseArmEnv, when set, names a file that arms the steps: a job stops only at a step the file has
// a line of, and goes on as soon as the test removes that line (it has done what it held the job for),
// or when the step's own bound ends (the hook's context); steps it does not list pass at once.
const (
	TestJobPauseEnv       = "APPLIANCE_TEST_JOB_PAUSE"
	TestJobPauseMarkerEnv = "APPLIANCE_TEST_JOB_PAUSE_MARKER"
	TestJobPauseArmEnv    = "APPLIANCE_TEST_JOB_PAUSE_ARM"
)

// testJobStepHook is the service's job-step hook (Deps.JobStepHook): nil unless TestJobPauseEnv names a
// step.
func testJobStepHook() appliance.JobStepHook {
	step := os.Getenv(TestJobPauseEnv)
	if step == "" {
		return nil
	}
	marker, arm := os.Getenv(TestJobPauseMarkerEnv), os.Getenv(TestJobPauseArmEnv)
	steps := strings.Split(step, ",") // several steps: a comma-separated list
	return func(ctx context.Context, jobID, at string) {
		if !slices.Contains(steps, at) || arm != "" && !armed(arm, at) {
			return
		}
		if marker != "" {
			appendLine(marker, jobID+" "+at)
		}
		if arm == "" {
			<-ctx.Done()
			return
		}
		for armed(arm, at) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// armed tells whether the arm file at path has a line step.
func armed(path, step string) bool {
	b, err := os.ReadFile(path)
	return err == nil && slices.Contains(strings.Split(string(b), "\n"), step)
}

func registerTestHooks(runner *scheduler.Runner) {
	runner.Handle("test.sleep", func(ctx context.Context, run *scheduler.Run) (any, error) {
		var p testSleepJob
		if err := run.DecodePayload(&p); err != nil {
			return nil, err
		}
		if p.Marker != "" {
			if err := appendLine(p.Marker, fmt.Sprintf("%s attempt %d started", run.Job.ID, run.Job.Attempts)); err != nil {
				return nil, fmt.Errorf("write marker: %w", err)
			}
		}
		t := time.NewTimer(time.Duration(p.Seconds * float64(time.Second)))
		defer t.Stop()
		select {
		case <-t.C:
			return testSleepResult{Slept: p.Seconds}, nil
		case <-ctx.Done():
			return nil, scheduler.Transient(ctx.Err())
		}
	})
}

// appendLine appends a line to the file at path (a test's marker), creating it.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, line)
	return errors.Join(err, f.Close())
}

func testRoutes(svc *appliance.Service, runner *scheduler.Runner) []httpapi.Route {
	return []httpapi.Route{{
		Method: http.MethodPost, Path: "/v1/test/jobs", Tag: "test", Auth: httpapi.Authenticated,
		Scope: api.ScopeJobsRead, Status: http.StatusAccepted,
		Summary: "Enqueue a test.sleep job (test builds only)",
		Do: httpapi.With(func(r *httpapi.Request, body *testSleepJob) (*api.JobResponse, error) {
			if body.Seconds < 0 || body.Seconds > 3600 {
				return nil, appliance.Invalid("seconds must be between 0 and 3600")
			}
			payload, err := json.Marshal(body)
			if err != nil {
				return nil, appliance.Internal(err, "encode payload")
			}
			j := &store.Job{Type: "test.sleep", OrganizationID: r.Principal.OrganizationID,
				ProjectID: r.Principal.ProjectID, LockedResource: "test", Payload: payload}
			if err := svc.DB().Update(func(tx *store.Tx) error { return scheduler.Enqueue(tx, j) }); err != nil {
				return nil, appliance.Internal(err, "enqueue test job")
			}
			runner.Notify()
			return &api.JobResponse{Job: appliance.JobView(j)}, nil
		}),
	}, {
		// Until placement moves projects between nodes, the node-loss tests move one by hand: the store's
		// Project.NodeID, as a restore on another node sets it.
		Method: http.MethodPost, Path: "/v1/test/projects/{projectID}/node", Tag: "test", Auth: httpapi.Authenticated,
		Scope: api.ScopeProjectsWrite, Status: http.StatusOK,
		Summary: "Set the node a project is hosted on (test builds only)",
		Do: httpapi.With(func(r *httpapi.Request, body *testProjectNode) (*testProjectNode, error) {
			err := svc.DB().Update(func(tx *store.Tx) error {
				p, err := store.Projects.Get(tx, r.PathValue("projectID"))
				if err != nil {
					return err
				}
				if p.OrganizationID != r.Principal.OrganizationID {
					return store.ErrNotFound
				}
				if _, err := store.Nodes.Get(tx, body.NodeID); err != nil {
					return appliance.Invalid("no such node: %s", body.NodeID)
				}
				store.MoveProject(p, body.NodeID)
				return store.Projects.Put(tx, p)
			})
			if errors.Is(err, store.ErrNotFound) {
				return nil, appliance.NotFound("project not found")
			}
			return body, err
		}),
	}}
}

// testProjectNode is the body of POST /v1/test/projects/{projectID}/node.
type testProjectNode struct {
	NodeID string `json:"node_id" api:"required" doc:"the node that hosts the project from now on"`
}
