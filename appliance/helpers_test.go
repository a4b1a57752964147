package appliance_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/theappliance/appliance/store"
)

func jsonUnmarshal(b []byte, v any) { json.Unmarshal(b, v) }

func osStat(p string) (os.FileInfo, error) { return os.Stat(p) }

// postmasterPID reads the first line of the instance's postmaster.pid.
func postmasterPID(t *testing.T, inst *store.Instance) int {
	t.Helper()
	return pidIn(t, filepath.Join(inst.Dir, "pgdata", "postmaster.pid"))
}

// processesUnder lists pids whose command line mentions dir.
func processesUnder(dir string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmd), dir) {
			out = append(out, pid)
		}
	}
	return out
}

// pidIn reads the pid a pid file names (its first line).
func pidIn(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}
