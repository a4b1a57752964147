package cmd_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
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

// killNode SIGKILLs a node and its instances: its machine is lost.
func killNode(t *testing.T, p *e2eProc, dir string) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.waitExit(t)
	e2eKillUnder(t, dir)
}

// TestClusterNodeLoss: a project on node 1 of three; node 1 lost (SIGKILL of it and its instances): the
// project is runtime_status unavailable through node 2, with a node_unavailable alert open; node 1
// started again: the project is active again and the alert resolved. Lost again, and the project moved
// to node 2 meanwhile (as a restore there does): node 1 started again does not start its stale copy —
// no server of it runs, and its directory is kept aside as instances/<id>.fenced-<time>, not deleted.
func TestClusterNodeLoss(t *testing.T) {
	t.Parallel()
	bin := e2eBuild(t)
	dirs := make([]string, 3)
	for i := range dirs {
		dirs[i] = appliancetest.TraversableTempDir(t)
		d := dirs[i]
		t.Cleanup(func() { e2eKillUnder(t, d) })
	}
	node1Flags := []string{"--spare-clusters", "0"}
	a1 := e2eStartWith(t, bin, dirs[0], nil, node1Flags)
	admin := e2eAdminKey(t, dirs[0])
	prj := a1.e2eProvision(t, admin, "lost")
	inst := a1.project(t, admin, prj).PrimaryInstanceID
	a1.stop(t, syscall.SIGTERM)
	runCLI(t, bin, "cluster", "init", "--data-dir", dirs[0], "--advertise", "127.0.0.1", "--etcd-client-port", "0", "--etcd-peer-port", "0", "--join-port", "0")
	a1 = e2eStartWith(t, bin, dirs[0], nil, node1Flags)
	procs := []*e2eProc{a1}
	for i, host := range []string{"127.0.0.2", "127.0.0.3"} {
		tok := strings.TrimSpace(runCLI(t, bin, "cluster", "join-token", "--data-dir", dirs[0], "--ttl", "10m"))
		procs = append(procs, e2eStartWith(t, bin, dirs[i+1], nil, append(clusterFlags(host), "--join", tok)))
	}
	nodes := clusterNodes(t, bin, dirs[1])
	if len(nodes) != 3 || nodes[0].Advertise != "127.0.0.1" || nodes[1].Advertise != "127.0.0.2" {
		t.Fatalf("cluster nodes: %+v", nodes)
	}
	a2 := procs[1]
	a2.waitRuntime(t, admin, prj, "active")
	// Node 2 starts no copy of the project: it is node 1's.
	if _, err := os.Stat(filepath.Join(dirs[1], "instances", inst)); err == nil {
		t.Fatalf("node 2 made a directory for node 1's instance %s", inst)
	}

	// Node 1 lost: its project is unavailable, with its alert; back: active, the alert resolved.
	killNode(t, a1, dirs[0])
	a2.waitRuntime(t, admin, prj, "unavailable")
	if open, msg, ok := a2.nodeAlert(t, admin, prj); !ok || !open || !strings.Contains(msg, nodes[0].ID) {
		t.Fatalf("node_unavailable alert with node 1 lost: found %v open %v %q", ok, open, msg)
	}
	a1 = e2eStartWith(t, bin, dirs[0], nil, node1Flags)
	a2.waitRuntime(t, admin, prj, "active")
	if open, _, ok := a2.nodeAlert(t, admin, prj); !ok || open {
		t.Fatalf("node_unavailable alert with node 1 back: found %v open %v", ok, open)
	}

	// Lost again, and the project moved to node 2 meanwhile: node 1 keeps its stale copy aside.
	killNode(t, a1, dirs[0])
	a2.waitRuntime(t, admin, prj, "unavailable")
	a2.do(t, admin, http.MethodPost, "/v1/test/projects/"+prj+"/node", map[string]any{"node_id": nodes[1].ID}, http.StatusOK, nil)
	a1 = e2eStartWith(t, bin, dirs[0], nil, node1Flags)
	if _, err := os.Stat(filepath.Join(dirs[0], "instances", inst)); err == nil {
		t.Fatalf("node 1 kept instances/%s in place for a project now on node 2", inst)
	}
	aside, _ := filepath.Glob(filepath.Join(dirs[0], "instances", inst+".fenced-*"))
	if len(aside) != 1 {
		t.Fatalf("instances/%s.fenced-*: %v, want one directory kept aside", inst, aside)
	}
	if _, err := os.Stat(filepath.Join(aside[0], "pgdata", "PG_VERSION")); err != nil {
		t.Fatalf("the fenced copy lost its data: %v", err)
	}
	if left := e2eProcsUnder(filepath.Join(dirs[0], "instances")); len(left) > 0 {
		t.Fatalf("node 1 runs processes of a fenced instance: %v", left)
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
		t.Fatalf("no instance.fenced audit event: %+v", events.AuditEvents)
	}
	// Node 1 is back, but the project is node 2's now: it is not made active by node 1's return.
	if got := a2.project(t, admin, prj); got.RuntimeStatus != "unavailable" {
		t.Fatalf("project moved to node 2 without a restore: runtime_status %q after node 1's return", got.RuntimeStatus)
	}
}
