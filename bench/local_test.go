package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/apptest"
	"github.com/theappliance/appliance/appliance/daemon"
)

// BenchmarkUpEphemeral measures `appliance up --ephemeral` (issue 32), BENCH_RUNS times (default 5), one
// after the other, on a cold state (no spare clusters): from the start of the process to its JSON line
// ("up"), to the first project's SELECT 1 answered over its direct URL ("select1": the project created
// through the API, its job polled every 50 ms as apptest does), and from SIGTERM to nothing left (the
// process gone, its directory removed, no process of it: "teardown"). It reports the median of each.
// New instances are copied from an initdb template kept in the user's cache directory
// ($XDG_CACHE_HOME/appliance/initdb-templates): the first run on a machine makes it (initdb) unless it is
// there; BENCH_NO_TEMPLATE=1 removes it before each run (every run then pays initdb). BENCH_DATA_DIR is
// up's --data-dir (where the throwaway directory is made: e.g. /dev/shm for a tmpfs).
func BenchmarkUpEphemeral(b *testing.B) {
	runs := envInt(b, "BENCH_RUNS", 5)
	b.Logf("load average before: %s", loadavg())
	bin, args, templates := upEphemeralSetup(b)
	var up, sel, down []time.Duration
	for range runs {
		tUp, tSel, tDown := upEphemeralOnce(b, bin, args, templates, runs > 8)
		up, sel, down = append(up, tUp), append(sel, tSel), append(down, tDown)
	}
	b.Logf("median of %d: up %v, up → first project's SELECT 1 %v, SIGTERM → nothing left %v; load average after: %s",
		runs, median(up).Round(time.Millisecond), median(sel).Round(time.Millisecond), median(down).Round(time.Millisecond), loadavg())
	b.ReportMetric(float64(median(sel).Milliseconds()), "ms-to-select1")
	b.ReportMetric(float64(median(up).Milliseconds()), "ms-to-up")
	b.ReportMetric(float64(median(down).Milliseconds()), "ms-teardown")
}

// upEphemeralOnce is one run of BenchmarkUpEphemeral: it starts bin with args and returns the times to the
// JSON line, to the first project's SELECT 1 and from SIGTERM to nothing left. quiet logs the run to stderr
// rather than to the benchmark's log (which keeps only 10 lines).
func upEphemeralOnce(b *testing.B, bin string, args []string, templates string, quiet bool) (tUp, tSel, tDown time.Duration) {
	if os.Getenv("BENCH_NO_TEMPLATE") == "1" {
		if err := os.RemoveAll(templates); err != nil {
			b.Fatal(err)
		}
	}
	_, terr := os.Stat(templates)
	t0 := time.Now()
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { // a run that failed: its guard cleans up after the SIGKILL
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err != nil {
		cmd.Process.Kill()
		b.Fatalf("no JSON line: %v", err)
	}
	tUp = time.Since(t0)
	var cr struct {
		APIURL  string `json:"api_url"`
		CACert  string `json:"ca_cert"`
		APIKey  string `json:"api_key"`
		DataDir string `json:"data_dir"`
	}
	if err := json.Unmarshal(line, &cr); err != nil {
		b.Fatal(err)
	}
	cl, err := apptest.NewClient(cr.APIURL, []byte(cr.CACert), cr.APIKey)
	if err != nil {
		b.Fatal(err)
	}
	tCreate := time.Since(t0)
	prj, dsn, err := cl.CreateProject(b.Context(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	tReady := time.Since(t0)
	conn, err := pgx.Connect(b.Context(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	var one int
	if err := conn.QueryRow(b.Context(), "SELECT 1").Scan(&one); err != nil {
		b.Fatal(err)
	}
	tSel = time.Since(t0)
	conn.Close(b.Context())
	var jobs struct {
		Jobs []struct {
			Type   string `json:"type"`
			Result struct {
				Timings map[string]float64 `json:"timings_ms"`
			} `json:"result"`
		} `json:"jobs"`
	}
	jobSteps := "?"
	if err := cl.Do(b.Context(), "GET", "/v1/projects/"+prj+"/jobs", nil, &jobs); err == nil {
		for _, j := range jobs.Jobs {
			if j.Type == "project.provision" {
				jobSteps = fmt.Sprint(j.Result.Timings)
			}
		}
	}
	t1 := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		b.Fatalf("exit: %v", err)
	}
	dir := filepath.Dir(cr.DataDir)
	for {
		_, err := os.Stat(dir)
		if errors.Is(err, os.ErrNotExist) && len(daemon.ProcessesUnder(dir)) == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	tDown = time.Since(t1)
	logf := b.Logf
	if quiet {
		logf = func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
	}
	logf("run: up %v, select1 %v, teardown %v (initdb template there before: %v; POST /v1/projects at %v, ready at %v; the provision job's steps, ms: %s)",
		tUp.Round(time.Millisecond), tSel.Round(time.Millisecond), tDown.Round(time.Millisecond), terr == nil, tCreate.Round(time.Millisecond), tReady.Round(time.Millisecond), jobSteps)
	return tUp, tSel, tDown
}

// upEphemeralSetup builds the binary and returns it, up's arguments and the initdb templates' directory.
func upEphemeralSetup(b *testing.B) (bin string, args []string, templates string) {
	bin = filepath.Join(b.TempDir(), "appliance")
	if out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		b.Fatal(err)
	}
	templates = filepath.Join(cache, "appliance", "initdb-templates")
	args = []string{"up", "--ephemeral", "--no-install", "--log-level", "warn"}
	if d := os.Getenv("BENCH_DATA_DIR"); d != "" {
		args = append(args, "--data-dir", d)
	}
	return bin, args, templates
}
