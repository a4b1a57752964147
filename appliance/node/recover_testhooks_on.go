//go:build testhooks

package node

import (
	"context"
	"os"
	"strconv"
	"sync/atomic"
)

// TestRecoverPauseEnv makes recover of a test build stop the N-th project (1 the first) to reach the step
// "base-fetched" (its base backup in its new directory, nothing started): it appends "<project id>
// base-fetched" to the file TestRecoverPauseMarkerEnv names, then blocks until the process stops, so that
// a test can kill recover with a project half restored.
const (
	TestRecoverPauseEnv       = "APPLIANCE_TEST_RECOVER_PAUSE"
	TestRecoverPauseMarkerEnv = "APPLIANCE_TEST_RECOVER_PAUSE_MARKER"
)

// recoverTestHook is appliance.RecoverOptions.Hook: nil unless TestRecoverPauseEnv is set.
func recoverTestHook() func(ctx context.Context, projectID, step string) {
	n, err := strconv.Atoi(os.Getenv(TestRecoverPauseEnv))
	if err != nil || n < 1 {
		return nil
	}
	marker := os.Getenv(TestRecoverPauseMarkerEnv)
	var seen atomic.Int64
	return func(ctx context.Context, projectID, step string) {
		if step != "base-fetched" || seen.Add(1) != int64(n) {
			return
		}
		appendLine(marker, projectID+" "+step)
		<-ctx.Done()
	}
}
