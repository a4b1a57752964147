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
)

// restoreDeadline bounds one restore job (archive, copy, recovery, swap) on a slow, shared machine.
const restoreDeadline = 5 * time.Minute

// TestRestoreSurvivesCrash SIGKILLs the real binary in the middle of a restore, at each dangerous moment
// (a test build's restore jobs stop at the step named by APPLIANCE_TEST_JOB_PAUSE), and starts it again:
//   - "recovering": the candidate postmaster recovers on its scratch port (it outlives the appliance);
//   - "swapped-out": the original's data directory was renamed to pgdata.pre-restore-<job>, pgdata is absent;
//   - "swapped-in": the candidate's data is pgdata, not started;
//   - "started": the restored instance runs, the original's directory is still kept.
//
// After each restart the retried job must complete, the project must run and serve (direct and pooled
// URLs) exactly the restored data (never a mix, never nothing), no candidate process or directory and no
// pre-restore directory may be left, and the project must be active. It needs PostgreSQL and PgBouncer.
func TestRestoreSurvivesCrash(t *testing.T) {
	t.Parallel()
	// Every start can stop a restore at each step: at those the arm file lists (pauseArm).
	pause := e2ePauseArmed(t, "recovering", "swapped-out", "swapped-in", "started")
	c := e2eCrashSetupEnv(t, "restored", append(pause.env, e2eNoSpares)...)
	dataDir, phase, p, key, prjID := c.dataDir, c.phase, c.p, c.key, c.projectID
	prj := p.project(t, key, prjID)
	instDir := filepath.Join(dataDir, "instances", prj.PrimaryInstanceID)
	pgdata := filepath.Join(instDir, "pgdata")
	conns := p.connections(t, key, prjID)

	// The backup every round restores: rows 1 to 10.
	e2eSQL(t, conns.DirectURL, false, "CREATE TABLE items (v int PRIMARY KEY)",
		"INSERT INTO items SELECT g FROM generate_series(1, 10) g")
	bj := p.call(t, key, http.MethodPost, "/v1/projects/"+prjID+"/backups", map[string]any{"label": "base"}, http.StatusAccepted)
	if j := waitJobFor(t, p, key, bj.ID, restoreDeadline); j.State != "completed" {
		t.Fatalf("backup %s: %q\n%s", j.State, j.Error, j.LastStderr)
	}
	var backups struct {
		Backups []struct {
			BackupKey string `json:"backup_key"`
			State     string `json:"state"`
		} `json:"backups"`
	}
	p.do(t, key, http.MethodGet, "/v1/projects/"+prjID+"/backups", nil, http.StatusOK, &backups)
	if len(backups.Backups) != 1 || backups.Backups[0].State != "completed" {
		t.Fatalf("backups: %+v", backups)
	}
	backupKey := backups.Backups[0].BackupKey
	restored := itemsState(t, conns.DirectURL, false)
	phase("provisioned and backed up")

	for round, step := range []string{"recovering", "swapped-out", "swapped-in", "started"} {
		// The live data differs from the backup: the restore must end with one or the other, whole.
		e2eSQL(t, conns.DirectURL, false, fmt.Sprintf("INSERT INTO items SELECT g FROM generate_series(%d, %d) g", 100*(round+1), 100*(round+1)+9))
		old := itemsState(t, conns.DirectURL, false)
		if old == restored {
			t.Fatal("the live data equals the backup's")
		}
		pause.arm(t, step)
		rj := p.call(t, key, http.MethodPost, "/v1/projects/"+prjID+"/restores", map[string]any{"backup_key": backupKey}, http.StatusAccepted)
		candDir := filepath.Join(dataDir, "instances", prj.PrimaryInstanceID+".restore-"+rj.ID)
		preRestore := pgdata + ".pre-restore-" + rj.ID
		waitMarker(t, p, pause.marker, rj.ID+" "+step)
		p.stop(t, syscall.SIGKILL)
		pause.arm(t) // the retry goes through

		// The moment the hook stopped at is the dangerous one it names.
		switch step {
		case "recovering":
			if len(e2eProcsUnder(candDir)) == 0 {
				t.Fatalf("%s: no candidate process runs in %s after the appliance's SIGKILL", step, candDir)
			}
		case "swapped-out":
			if _, err := os.Stat(pgdata); !os.IsNotExist(err) {
				t.Fatalf("%s: pgdata exists (%v)", step, err)
			}
			if _, err := os.Stat(preRestore); err != nil {
				t.Fatalf("%s: %v", step, err)
			}
		case "swapped-in", "started":
			if _, err := os.Stat(preRestore); err != nil {
				t.Fatalf("%s: %v", step, err)
			}
		}
		restoredPid := 0
		if step == "started" { // the restored instance runs: the retry must keep it, not restore again
			restoredPid = e2eLivePid(t, "restored postmaster", filepath.Join(pgdata, "postmaster.pid"))
		}
		phase(fmt.Sprintf("round %d: appliance SIGKILLed at %s", round+1, step))

		p = c.start(t)
		j := waitJobFor(t, p, key, rj.ID, restoreDeadline)
		if j.State != "completed" || j.Attempts != 2 {
			t.Fatalf("%s: restore job %s after %d attempts: %q\n%s", step, j.State, j.Attempts, j.Error, e2eInstanceLogs(dataDir))
		}
		for name, u := range map[string]struct {
			url    string
			pooled bool
		}{"direct": {conns.DirectURL, false}, "pooled": {conns.PooledURL, true}} {
			if got := itemsState(t, u.url, u.pooled); got != restored {
				t.Fatalf("%s: %s reads %s; want the restored %s (the old was %s)", step, name, got, restored, old)
			}
		}
		if restoredPid != 0 {
			if pid := e2eLivePid(t, "postmaster", filepath.Join(pgdata, "postmaster.pid")); pid != restoredPid {
				t.Fatalf("%s: postmaster pid %d, was %d: the retry restored again instead of finishing", step, pid, restoredPid)
			}
		}
		if left := e2eProcsUnder(candDir); len(left) > 0 {
			t.Fatalf("%s: candidate processes left: %v", step, left)
		}
		for _, dir := range []string{candDir, preRestore, preRestore + ".abandoned", filepath.Join(instDir, "restored-"+rj.ID)} {
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Fatalf("%s: %s left behind (%v)", step, dir, err)
			}
		}
		e2eEventually(t, e2eDeadline, "the project to be active after the restore", func() (bool, string) {
			prj := p.project(t, key, prjID)
			return prj.State == "active" && prj.RuntimeStatus == "active", prj.State + "/" + prj.RuntimeStatus
		})
		p.waitSupervisorHealthy(t)
		phase(fmt.Sprintf("round %d: restarted; the retried restore completed with the restored data", round+1))
	}

	// A restore whose every attempt dies during the swap: the job fails (its attempts spent), and the start
	// that finds it failed puts the original data back: the project runs with the old data.
	e2eSQL(t, conns.DirectURL, false, "INSERT INTO items SELECT g FROM generate_series(900, 909) g")
	old := itemsState(t, conns.DirectURL, false)
	pause.arm(t, "swapped-out")
	rj := p.call(t, key, http.MethodPost, "/v1/projects/"+prjID+"/restores", map[string]any{"backup_key": backupKey}, http.StatusAccepted)
	preRestore := pgdata + ".pre-restore-" + rj.ID
	for attempt := 1; attempt <= 3; attempt++ {
		if attempt > 1 {
			p = c.start(t)
		}
		pause.wait(t, p, rj.ID+" swapped-out", attempt)
		p.stop(t, syscall.SIGKILL)
		if _, err := os.Stat(pgdata); !os.IsNotExist(err) {
			t.Fatalf("attempt %d: pgdata exists at swapped-out (%v)", attempt, err)
		}
	}
	phase("a restore killed at swapped-out in each of its 3 attempts")
	pause.arm(t)
	p = c.start(t)
	if j := waitJobFor(t, p, key, rj.ID, restoreDeadline); j.State != "failed" || j.Attempts != 3 {
		t.Fatalf("restore job %s after %d attempts: %q", j.State, j.Attempts, j.Error)
	}
	e2eEventually(t, restoreDeadline, "the project to serve its data again", func() (bool, string) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, conns.DirectURL)
		if err != nil {
			return false, err.Error()
		}
		conn.Close(context.Background())
		return true, ""
	})
	for name, u := range map[string]struct {
		url    string
		pooled bool
	}{"direct": {conns.DirectURL, false}, "pooled": {conns.PooledURL, true}} {
		if got := itemsState(t, u.url, u.pooled); got != old {
			t.Fatalf("after the failed restore, %s reads %s; want the old %s", name, got, old)
		}
	}
	candDir := filepath.Join(dataDir, "instances", prj.PrimaryInstanceID+".restore-"+rj.ID)
	for _, dir := range []string{candDir, preRestore, preRestore + ".abandoned", filepath.Join(instDir, "restored-"+rj.ID)} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("%s left behind (%v)", dir, err)
		}
	}
	e2eEventually(t, e2eDeadline, "the project to be active after the failed restore", func() (bool, string) {
		prj := p.project(t, key, prjID)
		return prj.State == "active" && prj.RuntimeStatus == "active", prj.State + "/" + prj.RuntimeStatus
	})
	p.waitSupervisorHealthy(t)
	phase("the failed restore's start put the original data back")
	p.stop(t, syscall.SIGTERM)
}

// itemsState reads the items table as one comparable string.
func itemsState(t *testing.T, url string, pooled bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn := e2eConnect(ctx, t, url, pooled)
	defer conn.Close(context.Background())
	var n int64
	var all string
	if err := conn.QueryRow(ctx, "SELECT count(*), coalesce(string_agg(v::text, ',' ORDER BY v), '') FROM items").Scan(&n, &all); err != nil {
		t.Fatalf("read items: %v", err)
	}
	return fmt.Sprintf("%d rows [%s]", n, all)
}

// stop signals the appliance and waits for it to exit (0 after SIGTERM).
func (p *e2eProc) stop(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	if code := p.waitExit(t); sig == syscall.SIGTERM && code != 0 {
		t.Fatalf("exit code %d after SIGTERM; stderr:\n%s", code, p.stderr)
	}
}

// waitMarker waits until the marker file holds line (a restore or cutover job stopped at its step).
func waitMarker(t *testing.T, p *e2eProc, path, line string) {
	t.Helper()
	deadline := time.Now().Add(restoreDeadline)
	for {
		data, _ := os.ReadFile(path)
		if strings.Contains(string(data), line+"\n") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job did not reach %q within %v; marker holds %q", line, restoreDeadline, data)
		}
		select {
		case <-p.exited:
			t.Fatalf("appliance exited before the job reached %q; stderr:\n%s", line, p.stderr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitJobFor polls the job until it is completed or failed, for at most within.
func waitJobFor(t testing.TB, p *e2eProc, key, id string, within time.Duration) *e2eJob {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		j := p.call(t, key, http.MethodGet, "/v1/jobs/"+id, nil, http.StatusOK)
		if j.State == "completed" || j.State == "failed" {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s after %v (attempts %d, error %q)", id, j.State, within, j.Attempts, j.Error)
		}
		select {
		case <-p.exited:
			t.Fatalf("appliance exited while job %s ran; stderr:\n%s", id, p.stderr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// e2eCrash is what a crash test starts from: the test build started on a fresh data directory (whatever
// runs under it is killed with the test), its admin key, a provisioned project, a directory for pause
// markers, and phase, which logs a step with the time since the start.
type e2eCrash struct {
	bin, dataDir, markers string
	phase                 func(string)
	p                     *e2eProc
	key, projectID        string
	env                   []string // every start's environment (start adds to it)
}

// e2eNoSpares is the environment of an appliance that keeps no spare clusters (up --spare-clusters 0): a
// test that provisions little and restarts often spares their preparation and their servers, pools and
// adoption at every start.
const e2eNoSpares = "APPLIANCE_SPARE_CLUSTERS=0"

func e2eCrashSetup(t *testing.T, project string) *e2eCrash {
	t.Helper()
	return e2eCrashSetupEnv(t, project)
}

// e2eCrashSetupEnv is e2eCrashSetup with env in every start's environment (c.start).
func e2eCrashSetupEnv(t *testing.T, project string, env ...string) *e2eCrash {
	t.Helper()
	c := &e2eCrash{bin: e2eBuild(t), dataDir: appliancetest.TraversableTempDir(t), markers: t.TempDir(), env: env}
	t.Cleanup(func() { e2eKillUnder(t, c.dataDir) })
	began := time.Now()
	c.phase = func(what string) { t.Helper(); t.Logf("%6.2fs %s", time.Since(began).Seconds(), what) }
	c.p = c.start(t)
	c.key = e2eAdminKey(t, c.dataDir)
	var created struct {
		Job     *e2eJob     `json:"job"`
		Project *e2eProject `json:"project"`
	}
	c.p.do(t, c.key, http.MethodPost, "/v1/projects", map[string]any{"name": project, "environment": "development"},
		http.StatusAccepted, &created)
	if j := waitJobFor(t, c.p, c.key, created.Job.ID, restoreDeadline); j.State != "completed" {
		t.Fatalf("provisioning %s: %q\n%s", j.State, j.Error, e2eInstanceLogs(c.dataDir))
	}
	c.projectID = created.Project.ID
	return c
}

// start starts the appliance on c's data directory with c's environment and env.
func (c *e2eCrash) start(t *testing.T, env ...string) *e2eProc {
	t.Helper()
	return e2eStartWith(t, c.bin, c.dataDir, append(append([]string(nil), c.env...), env...), nil)
}

// e2ePause is a test build's job-step hook for every start of a test: its jobs stop at the steps the arm
// file lists (arm), of those the environment names, and go on at once at the others; each stop appends
// "<job> <step>" to the marker file. A start needs no environment of its own for a step then: the test
// arms a step, starts the job, and disarms the step before the start that is to retry the job.
type e2ePause struct {
	env             []string
	marker, armFile string
}

// e2ePauseArmed is the hook at steps, none armed.
func e2ePauseArmed(t *testing.T, steps ...string) e2ePause {
	dir := t.TempDir()
	p := e2ePause{marker: filepath.Join(dir, "paused"), armFile: filepath.Join(dir, "armed")}
	p.env = []string{"APPLIANCE_TEST_JOB_PAUSE=" + strings.Join(steps, ","), "APPLIANCE_TEST_JOB_PAUSE_MARKER=" + p.marker,
		"APPLIANCE_TEST_JOB_PAUSE_ARM=" + p.armFile}
	p.arm(t)
	return p
}

// arm makes steps the ones jobs stop at (none: every job goes through).
func (p e2ePause) arm(t *testing.T, steps ...string) {
	t.Helper()
	var b strings.Builder
	for _, s := range steps {
		b.WriteString(s + "\n")
	}
	if err := os.WriteFile(p.armFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// wait waits until the marker holds line ("<job> <step>") n times: a job (attempt n) stopped at the step.
func (p e2ePause) wait(t *testing.T, proc *e2eProc, line string, n int) {
	t.Helper()
	deadline := time.Now().Add(restoreDeadline)
	for {
		data, _ := os.ReadFile(p.marker)
		if strings.Count(string(data), line+"\n") >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job did not reach %q %d times within %v; marker holds %q", line, n, restoreDeadline, data)
		}
		select {
		case <-proc.exited:
			t.Fatalf("appliance exited before the job reached %q; stderr:\n%s", line, proc.stderr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
