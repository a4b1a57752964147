package acceptance

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// clusterNodesView runs ui/e2e/cluster-nodes.mjs in headless Chromium (Debian's, driven by
// playwright-core) against p's dashboard: the operator (email, password) signs in and opens Operator →
// Nodes, which must list nodes (each alive, with its project count and first project ids as cluster
// nodes has them) under a
// cluster with quorum and one leader; screenshots at desktop and phone width go to APPLIANCE_E2E_OUT
// (default ui/test-results/screenshots, which git ignores) as operator-nodes-cluster-{desktop,phone}.png.
// node and /usr/bin/chromium are required: without them the test fails, saying so.
func clusterNodesView(t *testing.T, p *e2eProc, email, password string, nodes []clusterNode) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat("/usr/bin/chromium")
	}
	if err != nil {
		t.Fatalf("the Nodes view's screenshot needs node and /usr/bin/chromium (apt-get install nodejs chromium): %v", err)
	}
	work := t.TempDir()
	for _, name := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join("..", "ui", name))
		if err == nil {
			err = os.WriteFile(filepath.Join(work, name), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := os.CopyFS(filepath.Join(work, "e2e"), os.DirFS(filepath.Join("..", "ui", "e2e"))); err != nil {
		t.Fatal(err)
	}
	npm := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	npm.Dir = work
	npm.Env = append(os.Environ(), "NO_UPDATE_NOTIFIER=1")
	if b, err := npm.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, b)
	}
	out := os.Getenv("APPLIANCE_E2E_OUT")
	if out == "" {
		if out, err = filepath.Abs(filepath.Join("..", "ui", "test-results", "screenshots")); err != nil {
			t.Fatal(err)
		}
	}
	type want struct {
		ID       string   `json:"id"`
		Projects []string `json:"projects"`
	}
	ws := []want{}
	for _, n := range nodes {
		ws = append(ws, want{ID: n.ID, Projects: append([]string{}, n.Projects...)})
	}
	wb, _ := json.Marshal(ws)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(work, "e2e", "cluster-nodes.mjs"))
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "BASE_URL="+p.api, "EMAIL="+email, "PASSWORD="+password, "OUT_DIR="+out, "NODES="+string(wb))
	b, err := cmd.CombinedOutput()
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "error ") {
			t.Errorf("the Nodes view: %s", strings.TrimPrefix(l, "error "))
		}
	}
	if err != nil || !strings.Contains(string(b), "done") {
		t.Fatalf("ui/e2e/cluster-nodes.mjs: %v\n%s", err, b)
	}
	t.Logf("the Nodes view of the cluster: %s/operator-nodes-cluster-{desktop,phone}.png", out)
}
