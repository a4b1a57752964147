package daemon

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ProcessesUnder lists the live processes (not zombies, not this one) whose command line names dir or a
// path below it, or whose working directory is dir or below it, with their command lines.
func ProcessesUnder(dir string) map[int]string {
	out := map[int]string{}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		real = filepath.Clean(dir)
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
			if f := strings.Fields(string(stat[i+1:])); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
				continue
			}
		}
		raw, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		cmd := strings.ReplaceAll(strings.TrimRight(string(raw), "\x00"), "\x00", " ")
		cwd, _ := os.Readlink("/proc/" + e.Name() + "/cwd")
		under := func(p string) bool { return p == real || strings.HasPrefix(p, real+"/") }
		if names(cmd, dir) || names(cmd, real) || (cwd != "" && under(cwd)) {
			out[pid] = cmd
		}
	}
	return out
}

// names reports whether a command line mentions dir itself or a path below it (not merely a sibling whose
// name starts the same, like dir + "2").
func names(cmd, dir string) bool {
	for rest := cmd; ; {
		i := strings.Index(rest, dir)
		if i < 0 {
			return false
		}
		rest = rest[i+len(dir):]
		if rest == "" || rest[0] == '/' || rest[0] == ' ' || rest[0] == '"' || rest[0] == '\'' {
			return true
		}
	}
}
