package node

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/appliancetest"
)

// TestStartInProcess: Start runs a whole appliance in the test's process on a temporary data directory and
// free ports; through its API (its bootstrap's key, its CA) a project is created and provisioned, and
// `SELECT 1` runs on it over TLS verified against the CA; Stop leaves no process of the data directory.
func TestStartInProcess(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	out := &appliancetest.Output{}
	n, err := Start(t.Context(), cfg, out)
	if err != nil {
		t.Fatalf("start: %v\n%s", err, out)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			n.Stop(context.Background())
		}
	})
	boot := n.Bootstrap()
	if boot == nil || boot.APIKey == "" || boot.Email == "" || boot.Password == "" {
		t.Fatalf("first start: bootstrap %+v", boot)
	}
	for _, want := range []string{"appliance test is up", "API:       " + n.APIURL(), "KV:        " + n.KVAddr(), "https://" + n.KVRESTAddr() + " (REST)",
		"api_key:         " + boot.APIKey} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	caPEM, err := n.CACertPEM()
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("CA %s holds no certificate", n.CACertPath())
	}
	cl := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	call := func(method, path string, body, answer any) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(t.Context(), method, n.APIURL()+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+boot.APIKey)
		req.Header.Set("Content-Type", "application/json")
		res, err := cl.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode/100 != 2 {
			t.Fatalf("%s %s: %s %s", method, path, res.Status, b)
		}
		if err := json.Unmarshal(b, answer); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}

	var created api.ProjectJobResponse
	call(http.MethodPost, "/v1/projects", &api.CreateProjectRequest{Name: "shop", Environment: "development"}, &created)
	if created.Project == nil || created.Job == nil {
		t.Fatalf("create: %+v", created)
	}
	job := created.Job
	for deadline := time.Now().Add(3 * time.Minute); job.State != "completed"; time.Sleep(100 * time.Millisecond) {
		if job.State == "failed" || time.Now().After(deadline) {
			t.Fatalf("provision job %s: %s: %s", job.ID, job.State, job.Error)
		}
		var res api.JobResponse
		call(http.MethodGet, "/v1/jobs/"+job.ID, nil, &res)
		job = res.Job
	}
	var conns api.ConnectionsResponse
	call(http.MethodGet, "/v1/projects/"+created.Project.ID+"/connections", nil, &conns)
	conn, err := pgx.Connect(t.Context(), conns.Connections.DirectURL)
	if err != nil {
		t.Fatalf("connect to %s: %v", created.Project.ID, err)
	}
	var one int
	err = conn.QueryRow(t.Context(), "SELECT 1").Scan(&one)
	conn.Close(context.Background())
	if err != nil || one != 1 {
		t.Fatalf("SELECT 1: %d, %v", one, err)
	}

	n.Stop(context.Background())
	stopped = true
	appliancetest.CheckNoProcessesUnder(t, n.DataDir())
}
