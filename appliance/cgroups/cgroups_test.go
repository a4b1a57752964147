package cgroups

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tree writes files (path → content) under a temporary directory and returns it.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// procTree is a proc file system: the appliance's cgroups, and a postmaster (100) with two children
// (101, 102: a name with spaces and a parenthesis), one grandchild (103), and an unrelated process (200).
func procTree(selfCgroup string) map[string]string {
	return map[string]string{
		"proc/self/cgroup": selfCgroup,
		"proc/100/stat":    "100 (postgres) S 1 100 100 0",
		"proc/101/stat":    "101 (postgres: checkpointer) S 100 100 100 0",
		"proc/102/stat":    "102 (a (b) c) S 100 100 100 0",
		"proc/103/stat":    "103 (x) S 102 100 100 0",
		"proc/200/stat":    "200 (other) S 1 200 200 0",
	}
}

func TestV1(t *testing.T) {
	files := procTree("9:name=systemd:/\n4:memory:/box\n1:cpu,cpuacct:/\n0::/\n")
	// A group's control files, which the kernel makes with its directory.
	for _, g := range []string{"", "/appliance-x/inst_a"} {
		files["memory/box"+g+"/memory.limit_in_bytes"] = "9223372036854771712\n"
		files["memory/box"+g+"/memory.memsw.limit_in_bytes"] = "9223372036854771712\n"
		files["memory/box"+g+"/cgroup.procs"] = ""
		files["cpu"+g+"/cpu.cfs_quota_us"] = "-1\n"
		files["cpu"+g+"/cpu.cfs_period_us"] = "100000\n"
		files["cpu"+g+"/cgroup.procs"] = ""
	}
	// A cgroup2 mount without controllers (the hybrid layout): not usable.
	files["unified/cgroup.controllers"] = ""
	files["unified/cgroup.subtree_control"] = ""
	root := tree(t, files)
	g, err := Open(Options{Root: root, Proc: filepath.Join(root, "proc"), Name: "appliance-x"})
	if err != nil {
		t.Fatal(err)
	}
	if g.Version() != V1 || !strings.Contains(g.Status(), "memory controller is not available") {
		t.Fatalf("version %s, status %q", g.Version(), g.Status())
	}
	if err := g.Limit("inst_a", Limits{MemoryBytes: 128 << 20, CPUCores: 0.5}, 100); err != nil {
		t.Fatal(err)
	}
	mem, cpu := filepath.Join(root, "memory/box/appliance-x/inst_a"), filepath.Join(root, "cpu/appliance-x/inst_a")
	for path, want := range map[string]string{
		mem + "/memory.limit_in_bytes":       "134217728\n",
		mem + "/memory.memsw.limit_in_bytes": "134217728\n",
		cpu + "/cpu.cfs_quota_us":            "50000\n",
		cpu + "/cpu.cfs_period_us":           "100000\n",
		mem + "/cgroup.procs":                "100\n101\n102\n103\n",
		cpu + "/cgroup.procs":                "100\n101\n102\n103\n",
	} {
		if got := read(t, path); got != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
	}
	if l, err := g.Read("inst_a"); err != nil || l != (Limits{MemoryBytes: 128 << 20, CPUCores: 0.5}) {
		t.Errorf("read back %+v, %v", l, err)
	}
	// Unlimited.
	if err := g.Limit("inst_a", Limits{}, 0); err != nil {
		t.Fatal(err)
	}
	if got := read(t, cpu+"/cpu.cfs_quota_us"); got != "-1\n" {
		t.Errorf("quota %q", got)
	}
	if got := read(t, mem+"/memory.limit_in_bytes"); got != "-1\n" {
		t.Errorf("memory %q", got)
	}
	for _, bad := range []string{"../x", "a/b", "..", ".hidden", ""} {
		if err := g.Limit(bad, Limits{}, 0); err == nil || errors.Is(err, ErrNotSupported) {
			t.Errorf("Limit(%q) = %v", bad, err)
		}
	}
}

func TestV2(t *testing.T) {
	files := procTree("0::/app.slice\n")
	files["cgroup.controllers"] = "cpuset cpu io memory pids\n"
	files["app.slice/cgroup.controllers"] = "cpuset cpu io memory pids\n"
	files["app.slice/cgroup.subtree_control"] = "pids\n"
	files["app.slice/appliance-y/cgroup.subtree_control"] = ""
	files["app.slice/appliance-y/inst_b/memory.max"] = "max\n"
	files["app.slice/appliance-y/inst_b/memory.swap.max"] = "max\n"
	files["app.slice/appliance-y/inst_b/cpu.max"] = "max 100000\n"
	files["app.slice/appliance-y/inst_b/cgroup.procs"] = ""
	root := tree(t, files)
	g, err := Open(Options{Root: root, Proc: filepath.Join(root, "proc"), Name: "appliance-y"})
	if err != nil {
		t.Fatal(err)
	}
	if g.Version() != V2 {
		t.Fatalf("version %s: %s", g.Version(), g.Status())
	}
	if got := read(t, filepath.Join(root, "app.slice/cgroup.subtree_control")); got != "+memory +cpu\n" {
		t.Errorf("own subtree_control %q", got)
	}
	if got := read(t, filepath.Join(root, "app.slice/appliance-y/cgroup.subtree_control")); got != "+memory +cpu\n" {
		t.Errorf("parent subtree_control %q", got)
	}
	if err := g.Limit("inst_b", Limits{MemoryBytes: 64 << 20, CPUCores: 2}, 102); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "app.slice/appliance-y/inst_b")
	for path, want := range map[string]string{
		dir + "/memory.max":      "67108864\n",
		dir + "/memory.swap.max": "0\n",
		dir + "/cpu.max":         "200000 100000\n",
		dir + "/cgroup.procs":    "102\n103\n",
	} {
		if got := read(t, path); got != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
	}
	if l, err := g.Read("inst_b"); err != nil || l != (Limits{MemoryBytes: 64 << 20, CPUCores: 2}) {
		t.Errorf("read back %+v, %v", l, err)
	}
	// A group the kernel did not make (its files absent) is an error, not files made up.
	if err := g.Limit("inst_c", Limits{MemoryBytes: 1}, 0); err == nil {
		t.Error("a limit written into a directory without control files")
	}
}

func TestNone(t *testing.T) {
	files := procTree("4:memory:/\n0::/\n")
	files["unified/cgroup.controllers"] = ""
	root := tree(t, files) // no memory/ or cpu/ hierarchies
	var logs bytes.Buffer
	g, err := Open(Options{Root: root, Proc: filepath.Join(root, "proc"), Name: "appliance-z", Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if g.Version() != None || !strings.Contains(logs.String(), "not enforced") || strings.Count(logs.String(), "\n") != 1 {
		t.Fatalf("version %s, log %q", g.Version(), logs.String())
	}
	if err := g.Limit("inst_a", Limits{MemoryBytes: 1}, 100); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("Limit = %v", err)
	}
	if _, err := Open(Options{Root: root, Proc: filepath.Join(root, "proc"), Name: "../up"}); err == nil {
		t.Error("a parent name with a path accepted")
	}
}

func TestParentName(t *testing.T) {
	a, b := ParentName("/var/lib/appliance"), ParentName("/var/lib/appliance2")
	if a == b || !nameRE.MatchString(a) || a != ParentName("/var/lib/appliance/") {
		t.Errorf("%q %q", a, b)
	}
}
