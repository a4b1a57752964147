package acceptance

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/appliancetest"
)

// TestUpStartsDegradedWhenDiskIsLow: an appliance restarted while its data directory's free space is under
// the reserve (simulated with --disk-reserve-mb over the real free space) starts all the same: it says so
// in its log, /healthz ("degraded") and /status (the disk component); it supervises the project's server
// and serves reads (the API's GETs, the database's SELECTs); it refuses writes: POSTs answer 507 with a
// JSON error, and the database is read-only. With the reserve back to normal, writes work again.
func TestUpStartsDegradedWhenDiskIsLow(t *testing.T) {
	t.Parallel()
	bin := e2eBuild(t)
	dataDir := appliancetest.TraversableTempDir(t)
	a := e2eStartWith(t, bin, dataDir, nil, []string{"--spare-clusters", "0"})
	key := e2eAdminKey(t, dataDir)
	var created struct {
		Job     *e2eJob     `json:"job"`
		Project *e2eProject `json:"project"`
	}
	a.do(t, key, http.MethodPost, "/v1/projects", map[string]any{"name": "lowdisk", "environment": "development"}, http.StatusAccepted, &created)
	if j := a.waitJob(t, key, created.Job.ID); j.State != "completed" {
		t.Fatalf("provision: %s %s", j.State, j.Error)
	}
	prjID := created.Project.ID
	stop := func(p *e2eProc) {
		t.Helper()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.waitExit(t); code != 0 {
			t.Fatalf("exit code %d after SIGTERM", code)
		}
	}
	stop(a)

	b := e2eStartWith(t, bin, dataDir, nil, []string{"--spare-clusters", "0", "--disk-reserve-mb", "1073741824"})
	if !strings.Contains(b.stderr.String(), "starting degraded") {
		t.Fatalf("no log line says the appliance starts degraded:\n%s", b.stderr)
	}
	var health struct {
		Status string `json:"status"`
	}
	b.do(t, "", http.MethodGet, "/healthz", nil, http.StatusOK, &health)
	if health.Status != "degraded" {
		t.Fatalf("/healthz says %q while writes are refused", health.Status)
	}
	var status struct {
		Status     string `json:"status"`
		Components []struct{ Name, Status, Message string }
	}
	b.do(t, "", http.MethodGet, "/status", nil, http.StatusOK, &status)
	if status.Status != "degraded" {
		t.Fatalf("public /status: %s while writes are refused", status.Status)
	}
	b.do(t, e2eMetricsToken, http.MethodGet, "/status", nil, http.StatusOK, &status) // the details are an operator's
	disk := ""
	for _, c := range status.Components {
		if c.Name == "disk" {
			disk = c.Status + ": " + c.Message
		}
	}
	if status.Status != "degraded" || !strings.HasPrefix(disk, "degraded: ") || !strings.Contains(disk, "reserve") {
		t.Fatalf("/status: %s, disk component %q", status.Status, disk)
	}
	mreq, _ := http.NewRequest(http.MethodGet, b.api+"/metrics", nil)
	mreq.Header.Set("Authorization", "Bearer "+e2eMetricsToken)
	if resp, err := b.client.Do(mreq); err != nil {
		t.Fatal(err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), "\nappliance_disk_degraded 1\n") || !strings.Contains(string(body), "\nappliance_disk_reserve_bytes 1.125899906842624e+15\n") {
			t.Fatalf("/metrics does not tell the disk's state:\n%.3000s", body)
		}
	}
	// Reads are served; writes are refused with a JSON error.
	if prj := b.project(t, key, prjID); prj.State != "active" {
		t.Fatalf("the project after a degraded start: %+v", prj)
	}
	raw := b.do(t, key, http.MethodPost, "/v1/projects", map[string]any{"name": "more", "environment": "development"}, http.StatusInsufficientStorage, nil)
	var refusal struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(raw, &refusal); err != nil || !strings.Contains(refusal.Error, "disk space") {
		t.Fatalf("the refusal is not a JSON error naming the cause: %s", raw)
	}
	// The project's server is supervised (started again) and serves reads; writes are refused (read-only).
	url := b.connections(t, key, prjID).DirectURL
	e2eEventually(t, 60*time.Second, "the database to serve reads and refuse writes", func() (bool, string) {
		conn, err := pgx.Connect(t.Context(), url)
		if err != nil {
			return false, err.Error()
		}
		defer conn.Close(t.Context())
		var one int
		if err := conn.QueryRow(t.Context(), "SELECT 1").Scan(&one); err != nil {
			return false, "a read: " + err.Error()
		}
		_, err = conn.Exec(t.Context(), "CREATE TABLE IF NOT EXISTS probe (id int)")
		return err != nil && strings.Contains(err.Error(), "read-only transaction"), fmt.Sprintf("a write: %v", err)
	})
	stop(b)

	// Space back: writes work again (the lock is lifted by the guard).
	c := e2eStartWith(t, bin, dataDir, nil, []string{"--spare-clusters", "0"})
	c.do(t, "", http.MethodGet, "/healthz", nil, http.StatusOK, &health)
	if health.Status != "ok" {
		t.Fatalf("/healthz with room: %q", health.Status)
	}
	e2eEventually(t, 60*time.Second, "writes accepted again", func() (bool, string) {
		conn, err := pgx.Connect(t.Context(), url)
		if err != nil {
			return false, err.Error()
		}
		defer conn.Close(t.Context())
		_, err = conn.Exec(t.Context(), "CREATE TABLE IF NOT EXISTS probe (id int)")
		return err == nil, fmt.Sprintf("a write: %v", err)
	})
}
