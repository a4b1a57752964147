package acceptance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/appliancetest"
)

// moveCluster is three nodes on 127.0.0.1-3 sharing a bucket as the backup store, each naming its own
// address in its projects' URLs (--public-host), a project on node 1 with a base backup and rows, and a
// second one there with rows and no backup.
type moveCluster struct {
	bin, admin, password, prj, inst, sum string
	// unbacked is a second project on node 1, with rows and never backed up; unbackedSum its rows' checksum.
	unbacked, unbackedInst, unbackedSum string
	// env1 and flags1 start node 1 again (after a SIGKILL); env3 and flags3 node 3.
	env1, flags1, env3, flags3 []string
	// marker is the file node 3 (a test build that may hold a move-in at the move-standby, move-staged,
	// move-cutover, move-started and move-opened steps) appends "<job> <step>" to when it holds one there:
	// its staged standby runs, it caught up, the source paused, the promoted copy's server and pooler run
	// (fenced, before the word), the project opened on node 3. It holds only at the step the file arm names (c.arm), until the test
	// empties it (c.release) or the step's bound ends.
	marker, armFile string
	dirs            []string
	nodes           []clusterNode
	procs           []*e2eProc
}

func newMoveCluster(t *testing.T) *moveCluster {
	bk := e2eBucket(t)
	bin := e2eBuild(t)
	dirs := make([]string, 3)
	for i := range dirs {
		dirs[i] = appliancetest.TraversableTempDir(t)
		d := dirs[i]
		t.Cleanup(func() { e2eKillUnder(t, d) })
	}
	node1 := append([]string{"--spare-clusters", "0", "--public-host", "127.0.0.1", "--pg-listen", "127.0.0.1"}, bk.flags()...)
	a1 := e2eStartWith(t, bin, dirs[0], bk.env, append([]string{"--operator-email", "op@example.com"}, node1...))
	password := operatorPassword(t, a1)
	admin := e2eAdminKey(t, dirs[0])
	prj := a1.e2eProvision(t, admin, "moving")
	inst := a1.project(t, admin, prj).PrimaryInstanceID
	conn := a1.connections(t, admin, prj)
	e2eSQL(t, conn.DirectURL, false, "CREATE TABLE kept (id int PRIMARY KEY, note text NOT NULL)",
		"INSERT INTO kept SELECT g, 'before the backup '||g FROM generate_series(1, 500) g",
		"CREATE TABLE written (id int PRIMARY KEY)")
	bj := a1.call(t, admin, http.MethodPost, "/v1/projects/"+prj+"/backups", map[string]any{"label": "base"}, http.StatusAccepted)
	if j := waitJobFor(t, a1, admin, bj.ID, restoreDeadline); j.State != "completed" {
		t.Fatalf("backup: %s %q\n%s", j.State, j.Error, j.LastStderr)
	}
	e2eSQL(t, conn.DirectURL, false, "INSERT INTO kept SELECT g, 'after the backup '||g FROM generate_series(501, 1500) g")
	sum := recoverChecksum(t, conn.DirectURL)
	unbacked := a1.e2eProvision(t, admin, "unbacked")
	unbackedConn := a1.connections(t, admin, unbacked)
	e2eSQL(t, unbackedConn.DirectURL, false, "CREATE TABLE kept (id int PRIMARY KEY, note text NOT NULL)",
		"INSERT INTO kept SELECT g, 'never backed up '||g FROM generate_series(1, 800) g",
		"CREATE TABLE written (id int PRIMARY KEY)")
	unbackedSum := recoverChecksum(t, unbackedConn.DirectURL)
	unbackedInst := a1.project(t, admin, unbacked).PrimaryInstanceID
	a1.stop(t, syscall.SIGTERM)
	runCLI(t, bin, append([]string{"cluster", "init", "--data-dir", dirs[0], "--advertise", "127.0.0.1"}, e2eNodePortFlags(t, dirs[0])...)...)
	procs := []*e2eProc{e2eStartWith(t, bin, dirs[0], bk.env, node1)}
	marker := filepath.Join(t.TempDir(), "marker")
	armFile := filepath.Join(t.TempDir(), "arm")
	var env3, flags3 []string
	for i, host := range []string{"127.0.0.2", "127.0.0.3"} {
		tok := strings.TrimSpace(runCLI(t, bin, "cluster", "join-token", "--data-dir", dirs[0], "--ttl", "10m"))
		flags := append(append(clusterFlags(t, host, dirs[i+1]), "--public-host", host, "--pg-listen", host, "--join", tok), bk.flags()...)
		env := bk.env
		if i == 1 { // node 3 may hold its move-ins (the step armed, until released)
			env = append(slices.Clone(bk.env), "APPLIANCE_TEST_JOB_PAUSE=move-standby,move-staged,move-cutover,move-started,move-opened",
				"APPLIANCE_TEST_JOB_PAUSE_MARKER="+marker, "APPLIANCE_TEST_JOB_PAUSE_ARM="+armFile)
			env3, flags3 = env, flags
		}
		procs = append(procs, e2eStartWith(t, bin, dirs[i+1], env, flags))
	}
	nodes := clusterNodes(t, bin, dirs[1])
	if len(nodes) != 3 || nodes[0].Advertise != "127.0.0.1" || nodes[1].Advertise != "127.0.0.2" {
		t.Fatalf("cluster nodes: %+v", nodes)
	}
	procs[1].waitRuntime(t, admin, prj, "active")
	return &moveCluster{bin: bin, admin: admin, password: password, prj: prj, inst: inst, sum: sum,
		unbacked: unbacked, unbackedInst: unbackedInst, unbackedSum: unbackedSum, env1: bk.env, flags1: node1,
		env3: env3, flags3: flags3, marker: marker, armFile: armFile, dirs: dirs, nodes: nodes, procs: procs}
}

// writer inserts rows into the project's table written through its pooled URL, one per transaction,
// until stopped, and keeps the ids the server acknowledged; on an error it reads the project's URL again
// (through p) and reconnects.
type writer struct {
	mu    sync.Mutex
	acked []int
	errs  int
	last  string         // the last error
	hosts map[string]int // the pooled URL's host -> rows acknowledged through it
	stop  chan struct{}
	done  chan struct{}
}

func startWriter(p *e2eProc, key, prj string) *writer {
	w := &writer{hosts: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		var conn *pgx.Conn
		var host string
		next := 1
		for {
			select {
			case <-w.stop:
				if conn != nil {
					conn.Close(context.Background())
				}
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if conn == nil {
				u, err := pooledURL(ctx, p, key, prj)
				if err == nil {
					var cfg *pgx.ConnConfig
					if cfg, err = pgx.ParseConfig(u); err == nil {
						cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
						conn, err = pgx.ConnectConfig(ctx, cfg)
						pu, _ := url.Parse(u)
						host = pu.Hostname()
					}
				}
				if err != nil {
					cancel()
					w.mu.Lock()
					w.errs++
					w.last = err.Error()
					w.mu.Unlock()
					conn = nil
					time.Sleep(100 * time.Millisecond)
					continue
				}
			}
			_, err := conn.Exec(ctx, fmt.Sprintf("INSERT INTO written VALUES (%d)", next))
			cancel()
			w.mu.Lock()
			if err == nil {
				w.acked = append(w.acked, next)
				w.hosts[host]++
				next++
			} else {
				// Not acknowledged: the row may or may not be there; the next id is another one.
				next++
				w.errs++
				w.last = err.Error()
				conn.Close(context.Background())
				conn = nil
			}
			w.mu.Unlock()
			if err != nil {
				time.Sleep(50 * time.Millisecond)
			}
		}
	}()
	return w
}

// ackedThrough is how many rows were acknowledged through a pooled URL naming host.
// servesOnNode1 waits, after a move that failed (what), until the project is active with node 1's URL
// and takes writes there again: 20 more rows acknowledged through node 1's pooled URL.
func servesOnNode1(t *testing.T, p *e2eProc, key, prj string, w *writer, what string) {
	t.Helper()
	p.waitRuntime(t, key, prj, "active")
	if u := p.connections(t, key, prj).PooledURL; !strings.Contains(u, "@127.0.0.1:") {
		t.Fatalf("URL after %s: %s, want node 1's", what, e2eRedact(u))
	}
	before := w.ackedThrough("127.0.0.1")
	e2eEventually(t, time.Minute, "rows written through node 1's pooled URL after "+what, func() (bool, string) {
		n := w.ackedThrough("127.0.0.1")
		return n >= before+20, fmt.Sprintf("%d (last error: %s)", n, w.lastError())
	})
}

// ackedSoFar is a copy of the rows acknowledged until now.
func (w *writer) ackedSoFar() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int(nil), w.acked...)
}

func (w *writer) ackedThrough(host string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hosts[host]
}

// lastError is the last error the writer met.
func (w *writer) lastError() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

func (w *writer) finish() (acked []int, errs int) {
	close(w.stop)
	<-w.done
	return w.acked, w.errs
}

// pooledURL reads the project's pooled URL through p.
func pooledURL(ctx context.Context, p *e2eProc, key, prj string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.api+"/v1/projects/"+prj+"/connections", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := p.client.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	var out struct {
		Connections e2eConnections `json:"connections"`
	}
	if res.StatusCode != http.StatusOK || json.Unmarshal(data, &out) != nil || out.Connections.PooledURL == "" {
		return "", fmt.Errorf("connections: %d %s", res.StatusCode, data)
	}
	return out.Connections.PooledURL, nil
}

// TestClusterMove: a project with rows on node 1 of three (a bucket as the backup store), a client writing
// through its pooled URL. Refused moves (an API key, an unknown node, no node, the node it is on, a second
// move while one runs) change nothing. A move to node 3 whose staging fails (its staged standby killed
// before it caught up) leaves the project serving on node 1 throughout, and nothing on node 3; one whose
// cutover fails (the standby killed once caught up: node 1 paused, then node 3 cannot promote it) puts it
// back on node 1, every acknowledged row there. Then crashes inside the pause (moveThroughTargetCrash,
// moveThroughSourceCrash): node 3, the target, killed at its cutover — the move fails, the project serves
// on node 1; node 1, the source, killed there — the move completes on node 3. POST .../move to node 2: the
// job's result says from node 3 to node 2 with the write pause, the staging time and an LSN; on node 2
// every acknowledged row and every row of before are there, the URLs name node 2's host, and node 3 keeps
// its directory aside (instances/<id>.moved-*) with no server of it running. appliance cluster remove-node of node 2 (which
// hosts the project now) with the project suspended refuses before anything moves and removes nothing;
// with it active again it drains node 2 — the project moves to another node, its rows intact — and
// removes it. First of all, a project never backed up moves to node 3 through a crash of its source
// (moveUnbackedThroughACrash).
func TestClusterMove(t *testing.T) {
	t.Parallel()
	c := newMoveCluster(t)
	a2, admin, prj := c.procs[1], c.admin, c.prj
	sess := operatorSession(t, a2, c.password)
	move := "/v1/projects/" + prj + "/move"

	// First (the appliance takes a first base backup of a project without one within a minute, and not of
	// one being moved): the project never backed up moves through a crash of its source.
	c.moveUnbackedThroughACrash(t, sess)
	a2.waitRuntime(t, admin, prj, "active")

	// Refused: nothing changes.
	a2.do(t, admin, http.MethodPost, move, map[string]any{"node": c.nodes[1].ID}, http.StatusForbidden, nil)
	got := a2.do(t, sess, http.MethodPost, move, map[string]any{"node": "nod_nope"}, http.StatusBadRequest, nil)
	e2eWants(t, "move to an unknown node", string(got), "no node nod_nope")
	a2.do(t, sess, http.MethodPost, move, map[string]any{}, http.StatusBadRequest, nil)
	got = a2.do(t, sess, http.MethodPost, move, map[string]any{"node": c.nodes[0].ID}, http.StatusConflict, nil)
	e2eWants(t, "move to its own node", string(got), "is on node "+c.nodes[0].ID+" already")
	if p := a2.project(t, admin, prj); p.RuntimeStatus != "active" {
		t.Fatalf("after the refused moves: runtime_status %q", p.RuntimeStatus)
	}

	w := startWriter(a2, admin, prj)
	e2eEventually(t, time.Minute, "rows written through node 1's pooled URL", func() (bool, string) {
		n := w.ackedThrough("127.0.0.1")
		return n >= 20, fmt.Sprint(n)
	})
	var started struct {
		Job *e2eJob `json:"job"`
	}

	// A move whose staging fails on the target (node 3's staged standby killed while the job is held
	// after starting it) leaves the project serving on node 1 (same URL, its rows there, nothing kept
	// aside) and nothing of the staged copy on node 3.
	during := w.ackedThrough("127.0.0.1")
	heldBefore := c.held("move-standby")
	c.arm(t, "move-standby")
	a2.do(t, sess, http.MethodPost, move, map[string]any{"node": c.nodes[2].ID}, http.StatusAccepted, &started)
	e2eEventually(t, 2*time.Minute, "node 3's staged standby running", func() (bool, string) {
		n := c.held("move-standby")
		return n > heldBefore, fmt.Sprint(n)
	})
	stages, _ := filepath.Glob(filepath.Join(c.dirs[2], "instances", c.inst+".stage-*"))
	if len(stages) != 1 {
		t.Fatalf("node 3's staged copies: %v, want one", stages)
	}
	standby := e2eProcsUnder(stages[0])
	if len(standby) == 0 {
		t.Fatalf("no process of the staged standby under %s", stages[0])
	}
	for pid := range standby {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	c.release(t)
	failed := waitJobFor(t, a2, admin, started.Job.ID, restoreDeadline)
	if n := w.ackedThrough("127.0.0.1"); n <= during {
		t.Fatalf("no row acknowledged through node 1's pooled URL while node 3 staged: %d then %d (last error: %s)", during, n, w.lastError())
	}
	if failed.State != "failed" || !strings.Contains(failed.Error, "staging on node "+c.nodes[2].ID+" failed") {
		t.Fatalf("a move whose staging fails: %s %q", failed.State, failed.Error)
	}
	t.Logf("the failed move: %s", failed.Error)
	servesOnNode1(t, a2, admin, prj, w, "a failed move")
	if aside, _ := filepath.Glob(filepath.Join(c.dirs[0], "instances", c.inst+".moved-*")); len(aside) != 0 {
		t.Fatalf("a failed move kept node 1's directory aside: %v", aside)
	}
	if left, _ := filepath.Glob(filepath.Join(c.dirs[2], "instances", c.inst+"*")); len(left) != 0 {
		t.Fatalf("a failed staging left on node 3: %v", left)
	}
	if left := e2eProcsUnder(filepath.Join(c.dirs[2], "instances", c.inst)); len(left) > 0 {
		t.Fatalf("a failed staging left processes on node 3: %v", left)
	}

	// A move whose cutover fails on the target (node 3's staged standby killed once it caught up, so the
	// source pauses and then the target cannot promote it) puts the project back on node 1: it serves
	// there again, every acknowledged row there, nothing left on node 3.
	heldBefore = c.held("move-staged")
	c.arm(t, "move-staged")
	a2.do(t, sess, http.MethodPost, move, map[string]any{"node": c.nodes[2].ID}, http.StatusAccepted, &started)
	e2eEventually(t, 2*time.Minute, "node 3's staged standby caught up", func() (bool, string) {
		n := c.held("move-staged")
		return n > heldBefore, fmt.Sprint(n)
	})
	stages, _ = filepath.Glob(filepath.Join(c.dirs[2], "instances", c.inst+".stage-*"))
	if len(stages) != 1 {
		t.Fatalf("node 3's staged copies: %v, want one", stages)
	}
	for pid := range e2eProcsUnder(stages[0]) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	c.release(t)
	failed = waitJobFor(t, a2, admin, started.Job.ID, restoreDeadline)
	if failed.State != "failed" || !strings.Contains(failed.Error, "rebuild on node "+c.nodes[2].ID+" failed") {
		t.Fatalf("a move whose cutover fails: %s %q", failed.State, failed.Error)
	}
	t.Logf("the move failed in its cutover: %s", failed.Error)
	servesOnNode1(t, a2, admin, prj, w, "a failed cutover")
	ackedSoFar := w.ackedSoFar()
	checkRows(t, a2.connections(t, admin, prj).DirectURL, ackedSoFar)
	if left, _ := filepath.Glob(filepath.Join(c.dirs[2], "instances", c.inst+"*")); len(left) != 0 {
		t.Fatalf("a failed cutover left on node 3: %v", left)
	}

	// Crashes inside the pause: the target, the target after it opened the project (then the project
	// moves back to node 1), then the source.
	c.moveThroughTargetCrash(t, sess, w)
	c.moveThroughTargetCrashStarted(t, sess, w)
	c.moveThroughTargetCrashOpened(t, sess, w)
	c.procs[1].do(t, sess, http.MethodPost, move, map[string]any{"node": c.nodes[0].ID}, http.StatusAccepted, &started)
	if j := waitJobFor(t, a2, admin, started.Job.ID, restoreDeadline); j.State != "completed" {
		t.Fatalf("the move back to node 1: %s %q", j.State, j.Error)
	}
	servesOnNode1(t, a2, admin, prj, w, "the move back")
	c.moveThroughSourceCrash(t, sess, w)
	a2.waitRuntime(t, admin, prj, "active")

	asideBefore, _ := filepath.Glob(filepath.Join(c.dirs[2], "instances", c.inst+".moved-*"))
	a2.do(t, sess, http.MethodPost, move, map[string]any{"node": c.nodes[1].ID}, http.StatusAccepted, &started)
	got = a2.do(t, sess, http.MethodPost, move, map[string]any{"node": c.nodes[0].ID}, http.StatusConflict, nil)
	e2eWants(t, "a second move while one runs", string(got), "being moved already")
	j := waitJobFor(t, a2, admin, started.Job.ID, restoreDeadline)
	if j.State != "completed" {
		w.finish()
		t.Fatalf("move: %s %q", j.State, j.Error)
	}
	var res struct {
		FromNode     string   `json:"from_node"`
		ToNode       string   `json:"to_node"`
		WritePauseMS *int64   `json:"write_pause_ms"`
		StagingMS    *int64   `json:"staging_ms"`
		LSN          string   `json:"lsn"`
		Warnings     []string `json:"warnings"`
	}
	if err := json.Unmarshal(j.Result, &res); err != nil || res.FromNode != c.nodes[2].ID || res.ToNode != c.nodes[1].ID || res.LSN == "" ||
		res.WritePauseMS == nil || *res.WritePauseMS <= 0 || res.StagingMS == nil || *res.StagingMS <= 0 {
		t.Fatalf("move's result: %v %s", err, j.Result)
	}
	t.Logf("moved from node 3 to node 2: write pause %d ms, staging %d ms (%s)", *res.WritePauseMS, *res.StagingMS, j.Result)
	e2eEventually(t, time.Minute, "rows written through node 2's pooled URL", func() (bool, string) {
		n := w.ackedThrough("127.0.0.2")
		return n >= 20, fmt.Sprintf("%d (last error: %s)", n, w.lastError())
	})
	acked, errs := w.finish()
	t.Logf("writer: %d rows acknowledged, %d errors (refused or cut off in the pause)", len(acked), errs)

	conn2 := a2.connections(t, admin, prj)
	for _, u := range []string{conn2.DirectURL, conn2.PooledURL} {
		if pu, err := url.Parse(u); err != nil || pu.Hostname() != "127.0.0.2" {
			t.Fatalf("URL after the move: %v %s, want node 2's host 127.0.0.2", err, e2eRedact(u))
		}
	}
	if p := a2.project(t, admin, prj); p.RuntimeStatus != "active" {
		t.Fatalf("after the move: runtime_status %q", p.RuntimeStatus)
	}
	checkRows(t, conn2.DirectURL, acked)
	if got := recoverChecksum(t, conn2.DirectURL); got != c.sum {
		t.Fatalf("rows of before the move on node 2: checksum %s, want %s", got, c.sum)
	}
	aside := keptAside(filepath.Join(c.dirs[2], "instances", c.inst), asideBefore)
	if len(aside) != 1 {
		t.Fatalf("instances/%s.moved-* on node 3: %v, want one more than %v", c.inst, aside, asideBefore)
	}
	if _, err := os.Stat(filepath.Join(aside[0], "pgdata", "PG_VERSION")); err != nil {
		t.Fatalf("node 3's copy kept aside lost its data: %v", err)
	}
	if _, err := os.Stat(filepath.Join(c.dirs[2], "instances", c.inst)); err == nil {
		t.Fatalf("node 3 kept instances/%s in place", c.inst)
	}
	for _, d := range []string{c.dirs[0], c.dirs[2]} {
		if left := e2eProcsUnder(filepath.Join(d, "instances", c.inst)); len(left) > 0 {
			t.Fatalf("node %s runs processes of the moved project: %v", d, left)
		}
	}

	// A project that cannot move (suspended) stops the drain before anything moves: nothing is removed.
	a2.do(t, admin, http.MethodPost, "/v1/projects/"+prj+"/suspend", nil, http.StatusOK, nil)
	a2.waitRuntime(t, admin, prj, "suspended")
	out := runCLIFails(t, c.bin, "cluster", "remove-node", c.nodes[1].ID, "--data-dir", c.dirs[0])
	e2eWants(t, "a refused drain", out, "was not removed", "cannot be drained, nothing was moved", prj, "only an active, running project")
	if nodes := clusterNodes(t, c.bin, c.dirs[0]); len(nodes) != 3 {
		t.Fatalf("nodes after a refused drain: %+v", nodes)
	}
	a2.do(t, admin, http.MethodPost, "/v1/projects/"+prj+"/resume", nil, http.StatusOK, nil)
	a2.waitRuntime(t, admin, prj, "active")

	// remove-node of node 2, which hosts the project now: drained (moved to node 1 or 3), then removed.
	out = runCLIAll(t, c.bin, "cluster", "remove-node", c.nodes[1].ID, "--data-dir", c.dirs[0])
	e2eWants(t, "remove-node's output", out, "draining node "+c.nodes[1].ID, "removed node "+c.nodes[1].ID)
	nodes := clusterNodes(t, c.bin, c.dirs[0])
	if len(nodes) != 2 {
		t.Fatalf("nodes after remove-node: %+v", nodes)
	}
	a1 := c.procs[0]
	a1.waitRuntime(t, admin, prj, "active")
	conn3 := a1.connections(t, admin, prj)
	if pu, _ := url.Parse(conn3.DirectURL); pu.Hostname() == "127.0.0.2" {
		t.Fatalf("after the drain the URL still names node 2: %s", e2eRedact(conn3.DirectURL))
	}
	checkRows(t, conn3.DirectURL, acked)
	if got := recoverChecksum(t, conn3.DirectURL); got != c.sum {
		t.Fatalf("rows after the drain: checksum %s, want %s", got, c.sum)
	}

}

// held is how many times node 3 held a move-in at step.
func (c *moveCluster) held(step string) int {
	data, _ := os.ReadFile(c.marker)
	return strings.Count(string(data), " "+step+"\n")
}

// arm makes node 3 hold its next move-ins at step (until c.release).
func (c *moveCluster) arm(t *testing.T, step string) {
	t.Helper()
	if err := os.WriteFile(c.armFile, []byte(step+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// release lets a held move-in go on, and holds none after.
func (c *moveCluster) release(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(c.armFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// moveUnbackedThroughACrash: the project that never had a base backup moves from node 1 to node 3 (the
// move takes a fresh base backup first), and node 1, its source, is SIGKILLed while node 3 stages it (a
// test build's hold at move-standby) and started again: the move job's retry goes on from where it was
// and completes. Every row of before and every row acknowledged through the pooled URL throughout is on
// node 3, the result names the fresh backup, node 1 keeps its directory aside and runs nothing of it.
func (c *moveCluster) moveUnbackedThroughACrash(t *testing.T, sess string) {
	a3, admin, prj := c.procs[2], c.admin, c.unbacked
	w := startWriter(a3, admin, prj)
	e2eEventually(t, time.Minute, "rows written into the unbacked project through node 1's pooled URL", func() (bool, string) {
		n := w.ackedThrough("127.0.0.1")
		return n >= 20, fmt.Sprintf("%d (last error: %s)", n, w.lastError())
	})
	heldBefore := c.held("move-standby")
	var started struct {
		Job *e2eJob `json:"job"`
	}
	c.arm(t, "move-standby")
	a3.do(t, sess, http.MethodPost, "/v1/projects/"+prj+"/move", map[string]any{"node": c.nodes[2].ID}, http.StatusAccepted, &started)
	e2eEventually(t, 3*time.Minute, "node 3's staged standby of the unbacked project running", func() (bool, string) {
		n := c.held("move-standby")
		return n > heldBefore, fmt.Sprint(n)
	})
	c.procs[0].stop(t, syscall.SIGKILL)
	c.procs[0] = e2eStartWith(t, c.bin, c.dirs[0], c.env1, c.flags1)
	c.release(t)
	j := waitJobFor(t, a3, admin, started.Job.ID, restoreDeadline)
	if j.State != "completed" {
		w.finish()
		t.Fatalf("the move whose source was killed while staging: %s %q (attempts %d)", j.State, j.Error, j.Attempts)
	}
	var res struct {
		ToNode      string `json:"to_node"`
		FreshBackup string `json:"fresh_backup"`
	}
	if err := json.Unmarshal(j.Result, &res); err != nil || res.ToNode != c.nodes[2].ID || res.FreshBackup == "" {
		t.Fatalf("the unbacked project's move result: %v %s", err, j.Result)
	}
	t.Logf("the unbacked project moved through its source's crash (attempts %d): %s", j.Attempts, j.Result)
	e2eEventually(t, time.Minute, "rows written through node 3's pooled URL", func() (bool, string) {
		n := w.ackedThrough("127.0.0.3")
		return n >= 20, fmt.Sprintf("%d (last error: %s)", n, w.lastError())
	})
	acked, errs := w.finish()
	t.Logf("writer of the unbacked project: %d rows acknowledged, %d errors", len(acked), errs)
	conn := a3.connections(t, admin, prj)
	if pu, err := url.Parse(conn.DirectURL); err != nil || pu.Hostname() != "127.0.0.3" {
		t.Fatalf("URL after the move: %v %s, want node 3's host", err, e2eRedact(conn.DirectURL))
	}
	checkRows(t, conn.DirectURL, acked)
	if got := recoverChecksum(t, conn.DirectURL); got != c.unbackedSum {
		t.Fatalf("the unbacked project's rows on node 3: checksum %s, want %s", got, c.unbackedSum)
	}
	aside, _ := filepath.Glob(filepath.Join(c.dirs[0], "instances", c.unbackedInst+".moved-*"))
	if len(aside) != 1 {
		t.Fatalf("instances/%s.moved-* on node 1: %v, want one", c.unbackedInst, aside)
	}
	if left := e2eProcsUnder(aside[0]); len(left) > 0 {
		t.Fatalf("node 1 runs processes of the moved project: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(c.dirs[2], "instances", c.unbackedInst+".stage-*")); len(left) != 0 {
		t.Fatalf("staged copies left on node 3: %v", left)
	}
}

// checkRows checks that every acknowledged id is in the table written.
func checkRows(t *testing.T, u string, acked []int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	pg := e2eConnect(ctx, t, u, false)
	defer pg.Close(context.Background())
	have := map[int]bool{}
	rows, err := pg.Query(ctx, "SELECT id FROM written")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		have[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var missing []int
	for _, id := range acked {
		if !have[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%d of %d acknowledged rows missing: %v", len(missing), len(acked), missing)
	}
}

// runCLIAll is runCLI returning standard output and error together.
func runCLIAll(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("appliance %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// runCLIFails runs the binary expecting an error exit and returns its output.
func runCLIFails(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err == nil {
		t.Fatalf("appliance %s succeeded, want a refusal:\n%s", strings.Join(args, " "), out)
	}
	return string(out)
}

// moveHeldAt starts a move of the project from node 1 to node 3 (through node 2) and returns its job's ID
// once node 3's move-in holds at step, move-cutover (node 1 paused, fenced and stopped) or a later one.
func (c *moveCluster) moveHeldAt(t *testing.T, sess, step string) string {
	t.Helper()
	var started struct {
		Job *e2eJob `json:"job"`
	}
	heldBefore := c.held(step)
	c.arm(t, step)
	c.procs[1].do(t, sess, http.MethodPost, "/v1/projects/"+c.prj+"/move", map[string]any{"node": c.nodes[2].ID}, http.StatusAccepted, &started)
	e2eEventually(t, 2*time.Minute, "node 3's move-in at "+step+" (node 1 paused)", func() (bool, string) {
		n := c.held(step)
		return n > heldBefore, fmt.Sprint(n)
	})
	return started.Job.ID
}

// moveThroughTargetCrash: a move of the project from node 1 to node 3 whose target, node 3, is SIGKILLed
// in the pause (held at move-cutover: node 1 fenced the project, archived its last WAL and stopped it),
// then started again. The move-in had one attempt: node 3's restart fails it and removes the staged copy;
// the move job, on node 1, puts the project back there and ends failed. The project serves on node 1 again
// (its URL, every row acknowledged before and rows written after), node 3 holds nothing of it and runs
// nothing of it, node 1 kept nothing aside.
func (c *moveCluster) moveThroughTargetCrash(t *testing.T, sess string, w *writer) {
	a2, admin, prj := c.procs[1], c.admin, c.prj
	moveID := c.moveHeldAt(t, sess, "move-cutover")
	if left := e2eProcsUnder(filepath.Join(c.dirs[0], "instances", c.inst)); len(left) > 0 {
		t.Fatalf("node 1 paused (the target at its cutover), yet processes of the project run there: %v", left)
	}
	c.procs[2].stop(t, syscall.SIGKILL)
	c.release(t)
	c.procs[2] = e2eStartWith(t, c.bin, c.dirs[2], c.env3, c.flags3)
	j := waitJobFor(t, a2, admin, moveID, restoreDeadline)
	if j.State != "failed" || !strings.Contains(j.Error, "rebuild on node "+c.nodes[2].ID+" failed") {
		t.Fatalf("a move whose target was killed in its cutover: %s %q", j.State, j.Error)
	}
	t.Logf("the move whose target was killed in the pause: %s", j.Error)
	servesOnNode1(t, a2, admin, prj, w, "the target's crash")
	acked := w.ackedSoFar()
	checkRows(t, a2.connections(t, admin, prj).DirectURL, acked)
	if left, _ := filepath.Glob(filepath.Join(c.dirs[2], "instances", c.inst+"*")); len(left) != 0 {
		t.Fatalf("the target's crash in the cutover left on node 3: %v", left)
	}
	if left := e2eProcsUnder(filepath.Join(c.dirs[2], "instances", c.inst)); len(left) > 0 {
		t.Fatalf("node 3 runs processes of the project after its crash in the cutover: %v", left)
	}
	if aside, _ := filepath.Glob(filepath.Join(c.dirs[0], "instances", c.inst+".*")); len(aside) != 0 {
		t.Fatalf("a failed move kept node 1's directory aside: %v", aside)
	}
	// The unbacked project node 3 hosts serves again after its restart.
	a2.waitRuntime(t, admin, c.unbacked, "active")
}

// moveThroughSourceCrash: a move of the project from node 1 to node 3 whose source, node 1, is SIGKILLed
// after its pause (fenced, last WAL archived, stopped) while node 3 holds at its cutover, and started
// again: node 1 does not start the project (its move paused it), node 3, released, promotes its copy and
// opens the project, and the move job's retry on node 1 keeps node 1's directory aside and completes. The
// project serves on node 3 with every row of before and every row acknowledged, node 1 runs nothing of it,
// nothing of the staging is left on node 3.
func (c *moveCluster) moveThroughSourceCrash(t *testing.T, sess string, w *writer) {
	a2, admin, prj := c.procs[1], c.admin, c.prj
	asideBefore, _ := filepath.Glob(filepath.Join(c.dirs[0], "instances", c.inst+".moved-*"))
	moveID := c.moveHeldAt(t, sess, "move-cutover")
	c.procs[0].stop(t, syscall.SIGKILL)
	c.procs[0] = e2eStartWith(t, c.bin, c.dirs[0], c.env1, c.flags1)
	// Node 1 is up (its instances adopted) while node 3 still holds: the paused project is not started.
	staged, _ := filepath.Glob(filepath.Join(c.dirs[2], "instances", c.inst+".stage-*"))
	stillHeld := len(staged) == 1 // the cutover hands the staged copy over
	if left := e2eProcsUnder(filepath.Join(c.dirs[0], "instances", c.inst)); len(left) > 0 {
		t.Fatalf("node 1, started again in the move's pause, runs processes of the project: %v", left)
	}
	c.release(t)
	j := waitJobFor(t, a2, admin, moveID, restoreDeadline)
	if j.State != "completed" {
		t.Fatalf("the move whose source was killed in the pause: %s %q (attempts %d)", j.State, j.Error, j.Attempts)
	}
	t.Logf("the move whose source was killed in the pause (node 1 back while node 3 held: %v; attempts %d): %s", stillHeld, j.Attempts, j.Result)
	a2.waitRuntime(t, admin, prj, "active")
	conn := a2.connections(t, admin, prj)
	if pu, err := url.Parse(conn.PooledURL); err != nil || pu.Hostname() != "127.0.0.3" {
		t.Fatalf("URL after the move through the source's crash: %v %s, want node 3's", err, e2eRedact(conn.PooledURL))
	}
	e2eEventually(t, time.Minute, "rows written through node 3's pooled URL", func() (bool, string) {
		n := w.ackedThrough("127.0.0.3")
		return n >= 20, fmt.Sprintf("%d (last error: %s)", n, w.lastError())
	})
	acked := w.ackedSoFar()
	checkRows(t, conn.DirectURL, acked)
	if got := recoverChecksum(t, conn.DirectURL); got != c.sum {
		t.Fatalf("rows of before the move on node 3: checksum %s, want %s", got, c.sum)
	}
	aside := keptAside(filepath.Join(c.dirs[0], "instances", c.inst), asideBefore)
	if len(aside) != 1 {
		all, _ := filepath.Glob(filepath.Join(c.dirs[0], "instances", c.inst+"*"))
		t.Fatalf("new instances/%s.moved-* on node 1: %v, want one (node 1 holds %v)", c.inst, aside, all)
	}
	if left := e2eProcsUnder(filepath.Join(c.dirs[0], "instances", c.inst)); len(left) > 0 {
		t.Fatalf("node 1 runs processes of the moved project: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(c.dirs[2], "instances", c.inst+".stage-*")); len(left) != 0 {
		t.Fatalf("staged copies left on node 3: %v", left)
	}
}

// moveThroughTargetCrashStarted: a move of the project from node 1 to node 3 whose target, node 3, is
// SIGKILLed once its rebuild started the promoted copy's server (held at move-started, before the word that
// it opened the project), then started again. The copy's promotion archived a new timeline's history file
// (a branch of the project's timeline the project will never be on); the move rolls back and node 1, the
// source, moves itself to a timeline above that branch before it serves again. The project serves on node
// 1, every acknowledged row there; the next move (moveThroughTargetCrashOpened), whose staged standby
// follows the archive's latest timeline, finds every row node 1 acknowledged after the rollback.
func (c *moveCluster) moveThroughTargetCrashStarted(t *testing.T, sess string, w *writer) {
	a2, admin, prj := c.procs[1], c.admin, c.prj
	moveID := c.moveHeldAt(t, sess, "move-started")
	c.procs[2].stop(t, syscall.SIGKILL)
	c.release(t)
	c.procs[2] = e2eStartWith(t, c.bin, c.dirs[2], c.env3, c.flags3)
	j := waitJobFor(t, a2, admin, moveID, restoreDeadline)
	if j.State != "failed" {
		t.Fatalf("a move whose target was killed after its promotion, before the word: %s %q %s", j.State, j.Error, j.Result)
	}
	t.Logf("the move whose target was killed after its promotion: %s", j.Error)
	servesOnNode1(t, a2, admin, prj, w, "the target's crash after its promotion")
	acked := w.ackedSoFar()
	checkRows(t, a2.connections(t, admin, prj).DirectURL, acked)
}

// keptAside is the directories <dir>.moved-* there are now and were not in before.
func keptAside(dir string, before []string) []string {
	now, _ := filepath.Glob(dir + ".moved-*")
	var added []string
	for _, d := range now {
		if !slices.Contains(before, d) {
			added = append(added, d)
		}
	}
	return added
}

// moveThroughTargetCrashOpened: a move of the project from node 1 to node 3 held first once node 3's
// rebuild started the promoted copy's server and pooler, before the word that it opened the project
// (move-started: the records and the direct URL name node 3, yet a client's login there is refused by
// pg_hba.conf and no row is acknowledged through node 3's URL), then whose target, node 3, is
// SIGKILLed after the rebuild opened the project there (held at move-opened: its records name node 3, a
// client's writes through node 3's URL are acknowledged), before its move-in job completes, then started
// again. The move happened: the move job, on node 1, does not take the project back (it would lose what
// node 3 acknowledged) — it keeps node 1's copy aside and completes with a warning that the move-in
// failed after it opened the project. Node 3's start serves the project: its URL names node 3, every row
// of before and every row acknowledged (on node 1, then on node 3 before and after its kill) are there,
// node 1 runs nothing of it, nothing of the staging is left on node 3.
func (c *moveCluster) moveThroughTargetCrashOpened(t *testing.T, sess string, w *writer) {
	a2, admin, prj := c.procs[1], c.admin, c.prj
	asideBefore, _ := filepath.Glob(filepath.Join(c.dirs[0], "instances", c.inst+".moved-*"))
	var started struct {
		Job *e2eJob `json:"job"`
	}
	heldBefore := c.held("move-opened")
	startedBefore := c.held("move-started")
	c.arm(t, "move-started")
	a2.do(t, sess, http.MethodPost, "/v1/projects/"+prj+"/move", map[string]any{"node": c.nodes[2].ID}, http.StatusAccepted, &started)
	e2eEventually(t, 2*time.Minute, "node 3's rebuild held once its server and pooler run, before the word", func() (bool, string) {
		n := c.held("move-started")
		return n > startedBefore, fmt.Sprint(n)
	})
	// Before the word: the records and the direct URL name node 3, yet its server admits no client.
	direct := a2.connections(t, admin, prj).DirectURL
	if pu, err := url.Parse(direct); err != nil || pu.Hostname() != "127.0.0.3" {
		t.Fatalf("direct URL while node 3's rebuild holds before the word: %v %s, want node 3's", err, e2eRedact(direct))
	}
	lctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	client, err := pgx.Connect(lctx, direct)
	cancel()
	if err == nil {
		client.Close(context.Background())
		t.Fatalf("a client logged in through node 3's direct URL before the move's word that it opened the project")
	}
	if !strings.Contains(err.Error(), "pg_hba.conf rejects connection") {
		t.Fatalf("a client's login through node 3's direct URL before the word: %v, want pg_hba.conf's refusal", err)
	}
	if n := w.ackedThrough("127.0.0.3"); n != 0 {
		t.Fatalf("%d rows acknowledged through node 3's URL before the move's word", n)
	}
	c.arm(t, "move-opened") // the hold at move-started ends; the next one is after the word
	e2eEventually(t, 2*time.Minute, "node 3's move-in held after it opened the project", func() (bool, string) {
		n := c.held("move-opened")
		return n > heldBefore, fmt.Sprint(n)
	})
	// Node 3 serves the project while its move-in job holds: writes through node 3's URL acknowledged.
	on3 := w.ackedThrough("127.0.0.3")
	e2eEventually(t, time.Minute, "rows written through node 3's pooled URL while its move-in holds", func() (bool, string) {
		n := w.ackedThrough("127.0.0.3")
		return n >= on3+20, fmt.Sprintf("%d (last error: %s)", n, w.lastError())
	})
	if j := a2.call(t, admin, http.MethodGet, "/v1/jobs/"+started.Job.ID, nil, http.StatusOK); j.State == "completed" || j.State == "failed" {
		t.Fatalf("the move ended before node 3 was killed (its hold at move-opened ended): %s %q", j.State, j.Error)
	}
	beforeKill := w.ackedSoFar()
	c.procs[2].stop(t, syscall.SIGKILL)
	c.release(t)
	c.procs[2] = e2eStartWith(t, c.bin, c.dirs[2], c.env3, c.flags3)
	j := waitJobFor(t, a2, admin, started.Job.ID, restoreDeadline)
	var res struct {
		ToNode    string   `json:"to_node"`
		KeptAside string   `json:"kept_aside"`
		Warnings  []string `json:"warnings"`
	}
	if j.State != "completed" || json.Unmarshal(j.Result, &res) != nil || res.ToNode != c.nodes[2].ID || res.KeptAside == "" ||
		!slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, "after it opened the project there") }) {
		t.Fatalf("a move whose target was killed after it opened the project: %s %q %s", j.State, j.Error, j.Result)
	}
	t.Logf("the move whose target was killed after it opened the project: %s", j.Result)
	a2.waitRuntime(t, admin, prj, "active")
	conn := a2.connections(t, admin, prj)
	if pu, err := url.Parse(conn.PooledURL); err != nil || pu.Hostname() != "127.0.0.3" {
		t.Fatalf("URL after node 3's crash once it opened the project: %v %s, want node 3's", err, e2eRedact(conn.PooledURL))
	}
	after := w.ackedThrough("127.0.0.3")
	e2eEventually(t, time.Minute, "rows written through node 3's pooled URL after its restart", func() (bool, string) {
		n := w.ackedThrough("127.0.0.3")
		return n >= after+20, fmt.Sprintf("%d (last error: %s)", n, w.lastError())
	})
	acked := w.ackedSoFar()
	if len(acked) <= len(beforeKill) {
		t.Fatalf("no row acknowledged since node 3's kill: %d then %d", len(beforeKill), len(acked))
	}
	checkRows(t, conn.DirectURL, acked)
	if got := recoverChecksum(t, conn.DirectURL); got != c.sum {
		t.Fatalf("rows of before the move on node 3: checksum %s, want %s", got, c.sum)
	}
	aside := keptAside(filepath.Join(c.dirs[0], "instances", c.inst), asideBefore)
	if len(aside) != 1 || filepath.Base(aside[0]) != filepath.Base(res.KeptAside) {
		t.Fatalf("new instances/%s.moved-* on node 1: %v, want one, the result's %s", c.inst, aside, res.KeptAside)
	}
	if _, err := os.Stat(filepath.Join(aside[0], "pgdata", "PG_VERSION")); err != nil {
		t.Fatalf("node 1's copy kept aside lost its data: %v", err)
	}
	if _, err := os.Stat(filepath.Join(c.dirs[0], "instances", c.inst)); err == nil {
		t.Fatalf("node 1 kept instances/%s in place", c.inst)
	}
	if left := e2eProcsUnder(filepath.Join(c.dirs[0], "instances", c.inst)); len(left) > 0 {
		t.Fatalf("node 1 runs processes of the project node 3 opened: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(c.dirs[2], "instances", c.inst+".stage-*")); len(left) != 0 {
		t.Fatalf("staged copies left on node 3: %v", left)
	}
	// The unbacked project node 3 hosts serves again after its restart.
	a2.waitRuntime(t, admin, c.unbacked, "active")
}
