package cmd_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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
	dataDir := t.TempDir()
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

// e2eBuild builds the appliance binary with the testhooks tag from the module root.
func e2eBuild(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "appliance")
	build := exec.Command(gobin, "build", "-tags", "testhooks", "-o", bin, ".")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags testhooks: %v\n%s", err, out)
	}
	return bin
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
}

var e2eAPILine = regexp.MustCompile(`API:\s+(https://\S+)`)

// e2eStart starts `appliance up` on dataDir (free ports picked by the system) and waits until /healthz
// answers over HTTPS, trusting the appliance's own CA.
func e2eStart(t *testing.T, bin, dataDir string) *e2eProc {
	t.Helper()
	p := &e2eProc{stdout: &e2eBuffer{}, stderr: &e2eBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, "up", "--data-dir", dataDir, "--listen", "127.0.0.1:0")
	p.cmd.Env = append(os.Environ(), "APPLIANCE_KV_LISTEN=127.0.0.1:0", "APPLIANCE_LOG_LEVEL=debug")
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
func (p *e2eProc) checkAlive(t *testing.T, deadline time.Time, what string) {
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
func (p *e2eProc) waitExit(t *testing.T) int {
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
	Result              json.RawMessage `json:"result"`
}

func (p *e2eProc) call(t *testing.T, key, method, path string, body any, wantStatus int) *e2eJob {
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
	req.Header.Set("Authorization", "Bearer "+key)
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
	var out struct {
		Job *e2eJob `json:"job"`
	}
	if err := json.Unmarshal(data, &out); err != nil || out.Job == nil || out.Job.ID == "" {
		t.Fatalf("%s %s: not a {job} answer (%v): %s", method, path, err, data)
	}
	return out.Job
}

func (p *e2eProc) enqueueSleep(t *testing.T, key string, seconds int, marker string) *e2eJob {
	t.Helper()
	return p.call(t, key, http.MethodPost, "/v1/test/jobs", map[string]any{"seconds": seconds, "marker": marker}, http.StatusAccepted)
}

// waitJob polls GET /v1/jobs/{id} until the job is completed or failed.
func (p *e2eProc) waitJob(t *testing.T, key, id string) *e2eJob {
	t.Helper()
	deadline := time.Now().Add(e2eDeadline)
	for {
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
func e2eWaitLines(t *testing.T, path string, n int) int {
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
