// Package apptest gives a Go test a whole throwaway appliance, running in the test's process:
//
//	s := apptest.Start(t, apptest.Options{})
//	dsn := s.Project(t) // a new project's connection string, once it is ready
//
// It is `appliance up --ephemeral` (node.Start on node.Defaults() with Config.Ephemeral): a new data
// directory in the system's temporary directory, every listener on a free port, the PostgreSQL servers
// WITHOUT DURABILITY (fsync and synchronous_commit off: for tests only), no spare clusters unless asked.
// t.Cleanup stops it and fails the test if any process or file of it is left. Were the test process
// SIGKILLed, a guard process ends the appliance's processes and removes its directory (see node's
// ephemeral.go). It needs what `appliance up` needs on the machine (PostgreSQL's programs; run
// `appliance doctor`), and it does not install missing programs.
package apptest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/node"
)

// Options change the appliance Start runs; the zero value is what most tests want.
type Options struct {
	// Spares is how many prepared clusters the appliance keeps ready (0: none; a project then waits for
	// initdb, a few seconds).
	Spares int
	// Configure, when not nil, changes the appliance's configuration (node.Defaults() made ephemeral)
	// before it starts, e.g. to set PGBin. The data directory and the listeners' ports are the throwaway
	// appliance's own whatever it sets.
	Configure func(*node.Config)
}

// Appliance is a running throwaway appliance.
type Appliance struct {
	// URL is the API's base URL (https://127.0.0.1:PORT); CAPool holds the appliance's CA, which the API's,
	// the key-value fronts' and the databases' certificates chain to; CACertPEM is that certificate.
	URL       string
	CAPool    *x509.CertPool
	CACertPEM []byte
	// Bootstrap is the first start's credentials: the organization, its owner's email and password, an
	// admin API key.
	Bootstrap *appliance.Bootstrap
	// Client calls the API with the admin API key.
	Client *Client
	// Node is the appliance itself (its key-value fronts' addresses, its data directory...).
	Node *node.Node

	projects atomic.Int64
}

// Start starts a throwaway appliance for t and stops it when t ends (t.Cleanup), failing t if a process or
// a file of it is left.
func Start(t testing.TB, opts Options) *Appliance {
	t.Helper()
	cfg := node.Defaults()
	cfg.Ephemeral, cfg.DataDir, cfg.Spares, cfg.NoInstall, cfg.LogLevel, cfg.Version = true, "", opts.Spares, true, "warn", "apptest"
	if opts.Configure != nil {
		opts.Configure(&cfg)
	}
	out := &output{}
	n, err := node.Start(t.Context(), cfg, out)
	if err != nil {
		t.Fatalf("apptest: start the appliance: %v\n%s", err, out)
	}
	dir := filepath.Dir(n.DataDir()) // the throwaway directory
	t.Cleanup(func() {
		n.Stop(context.Background())
		if left := daemon.ProcessesUnder(dir); len(left) > 0 {
			t.Errorf("apptest: processes of the appliance left after Stop: %v", left)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("apptest: the appliance's directory %s is left after Stop (%v)", dir, err)
		}
	})
	pem, err := n.CACertPEM()
	if err != nil {
		t.Fatalf("apptest: %v", err)
	}
	boot := n.Bootstrap()
	if boot == nil {
		t.Fatalf("apptest: the appliance made no credentials\n%s", out)
	}
	cl, err := NewClient(n.APIURL(), pem, boot.APIKey)
	if err != nil {
		t.Fatalf("apptest: %v", err)
	}
	return &Appliance{URL: n.APIURL(), CAPool: cl.pool, CACertPEM: pem, Bootstrap: boot, Client: cl, Node: n}
}

// Project creates a project (environment development), waits until it is ready and returns its direct
// connection string (TLS, verified against CAPool by clients that set sslrootcert; the string says
// sslmode=require).
func (a *Appliance) Project(t testing.TB) string {
	t.Helper()
	_, dsn, err := a.Client.CreateProject(t.Context(), fmt.Sprintf("test-%d", a.projects.Add(1)))
	if err != nil {
		t.Fatalf("apptest: %v", err)
	}
	return dsn
}

// Client calls an appliance's API (JSON) with an API key, trusting the appliance's CA.
type Client struct {
	BaseURL string
	Key     string
	HTTP    *http.Client // trusts the appliance's CA
	pool    *x509.CertPool
}

// NewClient is a client of the API at baseURL whose certificate chains to caPEM, with key.
func NewClient(baseURL string, caPEM []byte, key string) (*Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("the CA certificate holds no PEM certificate")
	}
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Key: key, pool: pool,
		HTTP: &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}, nil
}

// Do sends body (nil: none) as JSON with method to path and decodes the answer into answer (nil: not
// read); an answer other than 2xx is an error with the API's message.
func (c *Client) Do(ctx context.Context, method, path string, body, answer any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if res.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s %s: %s: %s", method, path, res.Status, e.Error)
		}
		return fmt.Errorf("%s %s: %s: %s", method, path, res.Status, b)
	}
	if answer != nil {
		if err := json.Unmarshal(b, answer); err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return nil
}

// CreateProject creates a development project named name, waits (up to 3 minutes, or ctx) until its
// provisioning job is done, and returns its id and direct connection string.
func (c *Client) CreateProject(ctx context.Context, name string) (id, dsn string, err error) {
	var created api.ProjectJobResponse
	if err := c.Do(ctx, http.MethodPost, "/v1/projects", &api.CreateProjectRequest{Name: name, Environment: "development"}, &created); err != nil {
		return "", "", err
	}
	if created.Project == nil || created.Job == nil {
		return "", "", errors.New("create project: the answer holds no project and job")
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for job := created.Job; job.State != api.JobCompleted; {
		if job.State == api.JobFailed {
			return "", "", fmt.Errorf("project %s: provisioning failed: %s", created.Project.ID, job.Error)
		}
		select {
		case <-ctx.Done():
			return "", "", fmt.Errorf("project %s: still %s: %w", created.Project.ID, job.State, ctx.Err())
		case <-time.After(50 * time.Millisecond): // the job's progress is polled: the API has no push
		}
		var res api.JobResponse
		if err := c.Do(ctx, http.MethodGet, "/v1/jobs/"+job.ID, nil, &res); err != nil {
			return "", "", err
		}
		if res.Job == nil {
			return "", "", fmt.Errorf("job %s: the answer holds no job", job.ID)
		}
		job = res.Job
	}
	var conns api.ConnectionsResponse
	if err := c.Do(ctx, http.MethodGet, "/v1/projects/"+created.Project.ID+"/connections", nil, &conns); err != nil {
		return "", "", err
	}
	if conns.Connections.DirectURL == "" {
		return "", "", fmt.Errorf("project %s: no direct connection string", created.Project.ID)
	}
	return created.Project.ID, conns.Connections.DirectURL, nil
}

// output collects what the appliance prints (shown when it fails to start).
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}
