package acceptance

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/appliancetest"
)

// TestClusterForwarding: a project's instances live on one node (the one that formed the cluster: the
// project was made before, on the single-node appliance it was); the other two nodes answer its studio SQL
// and its logs (JSON and the event stream) from that node's server — the same server (its start time and
// port) and the same rows as the node's own answer, a write through one read through another. Over
// HTTP/2 and HTTP/1.1 the forwarded log stream flows event by event and request bodies pass whole, or
// get the owning node's 413 over the limit (checkForwardedProtocols). A client
// sending the forwarded header itself is refused (403), and so is a client without a node's certificate on
// the nodes' channel. With the owning node SIGKILLed, the others answer a clear JSON 503 naming it (and no
// address), while any node still answers the project's record from the store.
func TestClusterForwarding(t *testing.T) {
	t.Parallel()
	bin := e2eBuild(t)
	dirs := make([]string, 3)
	for i := range dirs {
		dirs[i] = appliancetest.TraversableTempDir(t)
		d := dirs[i]
		t.Cleanup(func() { e2eKillUnder(t, d) })
	}
	a1 := e2eStartWith(t, bin, dirs[0], nil, []string{"--spare-clusters", "0"})
	admin := e2eAdminKey(t, dirs[0])
	prj := a1.e2eProvision(t, admin, "forwarded")
	a1.stop(t, syscall.SIGTERM)
	runCLI(t, bin, append([]string{"cluster", "init", "--data-dir", dirs[0], "--advertise", "127.0.0.1"}, e2eNodePortFlags(t, dirs[0])...)...)
	procs := []*e2eProc{e2eStartWith(t, bin, dirs[0], nil, []string{"--spare-clusters", "0"})}
	for i, host := range []string{"127.0.0.2", "127.0.0.3"} {
		tok := strings.TrimSpace(runCLI(t, bin, "cluster", "join-token", "--data-dir", dirs[0], "--ttl", "10m"))
		procs = append(procs, e2eStartWith(t, bin, dirs[i+1], nil, append(clusterFlags(t, host, dirs[i+1]), "--join", tok)))
	}
	var nodes []struct {
		ID       string   `json:"id"`
		JoinURL  string   `json:"join_url"`
		Projects []string `json:"projects"`
	}
	if err := json.Unmarshal([]byte(runCLI(t, bin, "cluster", "nodes", "--json", "--data-dir", dirs[1])), &nodes); err != nil || len(nodes) != 3 {
		t.Fatalf("cluster nodes: %v %+v", err, nodes)
	}
	owner := nodes[0]
	if len(owner.Projects) != 1 || owner.Projects[0] != prj {
		t.Fatalf("node 1 hosts %v, want the project %s", owner.Projects, prj)
	}

	// Studio SQL: the same server answers on every node; a row written through node 3 is read through node 2.
	type sqlAnswer struct {
		Result struct {
			Rows []map[string]any `json:"rows"`
		} `json:"result"`
	}
	server := func(p *e2eProc) string {
		var a sqlAnswer
		p.do(t, admin, http.MethodPost, "/v1/projects/"+prj+"/sql", map[string]any{"query": "select pg_postmaster_start_time()::text, inet_server_port()"}, http.StatusOK, &a)
		b, _ := json.Marshal(a.Result.Rows)
		return string(b)
	}
	own := server(procs[0])
	for i, p := range procs[1:] {
		if got := server(p); got != own {
			t.Fatalf("node %d's answer is another server's: %s, node 1's own: %s", i+2, got, own)
		}
	}
	// Node 1 served them (the other nodes reach its server's port on this machine too: the proof is that
	// node 1 served each node's requests).
	for _, n := range nodes[1:] {
		if want := `"serving a request forwarded by another node" from_node=` + n.ID + ` method=POST path=/v1/projects/` + prj + `/sql`; !procs[0].logged(want) {
			t.Fatalf("node 1 did not serve node %s's SQL request (its log lacks %s)", n.ID, want)
		}
	}
	procs[2].do(t, admin, http.MethodPost, "/v1/projects/"+prj+"/sql", map[string]any{"query": "create table fwd(v text); insert into fwd values ('through node 3')"}, http.StatusOK, nil)
	var a sqlAnswer
	procs[1].do(t, admin, http.MethodPost, "/v1/projects/"+prj+"/sql", map[string]any{"query": "select v from fwd"}, http.StatusOK, &a)
	if len(a.Result.Rows) != 1 || a.Result.Rows[0]["v"] != "through node 3" {
		t.Fatalf("the row written through node 3, read through node 2: %v", a.Result.Rows)
	}
	// A SQL error through node 3: a 400 from the owner, and a line in its server's log.
	procs[2].do(t, admin, http.MethodPost, "/v1/projects/"+prj+"/sql", map[string]any{"query": "select 1/0 as forwarded_marker"}, http.StatusBadRequest, nil)

	// Logs: node 2's and node 3's answers carry the entry node 1's log has (the JSON read, then the stream).
	hasMarker := func(p *e2eProc) bool {
		b := p.do(t, admin, http.MethodGet, "/v1/projects/"+prj+"/logs?q=forwarded_marker", nil, http.StatusOK, nil)
		return bytes.Contains(b, []byte("forwarded_marker"))
	}
	deadline := time.Now().Add(time.Minute)
	for !hasMarker(procs[0]) { // the server's log collector reads its file as it is written
		if time.Now().After(deadline) {
			t.Fatal("node 1's log of the project never showed the failed statement")
		}
		time.Sleep(200 * time.Millisecond)
	}
	for i, p := range procs[1:] {
		if !hasMarker(p) {
			t.Fatalf("node %d's logs of the project lack the entry node 1's have", i+2)
		}
		req, _ := http.NewRequest(http.MethodGet, p.api+"/v1/projects/"+prj+"/logs/stream?follow=false&q=forwarded_marker", nil)
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := p.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			found = found || strings.Contains(sc.Text(), "forwarded_marker")
		}
		resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/event-stream") || !found {
			t.Fatalf("node %d's log stream: %d %s, marker found: %v", i+2, resp.StatusCode, ct, found)
		}
	}

	for _, n := range nodes[1:] {
		if want := `from_node=` + n.ID + ` method=GET path=/v1/projects/` + prj + `/logs/stream`; !procs[0].logged(want) {
			t.Fatalf("node 1 did not serve node %s's log stream (its log lacks %s)", n.ID, want)
		}
	}

	// Over HTTP/2 and HTTP/1.1, through node 2: the log stream flows event by event, a body of nearly the
	// limit passes whole and one over it is the owning node's JSON 413; an upload's signed URL PUT to it
	// stores the dump on node 1.
	checkForwardedProtocols(t, procs[1], procs[2], admin, prj, dirs[0])

	// A client may not pose as a node: the forwarded header from it is refused, as is the nodes' channel
	// without a node's certificate.
	req, _ := http.NewRequest(http.MethodGet, procs[1].api+"/v1/projects/"+prj+"/logs", nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	req.Header.Set("X-Appliance-Forwarded-By", owner.ID)
	if status, body := send(t, procs[1].client, req); status != http.StatusForbidden || !strings.Contains(body, "may not send it") {
		t.Fatalf("a forged forwarded request: %d %s, want 403", status, body)
	}
	caPEM, err := os.ReadFile(filepath.Join(dirs[0], "ca", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	noCert := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ = http.NewRequest(http.MethodGet, owner.JoinURL+"/v1/projects/"+prj+"/logs", nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	req.Header.Set("X-Appliance-Forwarded-By", nodes[1].ID)
	if status, body := send(t, noCert, req); status != http.StatusForbidden {
		t.Fatalf("the nodes' channel without a node's certificate: %d %s, want 403", status, body)
	}

	// The owning node SIGKILLed: a 503 naming it, not its address; the project's record still answers.
	procs[0].cmd.Process.Signal(syscall.SIGKILL)
	procs[0].waitExit(t)
	for i, p := range procs[1:] {
		var status int
		var body string
		deadline := time.Now().Add(time.Minute)
		for { // until the store has its leader again (a 503 saying there is no quorum until then)
			req, _ := http.NewRequest(http.MethodPost, p.api+"/v1/projects/"+prj+"/sql", strings.NewReader(`{"query":"select 1"}`))
			req.Header.Set("Authorization", "Bearer "+admin)
			req.Header.Set("Content-Type", "application/json")
			status, body = send(t, p.client, req)
			if strings.Contains(body, owner.ID) || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if status != http.StatusServiceUnavailable || !strings.Contains(body, owner.ID) || strings.Contains(body, "127.0.0.1") {
			t.Fatalf("node %d with the project's node dead: %d %s, want a 503 naming node %s and no address", i+2, status, body, owner.ID)
		}
		p.do(t, admin, http.MethodGet, "/v1/projects/"+prj, nil, http.StatusOK, nil)
	}
}

// logged says whether the process's log shows want within a minute (its output is copied into the
// buffer as it comes: a line written before an answer may arrive after it).
func (p *e2eProc) logged(want string) bool {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if strings.Contains(p.stderr.String(), want) {
			return true
		}
	}
	return false
}

// send does req and returns the status and body.
func send(t *testing.T, c *http.Client, req *http.Request) (int, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
