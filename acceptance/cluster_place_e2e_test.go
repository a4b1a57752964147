package acceptance

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/theappliance/appliance/appliance/appliancetest"
)

// TestClusterPlacement forms a cluster of three appliances (127.0.0.1, .2, .3, each its own
// --public-host and --pg-listen) and creates projects through node 1: they land on more than one node
// (cluster nodes lists them, every node alive), each project's connection URL names its node's host and
// answers SELECT 1 there, and its server's process runs in that node's data directory only. The
// dashboard's Operator → Nodes view, signed in as an operator, lists the three nodes with their projects
// (clusterNodesView: screenshots at desktop and phone width).
func TestClusterPlacement(t *testing.T) {
	t.Parallel()
	bin := e2eBuild(t)
	hosts := []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}
	dirs := make([]string, 3)
	for i := range dirs {
		dirs[i] = appliancetest.TraversableTempDir(t)
		d := dirs[i]
		t.Cleanup(func() { e2eKillUnder(t, d) })
	}
	hostFlags := func(i int) []string { return []string{"--public-host", hosts[i], "--pg-listen", hosts[i]} }
	kvEnv := func(i int) []string {
		return []string{"APPLIANCE_KV_LISTEN=" + hosts[i] + ":0", "APPLIANCE_KV_REST_LISTEN=" + hosts[i] + ":0"}
	}

	a1 := e2eStartWith(t, bin, dirs[0], kvEnv(0), append([]string{"--spare-clusters", "0", "--operator-email", "op@example.com"}, hostFlags(0)...))
	password := operatorPassword(t, a1)
	admin := e2eAdminKey(t, dirs[0])
	a1.stop(t, syscall.SIGTERM)
	runCLI(t, bin, append([]string{"cluster", "init", "--data-dir", dirs[0], "--advertise", hosts[0]}, e2eNodePortFlags(t, dirs[0])...)...)
	a1 = e2eStartWith(t, bin, dirs[0], kvEnv(0), append([]string{"--spare-clusters", "0"}, hostFlags(0)...))
	for i := 1; i < 3; i++ {
		tok := strings.TrimSpace(runCLI(t, bin, "cluster", "join-token", "--data-dir", dirs[0], "--ttl", "10m"))
		e2eStartWith(t, bin, dirs[i], kvEnv(i), append(append(clusterFlags(t, hosts[i], dirs[i]), hostFlags(i)...), "--join", tok))
	}

	nodes := clusterNodes(t, bin, dirs[0])
	if len(nodes) != 3 {
		t.Fatalf("cluster nodes: %d nodes, want 3: %+v", len(nodes), nodes)
	}
	hostOf, dirOf := map[string]string{}, map[string]string{}
	for i, n := range nodes {
		if n.Liveness != "alive" {
			t.Errorf("node %s (%s): liveness %q, want alive", n.ID, n.Advertise, n.Liveness)
		}
		hostOf[n.ID], dirOf[n.ID] = hosts[i], dirs[i]
	}
	self := nodes[0].ID

	var ids []string
	for i := range 4 {
		ids = append(ids, a1.e2eProvision(t, admin, "placed-"+strconv.Itoa(i)))
	}
	nodes = clusterNodes(t, bin, dirs[1])
	ownerOf := map[string]string{}
	hosting := 0
	for _, n := range nodes {
		if len(n.Projects) > 0 {
			hosting++
		}
		for _, p := range n.Projects {
			ownerOf[p] = n.ID
		}
	}
	if hosting < 2 {
		t.Fatalf("4 projects on %d node(s), want them spread over more than one: %+v", hosting, nodes)
	}
	listed := runCLI(t, bin, "cluster", "nodes", "--data-dir", dirs[2])
	e2eWants(t, "cluster nodes", listed, "LIVENESS", "alive")
	// The dashboard's Operator → Nodes lists the three with their projects (screenshots).
	clusterNodesView(t, a1, "op@example.com", password, nodes)

	for _, id := range ids {
		owner := ownerOf[id]
		if owner == "" {
			t.Fatalf("project %s is on no node: %+v", id, nodes)
		}
		c := a1.connections(t, admin, id)
		for _, u := range []string{c.DirectURL, c.PooledURL} {
			pu, err := url.Parse(u)
			if err != nil {
				t.Fatal(err)
			}
			if pu.Hostname() != hostOf[owner] {
				t.Errorf("project %s on node %s (%s): its URL names %s", id, owner, hostOf[owner], pu.Hostname())
			}
		}
		e2eSQL(t, c.DirectURL, false, "SELECT 1")
		e2eSQL(t, c.PooledURL, true, "SELECT 1")

		// Its server runs in its node's data directory, and no other node has a copy.
		inst := a1.project(t, admin, id).PrimaryInstanceID
		for i, d := range dirs {
			pidFile := filepath.Join(d, "instances", inst, "pgdata", "postmaster.pid")
			b, err := os.ReadFile(pidFile)
			if d != dirOf[owner] {
				if err == nil {
					t.Errorf("project %s (node %s): node %d's data directory runs its server too (%s)", id, owner, i+1, pidFile)
				}
				continue
			}
			if err != nil {
				t.Fatalf("project %s (node %s): no server in its node's data directory: %v", id, owner, err)
			}
			pid := strings.SplitN(string(b), "\n", 2)[0]
			cwd, err := os.Readlink("/proc/" + pid + "/cwd")
			if err != nil || !strings.HasPrefix(cwd, d) {
				t.Errorf("project %s: its server (pid %s) runs in %q (%v), want under %s", id, pid, cwd, err, d)
			}
		}
	}

	// A key-value store of a project on another node than the API's: its credentials name that node's
	// host and front, and answer there.
	var other string
	for _, id := range ids {
		if ownerOf[id] != self {
			other = id
		}
	}
	if other == "" {
		t.Fatalf("no project on another node than node 1: %+v", nodes)
	}
	var kvCreated struct {
		Job     *e2eJob `json:"job"`
		KVStore struct {
			Token string `json:"token"`
		} `json:"kv_store"`
	}
	a1.do(t, admin, http.MethodPost, "/v1/projects/"+other+"/kv", nil, http.StatusAccepted, &kvCreated)
	if j := a1.waitJob(t, admin, kvCreated.Job.ID); j.State != "completed" {
		t.Fatalf("kv.create %s: %s", j.State, j.Error)
	}
	var creds struct {
		RedisHost string `json:"redis_host"`
		RedisPort int    `json:"redis_port"`
	}
	a1.do(t, admin, http.MethodGet, "/v1/projects/"+other+"/kv/credentials", nil, http.StatusOK, &creds)
	var ownerNode clusterNode
	for _, n := range nodes {
		if n.ID == ownerOf[other] {
			ownerNode = n
		}
	}
	if creds.RedisHost != hostOf[ownerOf[other]] || creds.RedisPort == 0 || creds.RedisPort != ownerNode.KVRESPPort {
		t.Errorf("key-value credentials of %s (node %s, %s, front port %d): %+v", other, ownerNode.ID, hostOf[ownerNode.ID], ownerNode.KVRESPPort, creds)
	}
	kv := a1.kvClient(t, admin, other, kvCreated.KVStore.Token)
	if err := kv.Set(t.Context(), "placed", "yes", 0).Err(); err != nil {
		t.Fatalf("SET through %s:%d: %v", creds.RedisHost, creds.RedisPort, err)
	}
	if v, err := kv.Get(t.Context(), "placed").Result(); err != nil || v != "yes" {
		t.Fatalf("GET through %s:%d: %q %v", creds.RedisHost, creds.RedisPort, v, err)
	}
}
