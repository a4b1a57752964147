package acceptance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/appliancetest"
)

// waitRuntime polls the project through p until its runtime_status is want.
func (p *e2eProc) waitRuntime(t *testing.T, key, id, want string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got := p.project(t, key, id)
		if got.RuntimeStatus == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("project %s: runtime_status %q, want %q", id, got.RuntimeStatus, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// nodeAlert is the project's node_unavailable alert, the newest (nil: none).
func (p *e2eProc) nodeAlert(t *testing.T, key, id string) (open bool, message string, found bool) {
	t.Helper()
	var out struct {
		Alerts []struct {
			Kind       string  `json:"kind"`
			Message    string  `json:"message"`
			ResolvedAt *string `json:"resolved_at"`
		} `json:"alerts"`
	}
	p.do(t, key, http.MethodGet, "/v1/projects/"+id+"/alerts", nil, http.StatusOK, &out)
	for _, a := range out.Alerts {
		if a.Kind == "node_unavailable" {
			return a.ResolvedAt == nil, a.Message, true
		}
	}
	return false, "", false
}

// operatorPassword is the password the first start with --operator-email op@example.com printed.
func operatorPassword(t *testing.T, first *e2eProc) string {
	t.Helper()
	m := regexp.MustCompile(`Created op@example\.com \(usr_\S+\), a platform operator\. Their password follows; it is shown only this once\.\n(\S+)\n`).FindStringSubmatch(first.stdout.String())
	if m == nil {
		t.Fatalf("up --operator-email printed no password:\n%s", first.stdout)
	}
	return m[1]
}

// operatorSession signs the operator in through p and returns the session's token.
func operatorSession(t *testing.T, p *e2eProc, password string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"email": "op@example.com", "password": password})
	res, err := p.client.Post(p.api+"/v1/auth/sessions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var v struct {
		Token string `json:"token"`
	}
	json.NewDecoder(res.Body).Decode(&v)
	if v.Token == "" {
		t.Fatalf("operator sign-in: %d", res.StatusCode)
	}
	return v.Token
}

// killNode SIGKILLs a node and its instances: its machine is lost.
func killNode(t *testing.T, p *e2eProc, dir string) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.waitExit(t)
	e2eKillUnder(t, dir)
}

// lossCluster is a cluster of three (no backup store) whose node 1 hosts two projects, prj and epoch.
type lossCluster struct {
	bin, admin, password, prj, inst, epoch, epochInst string
	dirs, node1Flags                                  []string
	nodes                                             []clusterNode
	a1, a2                                            *e2eProc
}

// newLossCluster makes it.
func newLossCluster(t *testing.T) *lossCluster {
	t.Helper()
	bin := e2eBuild(t)
	dirs := make([]string, 3)
	for i := range dirs {
		dirs[i] = appliancetest.TraversableTempDir(t)
		d := dirs[i]
		t.Cleanup(func() { e2eKillUnder(t, d) })
	}
	node1Flags := []string{"--spare-clusters", "0"}
	a1 := e2eStartWith(t, bin, dirs[0], nil, append([]string{"--operator-email", "op@example.com"}, node1Flags...))
	password := operatorPassword(t, a1)
	admin := e2eAdminKey(t, dirs[0])
	prj := a1.e2eProvision(t, admin, "lost")
	inst := a1.project(t, admin, prj).PrimaryInstanceID
	epoch := a1.e2eProvision(t, admin, "placed twice")
	epochInst := a1.project(t, admin, epoch).PrimaryInstanceID
	a1.stop(t, syscall.SIGTERM)
	procs := clusterOfThree(t, bin, dirs, nil, node1Flags, nil)
	nodes := clusterNodes(t, bin, dirs[1])
	if len(nodes) != 3 || nodes[0].Advertise != "127.0.0.1" || nodes[1].Advertise != "127.0.0.2" {
		t.Fatalf("cluster nodes: %+v", nodes)
	}
	return &lossCluster{bin: bin, admin: admin, password: password, prj: prj, inst: inst, epoch: epoch, epochInst: epochInst,
		dirs: dirs, node1Flags: node1Flags, nodes: nodes, a1: procs[0], a2: procs[1]}
}

// TestClusterNodeLoss: two projects on node 1 of three (one cluster serves the checks below, one after the
// other; each logs its name first).
//   - lost and back: node 1 lost (SIGKILL of it and its instances): the project is runtime_status
//     unavailable through node 2, with a node_unavailable alert open; restore-elsewhere answers 409 (no
//     backup store); node 1 started again: the project is active again and the alert resolved.
//   - moved away: lost again, and the project moved to node 2 meanwhile (as a restore there does): node 1
//     started again does not start its stale copy — no server of it runs, and its directory is kept aside
//     as instances/<id>.fenced-<time>, not deleted, audited — and the project is not made active by it.
//   - placement epoch: in the same loss, the second project moved to node 2 and back to node 1 (the
//     placement epoch bumped twice): node 1 does not start its copy, though the project is placed on it —
//     the copy is older than the placement — and keeps it aside.
func TestClusterNodeLoss(t *testing.T) {
	t.Parallel()
	c := newLossCluster(t)
	bin, dirs, node1Flags, a1, admin, password, prj, inst, nodes := c.bin, c.dirs, c.node1Flags, c.a1, c.admin, c.password, c.prj, c.inst, c.nodes
	a2 := c.a2
	check := func(name string) { t.Helper(); t.Logf("check %q", name) }

	check("lost and back")
	a2.waitRuntime(t, admin, prj, "active")
	a2.waitRuntime(t, admin, c.epoch, "active")
	// Node 2 starts no copy of the project: it is node 1's.
	if _, err := os.Stat(filepath.Join(dirs[1], "instances", inst)); err == nil {
		t.Fatalf("lost and back: node 2 made a directory for node 1's instance %s", inst)
	}
	// Node 1 lost: its project is unavailable, with its alert; back: active, the alert resolved.
	killNode(t, a1, dirs[0])
	a2.waitRuntime(t, admin, prj, "unavailable")
	if open, msg, ok := a2.nodeAlert(t, admin, prj); !ok || !open || !strings.Contains(msg, nodes[0].ID) {
		t.Fatalf("lost and back: node_unavailable alert with node 1 lost: found %v open %v %q", ok, open, msg)
	}
	// Without an off-machine backup store nothing can be restored elsewhere: the operator is told what is lost.
	got := a2.do(t, operatorSession(t, a2, password), http.MethodPost, "/v1/projects/"+prj+"/restore-elsewhere", nil, http.StatusConflict, nil)
	e2eWants(t, "restore elsewhere without a backup store", string(got), "no off-machine backup store", "exists only on node "+nodes[0].ID)
	a1 = e2eStartWith(t, bin, dirs[0], nil, node1Flags)
	a2.waitRuntime(t, admin, prj, "active")
	// Node 1's own start may say active before the leader sees its lease again and resolves the alert
	// (one transaction with the project.available event): the alert is resolved soon after, not at once.
	pollEvery(t, time.Minute, clusterPoll, "lost and back: the node_unavailable alert resolved with node 1 back", func() (bool, string) {
		open, _, ok := a2.nodeAlert(t, admin, prj)
		return ok && !open, fmt.Sprintf("found %v open %v", ok, open)
	})

	// Lost again; meanwhile the project moved to node 2, and the second one to node 2 and back to node 1.
	check("moved away")
	a2.waitRuntime(t, admin, c.epoch, "active")
	killNode(t, a1, dirs[0])
	a2.waitRuntime(t, admin, prj, "unavailable")
	a2.waitRuntime(t, admin, c.epoch, "unavailable")
	a2.do(t, admin, http.MethodPost, "/v1/test/projects/"+prj+"/node", map[string]any{"node_id": nodes[1].ID}, http.StatusOK, nil)
	for _, n := range []clusterNode{nodes[1], nodes[0]} {
		a2.do(t, admin, http.MethodPost, "/v1/test/projects/"+c.epoch+"/node", map[string]any{"node_id": n.ID}, http.StatusOK, nil)
	}
	a1 = e2eStartWith(t, bin, dirs[0], nil, node1Flags)
	if _, err := os.Stat(filepath.Join(dirs[0], "instances", inst)); err == nil {
		t.Fatalf("moved away: node 1 kept instances/%s in place for a project now on node 2", inst)
	}
	aside, _ := filepath.Glob(filepath.Join(dirs[0], "instances", inst+".fenced-*"))
	if len(aside) != 1 {
		t.Fatalf("moved away: instances/%s.fenced-*: %v, want one directory kept aside", inst, aside)
	}
	if _, err := os.Stat(filepath.Join(aside[0], "pgdata", "PG_VERSION")); err != nil {
		t.Fatalf("moved away: the fenced copy lost its data: %v", err)
	}
	if left := e2eProcsUnder(filepath.Join(dirs[0], "instances")); len(left) > 0 {
		t.Fatalf("moved away, placement epoch: node 1 runs processes of a fenced instance: %v", left)
	}
	var events struct {
		AuditEvents []struct {
			Action   string          `json:"action"`
			Metadata json.RawMessage `json:"metadata"`
		} `json:"audit_events"`
	}
	a1.do(t, admin, http.MethodGet, "/v1/projects/"+prj+"/audit-events", nil, http.StatusOK, &events)
	fenced := false
	for _, e := range events.AuditEvents {
		fenced = fenced || e.Action == "instance.fenced" && strings.Contains(string(e.Metadata), ".fenced-")
	}
	if !fenced {
		t.Fatalf("moved away: no instance.fenced audit event: %+v", events.AuditEvents)
	}
	// Node 1 is back, but the project is node 2's now: it is not made active by node 1's return.
	if got := a2.project(t, admin, prj); got.RuntimeStatus != "unavailable" {
		t.Fatalf("moved away: project moved to node 2 without a restore: runtime_status %q after node 1's return", got.RuntimeStatus)
	}

	check("placement epoch")
	if _, err := os.Stat(filepath.Join(dirs[0], "instances", c.epochInst)); err == nil {
		t.Fatalf("placement epoch: node 1 kept instances/%s in place: a copy older than the project's placement", c.epochInst)
	}
	if aside, _ := filepath.Glob(filepath.Join(dirs[0], "instances", c.epochInst+".fenced-*")); len(aside) != 1 {
		t.Fatalf("placement epoch: instances/%s.fenced-*: %v, want one directory kept aside", c.epochInst, aside)
	}
}

// bucketProject is a project of a bucketCluster: on node 1, with rows after its base backup, archived to
// the bucket (sum: their checksum).
type bucketProject struct {
	id, inst, sum string
}

// bucketCluster is a cluster of three whose node 1 hosts projects made by bucketProjects.
type bucketCluster struct {
	bin, admin, password string
	prjs                 []bucketProject
	dirs, node1Flags     []string
	nodes                []clusterNode
	a1, a2               *e2eProc
	bk                   bucketEnv
}

// newBucketCluster makes it, with up --node-loss-restore-after restoreAfter on every node and one project
// per name.
func newBucketCluster(t *testing.T, restoreAfter string, names ...string) *bucketCluster {
	bk := e2eBucket(t)
	bin := e2eBuild(t)
	dirs := make([]string, 3)
	for i := range dirs {
		dirs[i] = appliancetest.TraversableTempDir(t)
		d := dirs[i]
		t.Cleanup(func() { e2eKillUnder(t, d) })
	}
	common := append(bk.flags(), "--node-loss-restore-after", restoreAfter)
	a1 := e2eStartWith(t, bin, dirs[0], bk.env, append([]string{"--spare-clusters", "0", "--operator-email", "op@example.com"}, common...))
	password := operatorPassword(t, a1)
	admin := e2eAdminKey(t, dirs[0])
	var prjs []bucketProject
	for _, name := range names {
		prjs = append(prjs, bucketProjectOn(t, a1, admin, name))
	}

	a1.stop(t, syscall.SIGTERM)
	node1Flags := append([]string{"--spare-clusters", "0"}, common...)
	procs := clusterOfThree(t, bin, dirs, bk.env, node1Flags, common)
	nodes := clusterNodes(t, bin, dirs[1])
	if len(nodes) != 3 || nodes[1].Advertise != "127.0.0.2" {
		t.Fatalf("cluster nodes: %+v", nodes)
	}
	a2 := procs[1]
	for _, bp := range prjs {
		a2.waitRuntime(t, admin, bp.id, "active")
	}
	return &bucketCluster{bin: bin, admin: admin, password: password, prjs: prjs, dirs: dirs,
		node1Flags: node1Flags, nodes: nodes, a1: procs[0], a2: a2, bk: bk}
}

// bucketProjectOn provisions a project through a1 (single node, bucket as the backup store), backs it up,
// writes rows after the backup and waits until the segment holding them is archived.
func bucketProjectOn(t *testing.T, a1 *e2eProc, admin, name string) bucketProject {
	t.Helper()
	prj := a1.e2eProvision(t, admin, name)
	inst := a1.project(t, admin, prj).PrimaryInstanceID
	conn := a1.connections(t, admin, prj)
	e2eSQL(t, conn.DirectURL, false, "CREATE TABLE kept (id int PRIMARY KEY, note text NOT NULL)",
		"INSERT INTO kept SELECT g, 'before the backup '||g FROM generate_series(1, 500) g")
	bj := a1.call(t, admin, http.MethodPost, "/v1/projects/"+prj+"/backups", map[string]any{"label": "base"}, http.StatusAccepted)
	if j := waitJobFor(t, a1, admin, bj.ID, restoreDeadline); j.State != "completed" {
		t.Fatalf("backup: %s %q\n%s", j.State, j.Error, j.LastStderr)
	}
	e2eSQL(t, conn.DirectURL, false,
		"INSERT INTO kept SELECT g, 'after the backup '||g FROM generate_series(501, 1500) g",
		"UPDATE kept SET note = note || ' (updated)' WHERE id % 7 = 0",
		"DELETE FROM kept WHERE id % 11 = 0")
	sum := recoverChecksum(t, conn.DirectURL)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pg := e2eConnect(ctx, t, conn.DirectURL, false)
	defer pg.Close(context.Background())
	var seg string
	if err := pg.QueryRow(ctx, "SELECT pg_walfile_name(pg_current_wal_lsn())").Scan(&seg); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Exec(ctx, "CREATE TABLE filler AS SELECT g, md5(g::text) || repeat('x', 900) AS pad FROM generate_series(1, 20000) g"); err != nil {
		t.Fatal(err)
	}
	e2eEventually(t, time.Minute, "segment "+seg+" archived", func() (bool, string) {
		var last *string
		if err := pg.QueryRow(ctx, "SELECT last_archived_wal FROM pg_stat_archiver").Scan(&last); err != nil {
			return false, err.Error()
		}
		if last == nil {
			return false, "nothing archived yet"
		}
		return *last >= seg, "last archived: " + *last
	})
	return bucketProject{id: prj, inst: inst, sum: sum}
}

// fenced checks that node 1, started again, keeps bp's stale copy aside and runs no instance, and that
// bp's rows on node 2 are intact.
func (c *bucketCluster) fenced(t *testing.T, bp bucketProject, conn2 e2eConnections) {
	t.Helper()
	c.a1 = e2eStartWith(t, c.bin, c.dirs[0], c.bk.env, c.node1Flags)
	aside, _ := filepath.Glob(filepath.Join(c.dirs[0], "instances", bp.inst+".fenced-*"))
	if len(aside) != 1 {
		t.Fatalf("instances/%s.fenced-* on node 1: %v, want one", bp.inst, aside)
	}
	if left := e2eProcsUnder(filepath.Join(c.dirs[0], "instances")); len(left) > 0 {
		t.Fatalf("node 1 runs processes of its fenced copy: %v", left)
	}
	if got := recoverChecksum(t, conn2.DirectURL); got != bp.sum {
		t.Fatalf("rows on node 2 after node 1's return: checksum %s, want %s", got, bp.sum)
	}
}

// restored checks the restore job's result (from node 1 to node 2, an LSN, a backup) and the project bp
// on node 2: active, every archived row, its alert resolved; it returns its connections there.
func (c *bucketCluster) restored(t *testing.T, bp bucketProject, j *e2eJob) e2eConnections {
	t.Helper()
	if j.State != "completed" {
		t.Fatalf("restore elsewhere: %s %q\n%s", j.State, j.Error, j.LastStderr)
	}
	var result struct {
		BackupKey string `json:"backup_key"`
		LSN       string `json:"lsn"`
		FromNode  string `json:"from_node"`
		ToNode    string `json:"to_node"`
	}
	if err := json.Unmarshal(j.Result, &result); err != nil || result.LSN == "" || result.BackupKey == "" ||
		result.FromNode != c.nodes[0].ID || result.ToNode != c.nodes[1].ID {
		t.Fatalf("restore elsewhere's result: %v %s", err, j.Result)
	}
	t.Logf("restored on node 2: %s", j.Result)
	c.a2.waitRuntime(t, c.admin, bp.id, "active")
	conn2 := c.a2.connections(t, c.admin, bp.id)
	if got := recoverChecksum(t, conn2.DirectURL); got != bp.sum {
		t.Fatalf("rows after the restore on node 2: checksum %s, want %s (as archived)", got, bp.sum)
	}
	if open, _, ok := c.a2.nodeAlert(t, c.admin, bp.id); !ok || open {
		t.Fatalf("node_unavailable alert after the restore: found %v open %v", ok, open)
	}
	return conn2
}

// restoreElsewhere asks for bp's restore elsewhere through node 2 with the operator's session sess and
// returns the job.
func (c *bucketCluster) restoreElsewhere(t *testing.T, sess string, bp bucketProject) *e2eJob {
	t.Helper()
	var started struct {
		Job *e2eJob `json:"job"`
	}
	c.a2.do(t, sess, http.MethodPost, "/v1/projects/"+bp.id+"/restore-elsewhere", nil, http.StatusAccepted, &started)
	return started.Job
}
