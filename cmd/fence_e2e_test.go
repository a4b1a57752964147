package cmd_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// refusedLogins checks that a client login to url is refused by pg_hba.conf (a fenced instance).
func refusedLogins(t *testing.T, url, when string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err == nil {
		conn.Close(context.Background())
		t.Fatalf("%s: node 1's copy took a client login", when)
	}
	if !strings.Contains(err.Error(), "pg_hba.conf rejects connection") {
		t.Fatalf("%s: a client login to node 1's copy: %v, want refused by pg_hba.conf", when, err)
	}
}

// TestClusterSelfFence: a project on node 1 of three (bucket as the backup store); node 1's appliance is
// frozen (SIGSTOP) while its instances run. By the time the cluster takes node 1 for lost (the project
// unavailable through node 2), node 1's copy refuses client logins and its open session is ended: its
// watchdog fenced it, the appliance itself being frozen. The project is restored on node 2; node 1 thawed
// (SIGCONT: no restart) stops its copy and keeps its directory aside; node 2's rows are intact.
func TestClusterSelfFence(t *testing.T) {
	t.Parallel()
	c := newBucketCluster(t, "0")
	a1, a2 := c.a1, c.a2
	conn1 := a1.connections(t, c.admin, c.prj)
	ctx := t.Context()
	held := e2eConnect(ctx, t, conn1.DirectURL, false) // a session opened before the cut
	defer held.Close(context.Background())
	if _, err := held.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}

	if err := a1.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	t.Cleanup(func() {
		if !thawed {
			a1.cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	a2.waitRuntime(t, c.admin, c.prj, "unavailable")
	// Lost for the cluster: node 1's copy takes no client writes any more (nothing restored yet).
	refusedLogins(t, conn1.DirectURL, "node 1 taken for lost")
	if _, err := held.Exec(ctx, "INSERT INTO kept VALUES (1000000, 'through a session of node 1 opened before the cut')"); err == nil {
		t.Fatal("a session opened on node 1 before it was cut off still writes after it is taken for lost")
	}

	var started struct {
		Job *e2eJob `json:"job"`
	}
	a2.do(t, operatorSession(t, a2, c.password), http.MethodPost, "/v1/projects/"+c.prj+"/restore-elsewhere", nil, http.StatusAccepted, &started)
	conn2 := c.restored(t, waitJobFor(t, a2, c.admin, started.Job.ID, restoreDeadline))
	refusedLogins(t, conn1.DirectURL, "project restored on node 2, node 1 frozen")

	// Thawed: the same process stops its stale copy and keeps its directory aside.
	if err := a1.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	thawed = true
	e2eEventually(t, 2*time.Minute, "node 1 keeps its stale copy aside", func() (bool, string) {
		aside, _ := filepath.Glob(filepath.Join(c.dirs[0], "instances", c.inst+".fenced-*"))
		left := e2eProcsUnder(filepath.Join(c.dirs[0], "instances"))
		return len(aside) == 1 && len(left) == 0, strings.Join(aside, " ")
	})
	select {
	case <-a1.exited:
		t.Fatal("node 1's appliance exited: the fence is to happen without a restart")
	default:
	}
	if got := recoverChecksum(t, conn2.DirectURL); got != c.sum {
		t.Fatalf("rows on node 2: checksum %s, want %s", got, c.sum)
	}
}
