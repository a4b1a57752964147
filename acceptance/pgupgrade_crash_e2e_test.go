package acceptance

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/testtools"
)

// TestPgUpgradeSurvivesCrash SIGKILLs the real binary inside the write pause of a major upgrade 15 → 17 by
// pg_upgrade (Debian 13's 17, given as --pg-dist 17=<its bin directory>; a test build's upgrade job stops
// at the step APPLIANCE_TEST_JOB_PAUSE names), and starts it again:
//   - "pgupgrade-stopped": the project's server stopped (fenced), the new cluster initialised, pg_upgrade
//     not started;
//   - "pgupgrade-old-running": pg_upgrade (held still) has started the old cluster on its private socket,
//     both outlive the appliance;
//   - "pgupgrade-new-running": pg_upgrade (held still) has started the new cluster on its private socket;
//   - "pgupgrade-started": pg_upgrade finished and the new server runs on the project's port, the record
//     still names the old cluster and nothing is open to clients.
//
// After each restart the retried job must complete: every row written before (direct and pooled URLs) on
// 17, no process of pg_upgrade nor of the old cluster left running, the old directory as pg_upgrade's copy
// mode leaves it; then a rollback to 15 serves the same rows from the old directory, and the next round
// starts from there (one project for every round). Last, an upgrade killed in each of its 3 attempts while
// pg_upgrade runs: the job fails, and the start that finds it so serves the project on 15, writable, with
// no new cluster nor process of pg_upgrade left.
func TestPgUpgradeSurvivesCrash(t *testing.T) {
	t.Parallel()
	pg17, err := testtools.DebianPostgres(t.Context(), 17)
	if err != nil {
		t.Fatal(err)
	}
	// No spare clusters: one project, and fourteen starts that would adopt them each time.
	flags := []string{"--pg-dist", "17=" + pg17, "--spare-clusters", "0"}
	bin, dataDir := e2eBuild(t), appliancetest.TraversableTempDir(t)
	t.Cleanup(func() { e2eKillUnder(t, dataDir) })
	began := time.Now()
	phase := func(what string) { t.Helper(); t.Logf("%6.2fs %s", time.Since(began).Seconds(), what) }
	// Every start can stop a job at each step: at those the arm file lists (pause.arm).
	pause := e2ePauseArmed(t, "pgupgrade-stopped", "pgupgrade-old-running", "pgupgrade-new-running", "pgupgrade-started", "pgupgrade-rolled-back")
	p := e2eStartWith(t, bin, dataDir, pause.env, flags)
	key := e2eAdminKey(t, dataDir)
	prjID := p.e2eProvision(t, key, "upgraded by pg_upgrade")
	prj := p.project(t, key, prjID)
	instDir := filepath.Join(dataDir, "instances", prj.PrimaryInstanceID)
	newDir := instDir + "-pg17"
	conns := p.connections(t, key, prjID)
	e2eSQL(t, conns.DirectURL, false, "CREATE TABLE items (v int PRIMARY KEY)")
	version := func(url string, pooled bool) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		conn := e2eConnect(ctx, t, url, pooled)
		defer conn.Close(context.Background())
		var v string
		if err := conn.QueryRow(ctx, "SHOW server_version_num").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v[:2]
	}
	serves := func(what, wantMajor, want string) {
		t.Helper()
		for name, u := range map[string]struct {
			url    string
			pooled bool
		}{"direct": {conns.DirectURL, false}, "pooled": {conns.PooledURL, true}} {
			if got, v := itemsState(t, u.url, u.pooled), version(u.url, u.pooled); got != want || v != wantMajor {
				t.Fatalf("%s: %s reads %s on %s; want %s on %s", what, name, got, v, want, wantMajor)
			}
		}
	}
	pgUpgradeLeft := func() []string {
		var left []string
		for pid, cmd := range e2eProcsUnder(dataDir) {
			if f := strings.Fields(cmd); len(f) > 0 && filepath.Base(f[0]) == "pg_upgrade" {
				left = append(left, fmt.Sprintf("%d %s", pid, cmd))
			}
		}
		return left
	}
	unchangedOld := func(what string) {
		t.Helper()
		// pg_upgrade's link modes disable the old cluster (pg_control renamed); its copy mode leaves it.
		if _, err := os.Stat(filepath.Join(instDir, "pgdata", "global", "pg_control")); err != nil {
			t.Fatalf("%s: the old cluster's pg_control: %v", what, err)
		}
		if _, err := os.Stat(filepath.Join(instDir, "pgdata", "global", "pg_control.old")); !os.IsNotExist(err) {
			t.Fatalf("%s: the old cluster was disabled by pg_upgrade (pg_control.old: %v)", what, err)
		}
	}

	for round, step := range []string{"pgupgrade-stopped", "pgupgrade-old-running", "pgupgrade-new-running", "pgupgrade-started"} {
		e2eSQL(t, conns.PooledURL, true, fmt.Sprintf("INSERT INTO items SELECT g FROM generate_series(%d, %d) g", round*100+1, round*100+40))
		want := itemsState(t, conns.DirectURL, false)
		pause.arm(t, step)
		uj := p.call(t, key, http.MethodPost, "/v1/projects/"+prjID+"/upgrade/major?target_major=17", nil, http.StatusAccepted)
		waitMarker(t, p, pause.marker, uj.ID+" "+step)
		p.stop(t, syscall.SIGKILL)
		pause.arm(t) // the retry goes through
		// What outlives the appliance at each step.
		switch step {
		case "pgupgrade-old-running":
			if len(e2eProcsUnder(filepath.Join(instDir, "pgdata"))) == 0 || len(pgUpgradeLeft()) == 0 {
				t.Fatalf("%s: no orphaned pg_upgrade with the old cluster's server after the SIGKILL: %v", step, e2eProcsUnder(dataDir))
			}
		case "pgupgrade-new-running":
			if len(e2eProcsUnder(filepath.Join(newDir, "pgdata"))) == 0 || len(pgUpgradeLeft()) == 0 {
				t.Fatalf("%s: no orphaned pg_upgrade with the new cluster's server after the SIGKILL: %v", step, e2eProcsUnder(dataDir))
			}
		case "pgupgrade-started":
			if len(e2eProcsUnder(filepath.Join(newDir, "pgdata"))) == 0 {
				t.Fatalf("%s: the new server does not run after the SIGKILL", step)
			}
		}
		phase(fmt.Sprintf("round %d: appliance SIGKILLed at %s", round+1, step))

		p = e2eStartWith(t, bin, dataDir, pause.env, flags)
		j := waitJobFor(t, p, key, uj.ID, restoreDeadline)
		if j.State != "completed" || j.Attempts != 2 {
			t.Fatalf("%s: upgrade job %s after %d attempts: %q\n%s", step, j.State, j.Attempts, j.Error, j.LastStderr)
		}
		e2eEventually(t, e2eDeadline, "the project to be active after the upgrade", func() (bool, string) {
			prj := p.project(t, key, prjID)
			return prj.State == "active" && prj.RuntimeStatus == "active", prj.State + "/" + prj.RuntimeStatus
		})
		serves(step+": after the retried upgrade", "17", want)
		if left := pgUpgradeLeft(); len(left) > 0 {
			t.Fatalf("%s: pg_upgrade processes left: %v", step, left)
		}
		if left := e2eProcsUnder(filepath.Join(instDir, "pgdata")); len(left) > 0 {
			t.Fatalf("%s: the old cluster's processes run after the upgrade: %v", step, left)
		}
		unchangedOld(step)
		phase(fmt.Sprintf("round %d: restarted; the retried upgrade completed", round+1))

		rb := p.call(t, key, http.MethodPost, "/v1/projects/"+prjID+"/upgrade/major/rollback", nil, http.StatusAccepted)
		if j := waitJobFor(t, p, key, rb.ID, restoreDeadline); j.State != "completed" {
			t.Fatalf("%s: rollback %s %q\n%s", step, j.State, j.Error, j.LastStderr)
		}
		serves(step+": after the rollback", "15", want)
		if _, err := os.Stat(newDir); !os.IsNotExist(err) {
			t.Fatalf("%s: the new cluster after the rollback: %v", step, err)
		}
		phase(fmt.Sprintf("round %d: rolled back to 15 from the old directory", round+1))
	}

	// A rollback killed once its record names the old directory again, before it opens it: the start
	// lets clients in (pg_upgrade's pg_hba.conf replaced), the retried rollback finds nothing to do.
	uj := p.call(t, key, http.MethodPost, "/v1/projects/"+prjID+"/upgrade/major?target_major=17", nil, http.StatusAccepted)
	if j := waitJobFor(t, p, key, uj.ID, restoreDeadline); j.State != "completed" {
		t.Fatalf("upgrade before the rollback's crash: %s %q\n%s", j.State, j.Error, j.LastStderr)
	}
	want := itemsState(t, conns.DirectURL, false)
	pause.arm(t, "pgupgrade-rolled-back")
	rb := p.call(t, key, http.MethodPost, "/v1/projects/"+prjID+"/upgrade/major/rollback", nil, http.StatusAccepted)
	waitMarker(t, p, pause.marker, rb.ID+" pgupgrade-rolled-back")
	p.stop(t, syscall.SIGKILL)
	pause.arm(t)
	phase("a rollback SIGKILLed after its record named the old directory")
	p = e2eStartWith(t, bin, dataDir, pause.env, flags)
	if j := waitJobFor(t, p, key, rb.ID, restoreDeadline); j.State != "completed" {
		t.Fatalf("the rollback's retry: %s %q\n%s", j.State, j.Error, j.LastStderr)
	}
	e2eEventually(t, e2eDeadline, "the project to be active on 15 after the cut rollback", func() (bool, string) {
		prj := p.project(t, key, prjID)
		return prj.State == "active" && prj.RuntimeStatus == "active", prj.State + "/" + prj.RuntimeStatus
	})
	serves("after the cut rollback", "15", want)
	if _, err := os.Stat(newDir); !os.IsNotExist(err) {
		t.Fatalf("the new cluster after the cut rollback: %v", err)
	}
	if left := e2eProcsUnder(newDir); len(left) > 0 {
		t.Fatalf("the new cluster's processes after the cut rollback: %v", left)
	}
	phase("the cut rollback's start let the project serve on 15")

	// Every attempt killed while pg_upgrade runs: the job fails, the project serves on 15.
	e2eSQL(t, conns.PooledURL, true, "INSERT INTO items VALUES (999)")
	want = itemsState(t, conns.DirectURL, false)
	pause.arm(t, "pgupgrade-new-running")
	uj = p.call(t, key, http.MethodPost, "/v1/projects/"+prjID+"/upgrade/major?target_major=17", nil, http.StatusAccepted)
	for attempt := 1; attempt <= 3; attempt++ {
		if attempt > 1 {
			p = e2eStartWith(t, bin, dataDir, pause.env, flags)
		}
		pause.wait(t, p, uj.ID+" pgupgrade-new-running", attempt)
		p.stop(t, syscall.SIGKILL)
	}
	pause.arm(t)
	phase("an upgrade killed while pg_upgrade ran in each of its 3 attempts")
	p = e2eStartWith(t, bin, dataDir, pause.env, flags)
	if j := waitJobFor(t, p, key, uj.ID, restoreDeadline); j.State != "failed" || j.Attempts != 3 {
		t.Fatalf("upgrade job %s after %d attempts: %q", j.State, j.Attempts, j.Error)
	}
	e2eEventually(t, e2eDeadline, "the project to be active on 15", func() (bool, string) {
		prj := p.project(t, key, prjID)
		return prj.State == "active" && prj.RuntimeStatus == "active", prj.State + "/" + prj.RuntimeStatus
	})
	e2eEventually(t, e2eDeadline, "the old server to let clients in", func() (bool, string) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, conns.PooledURL)
		if err != nil {
			return false, err.Error()
		}
		conn.Close(context.Background())
		return true, ""
	})
	serves("after the spent upgrade", "15", want)
	e2eSQL(t, conns.PooledURL, true, "INSERT INTO items VALUES (1000)")
	if _, err := os.Stat(newDir); !os.IsNotExist(err) {
		t.Fatalf("the spent upgrade's new cluster: %v", err)
	}
	if left := pgUpgradeLeft(); len(left) > 0 {
		t.Fatalf("the spent upgrade's pg_upgrade processes: %v", left)
	}
	if left := e2eProcsUnder(newDir); len(left) > 0 {
		t.Fatalf("the spent upgrade's processes run: %v", left)
	}
	unchangedOld("the spent upgrade")
	phase("the spent upgrade's start let the project serve on 15 and removed the attempt")
	p.stop(t, syscall.SIGTERM)
}
