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

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/programs"
	"github.com/theappliance/appliance/appliance/testtools"
)

// TestMajorUpgradeSurvivesCrash SIGKILLs the real binary in the middle of a major upgrade by logical
// replication to the npm build of 17 (a test build's upgrade jobs stop at the step named by
// APPLIANCE_TEST_JOB_PAUSE), and starts it again:
//   - "upgrade-catching-up": the new cluster follows the old one (both servers outlive the appliance);
//   - "upgrade-paused": writes paused, the old server fenced and its pooler stopped, the swap not begun;
//   - "upgrade-swapped": the record names the new server, which runs on the project's port, fenced, and
//     the old one is stopped without its rollback subscription.
//
// After each restart the retried job must complete and the project serve all its rows on 17 (direct and
// pooled URLs), never half-moved; in the last round a write on 17 must survive a rollback (the reverse
// replication the retry re-established). A fresh project each round.
func TestMajorUpgradeSurvivesCrash(t *testing.T) {
	t.Parallel()
	// Every start can stop an upgrade at each step: at those the arm file lists (pause.arm).
	pause := e2ePauseArmed(t, "upgrade-catching-up", "upgrade-paused", "upgrade-swapped")
	c := e2eCrashSetupEnv(t, "upgraded 0", append(pause.env, e2eNoSpares)...)
	dataDir, phase, p, key := c.dataDir, c.phase, c.p, c.key
	tgz, err := testtools.PostgresTarball(t.Context(), 17)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (programs.Dist{Major: 17, Source: tgz}).Obtain(t.Context(), appliance.PostgresDistDir(dataDir), nil); err != nil {
		t.Fatal(err)
	}
	phase("PostgreSQL 17 unpacked")
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

	for round, step := range []string{"upgrade-catching-up", "upgrade-paused", "upgrade-swapped"} {
		prjID := c.projectID
		if round > 0 {
			prjID = p.e2eProvision(t, key, fmt.Sprintf("upgraded %d", round))
		}
		prj := p.project(t, key, prjID)
		instDir := filepath.Join(dataDir, "instances", prj.PrimaryInstanceID)
		conns := p.connections(t, key, prjID)
		e2eSQL(t, conns.DirectURL, false, "CREATE TABLE items (v int PRIMARY KEY)",
			"INSERT INTO items SELECT g FROM generate_series(1, 50) g")
		want := itemsState(t, conns.DirectURL, false)
		pause.arm(t, step)
		uj := p.call(t, key, http.MethodPost, "/v1/projects/"+prjID+"/upgrade/major?target_major=17", nil, http.StatusAccepted)
		waitMarker(t, p, pause.marker, uj.ID+" "+step)
		p.stop(t, syscall.SIGKILL)
		pause.arm(t) // the retry goes through
		if len(e2eProcsUnder(instDir+"-pg17")) == 0 {
			t.Fatalf("%s: no server of the new cluster runs after the appliance's SIGKILL", step)
		}
		phase(fmt.Sprintf("round %d: appliance SIGKILLed at %s", round+1, step))

		p = c.start(t)
		j := waitJobFor(t, p, key, uj.ID, restoreDeadline)
		if j.State != "completed" || j.Attempts != 2 {
			t.Fatalf("%s: upgrade job %s after %d attempts: %q\n%s", step, j.State, j.Attempts, j.Error, j.LastStderr)
		}
		for name, u := range map[string]struct {
			url    string
			pooled bool
		}{"direct": {conns.DirectURL, false}, "pooled": {conns.PooledURL, true}} {
			if got := itemsState(t, u.url, u.pooled); got != want {
				t.Fatalf("%s: %s reads %s; want %s", step, name, got, want)
			}
			if v := version(u.url, u.pooled); v != "17" {
				t.Fatalf("%s: %s runs %s", step, name, v)
			}
		}
		e2eEventually(t, e2eDeadline, "the project to be active after the upgrade", func() (bool, string) {
			prj := p.project(t, key, prjID)
			return prj.State == "active" && prj.RuntimeStatus == "active", prj.State + "/" + prj.RuntimeStatus
		})
		phase(fmt.Sprintf("round %d: restarted; the retried upgrade completed", round+1))

		if step == "upgrade-swapped" {
			// The retry re-established the reverse replication: a write on 17 survives a rollback.
			e2eSQL(t, conns.PooledURL, true, "INSERT INTO items VALUES (1000)")
			want = itemsState(t, conns.DirectURL, false)
			rb := p.call(t, key, http.MethodPost, "/v1/projects/"+prjID+"/upgrade/major/rollback", nil, http.StatusAccepted)
			if j := waitJobFor(t, p, key, rb.ID, restoreDeadline); j.State != "completed" {
				t.Fatalf("rollback: %s %q", j.State, j.Error)
			}
			if got, v := itemsState(t, conns.PooledURL, true), version(conns.PooledURL, true); got != want || v != "15" {
				t.Fatalf("after the rollback: %s on %s; want %s on 15", got, v, want)
			}
			phase("rolled back with the write made on 17")
		} else {
			cf := p.call(t, key, http.MethodPost, "/v1/projects/"+prjID+"/upgrade/major/confirm", nil, http.StatusAccepted)
			if j := waitJobFor(t, p, key, cf.ID, restoreDeadline); j.State != "completed" {
				t.Fatalf("confirm: %s %q", j.State, j.Error)
			}
			if left := e2eProcsUnder(filepath.Join(instDir, "pgdata")); len(left) > 0 {
				t.Fatalf("%s: processes of the old cluster left after confirm: %v", step, left)
			}
			if _, err := os.Stat(instDir); !os.IsNotExist(err) {
				t.Fatalf("%s: the old cluster's directory after confirm: %v", step, err)
			}
		}
		p.waitSupervisorHealthy(t)
	}
	// An upgrade whose every attempt dies inside the write pause: the job fails (its attempts spent), and
	// the start that finds it so lets the old server's logins in again and removes the attempt: the project
	// serves on 15, writable, with no new cluster nor replication slot left.
	prjID := p.e2eProvision(t, key, "upgrade exhausted")
	prj := p.project(t, key, prjID)
	instDir := filepath.Join(dataDir, "instances", prj.PrimaryInstanceID)
	conns := p.connections(t, key, prjID)
	e2eSQL(t, conns.DirectURL, false, "CREATE TABLE items (v int PRIMARY KEY)", "INSERT INTO items SELECT g FROM generate_series(1, 20) g")
	want := itemsState(t, conns.DirectURL, false)
	pause.arm(t, "upgrade-paused")
	uj := p.call(t, key, http.MethodPost, "/v1/projects/"+prjID+"/upgrade/major?target_major=17", nil, http.StatusAccepted)
	for attempt := 1; attempt <= 3; attempt++ {
		if attempt > 1 {
			p = c.start(t)
		}
		pause.wait(t, p, uj.ID+" upgrade-paused", attempt)
		p.stop(t, syscall.SIGKILL)
	}
	phase("an upgrade killed in its write pause in each of its 3 attempts")
	pause.arm(t)
	p = c.start(t)
	if j := waitJobFor(t, p, key, uj.ID, restoreDeadline); j.State != "failed" || j.Attempts != 3 {
		t.Fatalf("upgrade job %s after %d attempts: %q", j.State, j.Attempts, j.Error)
	}
	for name, u := range map[string]struct {
		url    string
		pooled bool
	}{"direct": {conns.DirectURL, false}, "pooled": {conns.PooledURL, true}} {
		e2eEventually(t, e2eDeadline, name+" to serve the project on 15", func() (bool, string) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			conn, err := pgx.Connect(ctx, u.url)
			if err != nil {
				return false, err.Error()
			}
			conn.Close(context.Background())
			return true, ""
		})
		if got, v := itemsState(t, u.url, u.pooled), version(u.url, u.pooled); got != want || v != "15" {
			t.Fatalf("after the spent upgrade, %s reads %s on %s; want %s on 15", name, got, v, want)
		}
	}
	e2eSQL(t, conns.PooledURL, true, "INSERT INTO items VALUES (1000)")
	if _, err := os.Stat(instDir + "-pg17"); !os.IsNotExist(err) {
		t.Fatalf("the spent upgrade's new cluster: %v", err)
	}
	if left := e2eProcsUnder(instDir + "-pg17"); len(left) > 0 {
		t.Fatalf("the spent upgrade's server runs: %v", left)
	}
	e2eEventually(t, e2eDeadline, "the spent upgrade's replication slots to go", func() (bool, string) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		conn := e2eConnect(ctx, t, conns.DirectURL, false)
		defer conn.Close(context.Background())
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots").Scan(&n); err != nil {
			return false, err.Error()
		}
		return n == 0, fmt.Sprintf("%d slots", n)
	})
	phase("the spent upgrade's start let the project serve on 15 and removed the attempt")

	if !strings.Contains(p.component(t, "postgres-majors"), "17") {
		t.Fatal("no 17 in /status")
	}
	p.stop(t, syscall.SIGTERM)
}

// TestRecoverAfterARolledBackUpgrade: a project upgraded to 17 by logical replication (its new cluster's
// base backup taken before the cutover: the project's newest backup), rolled back to 15 and written to, is
// rebuilt by `recover` on a new machine from its newest backup of the cluster it ran (15's, with the WAL
// archived since), not from the newer backup of the rolled-back 17 cluster: every row, on 15.
func TestRecoverAfterARolledBackUpgrade(t *testing.T) {
	t.Parallel()
	bk := e2eBucket(t)
	bk.env = append(bk.env, e2eNoSpares) // no spare clusters in any up of the test
	bin := e2eBuild(t)
	dataDir := appliancetest.TraversableTempDir(t)
	p, _, keyFile := bk.start(t, bin, dataDir)
	key := e2eAdminKey(t, dataDir)
	tgz, err := testtools.PostgresTarball(t.Context(), 17)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (programs.Dist{Major: 17, Source: tgz}).Obtain(t.Context(), appliance.PostgresDistDir(dataDir), nil); err != nil {
		t.Fatal(err)
	}
	id := p.e2eProvision(t, key, "rolled back")
	conns := p.connections(t, key, id)
	e2eSQL(t, conns.DirectURL, false, "CREATE TABLE kept (id int PRIMARY KEY, note text NOT NULL)",
		"INSERT INTO kept SELECT g, 'on 15 ' || g FROM generate_series(1, 100) g")
	bj := p.call(t, key, http.MethodPost, "/v1/projects/"+id+"/backups", map[string]any{"label": "on 15"}, http.StatusAccepted)
	if j := waitJobFor(t, p, key, bj.ID, restoreDeadline); j.State != "completed" {
		t.Fatalf("backup %s: %q\n%s", j.State, j.Error, j.LastStderr)
	}
	for _, step := range []string{"/upgrade/major?target_major=17", "/upgrade/major/rollback"} {
		if step != "/upgrade/major?target_major=17" {
			e2eSQL(t, conns.PooledURL, true, "INSERT INTO kept SELECT g, 'on 17 ' || g FROM generate_series(101, 150) g")
		}
		j := p.call(t, key, http.MethodPost, "/v1/projects/"+id+step, nil, http.StatusAccepted)
		if j := waitJobFor(t, p, key, j.ID, restoreDeadline); j.State != "completed" {
			t.Fatalf("%s: %s %q\n%s", step, j.State, j.Error, j.LastStderr)
		}
	}
	// Back on 15: more rows, their WAL archived (a filler pushes the segment out).
	e2eSQL(t, conns.DirectURL, false, "INSERT INTO kept SELECT g, 'on 15 again ' || g FROM generate_series(151, 200) g")
	want := recoverChecksum(t, conns.DirectURL)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	conn := e2eConnect(ctx, t, conns.DirectURL, false)
	var seg string
	if err := conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_current_wal_lsn())").Scan(&seg); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE filler AS SELECT g, md5(g::text) || repeat('x', 900) AS pad FROM generate_series(1, 20000) g"); err != nil {
		t.Fatal(err)
	}
	e2eEventually(t, time.Minute, "segment "+seg+" archived", func() (bool, string) {
		var last *string
		if err := conn.QueryRow(ctx, "SELECT last_archived_wal FROM pg_stat_archiver").Scan(&last); err != nil {
			return false, err.Error()
		}
		if last == nil {
			return false, "nothing archived yet"
		}
		return *last >= seg, "last archived: " + *last
	})
	conn.Close(context.Background())
	var list struct {
		Backups []struct {
			Label         string `json:"label"`
			PostgresMajor int    `json:"postgres_major"`
			CreatedAt     string `json:"created_at"`
		} `json:"backups"`
	}
	p.do(t, key, http.MethodGet, "/v1/projects/"+id+"/backups", nil, http.StatusOK, &list)
	if len(list.Backups) < 2 || list.Backups[0].PostgresMajor != 17 {
		t.Fatalf("the project's newest backup is not the rolled-back 17 cluster's: %+v", list.Backups)
	}
	bk.snapshotEverything(t, p, key, id)
	loseMachine(t, p)

	newDir := appliancetest.TraversableTempDir(t)
	t.Cleanup(func() { e2eKillUnder(t, newDir) })
	out, err := bk.recover(t, 10*time.Minute, bin, newDir, keyFile)
	if err != nil {
		t.Fatalf("recover: %v\n%s", err, out)
	}
	q := e2eStartWith(t, bin, newDir, bk.env, bk.flags())
	checkRecovered(t, q, key, id, want, out, "15")
	q.stop(t, syscall.SIGTERM)
}

// checkRecovered waits until the recovered project id is active on q (up answers before it has started
// its server), then checks its rows' checksum (want) and that it runs PostgreSQL major; out is recover's
// output, shown on a failure.
func checkRecovered(t *testing.T, q *e2eProc, key, id, want, out, major string) {
	t.Helper()
	e2eEventually(t, 2*time.Minute, id+" active", func() (bool, string) {
		prj := q.project(t, key, id)
		return prj.State == "active" && prj.RuntimeStatus == "active", prj.State + "/" + prj.RuntimeStatus
	})
	c := q.connections(t, key, id)
	if got := recoverChecksum(t, c.PooledURL); got != want {
		t.Fatalf("after the recovery: %s, want %s\n%s", got, want, out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rc := e2eConnect(ctx, t, c.DirectURL, false)
	defer rc.Close(context.Background())
	var v string
	if err := rc.QueryRow(ctx, "SHOW server_version_num").Scan(&v); err != nil || !strings.HasPrefix(v, major) {
		t.Fatalf("the recovered project runs %s (%v), want %s", v, err, major)
	}
}
