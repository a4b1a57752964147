package cgroups

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// delegatedEnv names, in the child process of TestDelegatedGroup, the group it was started in.
const delegatedEnv = "CGROUPS_TEST_DELEGATED_GROUP"

// TestDelegatedGroup runs Open on the machine's kernel as the appliance runs under its systemd unit
// (Delegate=yes): in a group of its own under the cgroup2 mount, which holds its process, where v2's "no
// internal processes" rule refuses to enable controllers in the group's subtree. A child process of the
// test (started in the group with CLONE_INTO_CGROUP, as root) opens the groups: it must have moved itself
// into <group>/supervisor, enabled the controllers in the group and in its parent group made beside it,
// and where memory and cpu are v2's, an instance's group holds the plan's limits (memory.max, cpu.max) and
// its process. On a machine whose memory and cpu controllers are bound to v1 hierarchies (the hybrid
// layout) the same runs with the controllers the cgroup2 mount offers, and the limits are not checked
// (said in the log). A group that also holds a process not the appliance's is refused with the reason.
func TestDelegatedGroup(t *testing.T) {
	if os.Getenv(delegatedEnv) != "" {
		delegatedChild(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Fatal("this test makes cgroups: run it as root")
	}
	mount, err := cgroup2Mount()
	if err != nil {
		t.Fatal(err)
	}
	available := strings.Fields(valueOf(filepath.Join(mount, "cgroup.controllers")))
	// The rule holds for domain controllers: the threaded ones (cpu, cpuset, perf_event, pids) alone are
	// enabled under a group with processes.
	controllers := slices.DeleteFunc(slices.Clone(available), func(c string) bool {
		return c == "cpu" || c == "cpuset" || c == "perf_event" || c == "pids"
	})
	full := slices.Contains(available, "memory") && slices.Contains(available, "cpu")
	if full {
		controllers = []string{"memory", "cpu"}
	}
	if len(controllers) == 0 {
		// The kernel has bound every domain controller to cgroup v1 hierarchies: the rule cannot be met here.
		// CI's machine kind offers one (hugetlb), so there a missing one is a failure, not a skip.
		if os.Getenv("CI") == "true" {
			t.Fatalf("the cgroup2 mount %s offers no domain controller to delegate (its cgroup.controllers: %v), and CI's machines offer one", mount, available)
		}
		t.Skipf("the cgroup2 mount %s offers no domain controller to delegate (its cgroup.controllers: %v): the kernel has bound every one to a cgroup v1 hierarchy", mount, available)
	}
	if !full {
		t.Logf("the memory and cpu controllers are not cgroup v2's here (%s offers %v): the delegation runs with %v, and instances' memory.max and cpu.max are not checked", mount, available, controllers)
	}
	// What systemd does for a unit with Delegate=yes: the controllers enabled in the root's subtree (the
	// root group is exempt from the rule), a group for the service.
	rootControl := filepath.Join(mount, "cgroup.subtree_control")
	var enabled []string
	for _, c := range controllers {
		if !slices.Contains(strings.Fields(valueOf(rootControl)), c) {
			if err := write(rootControl, "+"+c, false); err != nil {
				t.Fatalf("enable %s in the root group: %v", c, err)
			}
			enabled = append(enabled, c)
		}
	}
	t.Cleanup(func() {
		for _, c := range enabled {
			_ = write(rootControl, "-"+c, false) // refused while another group uses it: then it stays
		}
	})

	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "own group", true: "shared group"}[shared], func(t *testing.T) {
			service := filepath.Join(mount, fmt.Sprintf("appliance-delegation-test-%d-%v.service", os.Getpid(), shared))
			if err := os.Mkdir(service, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { removeTree(t, service) })
			dir, err := os.Open(service)
			if err != nil {
				t.Fatal(err)
			}
			defer dir.Close()
			into := &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
			if shared { // a process not the appliance's in its group: a login session's shell
				other := exec.Command("sleep", "infinity")
				other.SysProcAttr = into
				if err := other.Start(); err != nil {
					t.Fatalf("start a process in %s: %v", service, err)
				}
				t.Cleanup(func() { other.Process.Kill(); other.Wait() })
			}
			child := exec.Command(os.Args[0], "-test.run=^TestDelegatedGroup$", "-test.v")
			child.Env = append(os.Environ(), delegatedEnv+"="+service, "CGROUPS_TEST_CONTROLLERS="+strings.Join(controllers, ","))
			child.SysProcAttr = into
			stdin, err := child.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := child.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			child.Stderr = &stderr
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { child.Process.Kill(); child.Wait() })
			lines := bufio.NewScanner(stdout)
			report := map[string]string{}
			for lines.Scan() {
				k, v, _ := strings.Cut(lines.Text(), "=")
				report[k] = v
				if k == "ready" {
					break
				}
			}
			if report["ready"] == "" {
				child.Wait()
				t.Fatalf("the child reported %v\nstderr:\n%s", report, stderr.String())
			}
			for _, name := range []string{"server", "helper"} {
				if p, err := strconv.Atoi(report[name]); err == nil {
					t.Cleanup(func() { syscall.Kill(p, syscall.SIGKILL) }) // the child's processes, were they left
				}
			}
			pid := strconv.Itoa(child.Process.Pid)
			if shared {
				if report["version"] == string(V2) || !strings.Contains(report["status"], "holds processes not the appliance's") {
					t.Errorf("in a group shared with another process: version %s, status %q", report["version"], report["status"])
				}
				if got := valueOf(filepath.Join(service, "cgroup.procs")); !slices.Contains(strings.Fields(got), pid) {
					t.Errorf("the appliance (%s) left the shared group: it holds %q", pid, got)
				}
			} else {
				if report["version"] != string(V2) || !strings.Contains(report["status"], "moved itself into "+filepath.Join(service, SupervisorGroup)) {
					t.Fatalf("in its own group: version %s, status %q\nstderr:\n%s", report["version"], report["status"], stderr.String())
				}
				if got := valueOf(filepath.Join(service, "cgroup.procs")); got != "" {
					t.Errorf("the service's group still holds %q", got)
				}
				if got := strings.Fields(valueOf(filepath.Join(service, SupervisorGroup, "cgroup.procs"))); !slices.Contains(got, pid) || !slices.Contains(got, report["helper"]) {
					t.Errorf("%s/%s holds %v, not the appliance %s and its child %s", service, SupervisorGroup, got, pid, report["helper"])
				}
				parent := filepath.Join(service, "appliance-t")
				for _, d := range []string{service, parent} {
					on := strings.Fields(valueOf(filepath.Join(d, "cgroup.subtree_control")))
					for _, c := range controllers {
						if !slices.Contains(on, c) {
							t.Errorf("%s: %s is not enabled in its subtree (%v)", d, c, on)
						}
					}
				}
				inst := filepath.Join(parent, "inst_a")
				if full {
					for file, want := range map[string]string{"memory.max": "67108864", "cpu.max": "50000 100000"} {
						if got := valueOf(filepath.Join(inst, file)); got != want {
							t.Errorf("%s/%s = %q, want %q", inst, file, got, want)
						}
					}
					if got := valueOf(filepath.Join(inst, "cgroup.procs")); got != report["server"] {
						t.Errorf("%s holds %q, not the server %s", inst, got, report["server"])
					}
				} else {
					// The controllers' files in the instance's group: the kernel made them, as it does memory.max.
					if err := os.Mkdir(inst, 0o755); err != nil {
						t.Fatal(err)
					}
					if got := valueOf(filepath.Join(inst, "cgroup.controllers")); strings.Join(strings.Fields(got), ",") != strings.Join(controllers, ",") {
						t.Errorf("an instance's group has the controllers %q, want %v", got, controllers)
					}
				}
			}
			stdin.Close()
			if err := child.Wait(); err != nil {
				t.Errorf("the child: %v\nstderr:\n%s", err, stderr.String())
			}
		})
	}
}

// delegatedChild is the appliance in the delegated group: it opens the groups as up does, limits a server
// (a sleep) when memory and cpu are v2's, reports, and waits for the test to close its stdin.
func delegatedChild(t *testing.T) {
	v2Controllers = strings.Split(os.Getenv("CGROUPS_TEST_CONTROLLERS"), ",")
	mount := filepath.Dir(os.Getenv(delegatedEnv))
	// A process the appliance started before it opened the groups (as up --ephemeral's guard): it moves too.
	helper := exec.Command("sleep", "infinity")
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { helper.Process.Kill(); helper.Wait() }()
	fmt.Printf("helper=%d\n", helper.Process.Pid)
	g, err := Open(Options{Root: mount, Name: "appliance-t"})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("version=%s\nstatus=%s\n", g.Version(), g.Status())
	if g.Version() == V2 && slices.Equal(v2Controllers, []string{"memory", "cpu"}) {
		server := exec.Command("sleep", "infinity")
		if err := server.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { server.Process.Kill(); server.Wait() }()
		if err := g.Limit("inst_a", Limits{MemoryBytes: 64 << 20, CPUCores: 0.5}, server.Process.Pid); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("server=%d\n", server.Process.Pid)
	}
	fmt.Println("ready=1")
	io.Copy(io.Discard, os.Stdin)
}

// cgroup2Mount is where the machine's cgroup2 file system is mounted (/proc/self/mountinfo).
func cgroup2Mount() (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(line, " - ")
		f, p := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) >= 5 && len(p) >= 1 && p[0] == "cgroup2" && f[3] == "/" {
			return f[4], nil
		}
	}
	return "", fmt.Errorf("no cgroup2 file system is mounted (its root) on this machine: /proc/self/mountinfo lists none")
}

// valueOf is a cgroup file's content, trimmed ("" when it cannot be read).
func valueOf(path string) string {
	v, _ := readValue(path)
	return v
}

// removeTree removes a group and the groups under it, deepest first (their processes gone).
func removeTree(t *testing.T, dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeTree(t, filepath.Join(dir, e.Name()))
		}
	}
	if err := syscall.Rmdir(dir); err != nil {
		t.Errorf("remove the test's group %s: %v", dir, err)
	}
}
