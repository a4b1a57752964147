package postgres

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/theappliance/appliance/appliance/daemon"
)

// isPostgres reports whether p is a PostgreSQL server process: a postmaster ("postgres -D ...") or one of
// its children, whose titles read "postgres: ...".
func isPostgres(p *daemon.ProcInfo) bool {
	return p.Program() == "postgres" || strings.HasPrefix(p.Args[0], "postgres:")
}

// postgresIn lists the live PostgreSQL processes of uid working in dir or below it (every process of a
// cluster works in its data directory). Other processes (an operator's shell in the directory) are not
// listed.
func postgresIn(dir string, uid uint32) []*daemon.ProcInfo {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		real = filepath.Clean(dir)
	}
	entries, _ := os.ReadDir("/proc")
	var out []*daemon.ProcInfo
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd")
		if err != nil || (cwd != real && !strings.HasPrefix(cwd, real+"/")) {
			continue
		}
		if p := daemon.ReadProcess(pid); p != nil && p.UID == uid && isPostgres(p) {
			out = append(out, p)
		}
	}
	return out
}

// killPostgresIn SIGKILLs the PostgreSQL processes of uid working in dir and waits until they are gone.
func killPostgresIn(ctx context.Context, dir string, uid uint32) error {
	return daemon.WaitFor(ctx, 20*time.Millisecond, func() (bool, error) {
		procs := postgresIn(dir, uid)
		for _, p := range procs {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
		return len(procs) == 0, nil
	})
}
