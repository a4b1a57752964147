package acceptance

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// refusedLogins checks that a client login to url is refused by pg_hba.conf (a fenced instance).
func refusedLogins(t *testing.T, url, when string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err == nil {
		conn.Close(context.Background())
		t.Fatalf("%s: node 1's copy took a client login", when)
	}
	if !strings.Contains(err.Error(), "pg_hba.conf rejects connection") {
		t.Fatalf("%s: a client login to node 1's copy: %v, want refused by pg_hba.conf", when, err)
	}
}

// TestClusterSelfFence: a project on node 1 of three (bucket as the backup store); node 1's appliance is
// frozen (SIGSTOP) while its instances run. By the time the cluster takes node 1 for lost (the project
// unavailable through node 2), node 1's copy refuses client logins and its open session is ended: its
// watchdog fenced it, the appliance itself being frozen. The project is restored on node 2; node 1 thawed
// (SIGCONT: no restart) stops its copy and keeps its directory aside; node 2's rows are intact.
func TestClusterSelfFence(t *testing.T) {
	t.Parallel()
	c := newBucketCluster(t, "0")
	a1, a2 := c.a1, c.a2
	conn1 := a1.connections(t, c.admin, c.prj)
	ctx := t.Context()
	held := e2eConnect(ctx, t, conn1.DirectURL, false) // a session opened before the cut
	defer held.Close(context.Background())
	if _, err := held.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}

	if err := a1.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	t.Cleanup(func() {
		if !thawed {
			a1.cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	a2.waitRuntime(t, c.admin, c.prj, "unavailable")
	// Lost for the cluster: node 1's copy takes no client writes any more (nothing restored yet).
	refusedLogins(t, conn1.DirectURL, "node 1 taken for lost")
	if _, err := held.Exec(ctx, "INSERT INTO kept VALUES (1000000, 'through a session of node 1 opened before the cut')"); err == nil {
		t.Fatal("a session opened on node 1 before it was cut off still writes after it is taken for lost")
	}

	var started struct {
		Job *e2eJob `json:"job"`
	}
	a2.do(t, operatorSession(t, a2, c.password), http.MethodPost, "/v1/projects/"+c.prj+"/restore-elsewhere", nil, http.StatusAccepted, &started)
	conn2 := c.restored(t, waitJobFor(t, a2, c.admin, started.Job.ID, restoreDeadline))
	refusedLogins(t, conn1.DirectURL, "project restored on node 2, node 1 frozen")

	// Thawed: the same process stops its stale copy and keeps its directory aside.
	if err := a1.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	thawed = true
	e2eEventually(t, 2*time.Minute, "node 1 keeps its stale copy aside", func() (bool, string) {
		aside, _ := filepath.Glob(filepath.Join(c.dirs[0], "instances", c.inst+".fenced-*"))
		left := e2eProcsUnder(filepath.Join(c.dirs[0], "instances"))
		return len(aside) == 1 && len(left) == 0, strings.Join(aside, " ")
	})
	select {
	case <-a1.exited:
		t.Fatal("node 1's appliance exited: the fence is to happen without a restart")
	default:
	}
	if got := recoverChecksum(t, conn2.DirectURL); got != c.sum {
		t.Fatalf("rows on node 2: checksum %s, want %s", got, c.sum)
	}
}

// latestRestoreJob waits for the project's latest job to be a restore elsewhere other than seen, ended
// (completed when completed), and returns it.
func (c *bucketCluster) latestRestoreJob(t *testing.T, completed bool, seen string) *e2eJob {
	t.Helper()
	var j *e2eJob
	e2eEventually(t, 5*time.Minute, "a restore-elsewhere job ended", func() (bool, string) {
		var out struct {
			Project struct {
				LatestJobID string `json:"latest_job_id"`
			} `json:"project"`
		}
		c.a2.do(t, c.admin, http.MethodGet, "/v1/projects/"+c.prj, nil, http.StatusOK, &out)
		if out.Project.LatestJobID == "" || out.Project.LatestJobID == seen {
			return false, "no new job"
		}
		j = c.a2.call(t, c.admin, http.MethodGet, "/v1/jobs/"+out.Project.LatestJobID, nil, http.StatusOK)
		return j.Type == "project.restore_elsewhere" && (j.State == "completed" || j.State == "failed" && !completed), j.Type + " " + j.State
	})
	return j
}

// TestClusterNodeLossRestoreRetried: node 1 lost with up --node-loss-restore-after 10s, and the bucket
// unreachable: the leader's automatic restore fails, and the project is not half-moved — still node 1's,
// unavailable, its alert open, nothing of it left on the node that tried. The bucket back, the next sweep
// restores it (a new job), with every archived row.
func TestClusterNodeLossRestoreRetried(t *testing.T) {
	t.Parallel()
	c := newBucketCluster(t, "10s")
	killNode(t, c.a1, c.dirs[0])
	c.a2.waitRuntime(t, c.admin, c.prj, "unavailable")
	c.bk.srv.Stop()
	failed := c.latestRestoreJob(t, false, "")
	if failed.State != "failed" || !strings.Contains(failed.Error, "the project stays on node "+c.nodes[0].ID) {
		t.Fatalf("restore with the bucket unreachable: %s %q", failed.State, failed.Error)
	}
	t.Logf("failed restore: %s", failed.Error)
	if got := c.a2.project(t, c.admin, c.prj); got.RuntimeStatus != "unavailable" {
		t.Fatalf("after a failed restore: runtime_status %q, want unavailable (still node 1's)", got.RuntimeStatus)
	}
	if open, msg, ok := c.a2.nodeAlert(t, c.admin, c.prj); !ok || !open || !strings.Contains(msg, c.nodes[0].ID) {
		t.Fatalf("node_unavailable alert after a failed restore: found %v open %v %q", ok, open, msg)
	}
	for _, d := range c.dirs[1:] {
		if _, err := os.Stat(filepath.Join(d, "instances", c.inst)); err == nil {
			t.Fatalf("the failed restore left instances/%s in %s", c.inst, d)
		}
	}
	c.bk.srv.Restart()
	j := c.latestRestoreJob(t, true, failed.ID)
	var result struct {
		ToNode string `json:"to_node"`
	}
	json.Unmarshal(j.Result, &result)
	if result.ToNode == c.nodes[2].ID {
		c.nodes[1] = c.nodes[2] // restored() checks against nodes[1]
	}
	c.restored(t, j)
}

// TestClusterPlacementEpoch: node 1 lost, its project moved to node 2 and back to node 1 meanwhile (the
// placement epoch bumped twice): node 1 started again does not start its copy, though the project is
// placed on it — the copy is older than the placement — and keeps it aside.
func TestClusterPlacementEpoch(t *testing.T) {
	t.Parallel()
	c := newLossCluster(t)
	c.a2.waitRuntime(t, c.admin, c.prj, "active")
	killNode(t, c.a1, c.dirs[0])
	c.a2.waitRuntime(t, c.admin, c.prj, "unavailable")
	for _, n := range []clusterNode{c.nodes[1], c.nodes[0]} {
		c.a2.do(t, c.admin, http.MethodPost, "/v1/test/projects/"+c.prj+"/node", map[string]any{"node_id": n.ID}, http.StatusOK, nil)
	}
	c.a1 = e2eStartWith(t, c.bin, c.dirs[0], nil, c.node1Flags)
	if _, err := os.Stat(filepath.Join(c.dirs[0], "instances", c.inst)); err == nil {
		t.Fatalf("node 1 kept instances/%s in place: a copy older than the project's placement", c.inst)
	}
	if aside, _ := filepath.Glob(filepath.Join(c.dirs[0], "instances", c.inst+".fenced-*")); len(aside) != 1 {
		t.Fatalf("instances/%s.fenced-*: %v, want one directory kept aside", c.inst, aside)
	}
	if left := e2eProcsUnder(filepath.Join(c.dirs[0], "instances")); len(left) > 0 {
		t.Fatalf("node 1 runs processes of a copy older than its project's placement: %v", left)
	}
}

// TestClusterNodeLossRestoreRetriedByOperator: the same with restores by an operator only: with the bucket
// unreachable the restore fails and the project stays node 1's, unavailable; the bucket back, the operator
// asks again and the project is restored; asked twice at once, the second is refused (409) while the first
// is under way.
func TestClusterNodeLossRestoreRetriedByOperator(t *testing.T) {
	t.Parallel()
	c := newBucketCluster(t, "0")
	killNode(t, c.a1, c.dirs[0])
	c.a2.waitRuntime(t, c.admin, c.prj, "unavailable")
	sess := operatorSession(t, c.a2, c.password)
	c.bk.srv.Stop()
	var started struct {
		Job *e2eJob `json:"job"`
	}
	c.a2.do(t, sess, http.MethodPost, "/v1/projects/"+c.prj+"/restore-elsewhere", nil, http.StatusAccepted, &started)
	got := c.a2.do(t, sess, http.MethodPost, "/v1/projects/"+c.prj+"/restore-elsewhere", nil, http.StatusConflict, nil)
	e2eWants(t, "a second restore while the first is under way", string(got), "under way already", started.Job.ID)
	if j := waitJobFor(t, c.a2, c.admin, started.Job.ID, restoreDeadline); j.State != "failed" || !strings.Contains(j.Error, "the project stays on node "+c.nodes[0].ID) {
		t.Fatalf("restore with the bucket unreachable: %s %q", j.State, j.Error)
	}
	if got := c.a2.project(t, c.admin, c.prj); got.RuntimeStatus != "unavailable" {
		t.Fatalf("after a failed restore: runtime_status %q, want unavailable", got.RuntimeStatus)
	}
	c.bk.srv.Restart()
	c.a2.do(t, sess, http.MethodPost, "/v1/projects/"+c.prj+"/restore-elsewhere", nil, http.StatusAccepted, &started)
	c.restored(t, waitJobFor(t, c.a2, c.admin, started.Job.ID, restoreDeadline))
}
