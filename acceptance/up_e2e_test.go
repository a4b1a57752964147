package acceptance

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/cgroups"
	"github.com/theappliance/appliance/store"
)

// TestUpSurvivesCrashAndStop runs the real binary (built with the testhooks tag, which adds the
// "test.sleep" job type and POST /v1/test/jobs) and checks the job guarantees across process ends:
//   - SIGKILL while a job runs: the next start retries it (attempts 2) and it completes;
//   - SIGTERM while a job runs: the process exits 0, the job is back to pending without a spent attempt,
//     and the next start completes it (attempts 1);
//   - restarts never bootstrap again.
//
// It needs only the Go toolchain (no PostgreSQL) and never skips.
func TestUpSurvivesCrashAndStop(t *testing.T) {
	t.Parallel()
	bin := e2eBuild(t)
	dataDir := appliancetest.TraversableTempDir(t)
	markers := t.TempDir()
	bootstrapPath := filepath.Join(dataDir, "bootstrap.json")

	// First start: bootstrap, then a crash in the middle of a job.
	a := e2eStart(t, bin, dataDir)
	if !strings.Contains(a.stdout.String(), "First start") {
		t.Fatalf("first start printed no bootstrap banner:\n%s", a.stdout)
	}
	bootstrap, err := os.ReadFile(bootstrapPath)
	if err != nil {
		t.Fatal(err)
	}
	var creds struct {
		APIKey string `json:"api_key"`
	}
	if err := json.Unmarshal(bootstrap, &creds); err != nil || creds.APIKey == "" {
		t.Fatalf("bootstrap.json has no api_key (%v):\n%s", err, bootstrap)
	}
	key := creds.APIKey

	marker1 := filepath.Join(markers, "crash")
	job1 := a.enqueueSleep(t, key, 3, marker1)
	if job1.State != "pending" || job1.Type != "test.sleep" || job1.LockedResource != "test" {
		t.Fatalf("enqueued job: %+v", job1)
	}
	e2eWaitLines(t, marker1, 1)
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.waitExit(t)

	// Second start: the interrupted job is retried and completes.
	b := e2eStart(t, bin, dataDir)
	j := b.waitJob(t, key, job1.ID)
	if j.State != "completed" || j.Attempts != 2 || j.RetryClassification != "transient" || string(j.Result) != `{"slept":3}` {
		t.Fatalf("job after the crash: state %s attempts %d class %q result %s error %q",
			j.State, j.Attempts, j.RetryClassification, j.Result, j.Error)
	}
	if n := e2eWaitLines(t, marker1, 2); n != 2 {
		t.Errorf("the handler started %d times, want 2", n)
	}
	e2eNoRebootstrap(t, b, bootstrapPath, bootstrap)

	// A clean stop in the middle of a job exits 0 and leaves the job pending, its attempt given back.
	marker2 := filepath.Join(markers, "stop")
	job2 := b.enqueueSleep(t, key, 3, marker2)
	e2eWaitLines(t, marker2, 1)
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := b.waitExit(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0; stderr:\n%s", code, b.stderr)
	}
	stopped := e2eReadJob(t, dataDir, job2.ID)
	if stopped.State != "pending" || stopped.Attempts != 0 || !strings.Contains(stopped.Error, "stopped") {
		t.Fatalf("job after a clean stop: state %s attempts %d error %q", stopped.State, stopped.Attempts, stopped.Error)
	}

	// Third start: the job runs again from the top and completes; still no second bootstrap.
	c := e2eStart(t, bin, dataDir)
	j = c.waitJob(t, key, job2.ID)
	if j.State != "completed" || j.Attempts != 1 || string(j.Result) != `{"slept":3}` {
		t.Fatalf("job after the clean stop: state %s attempts %d result %s error %q", j.State, j.Attempts, j.Result, j.Error)
	}
	if n := e2eWaitLines(t, marker2, 2); n != 2 {
		t.Errorf("the handler started %d times, want 2", n)
	}
	e2eNoRebootstrap(t, c, bootstrapPath, bootstrap)
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := c.waitExit(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0; stderr:\n%s", code, c.stderr)
	}
}

const e2eDeadline = 60 * time.Second

// e2eBuild builds the appliance binary with the testhooks tag from the module root, once for all the
// tests of the process (a link is several seconds of a core; TestMain removes it at the end), and gives
// each test its own path to it (a hard link in the test's temporary directory, a copy across file
// systems): a test looks for the processes of its binary's directory, and those of the other tests at
// once are not its own.
func e2eBuild(t testing.TB) string {
	t.Helper()
	e2eBinary.once.Do(e2eBinary.build)
	if e2eBinary.err != nil {
		t.Fatal(e2eBinary.err)
	}
	bin := filepath.Join(t.TempDir(), "appliance")
	if err := os.Link(e2eBinary.path, bin); err != nil {
		if err := copyFile(e2eBinary.path, bin); err != nil {
			t.Fatalf("the test's path to the built binary: %v", err)
		}
	}
	return bin
}

// copyFile copies an executable file.
func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// e2eBinary is the binary e2eBuild built.
var e2eBinary e2eBin

type e2eBin struct {
	once      sync.Once
	dir, path string
	err       error
}

func (b *e2eBin) build() {
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		b.err = err
		return
	}
	if b.dir, b.err = os.MkdirTemp("", "appliance-e2e-bin-"); b.err != nil {
		return
	}
	// Traversable by the unprivileged user the appliance runs its servers as (its archive_command is this
	// binary when the appliance runs as root).
	if b.err = os.Chmod(b.dir, 0o755); b.err != nil {
		return
	}
	bin := filepath.Join(b.dir, "appliance")
	build := exec.Command(gobin, "build", "-tags", "testhooks", "-o", bin, ".")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		b.err = fmt.Errorf("go build -tags testhooks: %v\n%s", err, out)
		return
	}
	b.path = bin
}

func (b *e2eBin) remove() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// e2eBuffer collects a process's output for the test to read while the process runs.
type e2eBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *e2eBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *e2eBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// e2eProc is one running `appliance up`.
type e2eProc struct {
	cmd            *exec.Cmd
	stdout, stderr *e2eBuffer
	exited         chan struct{}
	api            string
	client         *http.Client
	dataDir        string
}

var e2eAPILine = regexp.MustCompile(`API:\s+(https://\S+)`)

// e2eStart starts `appliance up` on dataDir (free ports picked by the system) and waits until /healthz
// answers over HTTPS, trusting the appliance's own CA.
func e2eStart(t *testing.T, bin, dataDir string) *e2eProc {
	t.Helper()
	return e2eStartEnv(t, bin, dataDir)
}

// e2ePorts is the instance port range of the appliance on dataDir: a range reserved until the test ends
// (appliancetest.FreePorts: below the kernel's ephemeral ports, shared with no other test of any
// process), the same on every call for the same data directory.
func e2ePorts(t testing.TB, dataDir string) string {
	r := e2eRange(t, dataDir, "instances")
	return fmt.Sprintf("%d-%d", r.First, r.Last)
}

// e2eNodePortFlags are the etcd member's and join listener's port flags (cluster init, up --join) of the
// node on dataDir: ports of a range reserved as e2ePorts' is. A free port the node picks itself ("0")
// could be taken by another test's process before the node binds it (a joined node binds its join
// listener seconds after it picked the port).
func e2eNodePortFlags(t testing.TB, dataDir string) []string {
	r := e2eRange(t, dataDir, "node")
	return []string{"--etcd-client-port", strconv.Itoa(r.First), "--etcd-peer-port", strconv.Itoa(r.First + 1),
		"--join-port", strconv.Itoa(r.First + 2)}
}

// e2eRanges are the port ranges reserved per data directory and use ("instances", "node") until their
// test ends.
var e2eRanges sync.Map

func e2eRange(t testing.TB, dataDir, use string) appliance.PortRange {
	t.Helper()
	k := dataDir + "\x00" + use
	if r, ok := e2eRanges.Load(k); ok {
		return r.(appliance.PortRange)
	}
	r := appliancetest.FreePorts(t, 40)
	e2eRanges.Store(k, r)
	t.Cleanup(func() { e2eRanges.Delete(k) })
	return r
}

// e2eStartEnv is e2eStart with extra environment variables ("NAME=value").
func e2eStartEnv(t *testing.T, bin, dataDir string, env ...string) *e2eProc {
	t.Helper()
	return e2eStartWith(t, bin, dataDir, env, nil)
}

// e2eStartWith is e2eStart with extra environment variables and flags (which win over the defaults).
func e2eStartWith(t testing.TB, bin, dataDir string, env, flags []string) *e2eProc {
	t.Helper()
	p := &e2eProc{stdout: &e2eBuffer{}, stderr: &e2eBuffer{}, exited: make(chan struct{}), dataDir: dataDir}
	p.cmd = exec.Command(bin, append([]string{"up", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--pg-ports", e2ePorts(t, dataDir)}, flags...)...)
	p.cmd.Env = append(append(os.Environ(), "APPLIANCE_KV_LISTEN=127.0.0.1:0", "APPLIANCE_KV_REST_LISTEN=127.0.0.1:0", "APPLIANCE_LOG_LEVEL=debug",
		"APPLIANCE_METRICS_TOKEN="+e2eMetricsToken), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
			// Its instances are daemons and outlive it: they would still write in the data directory while
			// the test's temp dir is removed (RemoveAll then fails on a pg_wal that is not empty).
			e2eKillUnder(t, dataDir)
		}
		if t.Failed() {
			t.Logf("appliance (pid %d) stdout:\n%s\nstderr:\n%s", p.cmd.Process.Pid, p.stdout, p.stderr)
		}
	})

	deadline := time.Now().Add(e2eDeadline)
	for p.api == "" {
		if m := e2eAPILine.FindStringSubmatch(p.stdout.String()); m != nil {
			p.api = m[1]
			break
		}
		p.checkAlive(t, deadline, "print its API address")
	}
	caPEM, err := os.ReadFile(filepath.Join(dataDir, "ca", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.crt holds no certificate")
	}
	p.client = &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(p.client.CloseIdleConnections)
	for {
		resp, err := p.client.Get(p.api + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		p.checkAlive(t, deadline, fmt.Sprintf("answer /healthz (last: %v)", err))
	}
}

// checkAlive fails the test if the process exited or the deadline passed, and otherwise waits a moment.
func (p *e2eProc) checkAlive(t testing.TB, deadline time.Time, what string) {
	t.Helper()
	select {
	case <-p.exited:
		t.Fatalf("appliance exited (%v) before it could %s; stderr:\n%s", p.cmd.ProcessState, what, p.stderr)
	case <-time.After(20 * time.Millisecond):
	}
	if time.Now().After(deadline) {
		t.Fatalf("appliance did not %s within %v", what, e2eDeadline)
	}
}

// waitExit waits for the process to end and returns its exit code (-1 when a signal ended it).
func (p *e2eProc) waitExit(t testing.TB) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(e2eDeadline):
		t.Fatalf("appliance did not exit within %v", e2eDeadline)
		return 0
	}
}

// e2eJob is the part of the API's job resource the test reads.
type e2eJob struct {
	ID                  string          `json:"id"`
	Type                string          `json:"type"`
	State               string          `json:"state"`
	LockedResource      string          `json:"locked_resource"`
	Attempts            int             `json:"attempts"`
	Error               string          `json:"error"`
	RetryClassification string          `json:"retry_classification"`
	LastStderr          string          `json:"last_stderr"`
	Result              json.RawMessage `json:"result"`
}

// do sends an API request, fails the test unless the answer has wantStatus, and decodes it into out (when
// not nil). It returns the raw answer.
func (p *e2eProc) do(t testing.TB, key, method, path string, body any, wantStatus int, out any) []byte {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, p.api+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != wantStatus {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, wantStatus, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: undecodable answer (%v): %s", method, path, err, data)
		}
	}
	return data
}

func (p *e2eProc) call(t testing.TB, key, method, path string, body any, wantStatus int) *e2eJob {
	t.Helper()
	var out struct {
		Job *e2eJob `json:"job"`
	}
	data := p.do(t, key, method, path, body, wantStatus, &out)
	if out.Job == nil || out.Job.ID == "" {
		t.Fatalf("%s %s: not a {job} answer: %s", method, path, data)
	}
	return out.Job
}

func (p *e2eProc) enqueueSleep(t *testing.T, key string, seconds int, marker string) *e2eJob {
	t.Helper()
	return p.call(t, key, http.MethodPost, "/v1/test/jobs", map[string]any{"seconds": seconds, "marker": marker}, http.StatusAccepted)
}

// waitJob polls GET /v1/jobs/{id} until the job is completed or failed.
func (p *e2eProc) waitJob(t testing.TB, key, id string) *e2eJob {
	t.Helper()
	return p.waitJobWatching(t, key, id, nil)
}

// waitJobWatching is waitJob calling look (when not nil) at every poll.
func (p *e2eProc) waitJobWatching(t testing.TB, key, id string, look func()) *e2eJob {
	t.Helper()
	deadline := time.Now().Add(e2eDeadline)
	for {
		if look != nil {
			look()
		}
		j := p.call(t, key, http.MethodGet, "/v1/jobs/"+id, nil, http.StatusOK)
		if j.State == "completed" || j.State == "failed" {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s after %v", id, j.State, e2eDeadline)
		}
		p.checkAlive(t, deadline, "finish job "+id)
	}
}

// e2eWaitLines waits until the marker file has at least n lines and returns how many it has.
func e2eWaitLines(t testing.TB, path string, n int) int {
	t.Helper()
	deadline := time.Now().Add(e2eDeadline)
	tick := time.NewTicker(10 * time.Millisecond) // the file is written by another process: poll it
	defer tick.Stop()
	for {
		data, err := os.ReadFile(path)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if got := strings.Count(string(data), "\n"); got >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("marker %s: fewer than %d lines after %v:\n%s", path, n, e2eDeadline, data)
		}
		<-tick.C
	}
}

func e2eNoRebootstrap(t *testing.T, p *e2eProc, path string, want []byte) {
	t.Helper()
	if strings.Contains(p.stdout.String(), "First start") {
		t.Errorf("a restart printed the bootstrap banner again:\n%s", p.stdout)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("bootstrap.json changed on restart:\n%s\nwant:\n%s", got, want)
	}
}

// e2eReadJob reads a job straight from the metadata store of a stopped appliance.
func e2eReadJob(t *testing.T, dataDir, id string) *store.Job {
	t.Helper()
	db, err := store.Open(filepath.Join(dataDir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var j *store.Job
	if err := db.View(func(tx *store.Tx) (err error) { j, err = store.Jobs.Get(tx, id); return err }); err != nil {
		t.Fatal(err)
	}
	return j
}

// TestUpInstancesSurviveCrash runs the real binary with real PostgreSQL and PgBouncer and checks that the
// data plane outlives the control plane:
//   - a provisioned project's rows are readable through direct_url and pooled_url;
//   - SIGKILL of the appliance leaves the postmaster and PgBouncer running (they are daemons) and still
//     serving;
//   - the next start adopts them (same postmaster pid, no restart event), the project stays active and
//     /status reports every watched process running;
//   - SIGKILL of the appliance and kill -9 of the postmaster and PgBouncer (a machine crash): the next start
//     restarts them, crash recovery keeps every committed row, and the restart is audited;
//   - SIGTERM exits 0 and stops every process of the data dir.
//
// It needs PostgreSQL and PgBouncer installed (as appliancetest does) and never skips.
func TestUpInstancesSurviveCrash(t *testing.T) {
	t.Parallel()
	bin := e2eBuild(t)
	dataDir := appliancetest.TraversableTempDir(t)
	// Registered before any start, so it runs after their cleanups (which SIGKILL the appliance only) and
	// before the temp dir is removed: nothing the test started outlives it, even when it fails midway.
	t.Cleanup(func() { e2eKillUnder(t, dataDir) })
	began := time.Now()
	phase := func(what string) { t.Helper(); t.Logf("%6.2fs %s", time.Since(began).Seconds(), what) }

	const rows, sum = 500, 500 * 501 / 2
	a := e2eStart(t, bin, dataDir)
	key := e2eAdminKey(t, dataDir)
	var created struct {
		Job     *e2eJob     `json:"job"`
		Project *e2eProject `json:"project"`
	}
	a.do(t, key, http.MethodPost, "/v1/projects", map[string]any{"name": "survivor", "environment": "development"},
		http.StatusAccepted, &created)
	if created.Job == nil || created.Project == nil || created.Project.ID == "" {
		t.Fatalf("POST /v1/projects answered no job or project: %+v", created)
	}
	prjID := created.Project.ID
	// A failed provision removes the instance directory: keep the last look at its server logs.
	var logs string
	if j := a.waitJobWatching(t, key, created.Job.ID, func() {
		if l := e2eInstanceLogs(dataDir); l != "" {
			logs = l
		}
	}); j.State != "completed" {
		t.Fatalf("provisioning %s: attempts %d, error %q\nlast_stderr:\n%s\nthe instance's last logs:\n%s",
			j.State, j.Attempts, j.Error, j.LastStderr, logs)
	}
	prj := a.project(t, key, prjID)
	if prj.State != "active" || prj.RuntimeStatus != "active" || prj.PrimaryInstanceID == "" {
		t.Fatalf("provisioned project: %+v", prj)
	}
	// The real listener serves /metrics from the API (not the dashboard's pages) to the metrics token. A
	// job's end is counted as its commit returns, which a reader of the job may see first: asked again.
	e2eEventually(t, e2eDeadline, "/metrics to count the provision", func() (bool, string) {
		mreq, _ := http.NewRequest(http.MethodGet, a.api+"/metrics", nil)
		mreq.Header.Set("Authorization", "Bearer "+e2eMetricsToken)
		resp, err := a.client.Do(mreq)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
			t.Fatalf("/metrics: %d %v\n%.2000s", resp.StatusCode, resp.Header, body)
		}
		return strings.Contains(string(body), "appliance_jobs_ended_total{type=\"project.provision\",state=\"completed\"} 1"), fmt.Sprintf("%.2000s", body)
	})
	instDir := filepath.Join(dataDir, "instances", prj.PrimaryInstanceID)
	pgdata := filepath.Join(instDir, "pgdata")
	pidFiles := map[string]string{"postmaster": filepath.Join(pgdata, "postmaster.pid"),
		"pgbouncer": filepath.Join(instDir, "pooler", "pgbouncer.pid")}

	// A key-value store beside the database: its redis-server is a daemon the supervisor watches too.
	var kvCreated struct {
		Job     *e2eJob `json:"job"`
		KVStore struct {
			ID    string `json:"id"`
			Token string `json:"token"`
		} `json:"kv_store"`
	}
	a.do(t, key, http.MethodPost, "/v1/projects/"+prjID+"/kv", nil, http.StatusAccepted, &kvCreated)
	if j := a.waitJob(t, key, kvCreated.Job.ID); j.State != "completed" {
		t.Fatalf("kv.create %s: %s", j.State, j.Error)
	}
	kvToken := kvCreated.KVStore.Token
	pidFiles["redis-server"] = filepath.Join(dataDir, "kv", kvCreated.KVStore.ID, "redis.pid")
	a.kvWrite(t, key, prjID, kvToken, "before", 100)

	conns := a.connections(t, key, prjID)
	if !strings.Contains(conns.DirectURL, "sslmode=verify-full") || !strings.Contains(conns.DirectURL, "sslrootcert=") {
		t.Errorf("direct_url does not verify the server: %s", e2eRedact(conns.DirectURL))
	}
	e2eSQL(t, conns.DirectURL, false,
		"CREATE TABLE survivors (id int PRIMARY KEY, note text NOT NULL)",
		fmt.Sprintf("INSERT INTO survivors SELECT g, 'row ' || g FROM generate_series(1, %d) g", rows))
	e2eCheckRows(t, "after provisioning", conns, rows, sum)
	pids := map[string]int{}
	for name, f := range pidFiles {
		pids[name] = e2eLivePid(t, name, f)
	}
	phase("provisioned, rows written and read")

	// 1. The appliance dies alone: the instance and the pooler go on serving without it.
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.waitExit(t)
	for name, f := range pidFiles {
		if pid := e2eLivePid(t, name, f); pid != pids[name] {
			t.Fatalf("%s pid %d after the appliance's SIGKILL, was %d", name, pid, pids[name])
		}
	}
	e2eCheckRows(t, "while the appliance is down", conns, rows, sum)
	// The postmaster runs in its project's memory group (up --cgroups auto); moved out of it while the
	// appliance is down (a server an appliance without cgroups started), the adoption moves it back.
	group := "/" + cgroups.ParentName(dataDir) + "/" + prj.PrimaryInstanceID
	if g := e2eMemoryGroup(t, pids["postmaster"]); !strings.HasSuffix(g, group) {
		t.Fatalf("the postmaster is in memory group %q, not %s", g, group)
	}
	e2eMoveToOwnMemoryGroup(t, pids["postmaster"])
	phase("appliance SIGKILLed; instance, pooler and redis-server still run")

	// The next start adopts both processes: same pids, no restart.
	b := e2eStart(t, bin, dataDir)
	for name, f := range pidFiles {
		if pid := e2eLivePid(t, name, f); pid != pids[name] {
			t.Errorf("%s pid %d after the restart, was %d: it was restarted, not adopted", name, pid, pids[name])
		}
	}
	if g := e2eMemoryGroup(t, pids["postmaster"]); !strings.HasSuffix(g, group) {
		t.Errorf("after adoption the postmaster is in memory group %q, not %s", g, group)
	}
	conns = b.connections(t, key, prjID)
	e2eCheckRows(t, "after adoption", conns, rows, sum)
	b.kvCheck(t, key, prjID, kvToken, "before", 100)
	b.waitSupervisorHealthy(t)
	if prj := b.project(t, key, prjID); prj.State != "active" || prj.RuntimeStatus != "active" {
		t.Errorf("project after adoption: state %s, runtime_status %s", prj.State, prj.RuntimeStatus)
	}
	if evs := b.instanceEvents(t, key, prjID); len(evs) != 0 {
		t.Errorf("adoption recorded instance events %v, want none", evs)
	}
	phase("restarted; instance, pooler and redis-server adopted, keys intact")

	// 2. A machine crash: the appliance, the postmaster and PgBouncer all die by SIGKILL. The postmaster's
	// backends are left to notice its death themselves, and its postmaster.pid stays behind.
	if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	b.waitExit(t)
	for name, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill -9 %s (pid %d): %v", name, pid, err)
		}
	}
	e2eEventually(t, e2eDeadline, "the postmaster and PgBouncer to die", func() (bool, string) {
		var alive []string
		for name, pid := range pids {
			if cmd, ok := e2eProcAlive(pid); ok {
				alive = append(alive, fmt.Sprintf("%s %d (%s)", name, pid, cmd))
			}
		}
		return len(alive) == 0, strings.Join(alive, ", ")
	})

	c := e2eStart(t, bin, dataDir)
	c.waitSupervisorHealthy(t)
	for name, f := range pidFiles {
		if pid := e2eLivePid(t, name, f); pid == pids[name] {
			t.Errorf("%s pid %d after the crash is the dead one's", name, pid)
		}
	}
	if g := e2eMemoryGroup(t, e2eLivePid(t, "postmaster", pidFiles["postmaster"])); !strings.HasSuffix(g, group) {
		t.Errorf("after the crash the restarted postmaster is in memory group %q, not %s", g, group)
	}
	conns = c.connections(t, key, prjID)
	e2eCheckRows(t, "after the crash", conns, rows, sum)
	e2eEventually(t, e2eDeadline, "the project to be active after the crash", func() (bool, string) {
		prj := c.project(t, key, prjID)
		return prj.State == "active" && prj.RuntimeStatus == "active", prj.State + "/" + prj.RuntimeStatus
	})
	evs := c.instanceEvents(t, key, prjID)
	for _, want := range []string{prj.PrimaryInstanceID, prj.PrimaryInstanceID + "/pooler"} {
		if !slices.Contains(evs, "instance.restarted "+want) {
			t.Errorf("no instance.restarted event for %s after the crash; events: %v", want, evs)
		}
	}
	// The store's server was restarted from its last snapshot (keys written since are lost, as RDB
	// persistence means); it serves, and what is written now survives a clean stop and start.
	c.kvWrite(t, key, prjID, kvToken, "after-crash", 50)
	phase("crash of everything; instance, pooler and redis-server restarted, rows intact")

	// 3. A clean stop exits 0 and leaves no process of the data dir behind.
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := c.waitExit(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0; stderr:\n%s", code, c.stderr)
	}
	// The stop waited for each process; allow only a moment (a postmaster removes its pid file just before
	// it exits). A process left behind would stay for good.
	e2eEventually(t, 5*time.Second, "every process of the data dir to end after SIGTERM", func() (bool, string) {
		left := e2eProcsUnder(dataDir)
		return len(left) == 0, fmt.Sprint(left)
	})
	for name, f := range pidFiles {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s pid file %s still exists after a clean stop (%v)", name, f, err)
		}
	}
	phase("SIGTERM: exit 0, no process left")

	// 4. A start after the clean stop (a machine restart): the store's server starts from the snapshot its
	// clean stop wrote.
	d := e2eStart(t, bin, dataDir)
	d.waitSupervisorHealthy(t)
	d.kvCheck(t, key, prjID, kvToken, "after-crash", 50)
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := d.waitExit(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0; stderr:\n%s", code, d.stderr)
	}
	phase("started again after the clean stop: keys intact")
}

// kvClient connects to the project's store through this appliance's RESP front, with the credentials the
// API gives (verify-full against the appliance's CA).
func (p *e2eProc) kvClient(t *testing.T, key, prjID, token string) *redis.Client {
	t.Helper()
	var creds struct {
		RedisURL string `json:"redis_url"`
	}
	p.do(t, key, http.MethodGet, "/v1/projects/"+prjID+"/kv/credentials", nil, http.StatusOK, &creds)
	opt, err := redis.ParseURL(creds.RedisURL)
	if err != nil {
		t.Fatalf("redis_url %q: %v", creds.RedisURL, err)
	}
	pem, err := os.ReadFile(filepath.Join(p.dataDir, "ca", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	opt.Password, opt.TLSConfig.RootCAs = token, pool
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// kvWrite sets prefix:0..n-1 in the project's store.
func (p *e2eProc) kvWrite(t *testing.T, key, prjID, token, prefix string, n int) {
	t.Helper()
	c := p.kvClient(t, key, prjID, token)
	pipe := c.Pipeline()
	for i := range n {
		pipe.Set(t.Context(), fmt.Sprintf("%s:%d", prefix, i), i, 0)
	}
	if _, err := pipe.Exec(t.Context()); err != nil {
		t.Fatalf("write %s keys: %v", prefix, err)
	}
	c.Close()
}

// kvCheck reads prefix:0..n-1 back, retrying while the store's server starts.
func (p *e2eProc) kvCheck(t *testing.T, key, prjID, token, prefix string, n int) {
	t.Helper()
	c := p.kvClient(t, key, prjID, token)
	e2eEventually(t, e2eDeadline, prefix+" keys to be read back", func() (bool, string) {
		for i := range n {
			v, err := c.Get(t.Context(), fmt.Sprintf("%s:%d", prefix, i)).Int()
			if err != nil || v != i {
				return false, fmt.Sprintf("%s:%d = %d, %v", prefix, i, v, err)
			}
		}
		return true, ""
	})
}

// e2eProject is the part of the API's project resource the test reads.
type e2eProject struct {
	ID                string `json:"id"`
	State             string `json:"state"`
	RuntimeStatus     string `json:"runtime_status"`
	PrimaryInstanceID string `json:"primary_instance_id"`
	LastError         string `json:"last_error"`
	DirectPort        int    `json:"direct_port"`
	PooledPort        int    `json:"pooled_port"`
}

type e2eConnections struct {
	DirectURL string `json:"direct_url"`
	PooledURL string `json:"pooled_url"`
}

// e2eAdminKey reads the admin API key the first start wrote.
func e2eAdminKey(t testing.TB, dataDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "bootstrap.json"))
	if err != nil {
		t.Fatal(err)
	}
	var creds struct {
		APIKey string `json:"api_key"`
	}
	if err := json.Unmarshal(b, &creds); err != nil || creds.APIKey == "" {
		t.Fatalf("bootstrap.json has no api_key (%v)", err)
	}
	return creds.APIKey
}

func (p *e2eProc) project(t testing.TB, key, id string) *e2eProject {
	t.Helper()
	var out struct {
		Project *e2eProject `json:"project"`
	}
	data := p.do(t, key, http.MethodGet, "/v1/projects/"+id, nil, http.StatusOK, &out)
	if out.Project == nil {
		t.Fatalf("GET /v1/projects/%s: no project: %s", id, data)
	}
	return out.Project
}

func (p *e2eProc) connections(t testing.TB, key, id string) e2eConnections {
	t.Helper()
	var out struct {
		Connections e2eConnections `json:"connections"`
	}
	p.do(t, key, http.MethodGet, "/v1/projects/"+id+"/connections", nil, http.StatusOK, &out)
	if out.Connections.DirectURL == "" || out.Connections.PooledURL == "" {
		t.Fatalf("GET /v1/projects/%s/connections: missing URLs: %+v", id, out.Connections)
	}
	return out.Connections
}

// instanceEvents lists the project's instance.* audit events as "action process".
func (p *e2eProc) instanceEvents(t *testing.T, key, id string) []string {
	t.Helper()
	var out struct {
		AuditEvents []struct {
			Action   string `json:"action"`
			Metadata struct {
				Process string `json:"process"`
			} `json:"metadata"`
		} `json:"audit_events"`
	}
	p.do(t, key, http.MethodGet, "/v1/projects/"+id+"/audit-events?limit=100", nil, http.StatusOK, &out)
	var evs []string
	for _, e := range out.AuditEvents {
		if strings.HasPrefix(e.Action, "instance.") {
			evs = append(evs, e.Action+" "+e.Metadata.Process)
		}
	}
	return evs
}

var e2eWatchedRE = regexp.MustCompile(`(\d+) of (\d+) watched processes running`)

// e2eMetricsToken is the appliances' --metrics-token: /status's details are an operator's.
const e2eMetricsToken = "e2e-metrics-token"

// waitSupervisorHealthy polls /status until the instance-supervisor component is operational with every
// watched process (at least one) running.
func (p *e2eProc) waitSupervisorHealthy(t *testing.T) {
	t.Helper()
	e2eEventually(t, e2eDeadline, "instance-supervisor to be operational with every process running", func() (bool, string) {
		var st struct {
			Components []struct {
				Name, Status, Message string
			} `json:"components"`
		}
		p.do(t, e2eMetricsToken, http.MethodGet, "/status", nil, http.StatusOK, &st) // the details are an operator's
		for _, c := range st.Components {
			if c.Name != "instance-supervisor" {
				continue
			}
			m := e2eWatchedRE.FindStringSubmatch(c.Message)
			ok := c.Status == "operational" && m != nil && m[1] == m[2] && m[2] != "0"
			return ok, c.Status + ": " + c.Message
		}
		return false, fmt.Sprintf("no instance-supervisor component: %+v", st.Components)
	})
}

// e2eSQL runs statements through url (the pooled URL needs the simple protocol: PgBouncer runs in
// transaction mode).
func e2eSQL(t testing.TB, url string, pooled bool, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	conn := e2eConnect(ctx, t, url, pooled)
	defer conn.Close(context.Background())
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func e2eConnect(ctx context.Context, t testing.TB, url string, pooled bool) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse %s: %v", e2eRedact(url), err)
	}
	if pooled {
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect to %s: %v", e2eRedact(url), err)
	}
	return conn
}

// e2eCheckRows reads the survivors table through both URLs and checks every row is there.
func e2eCheckRows(t *testing.T, when string, c e2eConnections, wantCount, wantSum int64) {
	t.Helper()
	for _, u := range []struct {
		name   string
		url    string
		pooled bool
	}{{"direct_url", c.DirectURL, false}, {"pooled_url", c.PooledURL, true}} {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		conn := e2eConnect(ctx, t, u.url, u.pooled)
		var n, sum int64
		var last string
		err := conn.QueryRow(ctx, "SELECT count(*), coalesce(sum(id), 0), coalesce(max(note) FILTER (WHERE id = $1), '') FROM survivors",
			wantCount).Scan(&n, &sum, &last)
		conn.Close(context.Background())
		cancel()
		if err != nil {
			t.Fatalf("%s: read through %s: %v", when, u.name, err)
		}
		if n != wantCount || sum != wantSum || last != fmt.Sprintf("row %d", wantCount) {
			t.Fatalf("%s: %s reads %d rows (sum %d, last %q), want %d (sum %d)", when, u.name, n, sum, last, wantCount, wantSum)
		}
	}
}

// e2eInstanceLogs returns the end of every instance's server logs (for a failure message).
func e2eInstanceLogs(dataDir string) string {
	var b strings.Builder
	logs, _ := filepath.Glob(filepath.Join(dataDir, "instances", "*", "pgdata", "log", "*"))
	more, _ := filepath.Glob(filepath.Join(dataDir, "instances", "*", "startup.log"))
	for _, f := range append(logs, more...) {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(&b, "--- %s (end):\n%s\n", f, data)
	}
	return b.String()
}

// e2eRedact hides the password of a connection URL.
func e2eRedact(u string) string {
	return regexp.MustCompile(`://([^:/@]+):[^@]*@`).ReplaceAllString(u, "://$1:***@")
}

// e2eMemoryGroup is the memory cgroup of a process (/proc/<pid>/cgroup: v1's memory line, else v2's).
func e2eMemoryGroup(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	v2 := ""
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), "memory") {
			return parts[2]
		}
		if len(parts) == 3 && parts[1] == "" {
			v2 = parts[2]
		}
	}
	return v2
}

// e2eMoveToOwnMemoryGroup moves a process (alone) into the test's own memory cgroup (v1's memory hierarchy,
// else v2's).
func e2eMoveToOwnMemoryGroup(t *testing.T, pid int) {
	t.Helper()
	own := e2eMemoryGroup(t, os.Getpid())
	dir := filepath.Join("/sys/fs/cgroup/memory", own)
	if _, err := os.Stat(filepath.Join(dir, "memory.limit_in_bytes")); err != nil {
		if dir = filepath.Join("/sys/fs/cgroup", own); !e2eIsFile(filepath.Join(dir, "cgroup.controllers")) {
			dir = filepath.Join("/sys/fs/cgroup/unified", own)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		t.Fatalf("move %d to %s: %v", pid, dir, err)
	}
	if g := e2eMemoryGroup(t, pid); g != own {
		t.Fatalf("%d is in %q after its move to %q", pid, g, own)
	}
}

func e2eIsFile(p string) bool { _, err := os.Stat(p); return err == nil }

// e2eLivePid reads the pid on the first line of a pid file and fails unless it is a live process (not a
// zombie) whose command line names the pid file's directory (postgres -D <pgdata>, pgbouncer -d
// <pooler>/pgbouncer.ini).
func e2eLivePid(t *testing.T, name, pidFile string) int {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		t.Fatalf("%s: pid file %s holds %q", name, pidFile, line)
	}
	cmd, ok := e2eProcAlive(pid)
	if !ok {
		t.Fatalf("%s (pid %d from %s) is not running", name, pid, pidFile)
	}
	if !strings.Contains(cmd, filepath.Dir(pidFile)) {
		t.Fatalf("%s: pid %d from %s is another process: %s", name, pid, pidFile, cmd)
	}
	return pid
}

// e2eProcAlive reports whether pid is a live process (a zombie is not: the instances are no children of
// the test, and nobody may reap them) and returns its command line.
func e2eProcAlive(pid int) (string, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
		if f := strings.Fields(string(stat[i+1:])); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
			return "", false
		}
	}
	cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return "", false
	}
	return strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " "), true
}

// e2eProcsUnder lists the live processes (but this one) whose command line names dir or whose working
// directory is in it: the appliance, postmasters, their backends (which change their titles but work in
// pgdata) and PgBouncers.
func e2eProcsUnder(dir string) map[int]string {
	out := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmd, ok := e2eProcAlive(pid)
		if !ok {
			continue
		}
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		if strings.Contains(cmd, dir) || cwd == dir || strings.HasPrefix(cwd, dir+"/") {
			out[pid] = cmd
		}
	}
	return out
}

// e2eKillUnder SIGKILLs every process of dir until none is left (a test cleanup: it only logs).
func e2eKillUnder(t testing.TB, dir string) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := e2eProcsUnder(dir)
		if len(left) == 0 {
			e2eRemoveCgroups(t, dir)
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("cleanup: processes of %s survive SIGKILL: %v", dir, left)
			return
		}
		for pid, cmd := range left {
			if t.Failed() {
				t.Logf("cleanup: killing pid %d: %s", pid, cmd)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond) // poll interval while the kernel tears them down
	}
}

// e2eRemoveCgroups removes the cgroups an appliance on the data directory dir left (killed, it could not):
// its processes are gone, so they are empty.
func e2eRemoveCgroups(t testing.TB, dir string) {
	g, err := cgroups.Open(cgroups.Options{Name: cgroups.ParentName(dir), Log: slog.New(slog.DiscardHandler)})
	if err == nil {
		err = g.Close()
	}
	if err != nil {
		t.Errorf("cleanup: cgroups of %s: %v", dir, err)
	}
}

// e2eEventually polls cond (every 20 ms, for up to within) and fails with its last detail if it never
// holds.
func e2eEventually(t testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	pollEvery(t, within, 20*time.Millisecond, what, cond)
}

var e2eOperatorLine = regexp.MustCompile(`Operator:\s+(https://\S+)/metrics`)

// TestUpOperatorListener: with --metrics-listen (and no metrics token) the operator listener serves
// /metrics and /status with each component's details to a client that reaches it, while the API's
// listener answers /metrics no longer to loopback clients (a same-host reverse proxy's) and /status
// without the details.
func TestUpOperatorListener(t *testing.T) {
	t.Parallel()
	bin := e2eBuild(t)
	dataDir := appliancetest.TraversableTempDir(t)
	p := e2eStartWith(t, bin, dataDir, []string{"APPLIANCE_METRICS_TOKEN="}, []string{"--metrics-listen", "127.0.0.1:0", "--spare-clusters", "0"})
	deadline := time.Now().Add(e2eDeadline)
	var op string
	for op == "" {
		if m := e2eOperatorLine.FindStringSubmatch(p.stdout.String()); m != nil {
			op = m[1]
			break
		}
		p.checkAlive(t, deadline, "print its operator listener")
	}
	get := func(url string) (int, string) {
		t.Helper()
		res, err := p.client.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if st, body := get(op + "/metrics"); st != http.StatusOK || !strings.Contains(body, "appliance_http_requests_total") {
		t.Fatalf("operator /metrics: %d %.500s", st, body)
	}
	if st, body := get(op + "/status"); st != http.StatusOK || !strings.Contains(body, "bbolt metadata store at "+dataDir) {
		t.Fatalf("operator /status: %d %.2000s", st, body)
	}
	if st, body := get(p.api + "/metrics"); st != http.StatusForbidden {
		t.Fatalf("the API's /metrics to a loopback client beside an operator listener: %d %.500s", st, body)
	}
	if st, body := get(p.api + "/status"); st != http.StatusOK || strings.Contains(body, dataDir) || !strings.Contains(body, `"components"`) {
		t.Fatalf("the API's /status: %d %.2000s", st, body)
	}
}
