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

// TestClusterNodeLossRestore: two projects on node 1 of three with a bucket as the backup store, rows
// written after their base backups and archived, restores elsewhere by an operator only (one cluster
// serves the checks below, one after the other; each logs its name first):
//   - self-fence: node 1's appliance frozen (SIGSTOP) while its instances run. By the time the cluster
//     takes node 1 for lost (the project unavailable through node 2), node 1's copy refuses client logins
//     and its open session is ended: its watchdog fenced it, the appliance itself being frozen. The project
//     is restored on node 2; node 1 thawed (SIGCONT: no restart) stops its copy and keeps its directory
//     aside; node 2's rows are intact.
//   - restore: while node 1 is alive restore-elsewhere answers 409. Node 1 lost (SIGKILL of it and its
//     instances): an API key is refused (operators only); with the bucket unreachable the operator's
//     restore fails and the project stays node 1's, unavailable; asked twice at once, the second is
//     refused (409) while the first is under way; the bucket back, the operator asks again and the
//     project is restored on node 2 from the bucket: the job says to which LSN it came back, the project
//     is active on node 2 with every row up to the archived position (checksum). Node 1 started again
//     keeps its stale copy aside and runs none of it.
func TestClusterNodeLossRestore(t *testing.T) {
	t.Parallel()
	c := newBucketCluster(t, "0", "restored elsewhere", "self-fenced")
	a1, a2, admin, prj, self := c.a1, c.a2, c.admin, c.prjs[0], c.prjs[1]
	check := func(name string) { t.Helper(); t.Logf("check %q", name) }
	sess := operatorSession(t, a2, c.password)
	a2.do(t, sess, http.MethodPost, "/v1/projects/"+prj.id+"/restore-elsewhere", nil, http.StatusConflict, nil)

	check("self-fence")
	conn1 := a1.connections(t, admin, self.id)
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
	a2.waitRuntime(t, admin, self.id, "unavailable")
	// Lost for the cluster: node 1's copy takes no client writes any more (nothing restored yet).
	refusedLogins(t, conn1.DirectURL, "self-fence: node 1 taken for lost")
	if _, err := held.Exec(ctx, "INSERT INTO kept VALUES (1000000, 'through a session of node 1 opened before the cut')"); err == nil {
		t.Fatal("self-fence: a session opened on node 1 before it was cut off still writes after it is taken for lost")
	}
	conn2 := c.restored(t, self, waitJobFor(t, a2, admin, c.restoreElsewhere(t, sess, self).ID, restoreDeadline))
	refusedLogins(t, conn1.DirectURL, "self-fence: project restored on node 2, node 1 frozen")
	// Thawed: the same process stops its stale copy and keeps its directory aside.
	if err := a1.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	thawed = true
	pollEvery(t, 2*time.Minute, clusterPoll, "self-fence: node 1 keeps its stale copy aside", func() (bool, string) {
		aside, _ := filepath.Glob(filepath.Join(c.dirs[0], "instances", self.inst+".fenced-*"))
		left := e2eProcsUnder(filepath.Join(c.dirs[0], "instances", self.inst)) // and .fenced-*
		return len(aside) == 1 && len(left) == 0, strings.Join(aside, " ")
	})
	select {
	case <-a1.exited:
		t.Fatal("self-fence: node 1's appliance exited: the fence is to happen without a restart")
	default:
	}
	if got := recoverChecksum(t, conn2.DirectURL); got != self.sum {
		t.Fatalf("self-fence: rows on node 2: checksum %s, want %s", got, self.sum)
	}
	// The other project is still node 1's: its copy stays in place.
	if _, err := os.Stat(filepath.Join(c.dirs[0], "instances", prj.inst, "pgdata", "PG_VERSION")); err != nil {
		t.Fatalf("self-fence: node 1's copy of a project it still hosts: %v", err)
	}

	check("restore")
	// Node 1 holds its lease again: the project it still hosts is active again (unfenced), so that its
	// loss below is a new one, seen from the start.
	a2.waitRuntime(t, admin, prj.id, "active")
	killNode(t, a1, c.dirs[0])
	a2.waitRuntime(t, admin, prj.id, "unavailable")
	a2.do(t, admin, http.MethodPost, "/v1/projects/"+prj.id+"/restore-elsewhere", nil, http.StatusForbidden, nil)
	c.bk.srv.Stop()
	first := c.restoreElsewhere(t, sess, prj)
	got := a2.do(t, sess, http.MethodPost, "/v1/projects/"+prj.id+"/restore-elsewhere", nil, http.StatusConflict, nil)
	e2eWants(t, "a second restore while the first is under way", string(got), "under way already", first.ID)
	if j := waitJobFor(t, a2, admin, first.ID, restoreDeadline); j.State != "failed" || !strings.Contains(j.Error, "the project stays on node "+c.nodes[0].ID) {
		t.Fatalf("restore: restore with the bucket unreachable: %s %q", j.State, j.Error)
	}
	if got := a2.project(t, admin, prj.id); got.RuntimeStatus != "unavailable" {
		t.Fatalf("restore: after a failed restore: runtime_status %q, want unavailable", got.RuntimeStatus)
	}
	c.bk.srv.Restart()
	conn2 = c.restored(t, prj, waitJobFor(t, a2, admin, c.restoreElsewhere(t, sess, prj).ID, restoreDeadline))
	c.fenced(t, prj, conn2)
}

// latestRestoreJob waits for bp's latest job to be a restore elsewhere other than seen, ended (completed
// when completed), and returns it.
func (c *bucketCluster) latestRestoreJob(t *testing.T, bp bucketProject, completed bool, seen string) *e2eJob {
	t.Helper()
	var j *e2eJob
	pollEvery(t, 5*time.Minute, clusterPoll, "a restore-elsewhere job ended", func() (bool, string) {
		var out struct {
			Project struct {
				LatestJobID string `json:"latest_job_id"`
			} `json:"project"`
		}
		c.a2.do(t, c.admin, http.MethodGet, "/v1/projects/"+bp.id, nil, http.StatusOK, &out)
		if out.Project.LatestJobID == "" || out.Project.LatestJobID == seen {
			return false, "no new job"
		}
		j = c.a2.call(t, c.admin, http.MethodGet, "/v1/jobs/"+out.Project.LatestJobID, nil, http.StatusOK)
		return j.Type == "project.restore_elsewhere" && (j.State == "completed" || j.State == "failed" && !completed), j.Type + " " + j.State
	})
	return j
}

// TestClusterNodeLossAutoRestore: node 1 of three lost with up --node-loss-restore-after 10s, and the
// bucket unreachable: the leader's automatic restore fails, and the project is not half-moved — still node
// 1's, unavailable, its alert open, nothing of it left on the node that tried. The bucket back, the next
// sweep restores the project on the leader (node 2 or 3) from the bucket, with no operator (a new job),
// with every archived row. Node 1 started again keeps its stale copy aside and runs none of it.
func TestClusterNodeLossAutoRestore(t *testing.T) {
	t.Parallel()
	c := newBucketCluster(t, "10s", "restored elsewhere")
	bp := c.prjs[0]
	killNode(t, c.a1, c.dirs[0])
	c.a2.waitRuntime(t, c.admin, bp.id, "unavailable")
	c.bk.srv.Stop()
	failed := c.latestRestoreJob(t, bp, false, "")
	if failed.State != "failed" || !strings.Contains(failed.Error, "the project stays on node "+c.nodes[0].ID) {
		t.Fatalf("restore with the bucket unreachable: %s %q", failed.State, failed.Error)
	}
	t.Logf("failed restore: %s", failed.Error)
	if got := c.a2.project(t, c.admin, bp.id); got.RuntimeStatus != "unavailable" {
		t.Fatalf("after a failed restore: runtime_status %q, want unavailable (still node 1's)", got.RuntimeStatus)
	}
	if open, msg, ok := c.a2.nodeAlert(t, c.admin, bp.id); !ok || !open || !strings.Contains(msg, c.nodes[0].ID) {
		t.Fatalf("node_unavailable alert after a failed restore: found %v open %v %q", ok, open, msg)
	}
	for _, d := range c.dirs[1:] {
		if _, err := os.Stat(filepath.Join(d, "instances", bp.inst)); err == nil {
			t.Fatalf("the failed restore left instances/%s in %s", bp.inst, d)
		}
	}
	c.bk.srv.Restart()
	j := c.latestRestoreJob(t, bp, true, failed.ID)
	var result struct {
		ToNode string `json:"to_node"`
	}
	json.Unmarshal(j.Result, &result)
	if result.ToNode == c.nodes[2].ID {
		t.Logf("restored on node 3 (the leader)")
		c.nodes[1] = c.nodes[2] // restored() checks against nodes[1]
	}
	c.fenced(t, bp, c.restored(t, bp, j))
}
