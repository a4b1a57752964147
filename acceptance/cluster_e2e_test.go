package acceptance

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/appliancetest"
)

// clusterFlags are up's flags of the node on dataDir at the loopback address host: its listeners there,
// its etcd member's and join listener's ports reserved ones (e2eNodePortFlags), no spare clusters (three
// appliances share the machine).
func clusterFlags(t testing.TB, host, dataDir string) []string {
	return append([]string{"--listen", host + ":0", "--spare-clusters", "0", "--advertise", host}, e2eNodePortFlags(t, dataDir)...)
}

// runCLI runs the binary with args to its end and returns its standard output; it fails the test on an
// error exit.
func runCLI(t testing.TB, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	c := exec.CommandContext(ctx, bin, args...)
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		t.Fatalf("appliance %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, &stdout, &stderr)
	}
	return stdout.String()
}

type clusterNode struct {
	ID         string   `json:"id"`
	Advertise  string   `json:"advertise"`
	State      string   `json:"state"`
	APIURL     string   `json:"api_url"`
	Memory     int64    `json:"memory_bytes"`
	Disk       int64    `json:"disk_bytes"`
	Projects   []string `json:"projects"`
	Liveness   string   `json:"liveness"`
	KVRESPPort int      `json:"kv_resp_port"`
}

func clusterNodes(t testing.TB, bin, dataDir string) []clusterNode {
	t.Helper()
	var nodes []clusterNode
	out := runCLI(t, bin, "cluster", "nodes", "--json", "--data-dir", dataDir)
	if err := json.Unmarshal([]byte(out), &nodes); err != nil {
		t.Fatalf("cluster nodes --json: %v\n%s", err, out)
	}
	return nodes
}

type clusterStatus struct {
	Status     string `json:"status"`
	Components []struct{ Name, Status, Message string }
	Cluster    *struct {
		Members []struct {
			Name    string `json:"name"`
			Leader  bool   `json:"leader"`
			Learner bool   `json:"learner"`
		} `json:"members"`
		Leader  string `json:"leader"`
		Quorum  bool   `json:"quorum"`
		Message string `json:"message"`
	} `json:"cluster"`
}

// status is the operator's /status (any HTTP status: a cluster without quorum answers 503).
// metrics is p's /metrics (with the metrics token).
func (p *e2eProc) metrics(t *testing.T) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.api+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+e2eMetricsToken)
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

func (p *e2eProc) clusterStatus(t testing.TB) clusterStatus {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.api+"/status", nil)
	req.Header.Set("Authorization", "Bearer "+e2eMetricsToken)
	cl := &http.Client{Timeout: 2 * time.Minute, Transport: p.client.Transport}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("/status: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var st clusterStatus
	if err := json.Unmarshal(b, &st); err != nil || st.Cluster == nil {
		t.Fatalf("/status (%d) has no cluster section (%v): %s", resp.StatusCode, err, b)
	}
	return st
}

// createKey makes an API key of the organization through the node and returns its plaintext.
func (p *e2eProc) createKey(t *testing.T, key, orgID, name string) string {
	t.Helper()
	var created struct {
		Plaintext string `json:"plaintext_api_key"`
	}
	p.do(t, key, http.MethodPost, "/v1/organizations/"+orgID+"/api-keys", map[string]any{"name": name, "scopes": []string{"projects:read", "api_keys:read"}}, http.StatusCreated, &created)
	if created.Plaintext == "" {
		t.Fatal("no plaintext key in the answer")
	}
	return created.Plaintext
}

// TestClusterOfThree forms a cluster of three appliances on this machine (separate data directories and
// ports, advertising 127.0.0.1, .2 and .3): init, refused while the appliance runs, on the stopped
// single-node appliance, two joins with tokens;
// cluster nodes lists three; an API key made through node 1 works on node 3 (one metadata store); a
// token used again, an expired one and one naming another CA are refused and change nothing; /status
// shows three members, a leader and a quorum. With one node SIGKILLed the other two answer and write; with
// two, a write on the last fails with an error (no quorum) instead of hanging, and /status says why; one
// of them started again brings the quorum back; one SIGSTOPped takes it away as a dead one does, and
// SIGCONT gives it back.
func TestClusterOfThree(t *testing.T) {
	t.Parallel()
	bin := e2eBuild(t)
	dirs := make([]string, 3)
	for i := range dirs {
		dirs[i] = appliancetest.TraversableTempDir(t)
		d := dirs[i]
		t.Cleanup(func() { e2eKillUnder(t, d) })
	}

	// A single-node appliance, stopped, becomes the cluster's first node.
	a1 := e2eStartWith(t, bin, dirs[0], nil, []string{"--operator-email", "op@example.com", "--spare-clusters", "0"})
	password := operatorPassword(t, a1)
	admin := e2eAdminKey(t, dirs[0])
	var boot struct {
		OrganizationID string `json:"organization_id"`
	}
	b, _ := os.ReadFile(filepath.Join(dirs[0], "bootstrap.json"))
	if err := json.Unmarshal(b, &boot); err != nil || boot.OrganizationID == "" {
		t.Fatalf("bootstrap.json: %v", err)
	}
	before := a1.createKey(t, admin, boot.OrganizationID, "made-before-the-cluster")
	refused := exec.Command(bin, append([]string{"cluster", "init", "--data-dir", dirs[0], "--advertise", "127.0.0.1"}, e2eNodePortFlags(t, dirs[0])...)...)
	if got, err := refused.CombinedOutput(); err == nil || !strings.Contains(string(got), "needs the appliance stopped") {
		t.Fatalf("cluster init of a running appliance: %v\n%s", err, got)
	}
	if _, err := os.Stat(filepath.Join(dirs[0], "cluster.json")); err == nil {
		t.Fatal("a refused init left cluster.json")
	}
	a1.stop(t, syscall.SIGTERM)
	out := runCLI(t, bin, append([]string{"cluster", "init", "--data-dir", dirs[0], "--advertise", "127.0.0.1"}, e2eNodePortFlags(t, dirs[0])...)...)
	e2eWants(t, "cluster init", out, "verified record by record", "meta.db.pre-cluster")
	if _, err := os.Stat(filepath.Join(dirs[0], "meta.db")); !os.IsNotExist(err) {
		t.Fatalf("meta.db is still in use after init (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(dirs[0], "meta.db.pre-cluster")); err != nil {
		t.Fatalf("meta.db was not kept aside: %v", err)
	}
	a1 = e2eStartWith(t, bin, dirs[0], nil, []string{"--spare-clusters", "0"})
	a1.do(t, before, http.MethodGet, "/v1/organizations/"+boot.OrganizationID+"/api-keys", nil, http.StatusOK, nil)

	// Two joins.
	procs := []*e2eProc{a1}
	for i, host := range []string{"127.0.0.2", "127.0.0.3"} {
		tok := strings.TrimSpace(runCLI(t, bin, "cluster", "join-token", "--data-dir", dirs[0], "--ttl", "10m"))
		p := e2eStartWith(t, bin, dirs[i+1], nil, append(clusterFlags(t, host, dirs[i+1]), "--join", tok))
		procs = append(procs, p)
		// The refusals: the token used, then one that expired, then one naming another CA.
		dir := appliancetest.TraversableTempDir(t)
		got := e2eRunFails(t, bin, dir, append([]string{"up"}, append(clusterFlags(t, "127.0.0.4", dir), "--join", tok)...)...)
		e2eWants(t, "a join with a used token", got, "used already")
	}
	expired := strings.TrimSpace(runCLI(t, bin, "cluster", "join-token", "--data-dir", dirs[0], "--ttl", "1ms"))
	foreign := strings.TrimSpace(runCLI(t, bin, "cluster", "join-token", "--data-dir", dirs[0]))
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(foreign, "aj1."))
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]string
	json.Unmarshal(raw, &fields)
	fields["f"] = strings.Repeat("ab", 32) // another CA's fingerprint
	raw, _ = json.Marshal(fields)
	foreign = "aj1." + base64.RawURLEncoding.EncodeToString(raw)
	for _, c := range []struct{ name, token, want string }{
		{"expired", expired, "expired"},
		{"foreign", foreign, "not of the cluster the join token names"},
	} {
		dir := appliancetest.TraversableTempDir(t)
		got := e2eRunFails(t, bin, dir, append([]string{"up"}, append(clusterFlags(t, "127.0.0.4", dir), "--join", c.token)...)...)
		e2eWants(t, "a join with a token "+c.name, got, c.want)
		if _, err := os.Stat(filepath.Join(dir, "cluster.json")); err == nil {
			t.Errorf("a refused join (%s) left cluster.json", c.name)
		}
	}

	nodes := clusterNodes(t, bin, dirs[2])
	if len(nodes) != 3 {
		t.Fatalf("cluster nodes: %d nodes, want 3 (the refused joins add none): %+v", len(nodes), nodes)
	}
	for i, n := range nodes {
		if n.State != "active" || n.Advertise != []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}[i] || n.APIURL == "" || n.Memory == 0 || n.Disk == 0 {
			t.Errorf("node %d: %+v", i, n)
		}
	}
	listed := runCLI(t, bin, "cluster", "nodes", "--data-dir", dirs[1])
	e2eWants(t, "cluster nodes", listed, "127.0.0.1", "127.0.0.2", "127.0.0.3", "(this)")

	// One metadata store: a key made through node 1 works on node 3.
	k := a1.createKey(t, admin, boot.OrganizationID, "made-on-node-1")
	procs[2].do(t, k, http.MethodGet, "/v1/organizations/"+boot.OrganizationID+"/api-keys", nil, http.StatusOK, nil)
	for i, p := range procs {
		st := p.clusterStatus(t)
		if len(st.Cluster.Members) != 3 || st.Cluster.Leader == "" || !st.Cluster.Quorum {
			t.Fatalf("node %d's /status: %+v", i+1, st.Cluster)
		}
	}

	// GET /v1/nodes (an operator's) answers the same three nodes on every node, as cluster nodes lists them:
	// alive voters, one leader, their lease renewed; each node's /metrics says which node it is and the
	// cluster's gauges, with one leader among them.
	op := operatorSession(t, a1, password)
	leaders := 0.0
	for i, p := range procs {
		var list api.NodeList
		p.do(t, op, http.MethodGet, "/v1/nodes", nil, http.StatusOK, &list)
		p.do(t, admin, http.MethodGet, "/v1/nodes", nil, http.StatusForbidden, nil)
		if !list.Clustered || list.Node != nodes[i].ID || len(list.Nodes) != 3 {
			t.Fatalf("node %d's GET /v1/nodes: %+v", i+1, list)
		}
		lead := 0
		for j, n := range list.Nodes {
			if n.ID != nodes[j].ID || n.Advertise != nodes[j].Advertise || n.Status != api.NodeStatusAlive || n.Role != api.NodeRoleVoter ||
				n.HeartbeatAgeSeconds == nil || n.LeaseTTLSeconds == nil || *n.LeaseTTLSeconds <= 0 || n.MemoryBytes == 0 || n.MemoryFreeBytes > n.MemoryBytes ||
				n.PortsFree != n.PortsLast-n.PortsFirst+1-2*len(n.Projects) {
				t.Errorf("node %d's GET /v1/nodes, node %d: %+v", i+1, j+1, n)
			}
			if n.Leader {
				lead++
			}
		}
		if lead != 1 {
			t.Errorf("node %d's GET /v1/nodes names %d leaders: %+v", i+1, lead, list.Nodes)
		}
		m := p.metrics(t)
		e2eWants(t, fmt.Sprintf("node %d's /metrics", i+1), m, "\n"+`appliance_node_info{node="`+nodes[i].ID+`"`, "\nappliance_cluster_members 3\n", "\nappliance_cluster_quorum 1\n")
		for _, other := range nodes {
			if other.ID != nodes[i].ID && strings.Contains(m, `node="`+other.ID+`"`) {
				t.Errorf("node %d's /metrics names node %s:\n%s", i+1, other.ID, m)
			}
		}
		if strings.Contains(m, "\nappliance_cluster_is_leader 1\n") {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("%v nodes say appliance_cluster_is_leader 1, want one", leaders)
	}

	// Node 3 killed: nodes 1 and 2 answer and write.
	procs[2].cmd.Process.Signal(syscall.SIGKILL)
	procs[2].waitExit(t)
	// Its lease lapses (a TTL after its last renewal): GET /v1/nodes says it is unavailable.
	tick := time.NewTicker(500 * time.Millisecond) // not e2eEventually's 20 ms: each answer reads etcd
	defer tick.Stop()
	for deadline := time.Now().Add(2 * time.Minute); ; <-tick.C {
		var list api.NodeList
		procs[1].do(t, op, http.MethodGet, "/v1/nodes", nil, http.StatusOK, &list)
		if len(list.Nodes) == 3 && list.Nodes[2].Status == api.NodeStatusUnavailable && list.Nodes[2].Liveness == "down" &&
			list.Nodes[2].LeaseTTLSeconds == nil && list.Nodes[0].Status == api.NodeStatusAlive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 3 killed: GET /v1/nodes through node 2 still says %+v", list.Nodes)
		}
	}
	k2 := procs[1].createKey(t, admin, boot.OrganizationID, "made-on-node-2-with-3-down")
	a1.do(t, k2, http.MethodGet, "/v1/organizations/"+boot.OrganizationID+"/api-keys", nil, http.StatusOK, nil)
	if st := a1.clusterStatus(t); !st.Cluster.Quorum || st.Cluster.Leader == "" {
		t.Fatalf("node 1's /status with node 3 down: %+v", st.Cluster)
	}

	// Node 2 killed too: node 1 has no quorum; a write fails (it does not hang), and /status says why.
	procs[1].cmd.Process.Signal(syscall.SIGKILL)
	procs[1].waitExit(t)
	body, _ := json.Marshal(map[string]any{"name": "no-quorum", "scopes": []string{"projects:read"}})
	req, _ := http.NewRequest(http.MethodPost, a1.api+"/v1/organizations/"+boot.OrganizationID+"/api-keys", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+admin)
	req.Header.Set("Content-Type", "application/json")
	cl := &http.Client{Timeout: 3 * time.Minute, Transport: a1.client.Transport}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("a write without quorum did not answer: %v", err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(msg), "no quorum") {
		t.Fatalf("a write without quorum: %d %s, want 503 saying there is no quorum", resp.StatusCode, msg)
	}
	t.Logf("a write without quorum: %d %s", resp.StatusCode, msg)
	st := a1.clusterStatus(t)
	if st.Cluster.Quorum || !strings.Contains(st.Cluster.Message, "no quorum") || st.Status != "down" {
		t.Fatalf("node 1's /status without quorum: %s %+v", st.Status, st.Cluster)
	}

	// Node 2 started again on its data directory (no --join: it is a node already): the quorum is back,
	// node 1 writes, and the key made on node 2 before it died still works there.
	procs[1] = e2eStartWith(t, bin, dirs[1], nil, clusterFlags(t, "127.0.0.2", dirs[1]))
	k3 := a1.createKey(t, admin, boot.OrganizationID, "made-on-node-1-after-2-came-back")
	procs[1].do(t, k3, http.MethodGet, "/v1/organizations/"+boot.OrganizationID+"/api-keys", nil, http.StatusOK, nil)
	procs[1].do(t, k2, http.MethodGet, "/v1/organizations/"+boot.OrganizationID+"/api-keys", nil, http.StatusOK, nil)
	if st := procs[1].clusterStatus(t); !st.Cluster.Quorum || len(st.Cluster.Members) != 3 {
		t.Fatalf("node 2's /status after its restart: %+v", st.Cluster)
	}

	// A node stopped (SIGSTOP: its sockets open, nothing answered) is as good as dead to the others:
	// with node 3 dead and node 2 stopped, node 1 refuses writes (503); node 2 continued, it writes again.
	if err := procs[1].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resp, err = cl.Do(mustRequest(t, a1.api+"/v1/organizations/"+boot.OrganizationID+"/api-keys", admin, body))
	if err != nil {
		t.Fatalf("a write with node 2 stopped did not answer: %v", err)
	}
	msg, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(msg), "no quorum") {
		t.Fatalf("a write with node 2 stopped and node 3 dead: %d %s, want 503 saying there is no quorum", resp.StatusCode, msg)
	}
	if err := procs[1].cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	a1.createKey(t, admin, boot.OrganizationID, "made-on-node-1-after-2-continued")
}

// mustRequest is a POST of body (JSON) with the key.
func mustRequest(t *testing.T, url, key string, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	return req
}
