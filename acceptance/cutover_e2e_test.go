package acceptance

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestCutoverSurvivesCrash SIGKILLs the real binary in the middle of a cutover's promotion, at each
// moment a test build's cutover.promote job stops at (APPLIANCE_TEST_JOB_PAUSE):
//   - "cutover-staged": the preview's data is in the staging database; the project must still serve its
//     own data while the appliance is dead;
//   - "cutover-swapped": the staging database has the project database's name; the project serves the
//     preview's data already.
//
// After the restart the retried promotion completes, the project's unchanged URLs (direct and pooled) serve
// exactly the preview's data, no staging or previous database is left, the request is completed and the
// preview deleted. It needs PostgreSQL and PgBouncer.
func TestCutoverSurvivesCrash(t *testing.T) {
	t.Parallel()
	c := e2eCrashSetup(t, "promoted")
	bin, dataDir, markers, phase, p, key, prjID := c.bin, c.dataDir, c.markers, c.phase, c.p, c.key, c.projectID
	conns := p.connections(t, key, prjID)
	e2eSQL(t, conns.DirectURL, false, "CREATE TABLE items (v int PRIMARY KEY)", "INSERT INTO items SELECT g FROM generate_series(1, 10) g")
	phase("provisioned")

	for round, step := range []string{"cutover-staged", "cutover-swapped"} {
		// A clone with rows of its own; the project then writes rows the cutover must drop.
		var prv struct {
			Job     *e2eJob `json:"job"`
			Preview struct {
				ID string `json:"id"`
			} `json:"preview"`
		}
		p.do(t, key, http.MethodPost, "/v1/projects/"+prjID+"/preview-databases", map[string]any{"name": fmt.Sprintf("round-%d", round)},
			http.StatusAccepted, &prv)
		if j := waitJobFor(t, p, key, prv.Job.ID, restoreDeadline); j.State != "completed" {
			t.Fatalf("preview %s: %q", j.State, j.Error)
		}
		var pc struct {
			Connections e2eConnections `json:"connections"`
		}
		p.do(t, key, http.MethodGet, "/v1/preview-databases/"+prv.Preview.ID+"/connections", nil, http.StatusOK, &pc)
		e2eSQL(t, pc.Connections.DirectURL, false, fmt.Sprintf("INSERT INTO items SELECT g FROM generate_series(%d, %d) g", 100*(round+1), 100*(round+1)+4))
		e2eSQL(t, conns.DirectURL, false, fmt.Sprintf("INSERT INTO items VALUES (%d)", 1000*(round+1)))
		want := itemsState(t, pc.Connections.DirectURL, false)
		old := itemsState(t, conns.DirectURL, false)
		p.stop(t, syscall.SIGTERM)

		marker := filepath.Join(markers, step)
		p = e2eStartEnv(t, bin, dataDir, "APPLIANCE_TEST_JOB_PAUSE="+step, "APPLIANCE_TEST_JOB_PAUSE_MARKER="+marker)
		var req struct {
			CutoverRequest struct {
				ID     string `json:"id"`
				Status string `json:"status"`
			} `json:"cutover_request"`
			Job *e2eJob `json:"job"`
		}
		p.do(t, key, http.MethodPost, "/v1/projects/"+prjID+"/cutover-requests", map[string]any{"preview_id": prv.Preview.ID}, http.StatusCreated, &req)
		reqID := req.CutoverRequest.ID
		p.do(t, key, http.MethodPost, "/v1/projects/"+prjID+"/cutover-requests/"+reqID+"/approve", map[string]any{}, http.StatusAccepted, &req)
		promote := req.Job.ID
		waitMarker(t, p, marker, promote+" "+step)
		p.stop(t, syscall.SIGKILL)

		// The moment the hook stopped at is the one it names; the instance outlives the appliance.
		switch got := itemsState(t, conns.DirectURL, false); step {
		case "cutover-staged":
			if got != old {
				t.Fatalf("%s: the project reads %s while the appliance is dead; want its own %s", step, got, old)
			}
		case "cutover-swapped":
			if got != want {
				t.Fatalf("%s: the project reads %s; want the preview's %s", step, got, want)
			}
		}
		phase(fmt.Sprintf("round %d: appliance SIGKILLed at %s", round+1, step))

		p = e2eStart(t, bin, dataDir)
		if j := waitJobFor(t, p, key, promote, restoreDeadline); j.State != "completed" || j.Attempts != 2 {
			t.Fatalf("%s: promotion %s after %d attempts: %q\n%s", step, j.State, j.Attempts, j.Error, j.LastStderr)
		}
		for name, u := range map[string]struct {
			url    string
			pooled bool
		}{"direct": {conns.DirectURL, false}, "pooled": {conns.PooledURL, true}} {
			if got := itemsState(t, u.url, u.pooled); got != want {
				t.Fatalf("%s: %s reads %s; want the preview's %s (the project had %s)", step, name, got, want, old)
			}
		}
		p.do(t, key, http.MethodGet, "/v1/projects/"+prjID+"/cutover-requests/"+reqID, nil, http.StatusOK, &req)
		if req.CutoverRequest.Status != "completed" {
			t.Fatalf("%s: request %s", step, req.CutoverRequest.Status)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		conn := e2eConnect(ctx, t, conns.DirectURL, false)
		var left int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname LIKE 'appliance_%cutover_%'").Scan(&left)
		conn.Close(context.Background())
		cancel()
		if err != nil || left != 0 {
			t.Fatalf("%s: %d cutover databases left (%v)", step, left, err)
		}
		e2eEventually(t, e2eDeadline, "the promoted preview to be deleted", func() (bool, string) {
			var list struct {
				PreviewDatabases []struct {
					ID    string `json:"id"`
					State string `json:"state"`
				} `json:"preview_databases"`
			}
			p.do(t, key, http.MethodGet, "/v1/projects/"+prjID+"/preview-databases", nil, http.StatusOK, &list)
			return len(list.PreviewDatabases) == 0, fmt.Sprint(list.PreviewDatabases)
		})
		phase(fmt.Sprintf("round %d: restarted; the retried promotion completed with the preview's data", round+1))
	}
	p.stop(t, syscall.SIGTERM)
}
