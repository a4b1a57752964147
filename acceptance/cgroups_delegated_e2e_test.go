package acceptance

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/apptest"
)

// TestUpInDelegatedCgroup starts `up` as its systemd unit (Delegate=yes) has it run: alone in a cgroup v2
// group of its own, made under the machine's cgroup2 mount (started in it with CLONE_INTO_CGROUP, as root),
// and creates a project. Where memory and cpu are cgroup v2's, up must have moved itself into
// <group>/supervisor and the project's server must be in a group beside it holding its plan's memory.max
// and cpu.max (before, v2's "no internal processes" rule left the limits a warning); /status says so. On
// a machine whose memory and cpu controllers are bound to v1 hierarchies (the hybrid layout), up in that
// group holds the server with v1 (memory.limit_in_bytes), which the test checks instead, saying so.
func TestUpInDelegatedCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test makes cgroups: run it as root")
	}
	mount := "/sys/fs/cgroup" // where up looks: a cgroup2 mount, or the hybrid layout's unified/
	if _, err := os.Stat(filepath.Join(mount, "cgroup.controllers")); err != nil {
		mount = filepath.Join(mount, "unified")
	}
	available := strings.Fields(cgroupValue(t, filepath.Join(mount, "cgroup.controllers")))
	v2 := slices.Contains(available, "memory") && slices.Contains(available, "cpu")
	if !v2 {
		t.Logf("the memory and cpu controllers are not cgroup v2's here (%s offers %v): up holds the server with v1, checked instead of memory.max", mount, available)
	} else {
		// What systemd does for its services: the controllers enabled in the root's subtree (the root group
		// is exempt from the rule).
		if err := os.WriteFile(filepath.Join(mount, "cgroup.subtree_control"), []byte("+memory +cpu"), 0); err != nil {
			t.Fatalf("enable memory and cpu in the root group of %s: %v", mount, err)
		}
	}
	service := filepath.Join(mount, fmt.Sprintf("appliance-up-test-%d.service", os.Getpid()))
	if err := os.Mkdir(service, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroupTree(t, service) })
	dir, err := os.Open(service)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()

	bin := e2eBuild(t)
	parent := appliancetest.TraversableTempDir(t)
	const token = "delegated-test-metrics-token"
	up := exec.Command(bin, "up", "--ephemeral", "--data-dir", parent, "--no-install", "--log-level", "warn", "--metrics-token", token)
	up.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
	var stderr e2eBuffer
	up.Stderr = &stderr
	stdout, err := up.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Start(); err != nil {
		t.Fatalf("start up in %s: %v", service, err)
	}
	exited := false
	t.Cleanup(func() {
		if !exited {
			up.Process.Kill()
			up.Wait()
		}
	})
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err != nil {
		t.Fatalf("no JSON line on stdout: %v\nstderr:\n%s", err, stderr.String())
	}
	var cr struct {
		APIURL string `json:"api_url"`
		CACert string `json:"ca_cert"`
		APIKey string `json:"api_key"`
	}
	if err := json.Unmarshal(line, &cr); err != nil {
		t.Fatalf("stdout's line %q: %v", line, err)
	}
	cl, err := apptest.NewClient(cr.APIURL, []byte(cr.CACert), cr.APIKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.CreateProject(t.Context(), "held"); err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
	}
	held := cgroupsStatus(t, cr.APIURL, cr.CACert, token)
	t.Logf("/status's cgroups: %s", held)
	pid := strconv.Itoa(up.Process.Pid)

	if v2 {
		supervisor := filepath.Join(service, "supervisor")
		if !strings.HasPrefix(held, "operational: projects' memory and CPU held by cgroup v2 under "+service+"/appliance-") ||
			!strings.Contains(held, "moved itself into "+supervisor) {
			t.Fatalf("/status's cgroups: %q\nstderr:\n%s", held, stderr.String())
		}
		if got := cgroupValue(t, filepath.Join(service, "cgroup.procs")); got != "" {
			t.Errorf("the service's own group holds %q: up did not leave it", got)
		}
		if got := strings.Fields(cgroupValue(t, filepath.Join(supervisor, "cgroup.procs"))); !slices.Contains(got, pid) {
			t.Errorf("%s holds %v, not up (%s)", supervisor, got, pid)
		}
		instances, _ := filepath.Glob(filepath.Join(service, "appliance-*", "*", "memory.max"))
		if len(instances) != 1 {
			t.Fatalf("the project's server's group: %v", instances)
		}
		inst := filepath.Dir(instances[0])
		mem, cpu := cgroupValue(t, filepath.Join(inst, "memory.max")), cgroupValue(t, filepath.Join(inst, "cpu.max"))
		if n, err := strconv.ParseInt(mem, 10, 64); err != nil || n <= 0 || strings.HasPrefix(cpu, "max") {
			t.Errorf("%s holds memory.max %q, cpu.max %q: not the plan's limits", inst, mem, cpu)
		}
		if got := cgroupValue(t, filepath.Join(inst, "cgroup.procs")); got == "" {
			t.Errorf("%s holds no process: the server is not in its group", inst)
		}
	} else {
		_, under, ok := strings.Cut(held, "held by cgroup v1 (memory, cpu) under ")
		if !ok {
			t.Fatalf("/status's cgroups: %q\nstderr:\n%s", held, stderr.String())
		}
		memParent := strings.Fields(under)[0]
		instances, _ := filepath.Glob(filepath.Join(memParent, "*", "memory.limit_in_bytes"))
		if len(instances) != 1 {
			t.Fatalf("the project's server's group under %s: %v", memParent, instances)
		}
		if n, err := strconv.ParseInt(cgroupValue(t, instances[0]), 10, 64); err != nil || n <= 0 || n >= 1<<62 {
			t.Errorf("%s: %d (%v): not the plan's limit", instances[0], n, err)
		}
	}

	if err := up.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = up.Wait()
	exited = true
	if err != nil {
		t.Fatalf("exit after SIGTERM: %v\nstderr:\n%s", err, stderr.String())
	}
	if v2 {
		if left, _ := filepath.Glob(filepath.Join(service, "appliance-*")); len(left) != 0 {
			t.Errorf("after up's exit its groups are left: %v", left)
		}
	}
}

// cgroupsStatus is the cgroups component of an appliance's /status ("<status>: <message>"), as its
// operator reads it (with the metrics token).
func cgroupsStatus(t *testing.T, apiURL, caPEM, token string) string {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(caPEM)) {
		t.Fatal("the CA holds no certificate")
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, apiURL+"/status", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var status struct {
		Components []struct{ Name, Status, Message string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&status); err != nil {
		t.Fatalf("/status: %s: %v", resp.Status, err)
	}
	for _, c := range status.Components {
		if c.Name == "cgroups" {
			return c.Status + ": " + c.Message
		}
	}
	t.Fatalf("/status has no cgroups component: %+v", status.Components)
	return ""
}

// cgroupValue is a cgroup file's content, trimmed.
func cgroupValue(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// removeCgroupTree removes a group and the groups under it, deepest first (their processes gone).
func removeCgroupTree(t *testing.T, dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeCgroupTree(t, filepath.Join(dir, e.Name()))
		}
	}
	if err := syscall.Rmdir(dir); err != nil {
		t.Errorf("remove the test's group %s: %v", dir, err)
	}
}
