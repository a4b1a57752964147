package appliance_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// TestMajorUpgradeFailuresBeforeTheCutover: a logical upgrade that fails before its cutover leaves the
// project as it was, serving on 15 (direct and pooled, unfenced), with nothing of the attempt left: no
// replication slot or publication on the old server, no new cluster directory nor server, no WAL archive
// nor backup of the new cluster. The failures: the subscription refused (the old server's replication
// slots all in use), the new server killed during the catch-up, and killed inside the write pause (after
// the new cluster's base backup). Then an upgrade succeeds.
func TestMajorUpgradeFailuresBeforeTheCutover(t *testing.T) {
	t.Parallel()
	var killAt atomic.Value // the step at which the hook kills the new server ("": none)
	killAt.Store("")
	var newDir atomic.Value
	newDir.Store("")
	killed := make(chan string, 1)
	hook := func(ctx context.Context, jobID, step string) {
		if step != killAt.Load().(string) {
			return
		}
		pid, err := postmasterPid(filepath.Join(newDir.Load().(string), "pgdata"))
		if err == nil {
			err = syscall.Kill(pid, syscall.SIGKILL)
		}
		if err != nil {
			t.Errorf("kill the new server at %s: %v", step, err)
		}
		killed <- step
	}
	e, p := keyEnv(t, appliancetest.Options{Instances: true, JobStepHook: hook})
	upgradeTarget(t, e)
	ctx := t.Context()
	prj := provision(t, e, p, "upgrade failures", "development")
	inst := instanceOf(t, e, prj)
	newDir.Store(inst.Dir + "-pg17")
	c, err := e.Svc.ProjectConnections(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, c.Connections.DirectURL)
	for _, q := range []string{"CREATE TABLE items (id serial PRIMARY KEY, v text)",
		"INSERT INTO items (v) SELECT 'row ' || g FROM generate_series(1, 500) g"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close(ctx)

	// untouched fails unless the project is as before the attempt of job j, on 15, and nothing of it is
	// left.
	untouched := func(j *store.Job, rows int64) {
		t.Helper()
		if got := instanceOf(t, e, prj); got.Major != 15 || got.PreviousDir != "" || got.Dir != inst.Dir || got.WALArchive != "" || got.Port != inst.Port {
			t.Fatalf("%s: the instance after the failed upgrade: %+v", j.ID, got)
		}
		for _, url := range []string{c.Connections.DirectURL, c.Connections.PooledURL} {
			conn := connect(t, url)
			if v := scalar[string](t, conn, "SELECT version()"); !strings.Contains(v, "PostgreSQL 15") {
				t.Fatalf("%s: after the failed upgrade: %s", j.ID, v)
			}
			if n := scalar[int64](t, conn, "SELECT count(*) FROM items"); n != rows {
				t.Fatalf("%s: %d rows after the failed upgrade, want %d", j.ID, n, rows)
			}
			if _, err := conn.Exec(ctx, "INSERT INTO items (v) VALUES ('after a failure')"); err != nil {
				t.Fatalf("%s: a write after the failed upgrade: %v", j.ID, err)
			}
			rows++
			conn.Close(ctx)
		}
		if e.Project(t, prj.ID).RuntimeStatus != appliance.RuntimeActive {
			t.Fatalf("%s: runtime status %s", j.ID, e.Project(t, prj.ID).RuntimeStatus)
		}
		conn := connect(t, c.Connections.DirectURL)
		defer conn.Close(ctx)
		if n := scalar[int64](t, conn, "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'appliance%'"); n != 0 {
			t.Fatalf("%s: %d replication slots of the upgrade left", j.ID, n)
		}
		if n := scalar[int64](t, conn, "SELECT count(*) FROM pg_publication"); n != 0 {
			t.Fatalf("%s: %d publications left", j.ID, n)
		}
		if _, err := os.Stat(inst.Dir + "-pg17"); !os.IsNotExist(err) {
			t.Fatalf("%s: the new cluster's directory: %v", j.ID, err)
		}
		if _, err := os.Stat(filepath.Join(e.Dir, "backups", prj.ID, "wal-pg17-"+j.ID)); !os.IsNotExist(err) {
			t.Fatalf("%s: the new cluster's WAL archive: %v", j.ID, err)
		}
		if err := e.DB.View(func(tx *store.Tx) error {
			all, err := store.Backups.Lookup(tx, store.BackupsByProject, prj.ID, store.Query{})
			for _, b := range all {
				if b.Major == 17 || b.JobID == j.ID {
					return fmt.Errorf("a backup of the failed upgrade's cluster is left: %+v", b)
				}
			}
			return err
		}); err != nil {
			t.Fatalf("%s: %v", j.ID, err)
		}
	}
	failedUpgrade := func(want string) *store.Job {
		t.Helper()
		res, err := e.Svc.Upgrades().Major(ctx, p, prj.ID, 17)
		if err != nil {
			t.Fatal(err)
		}
		j := e.WaitJob(t, res.Job.ID)
		if j.State != scheduler.StateFailed || !strings.Contains(j.Error, want) {
			t.Fatalf("the upgrade: %s %q (want it failed with %q)\n%s", j.State, j.Error, want, j.LastStderr)
		}
		t.Logf("the upgrade failed as it must: %s", j.Error)
		return j
	}
	rows := int64(500)

	// 1. The subscription refused: every replication slot of the old server is taken.
	conn = connect(t, c.Connections.DirectURL)
	max, _ := strconv.Atoi(scalar[string](t, conn, "SHOW max_replication_slots"))
	for i := range max {
		if err := e.AdminExec(t, prj.ID, fmt.Sprintf("SELECT pg_create_logical_replication_slot('taken_%d', 'pgoutput')", i)); err != nil {
			t.Fatal(err)
		}
	}
	j := failedUpgrade("replication slots are in use")
	if err := e.AdminExec(t, prj.ID, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE 'taken%'"); err != nil {
		t.Fatal(err)
	}
	if n := scalar[int64](t, conn, "SELECT count(*) FROM pg_replication_slots"); n != 0 {
		t.Fatalf("%d slots left", n)
	}
	conn.Close(ctx)
	untouched(j, rows)
	rows += 2

	// 2. The new server killed during the catch-up.
	killAt.Store("upgrade-catching-up")
	j = failedUpgrade("the catch-up of the new server")
	if step := <-killed; step != "upgrade-catching-up" {
		t.Fatal(step)
	}
	untouched(j, rows)
	rows += 2

	// 3. The new server killed inside the write pause (the old server fenced, its pooler stopped), after
	// the new cluster's base backup.
	killAt.Store("upgrade-paused")
	j = failedUpgrade("the new server") // stopped answering while the slots drain, or refused the sequences
	if step := <-killed; step != "upgrade-paused" {
		t.Fatal(step)
	}
	untouched(j, rows)
	rows += 2

	// Then the upgrade succeeds.
	killAt.Store("")
	res, err := e.Svc.Upgrades().Major(ctx, p, prj.ID, 17)
	runJob(t, e, res, err)
	on17 := connect(t, c.Connections.PooledURL)
	defer on17.Close(ctx)
	if v := scalar[string](t, on17, "SELECT version()"); !strings.Contains(v, "PostgreSQL 17") || scalar[int64](t, on17, "SELECT count(*) FROM items") != rows {
		t.Fatalf("after the upgrade: %s, %d rows (want %d)", v, scalar[int64](t, on17, "SELECT count(*) FROM items"), rows)
	}
}

// postmasterPid is the pid in a data directory's postmaster.pid.
func postmasterPid(dataDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}
